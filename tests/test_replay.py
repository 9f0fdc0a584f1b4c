"""The replay buffer: admission, the exact eviction order, sampling, mixing, refresh and durable storage."""

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings, strategies as st

from grpo_edu.training.trainers.replay import FORMAT, ReplayBuffer, ReplaySample


def S(question, advantage, reward=1.0, answer="42"):
    return ReplaySample(question, answer, advantage, reward)


# --- samples ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    (dict(answer="1", advantage=1.0, reward=1.0), "question"),
    (dict(question="q", advantage=1.0, reward=1.0), "answer"),
    (dict(question="q", answer="1", reward=1.0), "advantage"),
    (dict(question="q", answer="1", advantage=1.0), "reward"),
    (dict(question=3, answer="1", advantage=1.0, reward=1.0), "question"),
    (dict(question="q", answer=None, advantage=1.0, reward=1.0), "answer"),
    (dict(question="q", answer="1", advantage=float("nan"), reward=1.0), "advantage"),
    (dict(question="q", answer="1", advantage=1.0, reward=float("inf")), "reward"),
    (dict(question="q", answer="1", advantage=True, reward=1.0), "advantage"),
])
def test_a_sample_needs_all_four_valid_fields(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        ReplaySample(**kwargs)


def test_from_dict_refuses_unknown_fields():
    with pytest.raises(ValueError, match="unknown fields"):
        ReplaySample.from_dict({"question": "q", "answer": "a", "advantage": 1, "reward": 1, "extra": 0})


# --- the rules, on hand-made cases -----------------------------------------------------------

def test_admission_needs_positive_advantage_and_the_top_fraction():
    buf = ReplayBuffer(100, top_fraction=0.5)
    # 6 offered: the top half is 2.0, 1.5, 1.0; the positive 0.5 is outside it
    n = buf.add([S("a", 0.5), S("b", 2.0), S("c", 1.5), S("d", 0.0), S("e", 1.0), S("f", -2.0)], round=0)
    assert n == 3
    assert [s.question for s in buf.samples()] == ["b", "c", "e"]
    # top half of these is 0.0, 0.0: not > min_advantage = 0, so nothing gets in
    assert buf.add([S("g", 0.0), S("h", 0.0), S("i", -1.0), S("j", -1.0)], round=1) == 0
    assert ReplayBuffer(100, top_fraction=1.0, min_advantage=-1.5).add([S("k", -1.0), S("l", -2.0)], round=0) == 1


def test_top_fraction_ties_go_to_the_first_offered():
    buf = ReplayBuffer(100, top_fraction=0.5)
    assert buf.add([S("a", 1.0), S("b", 1.0), S("c", 1.0), S("d", 1.0)], round=0) == 2
    assert [s.question for s in buf.samples()] == ["a", "b"]


def test_eviction_lowest_advantage_first_then_oldest_round_then_first_added():
    buf = ReplayBuffer(3, top_fraction=1.0)
    buf.add([S("r0-low", 1.0)], round=0)
    buf.add([S("r1-low", 1.0), S("r1-high", 5.0)], round=1)
    buf.add([S("new", 2.0)], round=2)                  # full: evicts the lowest (1.0), oldest of them: r0-low
    assert [s.question for s in buf.samples()] == ["r1-low", "r1-high", "new"]
    buf.add([S("weak", 0.5)], round=3)                 # weaker than everything stored: not admitted
    assert [s.question for s in buf.samples()] == ["r1-low", "r1-high", "new"]
    assert buf.add([S("equal", 1.0)], round=3) == 1     # ties the weakest: the older one leaves
    assert [s.question for s in buf.samples()] == ["r1-high", "new", "equal"]


def test_mix_gives_the_exact_ratio_and_keeps_the_new_samples():
    buf = ReplayBuffer(1000, top_fraction=1.0, seed=0)
    buf.add([S(f"old{i}", 1.0 + i) for i in range(100)], round=0)
    new = [f"new{i}" for i in range(70)]
    mixed = buf.mix(new, 0.3)
    replayed = [m for m in mixed if isinstance(m, ReplaySample)]
    assert len(mixed) == 100 and len(replayed) == 30
    assert sorted(m for m in mixed if isinstance(m, str)) == sorted(new)
    assert len({r.question for r in replayed}) == 30                     # distinct
    assert mixed[:70] != new                                             # shuffled


def test_mix_warns_outside_ten_to_fifty_percent_and_refuses_impossible_ratios():
    buf = ReplayBuffer(100, top_fraction=1.0, seed=0)
    buf.add([S(f"q{i}", 1.0) for i in range(100)], round=0)
    with pytest.warns(UserWarning, match="outside 10–50 %"):
        buf.mix(["n"] * 10, 0.6)
    with pytest.warns(UserWarning, match="outside 10–50 %"):
        buf.mix(["n"] * 100, 0.05)
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="^replay_ratio:"):
            buf.mix(["n"], bad)
    assert buf.mix(["n"] * 5, 0.0) == ["n"] * 5


