"""A run's files survive reuse, kills, corruption and full disks (issue 7).

Rotation touches only this run's checkpoints; a folder holding another run is refused
unless resumed or overwritten; one process writes a folder at a time (a lock file);
damaged checkpoints are named with the intact one to use instead; a full disk leaves the
previous checkpoint intact and says so.
"""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from grpo_edu.training.runs import checkpoint as ckpt, run_folder
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.trainer import GRPOTrainer

FAST = dict(batch_size=4, num_generations=4, eval_size=0, max_completion_length=4, learning_rate=1e-2)


@pytest.fixture
def make(random_model, char_tokenizer):
    """make(out, steps, **config) → a trainer on a fresh copy of the same random model."""
    state = {k: v.clone() for k, v in random_model.state_dict().items()}

    def make(out=None, steps=4, **overrides):
        model = type(random_model)(random_model.config)
        model.load_state_dict(state)
        config = GRPOConfig(**{**FAST, "total_training_steps": steps, **overrides},
                            output_dir=None if out is None else str(out))
        return GRPOTrainer(config, model=model, tokenizer=char_tokenizer)
    return make


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def _latest(folder):
    return json.loads((folder / "latest.json").read_text())["checkpoint"]


# --- item 1: clean-up keeps what this run did not write -------------------------------------
def test_rotation_never_deletes_folders_this_run_did_not_write(tmp_path, make):
    """Clean-up used to keep the last two checkpoint-* folders by name, whoever wrote them."""
    other = tmp_path / "other"
    make(other, steps=1).train(progress=False)                      # another run's checkpoint
    out = tmp_path / "run"
    make(out, steps=2, checkpoint_every=1).train(progress=False)
    shutil.copytree(out / "checkpoint-000002", out / "checkpoint-best")       # a user's copies
    shutil.copytree(out / "checkpoint-000001", out / "checkpoint-final")
    shutil.copytree(other / "checkpoint-000001", out / "checkpoint-000000")   # kept from the other run
    (out / "notes.txt").write_text("mine")
    make(out, steps=5, checkpoint_every=1).train(resume_from=out, progress=False)
    assert _names(out) == ["checkpoint-000000", "checkpoint-000004", "checkpoint-000005", "checkpoint-best",
                           "checkpoint-final", "latest.json", "notes.txt"]
    assert _latest(out) == "checkpoint-000005"


def test_reusing_a_folder_of_a_longer_run_is_refused_then_overwritten(tmp_path, make):
    """The issue's reproduction: 40 steps into X, then 20 steps into X (here 4, then 2). The
    clean-up used to delete the new run's own checkpoints and leave latest.json dangling."""
    out = tmp_path / "X"
    make(out, steps=4, checkpoint_every=1).train(progress=False)
    (out / "notes.txt").write_text("mine")
    before = _names(out)
    second = make(out, steps=2, checkpoint_every=1)
    with pytest.raises(ckpt.CheckpointError, match=r"^output_dir: .*X already holds another run "
                       r"\(checkpoint-000003, checkpoint-000004\).*--resume .*--overwrite"):
        second.train(progress=False)
    assert _names(out) == before and second.step_count == 0        # refused before any work
    with pytest.warns(UserWarning, match="overwrite removed the earlier run's checkpoint-000003, checkpoint-000004"):
        second.train(overwrite=True, progress=False)
    assert _names(out) == ["checkpoint-000001", "checkpoint-000002", "latest.json", "notes.txt"]
    assert _latest(out) == "checkpoint-000002" and (out / _latest(out)).is_dir()


def test_overwrite_and_resume_together_are_refused(tmp_path, make):
    with pytest.raises(ValueError, match="^overwrite: cannot be combined with resume_from"):
        make(tmp_path / "r").train(resume_from=tmp_path, overwrite=True, progress=False)


# --- item 6: one writer per folder --------------------------------------------------------
def _lock(out, pid, host=None):
    out.mkdir(parents=True, exist_ok=True)
    (out / run_folder.LOCK).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "token": "x"}))


