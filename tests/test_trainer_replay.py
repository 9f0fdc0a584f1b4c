"""The trainer with a replay buffer: off means off, the buffer file and the checkpoint stay exact.

How replayed rows enter the loss is pinned in test_trainer_wiring.py; the buffer's own rules
in test_replay.py.
"""

import json
import warnings

import pytest
import torch

from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.replay import read_file
from grpo_edu.training.trainers.trainer import GRPOTrainer

FAST = dict(batch_size=4, num_generations=4, total_training_steps=6, eval_size=0, max_completion_length=4,
            learning_rate=1e-2, beta=0.05)


def _reward_first_digit(prompts, completions, **kw):
    """Rewards that vary within a group for a random model: answers starting like the prompt win, short (finished) ones too."""
    return [float(c[:1] == p[:1]) - 0.1 * len(c) for p, c in zip(prompts, completions)]


@pytest.fixture
def make(random_model, char_tokenizer):
    """Trainers that all start from the same random weights."""
    state = {k: v.clone() for k, v in random_model.state_dict().items()}

    def trainer(**overrides):
        model = type(random_model)(random_model.config)
        model.load_state_dict(state)
        return GRPOTrainer(GRPOConfig(**{**FAST, **overrides}), model=model, tokenizer=char_tokenizer,
                           reward_funcs=[_reward_first_digit])
    return trainer


def _strip(history):
    return [{k: v for k, v in h.items() if k != "seconds" and not k.startswith("replay_")} for h in history]


def test_replay_off_is_bit_for_bit_the_trainer_without_a_buffer(tmp_path, make):
    """replay_ratio = 0 trains exactly as before, also while it fills a buffer file for a later run."""
    runs = {"plain": make(), "ratio 0": make(replay_ratio=0.0),
            "ratio 0, filling a file": make(replay_path=str(tmp_path / "b.sqlite"))}
    histories = {name: t.train(progress=False) for name, t in runs.items()}
    assert runs["plain"].replay_buffer is None and "replay_share" not in histories["plain"][0]
    for name in ("ratio 0", "ratio 0, filling a file"):
        assert _strip(histories[name]) == _strip(histories["plain"]), name
        for a, b in zip(runs[name].model.parameters(), runs["plain"].model.parameters()):
            assert torch.equal(a, b), name
    filled = histories["ratio 0, filling a file"]
    assert len(read_file(tmp_path / "b.sqlite")) == filled[-1]["replay_buffer_size"] > 0
    assert sum(m["replay_admitted"] for m in filled) == filled[-1]["replay_buffer_size"]
    assert all(m["replay_share"] == 0 for m in filled)
    replaying = make(replay_ratio=0.3).train(progress=False)
    assert _strip(replaying) != _strip(histories["plain"])           # and replay does change training
    assert all(m["replay_share"] > 0 for m in replaying[1:])


@pytest.mark.parametrize("storage", [None, "buffer.sqlite", "buffer.jsonl"])
def test_resume_with_replay_equals_an_uninterrupted_run(tmp_path, make, storage):
    """3 steps + checkpoint (+ one step more that reaches the buffer file but no checkpoint) then
    resume == 6 uninterrupted steps: metrics, weights and the buffer's contents."""
    def path(name):
        return None if storage is None else str(tmp_path / name / storage)

    settings = dict(replay_ratio=0.3, num_iterations=2, replay_refresh_every=2, replay_max_age=3)
    (tmp_path / "full").mkdir(), (tmp_path / "cut").mkdir()
    full_trainer = make(replay_path=path("full"), **settings)
    full = full_trainer.train(progress=False)
    out = tmp_path / "run"
    first = make(replay_path=path("cut"), output_dir=str(out), **settings)
    for _ in range(3):
        first.step()
    first.save_checkpoint()
    first.step()                                     # lost on resume: its samples are in the file only
    first.replay_buffer.close()
    resumed = make(replay_path=path("cut"), output_dir=str(out), **settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = resumed.train(resume_from=out, progress=False)
    rolled_back = [w for w in caught if "replay_path" in str(w.message)]
    assert bool(rolled_back) == (storage is not None and first.history[-1]["replay_admitted"] > 0)
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in history] == \
        [{k: v for k, v in h.items() if k != "seconds"} for h in full]
    for a, b in zip(resumed.model.parameters(), full_trainer.model.parameters()):
        assert torch.equal(a, b)
    assert resumed.replay_buffer.entries() == full_trainer.replay_buffer.entries()
    if storage is not None:
        resumed.replay_buffer.close(), full_trainer.replay_buffer.close()
        assert read_file(path("cut")) == read_file(path("full"))
    saved = json.loads((out / "latest.json").read_text())["checkpoint"]
    assert "replay" in json.loads((out / saved / "trainer_state.json").read_text())