def test_sample_is_reproducible_with_the_seed_and_distinct():
    def draw(seed):
        buf = ReplayBuffer(100, top_fraction=1.0, seed=seed)
        buf.add([S(f"q{i}", 1.0) for i in range(50)], round=0)
        return [s.question for s in buf.sample(10)]

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    assert len(set(draw(3))) == 10


def test_sample_is_uniform():
    buf = ReplayBuffer(10, top_fraction=1.0, seed=0)
    buf.add([S(f"q{i}", 1.0 + i) for i in range(10)], round=0)
    counts = {f"q{i}": 0 for i in range(10)}
    for _ in range(2000):
        for s in buf.sample(3):
            counts[s.question] += 1
    # each sample is drawn 3/10 of the time: 600 ± 3σ (σ ≈ 20.5)
    assert all(540 < c < 660 for c in counts.values()), counts


def test_refresh_drops_only_samples_older_than_max_age():
    buf = ReplayBuffer(100, top_fraction=1.0)
    for r in range(5):
        buf.add([S(f"r{r}", 1.0)], round=r)
    assert buf.refresh(current_round=4, max_age=2) == 2                  # rounds 0 and 1 are 4 and 3 rounds old
    assert [s.question for s in buf.samples()] == ["r2", "r3", "r4"]


def test_refresh_with_keep_advantage_drops_only_the_low_advantage_old_samples():
    buf = ReplayBuffer(100, top_fraction=1.0)
    for r, a in enumerate([0.5, 2.0, 1.0, 0.1, 0.2]):
        buf.add([S(f"r{r}", a)], round=r)
    # rounds 0, 1, 2 are older than 1 round at round 4; of them r1 (Â 2.0) and r2 (Â 1.0) reach 1.0
    assert buf.refresh(current_round=4, max_age=1, keep_advantage=1.0) == 1
    assert [s.question for s in buf.samples()] == ["r1", "r2", "r3", "r4"]
    with pytest.raises(ValueError, match="^keep_advantage: "):
        buf.refresh(current_round=4, max_age=1, keep_advantage=float("nan"))


def test_bad_arguments_are_refused_before_any_work():
    for kwargs, name in ((dict(capacity=0), "capacity"), (dict(capacity=5, top_fraction=0), "top_fraction"),
                         (dict(capacity=5, top_fraction=1.5), "top_fraction"),
                         (dict(capacity=5, min_advantage=float("nan")), "min_advantage")):
        with pytest.raises(ValueError, match=f"^{name}:"):
            ReplayBuffer(**kwargs)


# --- properties ----------------------------------------------------------------------------

ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(-3, 5), min_size=0, max_size=8)),
    st.tuples(st.just("sample"), st.integers(0, 12)),
    st.tuples(st.just("refresh"), st.tuples(st.integers(0, 3), st.sampled_from([None, 1.0, 3.0]))),
    st.tuples(st.just("reopen"), st.just(0)),
), max_size=25)


@settings(max_examples=40, deadline=None)
@given(ops=ops, capacity=st.integers(1, 6), top=st.sampled_from([0.3, 0.5, 1.0]), fmt=st.sampled_from(["mem", "jsonl", "sqlite"]))
def test_random_sequences_keep_every_invariant(tmp_path_factory, ops, capacity, top, fmt):
    folder = tmp_path_factory.mktemp("buf")
    path = None if fmt == "mem" else folder / f"b.{fmt}"
    make = lambda: ReplayBuffer(capacity, path=path, top_fraction=top, seed=0)   # noqa: E731
    buf = make()
    model = []                              # reference: (advantage, round, seq, question) by the documented rules
    seq, rnd = 0, 0
    for op, arg in ops:
        if op == "add":
            rnd += 1
            offered = [S(f"q{rnd}-{i}", float(a)) for i, a in enumerate(arg)]
            k = math.ceil(top * len(offered))
            top_idx = sorted(sorted(range(len(offered)), key=lambda i: -offered[i].advantage)[:k])
            for i in top_idx:
                s = offered[i]
                if s.advantage <= 0:
                    continue
                if len(model) >= capacity:
                    weakest = min(model)
                    if s.advantage < weakest[0]:
                        continue
                    model.remove(weakest)
                model.append((s.advantage, rnd, seq, s.question))
                seq += 1
            buf.add(offered, round=rnd)
        elif op == "sample":
            drawn = buf.sample(arg)
            assert len(drawn) == min(arg, len(model))
            assert len({d.question for d in drawn}) == len(drawn)
        elif op == "refresh":
            age, keep = arg
            buf.refresh(rnd, age, keep)
            model = [m for m in model if rnd - m[1] <= age or (keep is not None and m[0] >= keep)]
        elif op == "reopen" and path is not None:
            buf.close()
            buf = make()
        assert len(buf) <= capacity
        assert all(s.advantage > 0 for s in buf.samples())
        assert [s.question for s in buf.samples()] == [m[3] for m in sorted(model, key=lambda m: m[2])]
    buf.close()


