"""Asynchronous GRPO (grpo_edu.training.asynchronous): versions, lag, staleness, resume, two processes."""

import os
import signal

import pytest
import torch

from grpo_edu.training.asynchronous.lagged import AsyncGRPOTrainer
from grpo_edu.training.asynchronous.versions import draw_plan, draw_version
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.trainer import GRPOTrainer

FAST = dict(batch_size=4, num_generations=4, total_training_steps=5, eval_size=0, max_completion_length=4,
            learning_rate=1e-2, beta=0.0)
KEYS = ("loss", "reward_mean", "clip_fraction", "policy_version", "staleness", "dropped_batches", "log_ratio_std")


def _trainer(model, tok, **overrides):
    return AsyncGRPOTrainer(GRPOConfig(**{**FAST, **overrides}), model=model, tokenizer=tok)


def test_the_version_that_draws_each_step():
    # the trainer holds version t − 1 at step t; lag k draws with t − 1 − k (never below 0)
    assert [draw_version(t, 0) for t in (1, 2, 3)] == [0, 1, 2]
    assert [draw_version(t, 2) for t in (1, 2, 3, 4, 5)] == [0, 0, 0, 1, 2]
    # TRL's rule drops staleness > max_staleness: lag 4, max 1 → drawn by t − 5, dropped, drawn again by t − 2
    assert draw_plan(6, 4, 1) == [1, 4] and draw_plan(2, 4, 1) == [0] and draw_plan(6, 4, None) == [1]
    assert draw_plan(6, 1, 1) == [4]


def test_a_lagged_run_tags_every_batch_and_learns_from_stale_ratios(random_model, char_tokenizer):
    # the random model scores 0 everywhere (no advantage): an entropy bonus makes every step move the policy
    history = _trainer(random_model, char_tokenizer, policy_lag=2, entropy_coef=0.5).train(progress=False)
    assert [m["policy_version"] for m in history] == [0, 0, 0, 1, 2]
    assert [m["staleness"] for m in history] == [0, 1, 2, 2, 2]
    assert history[0]["log_ratio_std"] < 1e-5                       # the first batch is on-policy
    assert min(m["log_ratio_std"] for m in history[2:]) > 1e-3       # later ones were drawn by an older policy
    assert [m["samples_drawn"] for m in history] == [16, 32, 48, 64, 80]


def test_lag_zero_is_on_policy(random_model, char_tokenizer):
    history = _trainer(random_model, char_tokenizer, policy_lag=0, total_training_steps=3).train(progress=False)
    assert all(m["staleness"] == 0 and m["log_ratio_std"] < 1e-5 and m["clip_fraction"] == 0 for m in history)


def test_max_staleness_drops_and_redraws(random_model, char_tokenizer):
    history = _trainer(random_model, char_tokenizer, policy_lag=3, max_staleness=1).train(progress=False)
    assert [m["dropped_batches"] for m in history] == [0, 0, 1, 1, 1]
    assert [m["staleness"] for m in history] == [0, 1, 1, 1, 1]
    assert history[-1]["samples_drawn"] == 16 * 8                  # the dropped batches were sampled too


def test_a_resumed_lagged_run_equals_an_uninterrupted_one(tmp_path, random_model, char_tokenizer):
    import copy

    model_b = copy.deepcopy(random_model)
    same = dict(policy_lag=2, off_policy_correction="token_tis", entropy_coef=0.5, lr_scheduler_type="constant")
    whole = _trainer(random_model, char_tokenizer, **same).train(progress=False)
    first = _trainer(model_b, char_tokenizer, **same, total_training_steps=3, output_dir=str(tmp_path / "run"))
    first.train(progress=False)
    fresh = copy.deepcopy(model_b)                                   # any start: the checkpoint sets the weights
    rest = _trainer(fresh, char_tokenizer, **same, output_dir=str(tmp_path / "run"))
    rest = rest.train(resume_from=str(tmp_path / "run"), progress=False)
    assert whole[-1]["log_ratio_std"] > 1e-3 and whole[-1]["truncated_fraction"] >= 0
    for a, b in zip(whole, rest):
        assert [a[k] for k in KEYS] == pytest.approx([b[k] for k in KEYS], abs=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_staleness=-1), "^max_staleness: must be an integer ≥ 0"),
    (dict(policy_lag=-1), "^policy_lag: "),
    (dict(off_policy_cap=1.0), "^off_policy_cap: is 1.0, but .* above 1"),
    (dict(off_policy_correction="tis"), "^off_policy_correction: unknown value"),
    (dict(policy_lag=1, num_iterations=2), "^policy_lag: is 1, and the asynchronous trainer takes one update"),
])
def test_bad_asynchronous_settings_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**{**FAST, **kwargs})


