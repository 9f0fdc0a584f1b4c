"""grpo-edu train --method: every family method from the command line, its settings as flags, and the method
as part of the run (a checkpoint records it; resuming with another is refused, naming both); a run's folder
continued exactly after a kill, for each method and for LoRA; flags the command does not know or cannot use."""

import hashlib
import json
import warnings

import pytest

from grpo_edu.cli import main
from grpo_edu.training.trainers.config import GRPOConfig

TINY = ["--batch-size", "4", "--num-generations", "4", "--eval-size", "0", "--no-progress"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _rows(path):
    return [json.loads(line) for line in open(path)]


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- flags refused by name ------------------------------------------------------------------------------------
def test_an_unknown_flag_after_train_is_named_by_trains_own_parser(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--batch-size", "4", "--bogus", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: grpo-edu train ") and "unrecognized arguments: --bogus 1" in err


@pytest.mark.parametrize("argv, message", [
    (["--lora-alpha", "nan"], "--lora-alpha|lora_alpha: must be a finite number > 0, got nan"),    # LoRA off
    (["--lora-rank", "4", "--lora-alpha", "nan"], "lora_alpha: must be a finite number > 0, got nan"),
    (["--lora-rank", "4", "--lora-alpha", "1e30"], "lora_alpha: must be from 0.001 to 10000, got 1e\\+30: .*every "
                                                    "gradient overflows"),
    (["--lora-rank", "4", "--lora-target-modules", ","], "lora_target_modules: names no module"),
    (["--method", "grpo", "--gamma", "0.9"], "--gamma: sets ppo's gamma, but --method is grpo. Fix: pass --method ppo"),
    (["--method", "ppo", "--gamma", "2"], "--gamma: must be a number in \\[0, 1\\], got 2.0"),
    (["--method", "ppo", "--critic-learning-rate", "5"], "--critic-learning-rate: must be ≤ 0.1"),
    (["--method", "dpo", "--dpo-beta", "-1"], "--dpo-beta: must be a finite number > 0"),
    (["--method", "dpo", "--beta", "0.1"], "--beta: is GRPO's KL weight β, and --method dpo has no KL term.*--dpo-beta"),
    (["--method", "rft", "--dpo-beta", "0.2"], "--dpo-beta: sets dpo, dpo_offline's beta, but --method is rft"),
    (["--method", "dpo", "--threshold", "nan"], "--threshold: sets rft's threshold"),
])
def test_bad_method_and_lora_settings_are_refused_before_any_model_loads(argv, message, capsys, monkeypatch):
    from grpo_edu.training.trainers import family
    from grpo_edu.training.model import models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the flags were checked")
    monkeypatch.setattr(family, "make_trainer", refuse)
    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)
    assert main(["train", *TINY, *argv]) == 2
    assert pytest.importorskip("re").search(f"error: ({message})", capsys.readouterr().err)