def test_a_second_process_is_refused_and_a_dead_ones_lock_is_taken_over(tmp_path, make):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        _lock(out, holder.pid)                                       # a live process holds the folder
        with pytest.raises(ckpt.CheckpointError, match=rf"is being written by process {holder.pid} on "):
            make(out, steps=1).train(progress=False)
        assert not (out / "latest.json").exists()
    finally:
        holder.communicate(b"")                                     # it exits: its lock is now stale
    with pytest.warns(UserWarning, match=rf"took over the stale lock .* of process {holder.pid}"):
        make(out, steps=1).train(progress=False)
    assert _latest(out) == "checkpoint-000001"
    assert not (out / run_folder.LOCK).exists()                          # released at the end


def test_a_lock_from_another_machine_is_never_taken_over(tmp_path, make):
    out = tmp_path / "run"
    _lock(out, 1, host="some-other-host")
    with pytest.raises(ckpt.CheckpointError, match=r"process 1 on some-other-host.*delete .*\.grpo_edu\.lock"):
        make(out, steps=1).train(progress=False)


def test_two_real_processes_cannot_share_a_folder(tmp_path):
    """Run the lock code in another interpreter that holds it; then kill that process."""
    out = tmp_path / "run"
    code = ("import sys; from grpo_edu.training import run_folder; run_folder.acquire_lock(sys.argv[1]); "
            "print('locked', flush=True); sys.stdin.read()")
    other = subprocess.Popen([sys.executable, "-c", code, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "locked"
        with pytest.raises(ckpt.CheckpointError, match=rf"process {other.pid} on"):
            run_folder.acquire_lock(out)
    finally:
        other.kill()                                                # SIGKILL: no clean-up runs
        other.wait()
    token, info = run_folder.acquire_lock(out)                           # the dead process's lock is stale
    assert f"process {other.pid}" in info["took_over"] and "no longer running" in info["took_over"]
    run_folder.release_lock(out, token)
    assert not (out / run_folder.LOCK).exists()


# --- damaged checkpoints ------------------------------------------------------------------
@pytest.fixture
def two_checkpoints(tmp_path, make):
    out = tmp_path / "run"
    make(out, steps=2, checkpoint_every=1).train(progress=False)
    return out


def _edit_state(out, change):
    path = out / "checkpoint-000002" / "trainer_state.json"
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state))


def _drop_tensors(path, prefix):
    from safetensors.torch import load_file, save_file

    save_file({k: v for k, v in load_file(path).items() if not k.startswith(prefix)}, path)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage, match, intact", [
    (lambda out: _truncate(out / "checkpoint-000002" / "model.safetensors"),
     r"checkpoint-000002/model\.safetensors is truncated \(\d+ of \d+ bytes\)", 1),
    (lambda out: _truncate(out / "checkpoint-000002" / "trainer_state.safetensors"),
     r"checkpoint-000002/trainer_state\.safetensors is truncated", 1),
    (lambda out: (out / "checkpoint-000002" / "trainer_state.json").write_text("{garbage"),
     r"checkpoint-000002/trainer_state\.json is not valid JSON", 1),
    (lambda out: (out / "latest.json").write_text("not json at all"),
     r"run/latest\.json is damaged \(JSONDecodeError", 2),
    (lambda out: shutil.rmtree(out / "checkpoint-000002"),
     r"run/latest\.json names checkpoint-000002, which is missing or incomplete", 1),
    # keys missing or malformed inside trainer_state.json: that file is named (it used to be the .safetensors)
    (lambda out: _edit_state(out, lambda s: s["optimizer"].pop("scalars")),
     r"checkpoint-000002/trainer_state\.json has its optimizer entry in the wrong form \(it must be an object with "
     r"param_groups", 1),
    (lambda out: _edit_state(out, lambda s: s.pop("metrics")),
     r"checkpoint-000002/trainer_state\.json lacks the metrics entry", 1),
    (lambda out: _edit_state(out, lambda s: s.update(step="2")),
     r"checkpoint-000002/trainer_state\.json has its step entry in the wrong form", 1),
    (lambda out: _edit_state(out, lambda s: s["optimizer"]["scalars"].update(nonsense=1)),
     r"checkpoint-000002/trainer_state\.json has optimizer scalars whose names are not <parameter index>\.<name>: "
     r"\['nonsense'\]", 1),
    (lambda out: _drop_tensors(out / "checkpoint-000002" / "trainer_state.safetensors", "rng."),
     r"checkpoint-000002/trainer_state\.safetensors lacks rng\.sampling, rng\.torch_cpu", 1),
])
def test_a_damaged_checkpoint_names_the_file_and_the_intact_one(two_checkpoints, make, damage, match, intact):
    """These used to be raw tracebacks that named no file and no way out."""
    out = two_checkpoints
    damage(out)
    t = make(out, steps=4)
    name = f"checkpoint-00000{intact}"
    with pytest.raises(ckpt.CheckpointError, match=rf"^resume_from: .*{match}.*\. Fix: use the newest intact "
                       rf"checkpoint, .*{name} \(--resume .*{name}"):
        t.train(resume_from=out, progress=False)
    assert t.step_count == 0
    t.train(resume_from=out / name, progress=False)                  # the offered one works
    assert t.step_count == 4