def test_a_reopened_buffer_file_continues_its_rounds(tmp_path, make):
    """Phase B reopens phase A's file: its samples are younger than A's, so A's leave first on ties
    and a refresh measures age across both runs."""
    path = str(tmp_path / "b.sqlite")
    a = make(replay_path=path, total_training_steps=3)
    a.train(progress=False)
    a.replay_buffer.close()
    last_a = max(r for _, r in read_file(path))
    assert 1 <= last_a <= 3
    b = make(replay_path=path, replay_ratio=0.3, total_training_steps=2)
    b.train(progress=False)
    b_rounds = [r for _, r in read_file(path)][len([1 for _ in read_file(path) if _[1] <= last_a]):]
    assert b_rounds and all(r in (last_a + 1, last_a + 2) for r in b_rounds)


def test_refresh_drops_samples_older_than_max_age(make):
    t = make(replay_ratio=0.3, replay_refresh_every=2, replay_max_age=1, total_training_steps=4)
    history = t.train(progress=False)
    assert [m["replay_dropped"] > 0 for m in history].count(True) >= 1
    assert all(m["replay_dropped"] == 0 for m in history if m["step"] % 2)
    assert all(r >= 4 - 1 for _, r in t.replay_buffer.entries())       # refreshed at step 4: age ≤ 1


def test_refresh_keeps_old_samples_at_or_above_keep_advantage(make):
    t = make(replay_ratio=0.3, replay_refresh_every=2, replay_max_age=1, replay_refresh_keep_advantage=1.0,
             total_training_steps=4)
    t.train(progress=False)
    old = [(s, r) for s, r in t.replay_buffer.entries() if r < 4 - 1]
    assert old and all(s.advantage >= 1.0 for s, _ in old)             # the old ones left are the strong ones


def test_an_interrupted_step_with_replay_runs_again_identically(make):
    full = make(replay_ratio=0.3).train(progress=False)
    t = make(replay_ratio=0.3)
    for _ in range(2):
        t.step()
    real_update = t._update

    def stop_once(*a, **k):
        t._update = real_update
        raise KeyboardInterrupt
    t._update = stop_once
    with pytest.raises(KeyboardInterrupt):
        t.step()                                              # drew its replayed samples, then stopped
    history = t.train(progress=False)
    strip = lambda hs: [{k: v for k, v in h.items() if k != "seconds"} for h in hs]   # noqa: E731
    assert strip(history) == strip(full)