# --- storage -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["buf.jsonl", "buf.sqlite", "buf.db"])
def test_reopening_in_a_new_process_gives_the_same_contents(tmp_path, name):
    path = tmp_path / name
    with ReplayBuffer(10, path=path, top_fraction=1.0) as buf:
        buf.add([S("12+34=", 1.5, answer="46"), S("问题", 0.7, reward=0.5, answer="答")], round=3)
        here = buf.entries()
    code = (f"from grpo_edu.training.trainers.replay import ReplayBuffer\n"
            f"b = ReplayBuffer(10, path={str(path)!r})\n"
            f"print([(s.question, s.answer, s.advantage, s.reward, r) for s, r in b.entries()])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([(s.question, s.answer, s.advantage, s.reward, r) for s, r in here])


@pytest.mark.parametrize("name, content", [
    ("bad.jsonl", b"this is not json\n"),
    ("bad.jsonl", b""),
    ("other.jsonl", json.dumps({"format": "someone-else/2"}).encode() + b"\n"),
    ("broken.jsonl", json.dumps({"format": FORMAT}).encode() + b"\n" + b'{"seq": 0, "round": 0, "question": "q"}\n'),
    ("bad.sqlite", b"garbage garbage garbage garbage garbage garbage garbage garbage"),
])
def test_a_bad_file_gets_a_clear_error_and_is_not_modified(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^path: .*{name}.*not modified"):
        ReplayBuffer(10, path=path)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_sqlite_file_of_another_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(ValueError, match="not a readable replay buffer"):
        ReplayBuffer(10, path=path)
    assert path.read_bytes() == before


def test_other_extensions_and_folders_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^path: .*'\.json'"):
        ReplayBuffer(10, path=tmp_path / "buf.json")
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        ReplayBuffer(10, path=tmp_path / "dir.sqlite")


def test_reopening_with_a_smaller_capacity_is_refused(tmp_path):
    path = tmp_path / "b.sqlite"
    with ReplayBuffer(10, path=path, top_fraction=1.0) as buf:
        buf.add([S(f"q{i}", 1.0) for i in range(5)], round=0)
    with pytest.raises(ValueError, match="^capacity: is 3 .* holds 5"):
        ReplayBuffer(3, path=path)


def test_sigkill_while_adding_keeps_every_returned_add(tmp_path):
    path = tmp_path / "b.sqlite"
    log = tmp_path / "returned.txt"
    code = textwrap.dedent(f"""
        import sys
        from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample
        buf = ReplayBuffer(100000, path={str(path)!r}, top_fraction=1.0)
        with open({str(log)!r}, "w") as log:
            for r in range(100000):
                buf.add([ReplaySample(f"q{{r}}-{{i}}", "1", 1.0 + i, 1.0) for i in range(8)], round=r)
                log.write(f"{{r}}\\n"); log.flush()
    """)
    child = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 60
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 30):
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    returned = [int(x) for x in log.read_text().split()]
    assert len(returned) >= 30
    buf = ReplayBuffer(100000, path=path)
    rounds = {r for _, r in buf.entries()}
    assert set(returned) <= rounds                       # every add that returned is there
    assert len(buf) == 8 * len(rounds)                   # and no add is there in part


def test_grpo_edu_replay_prints_a_summary_and_changes_nothing(tmp_path, capsys):
    from grpo_edu.cli import main

    path = tmp_path / "b.sqlite"
    with ReplayBuffer(10, path=path, top_fraction=1.0) as buf:
        buf.add([S("12+34=", 1.5, answer="46"), S("1+1=", 0.7, reward=0.5, answer="2")], round=3)
    before = path.read_bytes()
    assert main(["replay", str(path), "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 samples" in out and "rounds 3–3" in out and "max 1.5" in out
    assert "'12+34=' → '46'" in out and "'1+1='" not in out           # only the strongest one
    assert path.read_bytes() == before              # (SQLite may add its own -wal/-shm side files)
    assert {p.name for p in tmp_path.iterdir()} <= {"b.sqlite", "b.sqlite-wal", "b.sqlite-shm"}
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2
    assert "no buffer file" in capsys.readouterr().err


# --- one writer, and nothing lost (issue: nothing lost, second pass) -------------------------

@pytest.mark.parametrize("name", ["b.jsonl", "b.sqlite"])
def test_a_buffer_file_has_one_writer_and_a_second_is_refused_naming_it(tmp_path, name):
    path = tmp_path / name
    first = ReplayBuffer(10, path=path, top_fraction=1.0)
    first.add([S("1+1=", 1.0, answer="2")], round=1)
    with pytest.raises(ValueError, match=rf"^path: {path} is being written by a ReplayBuffer still open on it in this "
                                         r"Python process .*: its "
                                         r"lock file .*\.b\.\w+\.lock is held\. Fix: .*close it first"):
        ReplayBuffer(10, path=path)
    first.close()
    with ReplayBuffer(10, path=path) as second:                      # closed: the next writer may open it
        assert [s.question for s in second.samples()] == ["1+1="]
    assert sorted(p.name for p in tmp_path.iterdir() if "lock" in p.name) == []


def test_a_writer_in_another_process_is_named_and_its_lock_is_taken_over_once_it_dies(tmp_path, live_writer):
    path = tmp_path / "b.sqlite"
    code = f"from grpo_edu.training.trainers.replay import ReplayBuffer\nbuf = ReplayBuffer(10, path={str(path)!r})"
    with live_writer(code) as pid:
        with pytest.raises(ValueError, match=rf"is being written by process {pid} on "):
            ReplayBuffer(10, path=path)
    with ReplayBuffer(10, path=path) as buf:                          # a killed writer's lock is stale
        assert len(buf) == 0


def test_a_closed_buffer_refuses_to_write_instead_of_corrupting_its_file(tmp_path):
    path = tmp_path / "b.sqlite"
    buf = ReplayBuffer(10, path=path, top_fraction=1.0)
    buf.close()
    with pytest.raises(ValueError, match="^path: this buffer of .* was closed"):
        buf.add([S("1+1=", 1.0)], round=1)
    with ReplayBuffer(10, path=path) as again:
        assert len(again) == 0                                        # still a readable SQLite buffer


@pytest.mark.parametrize("name", ["exp#1.sqlite", "a?b%20c.sqlite", "exp#2.jsonl"])
def test_a_buffer_path_with_uri_characters_is_written_and_read_back(tmp_path, name, capsys):
    from grpo_edu.cli import main
    from grpo_edu.training.trainers.replay import read_file

    path = tmp_path / name
    with ReplayBuffer(10, path=path, top_fraction=1.0) as buf:
        buf.add([S("12+34=", 1.5, answer="46")], round=1)
    assert [s.answer for s, _ in read_file(path)] == ["46"]
    with ReplayBuffer(10, path=path) as again:
        assert len(again) == 1
    assert main(["replay", str(path)]) == 0 and "1 samples" in capsys.readouterr().out
    # reading made no stray file (an unescaped URI made one named after the path cut at '#' or '?');
    # SQLite's own -wal/-shm side files may stay beside a WAL database
    assert {p.name for p in tmp_path.iterdir()} <= {name, f"{name}-wal", f"{name}-shm"}


@pytest.mark.parametrize("name", ["kept.jsonl", "kept.sqlite"])
def test_a_write_protected_buffer_is_refused_and_left_as_it_is(tmp_path, name):
    path = tmp_path / name
    with ReplayBuffer(10, path=path, top_fraction=1.0) as buf:
        buf.add([S("1+1=", 1.0, answer="2")], round=1)
    path.chmod(0o444)
    before = path.read_bytes()
    try:
        if os.access(path, os.W_OK):
            pytest.skip("running as a user who can write read-only files (root): nothing to refuse")
        with pytest.raises(ValueError, match=rf"^path: {path} is read-only.*Fix: to replay it, copy it"):
            ReplayBuffer(10, path=path)
        assert path.read_bytes() == before
    finally:
        path.chmod(0o644)


def test_a_write_protected_buffer_is_refused_even_for_root(tmp_path, monkeypatch):
    """Root can write a 0444 file, so the check is driven through os.access as a normal user sees it."""
    path = tmp_path / "kept.jsonl"
    with ReplayBuffer(10, path=path, top_fraction=1.0) as buf:
        buf.add([S("1+1=", 1.0, answer="2")], round=1)
    before = path.read_bytes()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) and mode & os.W_OK else real(p, mode))
    with pytest.raises(ValueError, match=r"is read-only, so this buffer cannot write to it"):
        ReplayBuffer(10, path=path)
    assert path.read_bytes() == before and not (tmp_path / ".kept.jsonl.lock").exists()


def test_a_buffer_in_a_missing_folder_is_created_and_a_read_only_folder_is_refused(tmp_path, monkeypatch):
    with ReplayBuffer(10, path=tmp_path / "runs" / "x" / "buf.sqlite") as buf:    # e.g. inside a new output_dir
        assert len(buf) == 0
    assert (tmp_path / "runs" / "x" / "buf.sqlite").is_file()
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(locked) else real(p, mode))
    with pytest.raises(ValueError, match=rf"^path: cannot create or write .*buf\.sqlite \({locked} is not a "
                                         r"writable folder\)"):
        ReplayBuffer(10, path=locked / "sub" / "buf.sqlite")
    assert list(locked.iterdir()) == []


