"""The trainer: checked config, bad input before work, accumulation, interruptions, resume.

How the trainer wires the pieces together is tested in test_trainer_wiring.py; checkpoint
files, output folders and locks in test_checkpoint.py.
"""

import json
import math
import warnings

import pytest
import torch

from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.trainer import GRPOTrainer

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
    (dict(epsilon=1.0), r"^epsilon: must be below 1, got 1.0: the lower clip bound 1 − ε would be ≤ 0"),
    (dict(epsilon=1.5), "^epsilon: must be below 1"),
    (dict(learning_rate=-1e-3), "^learning_rate: "),
    (dict(beta=-0.1), "^beta: "),
    (dict(temperature=0), "^temperature: "),
    (dict(checkpoint_every=5), "^output_dir: "),
    (dict(device="tpu"), "^device: "),
    (dict(gradient_checkpointing="yes"), "^gradient_checkpointing: must be True or False"),
])
def test_config_checked_up_front(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_epsilon_high_below_epsilon_warns():
    with pytest.warns(UserWarning, match="^epsilon_high: 0.1 is below epsilon 0.2"):
        GRPOConfig(epsilon_high=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GRPOConfig(epsilon_high=0.28)   # clip-higher: no warning


def test_grpo_config_and_trainer_import_from_the_package():
    import grpo_edu

    assert grpo_edu.GRPOConfig is GRPOConfig and grpo_edu.GRPOTrainer is GRPOTrainer


def test_bad_data_and_model_fail_before_training(tmp_path, random_model, char_tokenizer):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\n{"question": "2+2="}\n')
    with pytest.raises(ValueError, match="row 1"):
        GRPOTrainer(GRPOConfig(**FAST, dataset=str(bad)), model=random_model, tokenizer=char_tokenizer)
    with pytest.raises(ValueError):
        GRPOTrainer(GRPOConfig(**FAST), train_rows=[], model=random_model, tokenizer=char_tokenizer)
    with pytest.raises(ValueError, match="^task: unknown task 'poetry'"):
        GRPOTrainer(GRPOConfig(**FAST, task="poetry"), model=random_model, tokenizer=char_tokenizer)
    with pytest.raises(ValueError, match=r"^model: no such folder './no/such/model'"):
        GRPOTrainer(GRPOConfig(**FAST, model="./no/such/model"))
    with pytest.raises(ValueError, match="^batch_size: 4 is larger than dataset_size=2"):
        GRPOTrainer(GRPOConfig(**FAST), train_rows=[{"prompt": "1+1=", "answer": "2"}] * 2,
                    model=random_model, tokenizer=char_tokenizer)


def test_a_row_without_answer_fails_at_load_not_mid_run(tmp_path, random_model, char_tokenizer):
    """Issue 7, item 4: one row lacking "answer" used to load, then raise KeyError('answer')
    at the step that first drew it."""
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(10, 30)]
    del rows[13]["answer"]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=r"^source: row 13 of .*p\.jsonl has no 'answer' while 19 other rows"):
        GRPOTrainer(GRPOConfig(**FAST, dataset=str(path)), model=random_model, tokenizer=char_tokenizer)


@pytest.mark.parametrize("prompt, match", [
    ("你好+1=", r"^prompts: 1 of 8 of the train prompts hold characters the tokenizer cannot encode .*row 3"),
    ("12+34= 😀", r"^prompts: 1 of 8 of the train prompts hold characters .*'12\+34= 😀'"),
    ("1" * 40 + "=", r"^prompts: 1 of 8 of the train prompts are too long for the model: .*its 32 positions "
                     r"\(longest: row 3, 42 prompt tokens\)"),
])
def test_prompts_the_model_cannot_read_fail_before_training(random_model, char_tokenizer, prompt, match):
    rows = [{"prompt": f"{a}+1=", "answer": "0"} for a in range(10, 18)]
    rows[3]["prompt"] = prompt
    with pytest.raises(ValueError, match=match):
        GRPOTrainer(GRPOConfig(**FAST), train_rows=rows, model=random_model, tokenizer=char_tokenizer)


def test_output_dir_that_is_a_file_fails_before_the_model_loads(tmp_path):
    """Issue 7, item 2: the run used to train to the end, then die at the final save."""
    f = tmp_path / "out"
    f.write_text("not a folder")
    with pytest.raises(ValueError, match=r"^output_dir: .*out is a file, not a folder"):
        GRPOTrainer(GRPOConfig(**FAST, output_dir=str(f), model="./not/loaded/yet"))


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