def test_a_lag_with_the_synchronous_trainer_is_refused(random_model, char_tokenizer):
    with pytest.raises(ValueError, match="^policy_lag: is 2, but GRPOTrainer samples with the policy it trains"):
        GRPOTrainer(GRPOConfig(**{**FAST, "policy_lag": 2}), model=random_model, tokenizer=char_tokenizer)


def test_two_processes_equal_the_lagged_run_and_a_killed_sampler_leaves_a_checkpoint_that_resumes(tmp_path):
    """The sampler in its own process draws what the one-process run draws at the same lag; killing it mid-run
    ends the run with SamplerDied (no hang) after saving the steps done, and resuming finishes the same run."""
    from grpo_edu.training.asynchronous.processes import SamplerDied, TwoProcessGRPOTrainer

    torch.set_num_threads(1)
    config = GRPOConfig(**{**FAST, "total_training_steps": 3, "policy_lag": 1, "output_dir": str(tmp_path / "run")})
    one = AsyncGRPOTrainer(GRPOConfig(**{**FAST, "total_training_steps": 3, "policy_lag": 1})).train(progress=False)

    def kill_after_first_step(metrics):                               # before version 1 is published: no batch 3
        if metrics["step"] == 1:
            os.kill(two.process.pid, signal.SIGKILL)

    two = TwoProcessGRPOTrainer(config, wait_s=120, callbacks=[kill_after_first_step])
    with pytest.raises(SamplerDied, match=r"sampler process ended \(exit code -9\) before it drew step \d's batch "
                                          r"\(killed by signal 9\); "
                                          r"the \d steps done are saved in .*resume_from"):
        two.train(progress=False)
    assert two.process is None and 1 <= two.step_count < 3
    rest = TwoProcessGRPOTrainer(config, wait_s=120).train(resume_from=str(tmp_path / "run"), progress=False)
    assert len(rest) == 3
    for a, b in zip(one, rest):
        assert [a[k] for k in KEYS] == pytest.approx([b[k] for k in KEYS], abs=1e-6)


_KILLED_TRAINER = """
import json, sys, time
import torch
from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer
from grpo_edu.training.trainers.config import GRPOConfig
torch.set_num_threads(1)
def stall(metrics):                       # step 3 trained, step 2 checkpointed: say the sampler's pid, then hang
    if metrics["step"] == 3:
        print(trainer.process.pid, flush=True)
        time.sleep(600)
trainer = TwoProcessGRPOTrainer(GRPOConfig(**json.loads(sys.argv[1])), wait_s=120, callbacks=[stall])
trainer.train(progress=False)
"""


def _gone(pid):
    """The process ``pid`` has ended (or is a zombie nobody reaps, as in a container without an init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the sampler's state in /proc")
@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_trainer_stops_its_sampler_and_its_checkpoint_resumes_the_same_run(tmp_path, monkeypatch, kill):
    """SIGKILL the trainer process mid-run (no clean-up runs): its sampler notices and exits instead of drawing on
    for ever, the next run's start removes the exchange folder left in TMPDIR, and the last periodic checkpoint
    resumes the run to the batches an uninterrupted run trains on. SIGTERM (``kill PID``) cleans up on the way out."""
    import json
    import subprocess
    import sys
    import tempfile
    import time

    from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer

    torch.set_num_threads(1)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    settings = {**FAST, "policy_lag": 1, "checkpoint_every": 1, "output_dir": str(tmp_path / "run")}
    child = subprocess.Popen([sys.executable, "-c", _KILLED_TRAINER, json.dumps(settings)], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "TMPDIR": str(tmp)})
    sampler_pid = int(child.stdout.readline())
    child.send_signal(kill)
    child.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not _gone(sampler_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(sampler_pid), "the sampler outlived its trainer"
    left = list(tmp.glob("grpo-async-*"))
    assert len(left) == (1 if kill == signal.SIGKILL else 0)           # SIGKILL leaves it; SIGTERM cleans up
    assert (tmp_path / "run" / ".grpo_edu.lock").exists() == (kill == signal.SIGKILL)
    rest = TwoProcessGRPOTrainer(GRPOConfig(**settings), wait_s=120)
    if kill == signal.SIGKILL:
        with pytest.warns(UserWarning, match="took over the stale lock .* which is no longer running"):
            history = rest.train(resume_from=str(tmp_path / "run"), progress=False)
    else:
        history = rest.train(resume_from=str(tmp_path / "run"), progress=False)
    assert list(tmp.glob("grpo-async-*")) == []                        # the killed run's folder went at this start
    assert rest.step_count == FAST["total_training_steps"] and len(history) == FAST["total_training_steps"]
    one = AsyncGRPOTrainer(GRPOConfig(**{**FAST, "policy_lag": 1})).train(progress=False)
    for a, b in zip(one, history):
        assert [a[k] for k in KEYS] == pytest.approx([b[k] for k in KEYS], abs=1e-6)


def test_a_free_running_sampler_keeps_every_batch_within_max_staleness(tmp_path):
    """Free-running, the sampler draws with the newest weights it has and waits only when that version is staler
    than max_staleness: the lag comes from the speeds, each batch's tag says which version drew it."""
    from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer

    torch.set_num_threads(1)
    with pytest.raises(ValueError, match="^max_staleness: is None, and a free-running sampler needs a bound"):
        TwoProcessGRPOTrainer(GRPOConfig(**FAST), free_running=True)
    trainer = TwoProcessGRPOTrainer(GRPOConfig(**{**FAST, "total_training_steps": 6, "max_staleness": 1}),
                                    wait_s=120, free_running=True)
    history = trainer.train(progress=False)
    versions = [m["policy_version"] for m in history]
    assert len(history) == 6 and versions == sorted(versions)             # the sampler never goes back in time
    assert all(m["staleness"] == m["step"] - 1 - m["policy_version"] for m in history)
    assert max(m["staleness"] for m in history) <= 1 and all(m["dropped_batches"] == 0 for m in history)
    assert [row["policy_version"] for row in trainer.timeline] == versions


