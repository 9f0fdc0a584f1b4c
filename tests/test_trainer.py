"""The trainer: checked config, bad input before work, accumulation, checkpoints, resume."""

import json
import math

import pytest
import torch

from grpo_edu.config import GRPOConfig
from grpo_edu.trainer import GRPOTrainer

FAST = dict(batch_size=4, num_generations=4, total_training_steps=4, eval_size=0, max_completion_length=4,
            learning_rate=1e-2)


def _trainer(model, tok, **overrides):
    return GRPOTrainer(GRPOConfig(**{**FAST, **overrides}), model=model, tokenizer=tok)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_generations=1), "^num_generations: "),
    (dict(batch_size=0), "^batch_size: "),
    (dict(batch_size=3, num_generations=8, micro_batch_size=5), "^micro_batch_size: .*divisor of 24"),
    (dict(total_training_steps=None, total_epochs=None), "^total_epochs/total_training_steps: "),
    (dict(loss_type="ppo"), "^loss_type: "),
    (dict(scale="rank"), "^scale: "),
    (dict(epsilon=0), "^epsilon: "),
    (dict(learning_rate=-1e-3), "^learning_rate: "),
    (dict(beta=-0.1), "^beta: "),
    (dict(temperature=0), "^temperature: "),
    (dict(checkpoint_every=5), "^output_dir: "),
    (dict(device="tpu"), "^device: "),
])
def test_config_checked_up_front(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_bad_data_and_model_fail_before_training(tmp_path, random_model, char_tokenizer):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\n{"question": "2+2="}\n')
    with pytest.raises(ValueError, match="row 1"):
        GRPOTrainer(GRPOConfig(**FAST, dataset=str(bad)), model=random_model, tokenizer=char_tokenizer)
    with pytest.raises(ValueError):
        GRPOTrainer(GRPOConfig(**FAST), train_rows=[], model=random_model, tokenizer=char_tokenizer)
    with pytest.raises(ValueError, match="^task: unknown task 'poetry'"):
        GRPOTrainer(GRPOConfig(**FAST, task="poetry"), model=random_model, tokenizer=char_tokenizer)
    with pytest.raises(ValueError, match="^model: the path './no/such/model' does not exist"):
        GRPOTrainer(GRPOConfig(**FAST, model="./no/such/model"))
    with pytest.raises(ValueError, match="^batch_size: 4 is larger than dataset_size=2"):
        GRPOTrainer(GRPOConfig(**FAST), train_rows=[{"prompt": "1+1=", "answer": "2"}] * 2,
                    model=random_model, tokenizer=char_tokenizer)


def test_bad_reward_functions_named_before_training(random_model, char_tokenizer):
    def too_few(prompts, completions, **kw):
        return [1.0] * (len(completions) - 1)

    def gives_nan(prompts, completions, **kw):
        return [math.nan] * len(completions)

    with pytest.raises(ValueError, match=r"^reward function .*reward: could not be called .*'answer'"):
        GRPOTrainer(GRPOConfig(**FAST), train_rows=[{"prompt": "1+1="}] * 8, model=random_model,
                    tokenizer=char_tokenizer)
    for fn, match in ((too_few, "^reward function .*too_few: returned 15 rewards for 16"),
                      (gives_nan, "^reward function .*gives_nan: returned NaN")):
        with pytest.raises(ValueError, match=match):
            GRPOTrainer(GRPOConfig(**FAST), model=random_model, tokenizer=char_tokenizer, reward_funcs=[fn])


def test_step_metrics_are_sane(random_model, char_tokenizer):
    t = _trainer(random_model, char_tokenizer, beta=0.1)
    m = t.step()
    assert m["step"] == 1 and m["epoch"] == 1
    assert 0 <= m["dead_group_fraction"] <= 1 and 0 <= m["clip_fraction"] <= 1
    assert m["ratio_mean"] == pytest.approx(1.0)      # μ = 1: on-policy
    assert m["kl"] == pytest.approx(0.0, abs=1e-6)   # the policy has not moved yet at step 1
    assert 1 <= m["completion_length"] <= 4 and m["entropy"] > 0
    no_ref = _trainer(random_model, char_tokenizer, beta=0.0)
    assert no_ref.ref_model is None and no_ref.step()["kl"] is None   # not measured, not "0"


def _reward_first_digit(prompts, completions, **kw):
    """A dense toy reward so that every group carries signal."""
    return [float(c[:1] == "1") + 0.1 * len(c) for c in completions]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_gradient_accumulation_matches_one_big_batch(random_model, char_tokenizer, loss_type):
    """Micro-batches of 4 accumulate the same gradient as the whole step of 16 at once.

    Not "bnpo": like TRL's, it normalises by each micro-batch's own token count, so it
    changes with the split; "dapo" is the fix (one token count for the whole step).
    """
    grads = {}
    for micro in (None, 4):
        model = type(random_model)(random_model.config)
        model.load_state_dict(random_model.state_dict())
        t = GRPOTrainer(GRPOConfig(**{**FAST, "micro_batch_size": micro, "loss_type": loss_type, "beta": 0.1,
                                      "max_grad_norm": 0.0}),
                        model=model, tokenizer=char_tokenizer, reward_funcs=[_reward_first_digit])
        t.optimizer.step = lambda: None          # keep the accumulated gradient for inspection
        t.step()
        grads[micro] = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert grads[None].abs().max() > 1e-3        # a real gradient, not zeros
    torch.testing.assert_close(grads[None], grads[4], atol=1e-6, rtol=1e-4)


def test_resume_continues_exactly(tmp_path, random_model, char_tokenizer):
    """3 steps + checkpoint + resume 3 more == 6 uninterrupted steps, metric for metric."""
    state = {k: v.clone() for k, v in random_model.state_dict().items()}

    def fresh():
        model = type(random_model)(random_model.config)
        model.load_state_dict(state)
        return model

    common = dict(total_training_steps=6, beta=0.05, num_iterations=2, reward_funcs=None)
    common.pop("reward_funcs")
    full = GRPOTrainer(GRPOConfig(**{**FAST, **common}), model=fresh(), tokenizer=char_tokenizer,
                       reward_funcs=[_reward_first_digit]).train(progress=False)

    out = tmp_path / "run"
    first = GRPOTrainer(GRPOConfig(**{**FAST, **common, "total_training_steps": 3, "output_dir": str(out),
                                      "checkpoint_every": 3}),
                        model=fresh(), tokenizer=char_tokenizer, reward_funcs=[_reward_first_digit])
    first.train(progress=False)
    assert json.loads((out / "latest.json").read_text())["step"] == 3
    resumed = GRPOTrainer(GRPOConfig(**{**FAST, **common, "output_dir": str(out)}), model=fresh(),
                          tokenizer=char_tokenizer, reward_funcs=[_reward_first_digit])
    history = resumed.train(resume_from=out, progress=False)

    strip = lambda hs: [{k: v for k, v in h.items() if k != "seconds"} for h in hs]
    assert strip(history) == strip(full)


def test_resume_refuses_incompatible_config(tmp_path, random_model, char_tokenizer):
    out = tmp_path / "run"
    t = _trainer(random_model, char_tokenizer, total_training_steps=1, output_dir=str(out))
    t.train(progress=False)
    other = _trainer(random_model, char_tokenizer, output_dir=str(out), beta=0.3)
    with pytest.raises(ValueError, match=r"^resume_from: .*incompatible config \(beta: checkpoint 0.04, now 0.3\)"):
        other.train(resume_from=out, progress=False)


def test_a_crash_while_checkpointing_keeps_the_previous_one(tmp_path, monkeypatch, random_model, char_tokenizer):
    from grpo_edu import checkpoint

    out = tmp_path / "run"
    t = _trainer(random_model, char_tokenizer, total_training_steps=2, output_dir=str(out), checkpoint_every=1)
    t.step()
    t.save_checkpoint()
    before = (out / "checkpoint-000001" / "model.safetensors").read_bytes()
    t.step()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(checkpoint, "save_file", boom)
    with pytest.raises(KeyboardInterrupt):
        t.save_checkpoint()
    assert json.loads((out / "latest.json").read_text())["checkpoint"] == "checkpoint-000001"
    assert (out / "checkpoint-000001" / "model.safetensors").read_bytes() == before
    assert not (out / "checkpoint-000002").exists()
    monkeypatch.undo()
    again = _trainer(random_model, char_tokenizer, total_training_steps=2, output_dir=str(out), checkpoint_every=1)
    again.load_checkpoint(out)
    assert again.step_count == 1


def test_a_short_real_run_learns():
    """The bundled model, real rewards: 150 GRPO steps must lift held-out sampled accuracy a lot."""
    t = GRPOTrainer(GRPOConfig(total_training_steps=150, eval_size=300))
    history = t.train(progress=False)
    before, after = t.evals[0]["accuracy"], t.evals[-1]["accuracy"]
    assert before < 0.6
    assert after > before + 0.2, (before, after)
    assert history[-1]["reward_mean"] > history[0]["reward_mean"]
    assert history[-1]["entropy"] < history[0]["entropy"]     # GRPO sharpens the policy