def test_lora_settings_without_a_rank_are_stated():
    with pytest.warns(UserWarning, match="lora_alpha=32.0 sets the LoRA adapter, but lora_rank is None"):
        GRPOConfig(lora_alpha=32.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GRPOConfig(lora_rank=8, lora_alpha=32.0)


def test_a_rank_wider_than_the_layers_is_refused(random_model):
    from grpo_edu.training.model import lora

    with pytest.raises(ValueError, match=r"^lora_rank: is 40, larger than the 32 of .*Fix: pass a rank of at most 32"):
        lora.add_lora(random_model, 40, 16.0)
    assert lora.is_lora(lora.add_lora(random_model, 32, 16.0))


# --- a run that trained nothing says so ------------------------------------------------------------------------
def test_unchanged_reason_reads_the_gradient_norms():
    from grpo_edu.training.trainers.trainer import unchanged_reason

    assert "∞ or NaN at every one of the 2 steps" in unchanged_reason([{"grad_norm": float("inf")},
                                                                       {"grad_norm": float("nan")}])
    assert "gradient was 0 at every one of the 1 steps" in unchanged_reason([{"grad_norm": 0.0}])
    assert unchanged_reason([{"grad_norm": float("inf")}, {"grad_norm": 0.3}]) is None
    assert unchanged_reason([]) is None


def test_a_run_whose_every_update_was_zero_warns_with_the_fix_and_succeeds(capsys):
    # subtraction on the adder: every answer wrong, every group's σ = 0, β's KL starts at 0: no gradient at all.
    # The run did what it was asked (its model is saved): a warning with the fix, exit status 0
    code = main(["train", "--task", "subtraction", *TINY, "--batch-size", "2", "--num-generations", "2",
                 "--total-training-steps", "2", "--output-dir", "run"])
    captured = capsys.readouterr()
    assert code == 0
    assert "warning: nothing was trained: the gradient was 0 at every one of the 2 steps" in captured.err
    assert "Fix: the model scored 0 on every answer: train on prompts it sometimes gets right" in captured.err
    assert "(--num-generations, now 2)" in captured.err


def test_a_run_whose_every_gradient_was_infinite_still_ends_with_an_error(capsys, monkeypatch):
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    real = GRPOTrainer.train

    def overflowing(self, *args, **kwargs):
        history = real(self, *args, **kwargs)
        for row in history:
            row["grad_norm"] = float("inf")
        return history
    monkeypatch.setattr(GRPOTrainer, "train", overflowing)
    assert main(["train", *TINY, "--total-training-steps", "1", "--output-dir", "run"]) == 1
    assert "error: nothing was trained: the gradient norm was ∞ or NaN" in capsys.readouterr().err


def test_the_fix_for_a_run_without_signal_follows_its_rewards():
    from grpo_edu.training.trainers.trainer import no_signal_fix

    assert no_signal_fix([{"reward_mean": 0.0}] * 2, 4).startswith("the model scored 0 on every answer")
    assert no_signal_fix([{"reward_mean": 1.0}, {"reward_mean": 0.0}], 4).startswith(
        "draw more answers per prompt (--num-generations, now 4)")


# --- the method is part of the run -------------------------------------------------------------------------------
def test_train_reaches_ppo_and_its_checkpoint_records_the_method(capsys):
    assert main(["train", *TINY, "--method", "ppo", "--gamma", "0.9", "--lam", "0.95", "--total-training-steps", "2",
                 "--checkpoint-every", "1", "--output-dir", "ppo_run", "--metrics-out", "m.jsonl"]) == 0
    assert capsys.readouterr().out.startswith("PPO on bundled")
    state = json.loads(open("ppo_run/checkpoint-000002/trainer_state.json").read())
    assert state["method"]["name"] == "ppo"
    assert (state["method"]["settings"]["gamma"], state["method"]["settings"]["lam"]) == (0.9, 0.95)
    assert all("value_loss" in row for row in _rows("m.jsonl"))
    # R09: resumed by plain `grpo-edu train`, the run continues as PPO with its own settings
    assert main(["train", *TINY, "--total-training-steps", "3", "--resume", "ppo_run", "--metrics-out", "m.jsonl"]) == 0
    rows = _rows("m.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and all("value_loss" in r for r in rows)
    # ... and with another method or other settings it is refused, naming both
    assert main(["train", *TINY, "--method", "grpo", "--total-training-steps", "4", "--resume", "ppo_run"]) == 2
    assert "is a run of method 'ppo', and this run's method is 'grpo'" in capsys.readouterr().err
    assert main(["train", *TINY, "--method", "ppo", "--gamma", "1.0", "--total-training-steps", "4",
                 "--resume", "ppo_run"]) == 2
    assert "trained by ppo with other settings (gamma: checkpoint 0.9, now 1.0)" in capsys.readouterr().err


def test_a_dpo_run_resumed_as_grpo_is_refused_as_dpo_before_any_beta_mismatch(tmp_path):
    from grpo_edu.training.trainers.family import make_trainer
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = GRPOConfig(batch_size=4, num_generations=4, eval_size=0, total_training_steps=1,
                        output_dir=str(tmp_path / "dpo_run"))
    make_trainer("dpo", config).train(progress=False)
    for beta in (0.04, 0.0):                              # R10, then R10b: what R10's old advice led to
        again = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, eval_size=0, total_training_steps=2, beta=beta))
        with pytest.raises(ValueError, match="^resume_from: .* is a run of method 'dpo', and this run's method is "
                                             "'grpo'.*Fix: resume it with its own method \\(grpo-edu train --method dpo"):
            again.train(resume_from=str(tmp_path / "dpo_run"), progress=False)


def test_a_checkpoint_written_before_methods_were_recorded_is_read_from_its_metrics(tmp_path):
    from grpo_edu.training.runs.checkpoint import method_of

    def state(**row):
        return {"config": {}, "metrics": {"history": [dict(step=1, **row)]}}
    assert method_of(state(value_loss=0.1)) == "ppo"
    assert method_of(state(pair_fraction=0.5)) == "dpo"
    assert method_of(state(kept_fraction=0.5)) == "rft"
    assert method_of(state(loss=0.1)) == "grpo"
    assert method_of({"config": {"advantage_estimator": "reinforce"}, "metrics": {"history": []}}) == "reinforce"


# --- kill, then resume: the uninterrupted run's weights and metrics -------------------------------------------------
@pytest.mark.parametrize("method", ["ppo", "rft", "dpo", "dpo_offline"])
def test_each_method_resumes_exactly(tmp_path, method):
    """An uninterrupted 3-step run against one stopped after step 2 (its checkpoint, then a new trainer resumes).
    Each trainer is made from the same global RNG state, as each process of a kill -9 and resume starts
    (PPO's critic head draws its initial values from it before zeroing them)."""
    import torch

    from grpo_edu.training.trainers.family import make_trainer

    def trainer(folder):
        torch.manual_seed(0)
        return make_trainer(method, GRPOConfig(batch_size=4, num_generations=4, eval_size=0, total_training_steps=3,
                                               checkpoint_every=1, output_dir=str(tmp_path / folder)))
    whole = trainer("a").train(progress=False)
    stopped = trainer("b")
    stopped.step(), stopped.step()
    stopped.save_checkpoint()
    del stopped
    resumed = trainer("b").train(resume_from=str(tmp_path / "b"), progress=False)
    strip = lambda history: [{k: v for k, v in row.items() if k != "seconds"} for row in history]   # noqa: E731
    assert strip(resumed) == strip(whole)
    for name in ("model.safetensors", "trainer_state.safetensors"):
        assert _sha(tmp_path / "a" / "checkpoint-000003" / name) == _sha(tmp_path / "b" / "checkpoint-000003" / name)