# --- issue 66: versions under the wrong number, settings that do nothing, a damaged checkpoint ------------------
def test_a_weights_file_holding_another_version_is_refused(tmp_path, random_model):
    import shutil

    from grpo_edu.training.asynchronous.versions import ExchangeError, WeightBoard

    board = WeightBoard(tmp_path)
    board.publish(1, random_model)
    with torch.no_grad():
        next(random_model.parameters()).add_(1.0)
    board.publish(2, random_model)
    (tmp_path / "weights" / "vbackup.safetensors").write_bytes(b"not ours")     # a stray file is no version
    assert board.versions() == [1, 2]
    shutil.copy(board.path(2), board.path(1))                                    # version 2's file under 1's name
    with pytest.raises(ExchangeError, match=r"^version: .*v000001\.safetensors holds the weights of version '2', "
                                            r"not 1"):
        board.load(1)
    board.path(2).write_bytes(b"\0" * 10)                                        # a truncated file
    with pytest.raises(ExchangeError, match=r"^version: .*cannot be read as version 2's weights"):
        board.load(2)


def test_a_checkpoints_version_swapped_for_another_is_refused_on_resume(tmp_path, random_model, char_tokenizer):
    import copy

    from safetensors.torch import load_file, save_file

    same = dict(policy_lag=2, entropy_coef=0.5, lr_scheduler_type="constant")
    fresh = copy.deepcopy(random_model)
    _trainer(random_model, char_tokenizer, **same, total_training_steps=3, output_dir=str(tmp_path)).train(
        progress=False)
    path = tmp_path / "checkpoint-000003" / "trainer_state.safetensors"
    tensors = load_file(str(path))
    names = [k for k in tensors if "v1/" in k]
    assert names and all(k.replace("v1/", "v3/") in tensors for k in names)
    for k in names:                                                  # the oldest version's weights := the newest's
        tensors[k] = tensors[k.replace("v1/", "v3/")].clone()
    with open(path, "rb") as f:
        import json
        import struct
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    save_file(tensors, str(path), metadata=header.get("__metadata__"))
    rest = _trainer(fresh, char_tokenizer, **same, total_training_steps=5, output_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"^resume_from: .*the weights stored as version 1 are not the ones saved "
                                         r"as version 1"):
        rest.train(resume_from=str(tmp_path), progress=False)


