"""Data replay: a buffer of good past answers, mixed back into training (the 错题本, mistake notebook).

A student keeps a notebook of the problems they once solved well and goes back over it now
and then, so that what was learned last month is not forgotten. A replay buffer does the same
for GRPO (source article 000): it keeps the best past samples and mixes some of them into each
new step, which protects what the model learned earlier from being overwritten by what it
learns now (catastrophic forgetting, 灾难性遗忘).

The four fields of a sample, as in the source: ``question``, ``answer`` (the model's own
completion), its ``advantage`` Â and its ``reward`` R. The rules, made exact:

* **admission** (准入): of the samples offered in one ``add`` call, only those with
  Â > ``min_advantage`` *and* in the top ``top_fraction`` of that call by advantage get in
  (the source: Â > 0, top 30–50 %), and, when ``min_reward`` is set, with a reward R ≥ ``min_reward``
  (the source's "reward close to full score": under a composite reward an all-wrong group still
  has answers with Â > 0, which only the reward threshold keeps out). "Top fraction" keeps the first ⌈top_fraction · n⌉ of the
  call's n samples sorted by advantage, highest first; among equal advantages the one offered
  first ranks higher.
* **capacity** (容量): a hard limit. When the buffer is full, the sample with the lowest
  advantage leaves first; among equal advantages the oldest (earliest round, then earliest
  added). A newcomer whose advantage is below everything stored is not admitted. The source's
  "delete the oldest and lowest-advantage" needs this exact order, since the oldest and the
  lowest are usually different samples.
* **sampling**: ``sample(n)`` draws n distinct samples uniformly at random (seeded).
* **mixing** (混合): ``mix(new, replay_ratio)`` adds replayed samples so that
  replayed / total = replay_ratio (7:3 new:replayed at 0.3, the source's default; it warns
  outside 10–50 %: above half, learning the new task stalls; below a tenth, replay does nothing).
* **refresh** (定期清理): ``refresh(current_round, max_age)`` drops samples older than max_age rounds;
  with ``keep_advantage`` only the old ones whose advantage is below it (the source: "delete the
  low-advantage old samples"). An old sample's Â was measured against its own group, by the policy of
  its day: it says how good the answer was then, not how much the current policy still has to learn from it.

Storage: in memory; a ``.jsonl`` file (rewritten atomically after each change); or SQLite
(``.sqlite``/``.db``, write-ahead log, one transaction per ``add``), so a run killed mid-way
keeps every sample whose ``add`` had returned. Reopening a file gives the same contents; a
corrupt file, or one written in another format, is reported and never modified.

A buffer file has **one writer at a time**, as a run's output folder has: the object that
opens it holds ``.NAME.lock`` beside it (``grpo_edu.common.locks``) until ``close()``, and a
second writer is refused, naming the first. Reading (``read_file``, ``grpo-edu replay``)
takes no lock and changes nothing. The file also records **who wrote what**: the first seq
each writer (a run id, or none) added, so that a resumed run rolls back only its own samples
and refuses to delete another run's (``load_state``).
"""

import heapq
import json
import math
import os
import random
import sqlite3
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_edu.common import _checks, locks

FORMAT = "grpo_edu.training.replay/1"
"""Written into every buffer file; a file with another value is refused."""
FIELDS = ("question", "answer", "advantage", "reward")
_MISSING = object()
SQLITE_SUFFIXES = (".sqlite", ".db")


