"""One mask rule for every method: no gradient reaches a tool's reply tokens (``tools.trained_mask``).

A rollout with the calculator in the loop holds tokens the model wrote (tool mask 1) and the calculator's
replies (tool mask 0). Each method's loss must see only the model's own: GRPO's and REINFORCE's update, PPO's
policy and its critic's value loss, rejection sampling's NLL, DPO's log π(y) online and offline. The test
drives each trainer's real step on the bundled calculator model and reads the gradient that reaches each
token's log-probability (and, for PPO's critic, each token's value V(s_t)): exactly 0 on every reply token,
not 0 on the model's. Lesson 15's ablation, ``Tool(reply_in_loss=True)``, puts the replies back in every loss.
"""

import warnings

import pytest
import torch

import grpo_edu.training.trainers.family as family
from grpo_edu.training.rollouts import passes
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.family import METHODS, make_trainer
from grpo_edu.training.model.models import calc_model_dir
from grpo_edu.training.rollouts.tools import Tool


def _calls(prompts, completions, **kwargs):
    """1 for an answer that called the calculator: right/wrong pairs and kept answers that hold replies."""
    return [float("[" in c) for c in completions]


def _rows_of(ids, rollout):
    """The rollout row of each row of ``ids`` (a forward's input ids, full width)."""
    same = (ids[:, None, :] == rollout.input_ids[None, :, :]).all(-1)            # (n, N)
    assert bool(same.any(1).all()), "a forward read rows the rollout does not hold"
    return same.float().argmax(1)                                                 # (n,)


def _gradients(monkeypatch, trainer):
    """Run one step of ``trainer``; return its rollout and every (rows, grad) that reached a per-token
    log-probability of the policy, or a value of PPO's critic: grad (n, T), rows (n,) into the rollout."""
    seen, last = [], {}
    sample = trainer._sample

    def spy_sample(prompts):
        last["rollout"] = sample(prompts)
        return last["rollout"]

    def keep(tensor, rows, kind):
        if tensor.requires_grad:
            tensor.register_hook(lambda g: seen.append((kind, rows, g.detach().clone())))

    rollout_logprobs = passes.rollout_logprobs

    def spy_rollout_logprobs(model, rollout, rows=slice(None), **kwargs):       # GRPO's update
        out = rollout_logprobs(model, rollout, rows, **kwargs)
        keep(out[0], torch.arange(rollout.completion_ids.shape[0])[rows], "policy")
        return out

    completion_logprobs = family.completion_logprobs

    def spy_completion_logprobs(model, input_ids, *args, **kwargs):             # the family's updates
        out = completion_logprobs(model, input_ids, *args, **kwargs)
        if out[0].requires_grad:
            keep(out[0], _rows_of(input_ids, last["rollout"]), "policy")
        return out

    monkeypatch.setattr(trainer, "_sample", spy_sample)
    monkeypatch.setattr(passes, "rollout_logprobs", spy_rollout_logprobs)
    monkeypatch.setattr(family, "completion_logprobs", spy_completion_logprobs)
    if hasattr(trainer, "critic"):
        trainer.critic.register_forward_hook(
            lambda module, args, out: keep(out, _rows_of(args[0], last["rollout"]), "critic") if out.requires_grad
            else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.step()
    return last["rollout"], seen


@pytest.fixture(scope="module")
def calc_model():
    return str(calc_model_dir())


@pytest.mark.parametrize("reply_in_loss", [False, True], ids=["replies out", "ablation: replies in"])
@pytest.mark.parametrize("method", list(METHODS))
def test_no_gradient_reaches_a_tool_reply_token(method, reply_in_loss, calc_model, monkeypatch):
    config = GRPOConfig(model=calc_model, task="calc", max_completion_length=20, batch_size=4, num_generations=4,
                        total_training_steps=2, eval_size=0, micro_batch_size=4, seed=0)
    trainer = make_trainer(method, config, tool=Tool(reply_in_loss=reply_in_loss), reward_funcs=[_calls])
    rollout, seen = _gradients(monkeypatch, trainer)
    kinds = {"policy", "critic"} if method == "ppo" else {"policy"}
    assert {kind for kind, _, _ in seen} == kinds
    for kind in kinds:
        reply = model = 0
        replies = on_replies = 0.0
        for _, rows, grad in (s for s in seen if s[0] == kind):
            written = rollout.completion_mask[rows] == 1                                     # (n, T)
            tool = written & (rollout.tool_mask[rows] == 0)                                  # the calculator's tokens
            replies += float(tool.sum())
            on_replies += float(grad[tool].abs().sum())
            reply += int((grad[tool] != 0).sum())
            model += int((grad[written & ~tool] != 0).sum())
        assert replies > 0, f"{method}: no reply token in the rows its loss read, so the test shows nothing"
        assert model > 0, f"{method} {kind}: no gradient on the model's own tokens"
        if reply_in_loss:
            assert reply > 0, f"{method} {kind}: the ablation should put the replies back in the loss"
        else:
            assert on_replies == 0.0, f"{method} {kind}: {reply} of {int(replies)} reply tokens get a gradient"