def test_asynchronous_settings_that_do_nothing_are_named(random_model, char_tokenizer):
    with pytest.warns(UserWarning, match="^off_policy_cap=3 caps the weights π_prox/μ, but off_policy_correction="
                                         "'behaviour_clip' weighs no token"):
        GRPOConfig(**FAST, policy_lag=1, off_policy_cap=3.0)
    for kwargs, match in ((dict(max_staleness=2), "^max_staleness=2 drops batches .* with policy_lag=0"),
                          (dict(off_policy_correction="token_tis"), "^off_policy_correction='token_tis' corrects")):
        config = GRPOConfig(**FAST, **kwargs)
        with pytest.warns(UserWarning, match=match):
            GRPOTrainer(config, model=random_model, tokenizer=char_tokenizer)
        with pytest.warns(UserWarning, match=match):
            AsyncGRPOTrainer(config, model=random_model, tokenizer=char_tokenizer)
    import warnings

    with warnings.catch_warnings():                                  # with a lag they act: no word
        warnings.simplefilter("error")
        AsyncGRPOTrainer(GRPOConfig(**FAST, policy_lag=2, max_staleness=1, off_policy_correction="token_tis"),
                         model=random_model, tokenizer=char_tokenizer)


# --- issue 65: several updates per batch ------------------------------------------------------------------------
def test_mini_batches_are_checked_and_only_the_asynchronous_trainer_takes_them(random_model, char_tokenizer):
    with pytest.raises(ValueError, match="^mini_batches: is 3, which does not divide batch_size 4"):
        GRPOConfig(**FAST, mini_batches=3)
    with pytest.raises(ValueError, match="^mini_batches: must be an integer ≥ 1"):
        GRPOConfig(**FAST, mini_batches=0)
    with pytest.raises(ValueError, match="^mini_batches: is 2, but GRPOTrainer makes num_iterations updates"):
        GRPOTrainer(GRPOConfig(**FAST, mini_batches=2), model=random_model, tokenizer=char_tokenizer)


def test_with_mini_batches_the_later_updates_clip_against_the_batchs_start(random_model, char_tokenizer):
    """One update per batch: π_prox is π_θ, the ratio against it is 1. Two mini-batches: the second is trained by
    weights the first moved, against log π_prox from the batch's start, so π_θ/π_prox leaves 1 (and can clip)."""
    import copy

    settings = dict(policy_lag=1, off_policy_correction="decoupled", entropy_coef=0.5, learning_rate=5e-2,
                    total_training_steps=2)
    one = _trainer(copy.deepcopy(random_model), char_tokenizer, **settings)
    h1 = one.train(progress=False)
    two = _trainer(random_model, char_tokenizer, **settings, mini_batches=2)
    h2 = two.train(progress=False)
    # (the random model scores 0 everywhere, Â = 0, so the clip has nothing to cut: the ratio shows the move)
    assert all(m["ratio_mean"] == 1 for m in h1) and one._updates_done == 1
    assert abs(h2[0]["ratio_mean"] - 1) > 1e-4 and two._updates_done == 2   # two optimizer updates in the step
    assert h2[0]["staleness"] == 0 and h2[0]["log_ratio_std"] < 1e-5   # step 1 is on-policy: μ = π_prox