def _jsonl(path, *lines):
    path.write_text("\n".join([json.dumps({"format": FORMAT}), *lines]) + "\n", encoding="utf-8")
    return path.read_bytes()


def _row(seq, question="q", rnd=0):
    return json.dumps({"seq": seq, "round": rnd, "question": question, "answer": "1", "advantage": 1.0, "reward": 1.0})


@pytest.mark.parametrize("lines, message", [
    ((_row(0, "a"), _row(1, "b"), _row(0, "c")), r"has seq 0 on both line 2 and line 4 \(two files joined"),
    ((_row(0), "null"), r"broken sample on line 3 \(TypeError: the line is NoneType"),
    ((_row(0), json.dumps({**json.loads(_row(1)), "seq": "1"})), r"line 3 \(TypeError: seq must be a whole number"),
    ((json.dumps({**json.loads(_row(0)), "round": -2}),), r"line 2 \(TypeError: round must be a whole number ≥ 0"),
])
def test_a_jsonl_buffer_with_clashing_or_malformed_lines_is_refused_untouched(tmp_path, lines, message):
    path = tmp_path / "b.jsonl"
    before = _jsonl(path, *lines)
    with pytest.raises(ValueError, match=message):
        ReplayBuffer(10, path=path)
    assert path.read_bytes() == before