@pytest.mark.parametrize("kwargs, match", [
    (dict(replay_ratio=1.0), r"^replay_ratio: must be in \[0, 1\), got 1.0"),
    (dict(replay_ratio=-0.1), "^replay_ratio: "),
    (dict(replay_ratio=True), "^replay_ratio: "),
    (dict(replay_ratio="0.3"), "^replay_ratio: "),
    (dict(replay_capacity=0), "^replay_capacity: "),
    (dict(replay_top_fraction=0), "^replay_top_fraction: "),
    (dict(replay_top_fraction=1.5), "^replay_top_fraction: "),
    (dict(replay_min_advantage=float("nan")), "^replay_min_advantage: "),
    (dict(replay_min_reward=float("inf")), "^replay_min_reward: "),
    (dict(replay_min_reward="1"), "^replay_min_reward: "),
    (dict(replay_refresh_every=-1), "^replay_refresh_every: "),
    (dict(replay_refresh_keep_advantage=float("nan")), "^replay_refresh_keep_advantage: "),
    (dict(replay_refresh_every=10), "^replay_max_age: is not set but replay_refresh_every asks"),
    (dict(replay_path="buffer.txt"), r"^replay_path: buffer.txt has the extension '.txt'"),
])
def test_replay_settings_checked_up_front(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


@pytest.mark.parametrize("ratio", [0.05, 0.6])
def test_a_replay_ratio_outside_the_advised_range_warns(ratio):
    with pytest.warns(UserWarning, match=f"^replay_ratio={ratio}: outside 10–50 %"):
        GRPOConfig(replay_ratio=ratio)


def test_a_corrupt_buffer_file_fails_before_the_model_loads_and_is_not_changed(tmp_path, monkeypatch):
    from grpo_edu.training.trainers import trainer as trainer_module

    bad = tmp_path / "b.sqlite"
    bad.write_bytes(b"not a database at all")
    monkeypatch.setattr(trainer_module, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(ValueError, match=r"^path: .*b.sqlite is not a readable replay buffer"):
        GRPOTrainer(GRPOConfig(**FAST, replay_ratio=0.3, replay_path=str(bad)))
    assert bad.read_bytes() == b"not a database at all"


# --- nothing lost: one writer per buffer file, and a resume never deletes another run's samples ---

def test_a_second_trainer_on_a_busy_buffer_file_is_refused_before_any_work(tmp_path, make):
    path = str(tmp_path / "shared.sqlite")
    first = make(replay_path=path)
    first.train(progress=False)
    stored = read_file(path)
    with pytest.raises(ValueError, match=r"^path: .*shared\.sqlite is being written by a ReplayBuffer still open on it "
                                         r"in this Python process"):
        make(replay_path=path)
    first.replay_buffer.close()
    assert read_file(path) == stored
    make(replay_path=path).replay_buffer.close()                     # free again once the first is closed


def test_resuming_a_run_after_another_appended_to_its_buffer_is_refused_and_deletes_nothing(tmp_path, make):
    path = str(tmp_path / "shared.jsonl")
    a = make(replay_path=path, output_dir=str(tmp_path / "a"))
    for _ in range(2):
        a.step()
    a.save_checkpoint()
    a.step()                                                          # past the checkpoint: A's own samples
    a.replay_buffer.close()
    b = make(replay_path=path, output_dir=str(tmp_path / "b"), seed=1)
    b.train(progress=False)                                           # another run appends to the same file
    b.replay_buffer.close()
    content = (tmp_path / "shared.jsonl").read_bytes()
    resumed = make(replay_path=path)
    with pytest.raises(ValueError, match=rf"^replay_path: .*shared\.jsonl holds \d+ samples? that the state does not, "
                                         rf"added by run {b.run_id}, not by run {a.run_id}.*another replay_path"):
        resumed.train(resume_from=tmp_path / "a", progress=False)
    resumed.replay_buffer.close()
    assert (tmp_path / "shared.jsonl").read_bytes() == content        # B's samples are all still there
    # the fix the message names: resume into another buffer file, which starts as the checkpoint's buffer
    fresh = make(replay_path=str(tmp_path / "a-resumed.jsonl"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh.load_checkpoint(tmp_path / "a")
    saved = json.loads((tmp_path / "a" / "checkpoint-000002" / "trainer_state.json").read_text())
    assert [[seq, rnd, s.question, s.answer] for seq, (s, rnd) in
            zip([e[0] for e in saved["replay"]["buffer"]["entries"]], read_file(tmp_path / "a-resumed.jsonl"))] == \
        [e[:4] for e in saved["replay"]["buffer"]["entries"]]
    fresh.train(progress=False)
    fresh.replay_buffer.close()


def test_a_refused_resume_while_the_run_is_live_leaves_its_buffer_untouched(tmp_path, make, live_writer):
    """A live run (another process) holds its folder and its buffer; resuming it is refused before the
    buffer is rolled back."""
    path, out = tmp_path / "live.sqlite", tmp_path / "run"
    a = make(replay_path=str(path), output_dir=str(out))
    for _ in range(2):
        a.step()
    a.save_checkpoint()
    a.step()
    a.replay_buffer.close()
    content = read_file(path)
    code = (f"from grpo_edu.training import run_folder\nfrom grpo_edu.training.trainers.replay import ReplayBuffer\n"
            f"run_folder.acquire_lock({str(out)!r})\nbuf = ReplayBuffer(10_000, path={str(path)!r})")
    with live_writer(code) as pid:
        with pytest.raises(ValueError, match=rf"is being written by process {pid} on "):
            make(replay_path=str(path), output_dir=str(out)).train(resume_from=out, progress=False)
    assert read_file(path) == content                                # nothing rolled back


def test_the_reward_threshold_keeps_an_all_wrong_groups_best_answer_out():
    """Under a composite reward (lesson 07) an all-wrong group still ranks its answers: the best of
    them has Â > 0 and would enter a notebook of good answers, unless its reward must be near full."""
    from grpo_edu.core.advantages import group_advantages
    from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample

    rewards = [0.2, 0.1, 0.0, 0.0]                                  # all wrong; brevity and format differ
    adv = group_advantages([rewards])[0].tolist()
    offered = [ReplaySample("1+1=", a, adv[i], rewards[i]) for i, a in enumerate(["3", "33", "x", "4x"])]
    assert ReplayBuffer(10).add(offered, round=1) == 2                # Â > 0, top half: two wrong answers get in
    assert ReplayBuffer(10, min_reward=1.0).add(offered, round=1) == 0
    right = ReplaySample("1+1=", "2", 1.0, 1.2)
    assert ReplayBuffer(10, min_reward=1.0).add([right], round=1) == 1


def test_the_trainer_passes_the_reward_threshold_to_its_buffer():
    trainer = GRPOTrainer(GRPOConfig(replay_ratio=0.3, replay_min_reward=1.0, total_training_steps=1, eval_size=0))
    assert trainer.replay_buffer.min_reward == 1.0
