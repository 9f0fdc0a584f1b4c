"""Padding-free training passes (``grpo_edu.training.passes``) against one padded pass.

The trainer's reference and policy passes compute each answer over its own length. Whatever the
grouping does, the loss and every parameter gradient must be those of today's padded pass
(``rollout.completion_logprobs`` on the whole batch) to 1e-6, for every ``loss_type``, with the clip
binding, β > 0, an entropy bonus, and a batch laid out as replay makes it (sampled rows, then rows
made from stored text, prompts of several lengths so left padding is real).
"""

import pytest
import torch

from grpo_edu.core.losses import TOKEN_COUNT_TYPES, grpo_loss
from grpo_edu.training import engine, passes
from grpo_edu.training.config import CHOICES
from grpo_edu.training.rollout import completion_logprobs, concat_rollouts, rollout_from_text

PROMPTS = ["1+2=", "12+34=", "123+456=", "9+87="]          # 4 to 8 characters: left padding


@pytest.fixture
def batch(random_model, char_tokenizer):
    """A replay step's rows: 16 sampled answers of many lengths, then 3 replayed rows made from text."""
    tok = char_tokenizer
    fresh = engine.generate(random_model, tok, PROMPTS, num_generations=4, max_new_tokens=14,
                            generator=torch.Generator().manual_seed(0))
    replayed = rollout_from_text(tok, ["5+5=", "77+8=", "100+1="], ["10", "85", "101"])
    rows = concat_rollouts(fresh, replayed, pad_token_id=tok.pad_token_id)
    lengths = rows.lengths.tolist()
    assert len(set(lengths)) >= 4 and not bool(rows.prompt_mask.all()), "answers and prompts of several lengths"
    return rows


def _padded(model, batch):
    return completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1],
                               with_entropy=True, entropy_grad=True)


def _padding_free(model, batch, pass_cost=0):
    """Passes free (``pass_cost=0``): a group per answer length, the most cutting and gathering to get wrong."""
    return passes.rollout_logprobs(model, batch, with_entropy=True, entropy_grad=True, pass_cost=pass_cost)


def _loss_and_grads(model, batch, logprobs_of, loss_type, old, ref, advantages):
    model.zero_grad(set_to_none=True)
    logprobs, entropy = logprobs_of(model, batch)
    mask = batch.completion_mask
    loss, info = grpo_loss(logprobs, old, advantages, mask, ref_logprobs=ref, beta=0.1, epsilon=0.2,
                           epsilon_high=5.0 if loss_type == "cispo" else 0.28, loss_type=loss_type,
                           max_completion_length=mask.shape[1] if loss_type == "dr_grpo" else None,
                           num_active_tokens=mask.sum() if loss_type in TOKEN_COUNT_TYPES else None,
                           entropy=entropy, entropy_coef=0.01)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()], info


@pytest.mark.parametrize("loss_type", CHOICES["loss_type"])
def test_loss_and_every_gradient_equal_the_padded_pass(random_model, batch, loss_type):
    model = random_model.train()
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        lp, _ = _padded(model, batch)
        mask = batch.completion_mask
        # π_θold off by up to ±0.6 nats per token, so that the ratio leaves [1 − ε, 1 + ε] and the clip binds
        old = (lp + 1.2 * torch.rand(lp.shape, generator=noise) - 0.6) * mask
        ref = (lp + 0.5 * torch.rand(lp.shape, generator=noise) - 0.25) * mask                # β > 0: KL acts
    advantages = torch.randn(mask.shape[0], generator=noise)
    loss, grads, info = _loss_and_grads(model, batch, _padded, loss_type, old, ref, advantages)
    free_loss, free_grads, free_info = _loss_and_grads(model, batch, _padding_free, loss_type, old, ref, advantages)
    if loss_type not in ("cispo", "sapo"):                     # those two do not clip the ratio PPO's way
        assert info["clip_fraction"] > 0.1, "the clip binds on many tokens"
    assert info["kl_mean"] > 0
    torch.testing.assert_close(free_loss, loss, atol=1e-6, rtol=0)
    for name_param, got, want in zip(model.named_parameters(), free_grads, grads):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0, msg=lambda m, name=name_param[0]: f"{name}: {m}")
    assert free_info["clip_fraction"] == pytest.approx(info["clip_fraction"], abs=1e-9)


def test_log_probs_are_the_padded_passs_and_zero_after_each_answer(random_model, batch):
    with torch.no_grad():
        want, want_entropy = _padded(random_model, batch)
        got, got_entropy = _padding_free(random_model, batch)
    mask = batch.completion_mask.bool()
    torch.testing.assert_close(got[mask], want[mask], atol=1e-6, rtol=0)
    torch.testing.assert_close(got_entropy[mask], want_entropy[mask], atol=1e-6, rtol=0)
    assert bool((got[~mask] == 0).all()) and bool((got_entropy[~mask] == 0).all())


def test_the_passes_compute_fewer_tokens_than_the_padded_batch(random_model, batch, monkeypatch):
    """Each group's forward is trimmed to its own longest prompt and answer, and every row is computed once."""
    seen = []
    real = passes.completion_logprobs
    monkeypatch.setattr(passes, "completion_logprobs",
                        lambda model, ids, mask, T, **kw: seen.append((ids.shape, T)) or real(model, ids, mask, T, **kw))
    with torch.no_grad():
        _padding_free(random_model, batch, pass_cost=16)
    N, width = batch.input_ids.shape
    assert sum(shape[0] for shape, _ in seen) == N and len(seen) > 1
    assert sum(shape[0] * shape[1] for shape, _ in seen) < 0.9 * N * width
    own = int((batch.prompt_mask.sum(1) + batch.lengths).sum())                   # no padding at all
    assert sum(shape[0] * shape[1] for shape, _ in seen) >= own


def test_length_groups_cut_only_where_the_padding_saved_pays_for_a_pass():
    # two lengths far apart: two groups; with a pass dearer than the padding, one group
    prompts, answers = [4] * 6, [2, 2, 2, 40, 40, 40]
    assert passes.length_groups(prompts, answers, pass_cost=10) == [[0, 1, 2], [3, 4, 5]]
    assert passes.length_groups(prompts, answers, pass_cost=1000) == [[0, 1, 2, 3, 4, 5]]
    # rows of one answer length are never split, and every row comes out once, shortest answers first
    answers = [5, 1, 5, 3, 1, 9]
    groups = passes.length_groups([3] * 6, answers, pass_cost=0)
    assert sorted(r for g in groups for r in g) == list(range(6))
    assert [sorted(g) for g in groups] == [[1, 4], [3], [0, 2], [5]]


def test_the_trainer_takes_both_passes_through_the_padding_free_function(monkeypatch):
    from grpo_edu.training.config import GRPOConfig
    from grpo_edu.training.trainer import GRPOTrainer

    calls = []
    real = passes.rollout_logprobs
    monkeypatch.setattr(passes, "rollout_logprobs", lambda model, *a, **k: calls.append(model) or real(model, *a, **k))
    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, total_training_steps=2, eval_size=0,
                                     beta=0.04))
    trainer.step()
    assert calls == [trainer.ref_model, trainer.model]