def test_gradient_checkpointing_recomputes_each_layer_and_keeps_the_gradient(random_model, char_tokenizer):
    """Checkpointing trades compute for memory: each decoder layer runs again in the backward
    pass (twice per micro-batch instead of once), and the gradient is the one without it."""
    grads, calls = {}, {}
    for checkpointing in (False, True):
        model = type(random_model)(random_model.config)
        model.load_state_dict(random_model.state_dict())
        t = GRPOTrainer(GRPOConfig(**{**FAST, "micro_batch_size": 8, "gradient_checkpointing": checkpointing,
                                      "beta": 0.1, "max_grad_norm": 0.0}),
                        model=model, tokenizer=char_tokenizer, reward_funcs=[_reward_first_digit])
        t.optimizer.step = lambda: None
        mlp = model.model.layers[0].mlp                # inside the checkpointed layer
        count, forward = [], mlp.forward

        def counted(*args, **kwargs):                 # (a forward hook would not see the recompute)
            count.append(torch.is_grad_enabled())
            return forward(*args, **kwargs)
        mlp.forward = counted
        passes = []                                    # the model's own forwards with autograd on
        model.register_forward_pre_hook(lambda module, args: passes.append(torch.is_grad_enabled()))
        t.step()
        grads[checkpointing] = torch.cat([p.grad.flatten() for p in model.parameters()])
        calls[checkpointing] = (sum(count), sum(passes))  # layer runs with autograd on: update and recompute
    micro_batches = FAST["batch_size"] * FAST["num_generations"] // 8    # the sampling runs it without grad
    assert calls[False][0] == calls[False][1] >= micro_batches         # once per pass
    assert calls[True][0] == 2 * calls[True][1] and calls[True][1] >= micro_batches   # and again in the backward
    assert grads[False].abs().max() > 1e-3
    torch.testing.assert_close(grads[False], grads[True], atol=1e-6, rtol=1e-5)


def test_resume_continues_exactly(tmp_path, random_model, char_tokenizer):
    """3 steps + checkpoint + resume 3 more == 6 uninterrupted steps, metric for metric."""
    state = {k: v.clone() for k, v in random_model.state_dict().items()}

    def trainer(**overrides):
        model = type(random_model)(random_model.config)
        model.load_state_dict(state)
        config = GRPOConfig(**{**FAST, "total_training_steps": 6, "beta": 0.05, "num_iterations": 2, **overrides})
        return GRPOTrainer(config, model=model, tokenizer=char_tokenizer, reward_funcs=[_reward_first_digit])

    full = trainer().train(progress=False)
    out = tmp_path / "run"
    first = trainer(output_dir=str(out))
    for _ in range(3):
        first.step()
    first.save_checkpoint()
    assert json.loads((out / "latest.json").read_text())["step"] == 3
    history = trainer(output_dir=str(out)).train(resume_from=out, progress=False)

    strip = lambda hs: [{k: v for k, v in h.items() if k != "seconds"} for h in hs]   # noqa: E731
    assert strip(history) == strip(full)


def _fails_once(at_call, error):
    """A reward function that raises ``error`` on its ``at_call``-th call (the preflight is call 1)."""
    calls = []

    def reward(prompts, completions, **kw):
        calls.append(1)
        if len(calls) == at_call:
            raise error
        return _reward_first_digit(prompts, completions)
    reward.__qualname__ = _reward_first_digit.__qualname__   # the same metric name as the uninterrupted run
    return reward


@pytest.mark.parametrize("error", [RuntimeError("flaky grader"), KeyboardInterrupt()])
def test_an_interrupted_step_runs_again(random_model, char_tokenizer, error):
    """Issue 7, item 5: step_count was incremented before the work, so the step that failed
    (a reward function's error, or Jupyter's Stop) was skipped by the next train()."""
    state = {k: v.clone() for k, v in random_model.state_dict().items()}

    def trainer(reward):
        model = type(random_model)(random_model.config)
        model.load_state_dict(state)
        return GRPOTrainer(GRPOConfig(**{**FAST, "beta": 0.05}), model=model, tokenizer=char_tokenizer,
                           reward_funcs=[reward])

    full = trainer(_reward_first_digit).train(progress=False)
    t = trainer(_fails_once(3, error))                        # fails in step 2
    with pytest.raises((ValueError, KeyboardInterrupt)):
        t.train(progress=False)
    assert t.step_count == 1 and len(t.history) == 1
    history = t.train(progress=False)                         # "run the cell again"
    strip = lambda hs: [{k: v for k, v in h.items() if k != "seconds"} for h in hs]   # noqa: E731
    assert [m["step"] for m in history] == [1, 2, 3, 4]
    assert strip(history) == strip(full)


def test_an_interruption_between_inner_updates_is_reported(random_model, char_tokenizer):
    t = _trainer(random_model, char_tokenizer, num_iterations=2)
    real_step, calls = t.optimizer.step, []

    def second_update_stops(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_step(*a, **k)

    t.optimizer.step = second_update_stops
    with pytest.warns(UserWarning, match="step 1 was interrupted after 1 of its 2 optimizer updates"):
        with pytest.raises(KeyboardInterrupt):
            t.step()
    assert t.step_count == 0 and t.history == []


def test_resume_refuses_incompatible_config(tmp_path, random_model, char_tokenizer):
    out = tmp_path / "run"
    t = _trainer(random_model, char_tokenizer, total_training_steps=1, output_dir=str(out))
    t.train(progress=False)
    other = _trainer(random_model, char_tokenizer, output_dir=str(out), beta=0.3)
    with pytest.raises(ValueError, match=r"^resume_from: .*incompatible config \(beta: checkpoint 0.04, now 0.3\)"):
        other.train(resume_from=out, progress=False)




def test_a_short_real_run_learns():
    """The bundled model, real rewards: 150 GRPO steps must lift held-out sampled accuracy a lot."""
    t = GRPOTrainer(GRPOConfig(total_training_steps=150, eval_size=300))
    history = t.train(progress=False)
    before, after = t.evals[0]["accuracy"], t.evals[-1]["accuracy"]
    assert before < 0.6
    assert after > before + 0.2, (before, after)
    assert history[-1]["reward_mean"] > history[0]["reward_mean"]
    assert history[-1]["entropy"] < history[0]["entropy"]     # GRPO sharpens the policy