def test_a_sqlite_buffer_with_a_non_numeric_round_is_refused_and_not_switched_to_wal(tmp_path):
    path = tmp_path / "b.sqlite"
    with ReplayBuffer(10, path=path, top_fraction=1.0) as buf:
        buf.add([S("1+1=", 1.0, answer="2")], round=1)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=DELETE")
    with db:
        db.execute("UPDATE replay_samples SET round = 'soon'")
    db.close()
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"has a broken sample \(seq 0: round must be a whole number ≥ 0, got 'soon'\)"):
        ReplayBuffer(10, path=path)
    assert path.read_bytes() == before
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "delete"


@pytest.mark.parametrize("name", ["b.jsonl", "b.sqlite"])
def test_load_state_rolls_back_only_its_own_writers_samples(tmp_path, name):
    path = tmp_path / name
    with ReplayBuffer(10, path=path, top_fraction=1.0, writer="run-a") as a:
        a.add([S("a1", 1.0)], round=1)
        saved = a.state()
        a.add([S("a2", 1.0)], round=2)                                  # after the "checkpoint": A's own
    with ReplayBuffer(10, path=path, top_fraction=1.0, writer="run-a") as a:
        assert a.load_state(saved) == 1                                 # A's later sample is rolled back
        assert [s.question for s in a.samples()] == ["a1"]
        a.add([S("a2", 1.0)], round=2)
    with ReplayBuffer(10, path=path, top_fraction=1.0, writer="run-b") as b:
        b.add([S("b1", 1.0)], round=3)                                  # another run appends
        assert [b.writer_of(seq) for seq in range(3)] == ["run-a", "run-a", "run-b"]
    content = path.read_bytes()
    with ReplayBuffer(10, path=path, top_fraction=1.0, writer="run-a") as a:
        with pytest.raises(ValueError, match=r"^replay_path: .* holds 1 sample that the state does not, added by "
                                             r"run run-b, not by run run-a.*Fix: give this buffer another file"):
            a.load_state(saved, arg="replay_path")
        assert [s.question for s in a.samples()] == ["a1", "a2", "b1"]
    assert path.read_bytes() == content or name.endswith(".sqlite")     # (SQLite may checkpoint its WAL)
    assert [s.question for s, _ in __import__("grpo_edu.training.trainers.replay", fromlist=["read_file"]).read_file(path)] \
        == ["a1", "a2", "b1"]