def test_no_intact_checkpoint_left_says_so(two_checkpoints, make):
    out = two_checkpoints
    for step in (1, 2):
        _truncate(out / f"checkpoint-00000{step}" / "model.safetensors")
    with pytest.raises(ckpt.CheckpointError, match="no intact checkpoint is left in"):
        make(out).train(resume_from=out, progress=False)
    with pytest.raises(ckpt.CheckpointError, match=r"^resume_from: no folder at .*nowhere"):
        make().train(resume_from=out / "nowhere", progress=False)
    with pytest.raises(ckpt.CheckpointError, match=r"holds no checkpoint"):
        make().train(resume_from=out.parent, progress=False)


# --- disk full ----------------------------------------------------------------------------
def test_disk_full_keeps_the_previous_checkpoint_and_says_so(tmp_path, make, monkeypatch):
    out = tmp_path / "run"
    t = make(out, steps=3, checkpoint_every=1)
    real_save, calls = ckpt.save_file, []

    def disk_fills_up(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(ckpt, "save_file", disk_fills_up)
    with pytest.raises(ckpt.CheckpointWriteError, match=r"^output_dir: disk full while writing checkpoint 2 into "
                       r".*run \(OSError: \[Errno 28\] No space left on device\); checkpoint 1 \(.*checkpoint-000001\) "
                       r"is intact\. Fix: free space .* --resume "):
        t.train(progress=False)
    assert _names(out) == ["checkpoint-000001", "latest.json"]     # no half-written .tmp folder left
    assert not (out / run_folder.LOCK).exists()
    (out / ".checkpoint-000002.tmp-99999").mkdir()                  # as a SIGKILL mid-write leaves it
    (out / "latest.json.tmp-99999").write_text("{")
    monkeypatch.setattr(ckpt, "save_file", real_save)
    make(out, steps=3, checkpoint_every=1).train(resume_from=out, progress=False)
    assert _names(out) == ["checkpoint-000002", "checkpoint-000003", "latest.json"]   # stale ones cleaned


def test_a_crash_while_checkpointing_keeps_the_previous_one(tmp_path, monkeypatch, make):
    out = tmp_path / "run"
    t = make(out, steps=2, checkpoint_every=1)
    t.step()
    t.save_checkpoint()
    before = (out / "checkpoint-000001" / "model.safetensors").read_bytes()
    t.step()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(ckpt, "save_file", boom)
    with pytest.raises(KeyboardInterrupt):
        t.save_checkpoint()
    assert _latest(out) == "checkpoint-000001"
    assert (out / "checkpoint-000001" / "model.safetensors").read_bytes() == before
    assert _names(out) == ["checkpoint-000001", "latest.json"]
    monkeypatch.undo()
    again = make(out, steps=2)
    again.load_checkpoint(out)
    assert again.step_count == 1


# --- resuming -----------------------------------------------------------------------------
def test_resume_from_a_named_checkpoint_without_output_dir_saves_into_its_run(tmp_path, make):
    """Resuming without output_dir used to train and save nothing."""
    out = tmp_path / "run"
    first = make(out, steps=4, checkpoint_every=2)
    first.train(progress=False)
    again = make(None, steps=4)
    with pytest.warns(UserWarning, match=r"output_dir: not set, so this resumed run saves into .*run"):
        history = again.train(resume_from=out / "checkpoint-000002", progress=False)
    assert again.config.output_dir == str(out)
    strip = lambda hs: [{k: v for k, v in h.items() if k != "seconds"} for h in hs]   # noqa: E731
    assert strip(history) == strip(first.history)
    assert _names(out) == ["checkpoint-000002", "checkpoint-000004", "latest.json"]


def test_the_final_checkpoint_holds_the_final_evaluation(tmp_path, make):
    out = tmp_path / "run"
    t = make(out, steps=4, checkpoint_every=2, eval_size=3)
    t.train(progress=False)
    state = json.loads((out / "checkpoint-000004" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["metrics"]["evals"]] == [0, 4] == [e["step"] for e in t.evals]
    again = make(out, steps=4, eval_size=3)
    again.train(resume_from=out, progress=False)                    # a finished run: nothing to redo
    assert again.evals == t.evals and again.step_count == 4


def test_save_checkpoint_without_output_dir_says_how(make):
    with pytest.raises(ValueError, match=r"^output_dir: is not set"):
        make().save_checkpoint()


def test_checkpoint_files_are_checked_without_loading_them(two_checkpoints):
    folder = two_checkpoints / "checkpoint-000002"
    assert ckpt.checkpoint_problem(folder) is None
    assert ckpt.safetensors_problem(folder / "nothing.safetensors") == "is missing"
    (folder / "x.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json here!!!")
    assert ckpt.safetensors_problem(folder / "x.safetensors").startswith("is not a safetensors file")
    (folder / "y.safetensors").write_bytes(os.urandom(4))
    assert "truncated" in ckpt.safetensors_problem(folder / "y.safetensors")
    assert [s for s, _ in ckpt.intact_checkpoints(two_checkpoints)] == [2, 1]


def test_planted_links_at_the_old_temporary_names_are_never_followed(tmp_path, make):
    """Temporary files and folders used to be named after the pid (predictable): a link planted there was
    written through. Now each is created exclusively, under a name nobody can guess."""
    import os

    out, outside = tmp_path / "run", tmp_path / "outside"
    out.mkdir(), outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    pid = os.getpid()
    (out / f".checkpoint-000001.tmp-{pid}").symlink_to(outside, target_is_directory=True)
    (out / f"latest.json.tmp-{pid}").symlink_to(outside / "precious.txt")
    t = make(out, steps=1)
    t.train(progress=False)
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "keep me"
    assert _latest(out) == "checkpoint-000001" and (out / "checkpoint-000001" / "model.safetensors").is_file()


def test_a_checkpoints_config_this_version_cannot_read_names_the_file(two_checkpoints, make):
    _edit_state(two_checkpoints, lambda s: s["config"].update(a_field_from_the_future=1))
    with pytest.raises(ckpt.CheckpointError, match=r"^resume_from: .*checkpoint-000002/trainer_state\.json holds a "
                                                   r"config this grpo_edu cannot read .*a_field_from_the_future"):
        make(two_checkpoints, steps=4).train(resume_from=two_checkpoints, progress=False)


def test_overwrite_removes_a_symlinked_checkpoint_link_and_never_what_it_points_to(tmp_path, make):
    out = tmp_path / "run"
    make(out, steps=2, checkpoint_every=1).train(progress=False)
    elsewhere = tmp_path / "kept-elsewhere"
    (out / "checkpoint-000002").rename(elsewhere)
    (out / "checkpoint-000002").symlink_to(elsewhere)               # a user's link to a copy kept outside
    before = sorted(p.name for p in elsewhere.iterdir())
    with pytest.warns(UserWarning, match="overwrite removed the earlier run's"):
        make(out, steps=1).train(overwrite=True, progress=False)
    assert sorted(p.name for p in elsewhere.iterdir()) == before     # the target is untouched
    assert not (out / "checkpoint-000002").is_symlink() and (out / "checkpoint-000001").is_dir()


def test_a_folder_held_by_this_process_names_the_trainer_and_one_held_by_another_names_its_pid(tmp_path, make,
                                                                                              live_writer):
    out = tmp_path / "run"
    token, _ = run_folder.acquire_lock(out)                         # as a trainer training into it from a callback
    with pytest.raises(ckpt.CheckpointError, match=r"^output_dir: .*run is being written by another GRPOTrainer in "
                                                   r"this Python process, which is training or saving into it"):
        make(out, steps=1).train(progress=False)
    run_folder.release_lock(out, token)
    code = f"from grpo_edu.training import run_folder\nrun_folder.acquire_lock({str(out)!r})"
    with live_writer(code) as pid:
        with pytest.raises(ckpt.CheckpointError, match=rf"^output_dir: .*run is being written by process {pid} on "):
            make(out, steps=1).train(progress=False)