@dataclass(frozen=True)
class ReplaySample:
    """One stored experience: the question, the model's answer, its advantage Â and reward R."""

    question: str = _MISSING
    answer: str = _MISSING
    advantage: float = _MISSING
    reward: float = _MISSING

    def __post_init__(self):
        for name in FIELDS:
            if getattr(self, name) is _MISSING:
                _checks.fail(name, "is missing", f"give every replay sample all four fields {list(FIELDS)}")
        for name in ("question", "answer"):
            if not isinstance(getattr(self, name), str):
                _checks.fail(name, f"must be a string, got {type(getattr(self, name)).__name__}",
                             "store the text exactly as the model saw or wrote it")
        for name in ("advantage", "reward"):
            value = _checks.finite_float(name, getattr(self, name), fix="store the number the step computed")
            object.__setattr__(self, name, value)

    @classmethod
    def from_dict(cls, data):
        """A sample from a dict with the four fields (other keys are refused)."""
        if not isinstance(data, dict):
            _checks.fail("sample", f"must be a dict or ReplaySample, got {type(data).__name__}",
                         f"pass {{{', '.join(repr(f) for f in FIELDS)}}}")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            _checks.fail("sample", f"has unknown fields {unknown}", f"use exactly {list(FIELDS)}")
        return cls(**data)


ADVISED_RATIO = (0.1, 0.5)
"""The source's advice for replay_ratio: below, replay does little; above, learning the new data stalls."""


def check_replay_ratio(replay_ratio):
    """Refuse a replay_ratio outside [0, 1) (the replayed share of a step's samples); return it."""
    if isinstance(replay_ratio, bool) or not _checks.is_finite_number(replay_ratio) or not 0 <= replay_ratio < 1:
        _checks.fail("replay_ratio", f"must be in [0, 1), got {replay_ratio!r}",
                     "pass the share of replayed samples in a step, e.g. 0.3 (7 new : 3 replayed), or 0 for none")
    return replay_ratio


def warn_unadvised_ratio(replay_ratio, *, stacklevel=2):
    """Warn when a replay_ratio > 0 lies outside :data:`ADVISED_RATIO`."""
    low, high = ADVISED_RATIO
    if replay_ratio > 0 and not low <= replay_ratio <= high:
        warnings.warn(f"replay_ratio={replay_ratio}: outside {low * 100:g}–{high * 100:g} % replay either does little "
                      "(below) or slows learning the new data (above); the source's default is 0.3",
                      stacklevel=stacklevel + 1)


def replay_count(num_new, replay_ratio):
    """k replayed samples for ``num_new`` new ones, so that k / (num_new + k) = replay_ratio (rounded).

    k = ratio · n / (1 − ratio): 30 replayed for 70 new at 0.3.
    """
    _checks.positive_int("num_new", num_new, minimum=0)
    check_replay_ratio(replay_ratio)
    return round(replay_ratio * num_new / (1 - replay_ratio))


def replay_composition(num_new, replay_ratio, buffer_size):
    """What one step trains on at ``replay_ratio``, and how often a stored sample comes back.

    ``replay_ratio`` is the replayed share of the *total* (7:3 new:replayed is 0.3): that is
    k = ratio·n/(1 − ratio) replayed for n new, i.e. 43 % of the new count at 0.3. (Seed 000
    also says "sample 30–50 % of the new data", a share of the *new* count: at 30 % of new,
    the mix is 10:3, a ratio of 0.23. The two are different numbers; grpo_edu uses the first.)
    Each step draws k of the ``buffer_size`` stored samples uniformly without replacement, so
    one stored sample is drawn with probability k/size per step, once every size/k steps.
    """
    _checks.positive_int("num_new", num_new)
    _checks.positive_int("buffer_size", buffer_size, minimum=0)
    k_wanted = replay_count(num_new, replay_ratio)
    k = min(k_wanted, buffer_size)
    p_drawn = k / buffer_size if buffer_size else 0.0
    return {"new samples": num_new, "replayed samples": k, "total": num_new + k,
            "replayed share of the total": k / (num_new + k), "replayed / new": k / num_new,
            "P(a stored sample is drawn) per step": p_drawn,
            "steps between draws of one stored sample": 1 / p_drawn if p_drawn else float("inf"),
            "short of the ratio (buffer too small)": k_wanted - k}


@dataclass(frozen=True, order=True)
class _Entry:
    """A stored sample with when it came in. Sorting entries gives the eviction order."""

    advantage: float
    round: int
    seq: int
    sample: ReplaySample = field(compare=False)