def test_stale_exchange_folders_are_removed_only_when_their_trainer_is_gone(tmp_path):
    import json
    import subprocess
    import sys

    from grpo_edu.training.asynchronous.processes import clean_stale_exchanges

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = int(done.stdout), os.getppid()
    for name, owner in (("grpo-async-dead", dead), ("grpo-async-alive", alive), ("grpo-async-noowner", None)):
        (tmp_path / name / "weights").mkdir(parents=True)
        if owner is not None:
            (tmp_path / name / "owner.json").write_text(json.dumps({"pid": owner}))
    (tmp_path / "other-dead").mkdir()
    (tmp_path / "other-dead" / "owner.json").write_text(json.dumps({"pid": dead}))
    assert clean_stale_exchanges(tmp_path) == [tmp_path / "grpo-async-dead"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grpo-async-alive", "grpo-async-noowner", "other-dead"]


_NO_GUARD = """
import torch
from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer
from grpo_edu.training.trainers.config import GRPOConfig
torch.set_num_threads(1)
trainer = TwoProcessGRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, total_training_steps=2, eval_size=0,
                                           policy_lag=1, beta=0.0, output_dir={out!r}), wait_s=120)
trainer.train(progress=False)
"""


def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path):
    """spawn imports the user's script again to start the sampler: without the guard that import builds a second
    trainer. The error says to add the guard, not that a lock should be deleted."""
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(_NO_GUARD.format(out=str(tmp_path / "run")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "SamplerDied" in last and 'if __name__ == "__main__":' in last, done.stderr[-2000:]
    assert "delete" not in done.stderr and ".grpo_edu.lock" not in done.stderr
    assert list(tmp_path.glob("grpo-async-*")) == []


def test_a_full_exchange_folder_ends_the_run_with_a_checkpoint_and_the_fix(tmp_path, monkeypatch):
    """A full TMPDIR (the exchange folder cannot take the next version's weights): a clear error naming TMPDIR, and
    the steps done saved, with every version a resumed run needs."""
    from safetensors import SafetensorError

    from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer
    from grpo_edu.training.asynchronous.versions import ExchangeError, WeightBoard

    torch.set_num_threads(1)
    publish = WeightBoard.publish

    def full_at_two(self, version, model):
        if self.folder is not None and version == 2:
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return publish(self, version, model)

    monkeypatch.setattr(WeightBoard, "publish", full_at_two)
    config = GRPOConfig(**{**FAST, "total_training_steps": 3, "policy_lag": 1, "output_dir": str(tmp_path / "run")})
    trainer = TwoProcessGRPOTrainer(config, wait_s=120)
    with pytest.raises(ExchangeError, match=r"^exchange: .*No space left on device.*Fix: free space in TMPDIR.*; "
                                            r"the 2 steps done are saved in .*checkpoint-000002"):
        trainer.train(progress=False)
    assert trainer.process is None and trainer.exchange is None
    monkeypatch.setattr(WeightBoard, "publish", publish)
    rest = AsyncGRPOTrainer(config)
    history = rest.train(resume_from=str(tmp_path / "run"), progress=False)
    assert [m["policy_version"] for m in history] == [0, 0, 1]


def test_the_experiment_command_checks_its_output_before_any_run(tmp_path, monkeypatch, capsys):
    """``python -m grpo_edu.course.experiments.asynchronous``: an --out it cannot write, a result already there, or
    stored runs it cannot use are refused before the first run starts (no run is started here at all)."""
    import json

    from grpo_edu.course.experiments import asynchronous as runs

    started = []
    monkeypatch.setattr(runs, "train_run", lambda *a, **k: started.append(a) or {})
    monkeypatch.setattr(runs, "mismatch", lambda seeds: started.append(seeds) or {})
    (tmp_path / "afile").write_text("x")
    for argv, match in (
            (["mismatch", "--seeds", "0", "--out", str(tmp_path / "afile" / "sub")], "--out: .* cannot be made a folder"),
            (["mismatch", "--seeds", "-1", "--out", str(tmp_path)], "--seeds: must be ≥ 0")):
        with pytest.raises(SystemExit):
            runs.main(argv)
        assert match.split(":")[0] in capsys.readouterr().err
    (tmp_path / "mismatch.json").write_text("{}")
    with pytest.raises(SystemExit):
        runs.main(["mismatch", "--seeds", "0", "--out", str(tmp_path)])
    assert "mismatch.json already exists" in capsys.readouterr().err and "--overwrite" not in str(started)
    stored = tmp_path / "ladder_mb" / "seed0-lag4-none.json"
    stored.parent.mkdir()
    stored.write_text(json.dumps({"seed": 0, "lag": 4, "correction": "none", "history": [{}]}))   # 1 step, not 40
    with pytest.raises(SystemExit):
        runs.main(["ladder_mb", "--seeds", "0", "--out", str(tmp_path)])
    assert "holds a run with other settings" in capsys.readouterr().err
    stored.write_text('{"seed": 0, "lag')                                                  # a truncated file
    with pytest.raises(SystemExit):
        runs.main(["ladder_mb", "--seeds", "0", "--out", str(tmp_path)])
    assert "is not a stored run this command can read" in capsys.readouterr().err
    assert started == []                                             # not one run was started


def test_grpo_edu_train_runs_the_sampler_in_its_own_process(tmp_path, capsys):
    """``grpo-edu train --two-process``: lesson 18's TwoProcessGRPOTrainer from the shell; a lag without it is
    refused with that flag as the fix."""
    import json

    from grpo_edu.cli import main

    torch.set_num_threads(1)
    tiny = ["--batch-size", "4", "--num-generations", "4", "--total-training-steps", "3", "--eval-size", "0",
            "--beta", "0", "--no-progress"]
    assert main(["train", *tiny, "--policy-lag", "1", "--output-dir", str(tmp_path / "no")]) == 2
    assert "--policy-lag: needs a sampler apart from the trainer. Fix: add --two-process" in capsys.readouterr().err
    out = tmp_path / "run"
    code = main(["train", *tiny, "--two-process", "--policy-lag", "1", "--mini-batches", "2", "--output-dir",
                 str(out), "--metrics-out", str(tmp_path / "m.jsonl")])
    assert code == 0, capsys.readouterr().err
    assert "async GRPO (lag 1, behaviour_clip)" in capsys.readouterr().out
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [m["policy_version"] for m in lines] == [0, 0, 1] and (out / "checkpoint-000003").exists()