class ReplayBuffer:
    """A capped pool of good past samples; see the module docstring for the exact rules."""

    def __init__(self, capacity, *, path=None, min_advantage=0.0, top_fraction=0.5, seed=None, writer=None,
                 min_reward=None):
        self.capacity = _checks.positive_int("capacity", capacity)
        self.min_advantage = _checks.finite_float("min_advantage", min_advantage,
                                                  fix="pass e.g. 0.0 (the source: Â > 0)")
        self.min_reward = None if min_reward is None else _checks.finite_float(
            "min_reward", min_reward, fix="pass e.g. 1.0 (a right answer's reward), or None for no threshold")
        if not (isinstance(top_fraction, (int, float)) and 0 < top_fraction <= 1):
            _checks.fail("top_fraction", f"must be in (0, 1], got {top_fraction!r}", "pass e.g. 0.5 (the source: 0.3–0.5)")
        self.top_fraction = float(top_fraction)
        self.rng = random.Random(seed)
        self.path = None if path is None else Path(path)
        self._entries = {}          # seq -> _Entry, in seq order (oldest first)
        self._heap = []             # the same entries as a min-heap in eviction order (may hold removed ones)
        self._next_seq = 0
        self._db = None
        self.writer = writer        # who this object's additions belong to (a trainer's run id), or None
        self._writers = []          # [first seq, writer] spans, as the file records them
        self._lock = None           # the file's lock token while this object may write it
        if self.path is not None:
            self._open()

    # --- reading ----------------------------------------------------------------------
    def __len__(self):
        return len(self._entries)

    def entries(self):
        """Every stored sample with its round, oldest first: a list of (ReplaySample, round)."""
        return [(e.sample, e.round) for e in self._entries.values()]

    def samples(self):
        """Every stored sample, oldest first."""
        return [sample for sample, _ in self.entries()]

    # --- the rules --------------------------------------------------------------------
    def add(self, samples, *, round):
        """Offer one step's samples; returns how many were admitted (see the admission rule)."""
        _checks.positive_int("round", round, minimum=0)
        offered = [s if isinstance(s, ReplaySample) else ReplaySample.from_dict(s) for s in samples]
        k = math.ceil(self.top_fraction * len(offered))
        ranked = sorted(range(len(offered)), key=lambda i: -offered[i].advantage)[:k]   # stable: first offered wins ties
        candidates = [offered[i] for i in sorted(ranked) if offered[i].advantage > self.min_advantage
                      and (self.min_reward is None or offered[i].reward >= self.min_reward)]
        added, evicted = [], []
        for sample in candidates:
            entry = _Entry(sample.advantage, round, self._next_seq, sample)
            if len(self._entries) >= self.capacity:
                weakest = self._weakest()                        # lowest Â, then oldest round, then first added
                if sample.advantage < weakest.advantage:
                    continue                                      # weaker than everything stored
                del self._entries[weakest.seq]
                heapq.heappop(self._heap)
                evicted.append(weakest.seq)
            self._entries[entry.seq] = entry
            heapq.heappush(self._heap, entry)
            self._next_seq += 1
            added.append(entry)
        self._persist(added=added, removed=evicted)
        return len([e for e in added if e.seq in self._entries])

    def sample(self, n):
        """n distinct stored samples, uniformly at random (all of them, shuffled, if fewer are stored)."""
        _checks.positive_int("n", n, minimum=0)
        pool = [e.sample for e in self._entries.values()]
        return self.rng.sample(pool, min(n, len(pool)))

    def replay_count(self, num_new, replay_ratio):
        """How many replayed samples make replayed / (num_new + replayed) = replay_ratio (rounded)."""
        return replay_count(num_new, replay_ratio)

    def mix(self, new_samples, replay_ratio):
        """``new_samples`` plus replayed ones at ``replay_ratio`` of the total, shuffled (new ones kept as given)."""
        new_samples = list(new_samples)
        k = self.replay_count(len(new_samples), replay_ratio)
        warn_unadvised_ratio(replay_ratio)
        replayed = self.sample(k)
        if len(replayed) < k:
            warnings.warn(f"the buffer holds {len(self)} samples, fewer than the {k} this mix asks for; "
                          "the replayed share is smaller than replay_ratio", stacklevel=2)
        mixed = new_samples + replayed
        self.rng.shuffle(mixed)
        return mixed

    def refresh(self, current_round, max_age, keep_advantage=None):
        """Drop samples added more than ``max_age`` rounds before ``current_round``; returns how many.

        With ``keep_advantage``, an old sample whose advantage is at least that value stays: only the
        low-advantage old samples go (the source's "删掉优势值低的旧样本")."""
        _checks.positive_int("current_round", current_round, minimum=0)
        _checks.positive_int("max_age", max_age, minimum=0)
        if keep_advantage is not None:
            _checks.finite_float("keep_advantage", keep_advantage,
                                 fix="pass e.g. 1.0 (old samples with Â ≥ 1 stay), or None to drop every old sample")
        old = [seq for seq, e in self._entries.items() if current_round - e.round > max_age
               and (keep_advantage is None or e.advantage < keep_advantage)]
        for seq in old:
            del self._entries[seq]
        if old:
            self._rebuild_heap()
        self._persist(added=[], removed=old)
        return len(old)

    def last_round(self):
        """The highest round stored (0 when empty): a reopened buffer's rounds continue from here."""
        return max((e.round for e in self._entries.values()), default=0)

    # --- saving the exact state (for a trainer's checkpoint) ---------------------------------
    def state(self):
        """Everything that decides what the buffer does next, as JSON-able data: its contents
        (seq, round and the four fields of each sample), the next seq and its RNG state."""
        version, internal, gauss = self.rng.getstate()
        return {"format": FORMAT, "next_seq": self._next_seq, "rng": [version, list(internal), gauss],
                "entries": [[e.seq, e.round, *(getattr(e.sample, f) for f in FIELDS)]
                            for e in self._entries.values()]}

    def load_state(self, state, *, arg="state"):
        """Make the buffer exactly what ``state()`` returned, in memory and in its file.

        Returns how many stored samples were not in ``state`` (removed: e.g. added by steps after
        the checkpoint being resumed, which the resumed run will add again). Only samples this
        buffer's ``writer`` added are ever removed from a file: one holding another writer's
        samples past the state is refused (named as ``arg``), unchanged.
        """
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            _checks.fail("state", "is not a saved replay-buffer state", "pass what ReplayBuffer.state() returned")
        entries = {}
        for seq, rnd, *values in state["entries"]:
            sample = ReplaySample(**dict(zip(FIELDS, values)))
            entries[seq] = _Entry(sample.advantage, rnd, seq, sample)
        if len(entries) > self.capacity:
            _checks.fail("capacity", f"is {self.capacity} but the saved state holds {len(entries)} samples",
                         f"use capacity ≥ {len(entries)}")
        def same(a, b):
            return a is not None and b is not None and a == b and a.sample == b.sample
        removed = [seq for seq, e in self._entries.items() if not same(e, entries.get(seq))]
        others = [seq for seq in removed if self.writer_of(seq) != self.writer]
        if others and self.path is not None:
            who = ", ".join(sorted({f"run {w}" if w else "an unnamed writer" for w in map(self.writer_of, others)}))
            _checks.fail(arg, f"{self.path} holds {len(others)} sample{'s' * (len(others) != 1)} that the state "
                         f"does not, added by {who}, "
                         f"not by {'run ' + self.writer if self.writer else 'this unnamed writer'}; rolling the file "
                         "back would delete them",
                         "give this buffer another file (a resumed run: another replay_path; its checkpoint holds "
                         "the buffer, so the new file starts exactly as it was), or copy the file first")
        added = [e for seq, e in entries.items() if not same(e, self._entries.get(seq))]
        self._entries = dict(sorted(entries.items()))
        self._rebuild_heap()
        self._next_seq = state["next_seq"]
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self._persist(added=added, removed=removed)
        return len(removed)

    def writer_of(self, seq):
        """Who added the sample ``seq`` (a run id), as the file records it; None when unknown."""
        owner = None
        for first, writer in self._writers:
            if first <= seq:
                owner = writer
        return owner

    # --- storage ----------------------------------------------------------------------
    def _open(self):
        check_path(self.path)
        check_writable(self.path)                                   # before the lock: nothing to clean up
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock, _ = locks.acquire(lock_path(self.path), arg="path", what=str(self.path),
                                      fix="wait for that run to finish, or give this one another replay_path "
                                          "(copy the file to replay its samples); if the other writer is in this "
                                          "process, close it first (buffer.close(), trainer.replay_buffer.close())",
                                      in_process="a ReplayBuffer still open on it in this Python process (a buffer "
                                                 "or an earlier trainer's replay_buffer, e.g. from another cell)")
        try:
            suffix = self.path.suffix.lower()
            if suffix == ".jsonl":
                if self.path.exists():
                    rows, self._writers = _read_jsonl(self.path)
                    self._load_entries(rows)
                else:
                    self._write_jsonl()
            else:
                if self.path.exists():
                    rows, self._writers = _read_sqlite(self.path)       # read-only: a refused file is untouched
                    self._load_entries(rows)
                if len(self._entries) <= self.capacity:
                    self._db = _open_sqlite(self.path)
            if len(self._entries) > self.capacity:
                _checks.fail("capacity", f"is {self.capacity} but {self.path} already holds {len(self._entries)} "
                             "samples", f"reopen it with capacity ≥ {len(self._entries)}")
        except BaseException:
            self.close()
            raise

    def _load_entries(self, rows):
        for seq, rnd, data in sorted(rows, key=lambda r: r[0]):
            self._entries[seq] = _Entry(data["advantage"], rnd, seq, ReplaySample(**data))
        self._next_seq = max(self._entries, default=-1) + 1
        self._rebuild_heap()

    def _weakest(self):
        """The stored entry that leaves first (heap top, skipping entries removed since they were pushed)."""
        while self._entries.get(self._heap[0].seq) is not self._heap[0]:
            heapq.heappop(self._heap)
        return self._heap[0]

    def _rebuild_heap(self):
        self._heap = list(self._entries.values())
        heapq.heapify(self._heap)

    def _persist(self, *, added, removed):
        if self.path is None or not (added or removed):
            return
        if self._lock is None:
            _checks.fail("path", f"this buffer of {self.path} was closed, so it can no longer write the file",
                         "open the file again as a new ReplayBuffer to add to it")
        kept = [e for e in added if e.seq in self._entries]
        new_writer = bool(kept) and (not self._writers or self._writers[-1][1] != self.writer)
        if new_writer:
            self._writers.append([min(e.seq for e in kept), self.writer])    # a new writer's first sample
        if self._db is None:
            self._write_jsonl()
            return
        with self._db:                                  # one transaction: all of this call, or none of it
            if new_writer:                              # once per writer, not at every step
                self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('writers', ?)",
                                 (json.dumps(self._writers),))
            self._db.executemany("DELETE FROM replay_samples WHERE seq = ?", [(s,) for s in removed])
            self._db.executemany(
                "INSERT INTO replay_samples (seq, round, question, answer, advantage, reward) VALUES (?, ?, ?, ?, ?, ?)",
                [(e.seq, e.round, e.sample.question, e.sample.answer, e.sample.advantage, e.sample.reward)
                 for e in added if e.seq in self._entries])

    def _write_jsonl(self):
        # a new, exclusively created file beside the target (never a name another process can plant)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps({"format": FORMAT, "writers": self._writers}) + "\n")
                for e in self._entries.values():
                    f.write(json.dumps({"seq": e.seq, "round": e.round, **asdict(e.sample)}, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def close(self):
        """Close the SQLite connection and let another writer open the file."""
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock is not None:
            locks.release(lock_path(self.path), self._lock)
            self._lock = None

    def __del__(self):                                   # a buffer dropped without close() frees its file
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def eviction_order(buffer):
    """The stored (sample, round) pairs in the order the buffer would evict them: lowest Â first,
    then the oldest round, then the earliest added."""
    return [(e.sample, e.round) for e in sorted(buffer._entries.values())]


def check_path(path, *, arg="path"):
    """Refuse a buffer path this module cannot store to (a wrong extension, a folder), before any work."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix != ".jsonl" and suffix not in SQLITE_SUFFIXES:
        _checks.fail(arg, f"{path} has the extension {suffix or '(none)'!r}",
                     "use .jsonl (a text file) or .sqlite/.db (SQLite), or None to keep the buffer in memory")
    if path.is_dir():
        _checks.fail(arg, f"{path} is a folder", "name a file inside it, e.g. replay.sqlite")
    return path


def lock_path(path):
    """The lock file of the buffer file ``path``: ``.NAME.lock`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


def check_writable(path, *, arg="path"):
    """Refuse a buffer file that cannot be written (read-only, in a read-only folder), before any work.

    A missing folder is fine: it is created when the buffer opens. A read-only file is never
    replaced behind its owner's back (a JSONL rewrite would rename over it).
    """
    path = Path(path)
    if path.exists() and not os.access(path, os.W_OK):
        _checks.fail(arg, f"{path} is read-only, so this buffer cannot write to it",
                     f"to replay it, copy it and give the copy (cp {path} copy{path.suffix}); to write to it, "
                     f"make it writable (chmod u+w {path})")
    folder = _checks.unwritable_folder(path.parent)
    if folder is not None:
        _checks.fail(arg, f"cannot create or write {path} ({folder} is not a writable folder)",
                     "give a path in a folder you can write to")
    return path


def read_file(path):
    """Every sample of a buffer file with its round, oldest first, read without changing the file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix != ".jsonl" and suffix not in SQLITE_SUFFIXES:
        _checks.fail("path", f"{path} has the extension {suffix or '(none)'!r}", "pass a .jsonl, .sqlite or .db buffer file")
    if path.exists() and not path.is_file():
        _checks.fail("path", f"{path} is not a regular file (a folder, a device or a pipe)",
                     "pass the .jsonl, .sqlite or .db file a ReplayBuffer(path=...) wrote")
    if not path.is_file():
        _checks.fail("path", f"no buffer file at {path}", "check the path (a buffer is written by ReplayBuffer(path=...))")
    rows, _ = _read_jsonl(path) if suffix == ".jsonl" else _read_sqlite(path)
    return [(ReplaySample(**data), rnd) for _, rnd, data in sorted(rows, key=lambda r: r[0])]


def describe_file(path, *, show=5):
    """What ``grpo-edu replay PATH`` prints: size, rounds, advantage and reward summary, the strongest samples."""
    entries = read_file(path)
    lines = [f"{path}: {len(entries)} samples"]
    if entries:
        def spread(values):
            values = sorted(values)
            return f"min {values[0]:.3g} · median {values[len(values) // 2]:.3g} · max {values[-1]:.3g}"
        rounds = sorted({r for _, r in entries})
        lines += [f"rounds {rounds[0]}–{rounds[-1]} ({len(rounds)} distinct)",
                  f"advantage: {spread(s.advantage for s, _ in entries)}",
                  f"reward:    {spread(s.reward for s, _ in entries)}",
                  f"the {min(show, len(entries))} strongest (round · advantage · reward · question → answer):"]
        strongest = sorted(entries, key=lambda e: -e[0].advantage)[:show]
        lines += [f"  {r:>5} · {s.advantage:+.3f} · {s.reward:.3g} · {s.question!r} → {s.answer!r}" for s, r in strongest]
    return "\n".join(lines)


def _bad_file(path, problem):
    _checks.fail("path", f"{path} {problem}",
                 "open another file, or move this one away to start a new buffer (it was not modified)")


def _read_jsonl(path):
    """(seq, round, fields) of every sample in a JSONL buffer file; a clear error if it is not one."""
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
    except UnicodeDecodeError:
        _bad_file(path, "is not a text file")
    if not lines:
        _bad_file(path, "is empty (a replay buffer file starts with a format line)")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        _bad_file(path, "is not a replay buffer: line 1 is not JSON")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        _bad_file(path, f"is not a {FORMAT} replay buffer (line 1 is {lines[0].strip()[:80]!r})")
    writers = _checked_writers(path, header.get("writers", []))
    line_of = {}                                       # seq -> the line that holds it
    for number, line in enumerate(lines[1:], start=2):
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise TypeError(f"the line is {type(data).__name__}, not an object")
            seq, rnd = data.pop("seq"), data.pop("round")
            _check_seq_round(seq, rnd)
            ReplaySample(**data)                       # checks the four fields
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            _bad_file(path, f"has a broken sample on line {number} ({err.__class__.__name__}: {str(err)[:120]})")
        if seq in line_of:
            _bad_file(path, f"has seq {seq} on both line {line_of[seq]} and line {number} (two files joined "
                      "into one?), so one of them would be lost")
        line_of[seq] = number
        rows.append((seq, rnd, data))
    return rows, writers


def _check_seq_round(seq, rnd):
    for name, value in (("seq", seq), ("round", rnd)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TypeError(f"{name} must be a whole number ≥ 0, got {value!r}")


def _checked_writers(path, writers):
    """The file's [first seq, writer] spans, checked."""
    ok = isinstance(writers, list) and all(
        isinstance(w, list) and len(w) == 2 and isinstance(w[0], int) and not isinstance(w[0], bool)
        and (w[1] is None or isinstance(w[1], str)) for w in writers)
    if not ok:
        _bad_file(path, f"records its writers in a form this version cannot read ({str(writers)[:80]})")
    return [list(w) for w in writers]


_SCHEMA = ("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
           "CREATE TABLE IF NOT EXISTS replay_samples (seq INTEGER PRIMARY KEY, round INTEGER NOT NULL, "
           "question TEXT NOT NULL, answer TEXT NOT NULL, advantage REAL NOT NULL, reward REAL NOT NULL);")


def _read_sqlite(path):
    """Read an existing SQLite buffer read-only (so a bad file is never changed): (rows, writers)."""
    # a file: URI, percent-escaped, so that '#', '?' or '%' in a name are the file's name, not URI syntax
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        db = sqlite3.connect(uri, uri=True)
        try:
            fmt = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            if fmt is None or fmt[0] != FORMAT:
                _bad_file(path, f"is not a {FORMAT} replay buffer (its format is {fmt and fmt[0]!r})")
            writers = db.execute("SELECT value FROM meta WHERE key = 'writers'").fetchone()
            rows = db.execute("SELECT seq, round, question, answer, advantage, reward FROM replay_samples").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as err:
        _bad_file(path, f"is not a readable replay buffer ({err})")
    try:
        writers = _checked_writers(path, json.loads(writers[0]) if writers else [])
    except json.JSONDecodeError:
        _bad_file(path, "records its writers in a form this version cannot read")
    out = []
    for seq, rnd, q, a, adv, rew in rows:
        try:
            _check_seq_round(seq, rnd)
            out.append((seq, rnd, asdict(ReplaySample(q, a, adv, rew))))
        except (TypeError, ValueError) as err:
            _bad_file(path, f"has a broken sample (seq {seq!r}: {err})")
    return out, writers


def _open_sqlite(path):
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")             # with WAL: a committed add survives a killed process
    with db:
        db.executescript(_SCHEMA)
        db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?)", (FORMAT,))
    return db
