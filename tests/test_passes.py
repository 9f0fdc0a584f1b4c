"""Padding-free training passes (``grpo_edu.training.rollouts.passes``) against one padded pass.

The trainer's reference and policy passes compute each answer over its own length. Whatever the
grouping does, the loss and every parameter gradient must be those of today's padded pass
(``rollout.completion_logprobs`` on the whole batch) to 1e-6, for every ``loss_type``, with the clip
binding, β > 0, an entropy bonus, and a batch laid out as replay makes it (sampled rows, then rows
made from stored text, prompts of several lengths so left padding is real).
"""

import pytest
import torch

from grpo_edu.core.losses import TOKEN_COUNT_TYPES, grpo_loss
from grpo_edu.training.rollouts import engine, passes
from grpo_edu.training.trainers.config import CHOICES
from grpo_edu.training.rollouts.rollout import completion_logprobs, concat_rollouts, rollout_from_text

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


def _padding_free(model, batch, pass_cost=0, share_prompts=True):
    """Passes free (``pass_cost=0``): a group per answer length, the most cutting and gathering to get wrong."""
    return passes.rollout_logprobs(model, batch, with_entropy=True, entropy_grad=True, pass_cost=pass_cost,
                                   share_prompts=share_prompts)


def _unshared(model, batch):
    return _padding_free(model, batch, share_prompts=False)


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


@pytest.mark.parametrize("share_prompts", [True, False], ids=["prompts shared", "prompts unshared"])
@pytest.mark.parametrize("loss_type", CHOICES["loss_type"])
def test_loss_and_every_gradient_equal_the_padded_pass(random_model, batch, loss_type, share_prompts):
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
    free = _padding_free if share_prompts else _unshared
    free_loss, free_grads, free_info = _loss_and_grads(model, batch, free, loss_type, old, ref, advantages)
    if loss_type not in ("cispo", "sapo"):                     # those two do not clip the ratio PPO's way
        assert info["clip_fraction"] > 0.1, "the clip binds on many tokens"
    assert info["kl_mean"] > 0
    torch.testing.assert_close(free_loss, loss, atol=1e-6, rtol=0)
    for name_param, got, want in zip(model.named_parameters(), free_grads, grads):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0, msg=lambda m, name=name_param[0]: f"{name}: {m}")
    assert free_info["clip_fraction"] == pytest.approx(info["clip_fraction"], abs=1e-9)


@pytest.mark.parametrize("share_prompts", [True, False], ids=["prompts shared", "prompts unshared"])
def test_log_probs_are_the_padded_passs_and_zero_after_each_answer(random_model, batch, share_prompts):
    with torch.no_grad():
        want, want_entropy = _padded(random_model, batch)
        got, got_entropy = _padding_free(random_model, batch, share_prompts=share_prompts)
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
        _padding_free(random_model, batch, pass_cost=16, share_prompts=False)
    N, width = batch.input_ids.shape
    assert sum(shape[0] for shape, _ in seen) == N and len(seen) > 1
    assert sum(shape[0] * shape[1] for shape, _ in seen) < 0.9 * N * width
    own = int((batch.prompt_mask.sum(1) + batch.lengths).sum())                   # no padding at all
    assert sum(shape[0] * shape[1] for shape, _ in seen) >= own


def _recorded_forwards(model):
    """The (rows, tokens) of every forward ``model`` runs from here on."""
    seen = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(tuple(kwargs["input_ids"].shape)),
                                    with_kwargs=True)                  # the fixture's model is this test's own
    return seen


def test_shared_prompts_are_read_once_and_answers_cost_their_own_tokens(random_model, batch):
    """One forward over the distinct prompts, then each row's answer (after its prompt's last token): the G
    answers of a prompt do not read it again (4 prompts × 4 answers and 3 replayed rows: 7 distinct prompts,
    not 19)."""
    seen = _recorded_forwards(random_model)
    with torch.no_grad():
        _padding_free(random_model, batch, pass_cost=16)
    distinct = len({tuple(r) for r in batch.prompt_ids.tolist()})
    longest_prompt = int(batch.prompt_mask.sum(1).max())
    assert distinct == 7 and seen[0] == (distinct, longest_prompt - 1)          # each prompt but its last token
    answers = seen[1:]                                                          # the last token, then the answer
    assert sum(rows for rows, _ in answers) == batch.completion_ids.shape[0]     # every row once
    assert sum(rows * tokens for rows, tokens in answers) < int(batch.lengths.sum()) * 1.5
    with torch.no_grad():                                                       # against reading every prompt again
        seen.clear()
        _padding_free(random_model, batch, pass_cost=16, share_prompts=False)
    unshared = sum(rows * tokens for rows, tokens in seen)
    seen.clear()
    with torch.no_grad():
        _padding_free(random_model, batch, pass_cost=16)
    assert sum(rows * tokens for rows, tokens in seen) < 0.8 * unshared


def test_a_model_whose_cache_cannot_be_shared_is_computed_unshared_and_said_once(random_model, batch, monkeypatch,
                                                                                 capsys):
    monkeypatch.setattr(passes, "_keys_and_values", lambda cache: None)
    monkeypatch.setattr(passes, "_unshared", set())
    with torch.no_grad():
        want, _ = _unshared(random_model, batch)
        first, _ = _padding_free(random_model, batch)
        second, _ = _padding_free(random_model, batch)
    torch.testing.assert_close(first, want, atol=0, rtol=0)
    torch.testing.assert_close(second, want, atol=0, rtol=0)
    assert capsys.readouterr().err.count("reads its prompt again (correct, only slower)") == 1


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
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    calls = []
    real = passes.rollout_logprobs
    monkeypatch.setattr(passes, "rollout_logprobs", lambda model, *a, **k: calls.append(model) or real(model, *a, **k))
    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, total_training_steps=2, eval_size=0,
                                     beta=0.04))
    trainer.step()
    assert calls == [trainer.ref_model, trainer.model]


def test_a_frozen_copy_and_the_policy_give_the_same_log_probs_bit_for_bit(random_model, batch):
    """π_ref (a frozen copy, no gradient) and π_θ (weights that need one) must agree exactly at the start: then
    a batch whose advantages are all 0 gives a gradient of exactly 0, and AdamW does not move (its first step
    would follow the sign of any rounding noise, lesson 05)."""
    import copy

    reference = copy.deepcopy(random_model).eval().requires_grad_(False)
    policy = random_model.train()
    for share_prompts in (True, False):                      # passes free: the prompts are shared where asked
        with torch.no_grad():
            want, _ = passes.rollout_logprobs(reference, batch, share_prompts=share_prompts, pass_cost=0)
        got, _ = passes.rollout_logprobs(policy, batch, share_prompts=share_prompts, pass_cost=0)
        assert torch.equal(got.detach(), want), share_prompts


def test_a_pass_costs_more_of_a_narrower_models_tokens():
    """A pass's fixed cost is per layer and a token's work is its layer's weights: 64 tokens on lesson 11's model
    (D = 128, I = 512: 262,144 weights a layer), 4 times as many on the adder (D = 64, I = 256: 65,536)."""
    from transformers import LlamaConfig

    from grpo_edu.training.model.models import bundled_model_dir, load_model_and_tokenizer, sums_model_dir

    grouped = LlamaConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, intermediate_size=128)
    assert passes.layer_weights(grouped) == 64 * (8 + 2 * 2) * 8 + 8 * 8 * 64 + 3 * 64 * 128 == 34_816
    adder, _ = load_model_and_tokenizer(str(bundled_model_dir()))
    sums, _ = load_model_and_tokenizer(str(sums_model_dir()))
    assert passes.layer_weights(sums.config) == 262_144 and passes.pass_cost_tokens(sums) == 64
    assert passes.layer_weights(adder.config) == 65_536 and passes.pass_cost_tokens(adder) == 256


def test_prompts_are_shared_only_where_that_saves_more_than_the_pass_it_adds(random_model, batch):
    # the adder's step: 4 prompts of 7 tokens, 32 answers of 4 to 8 tokens, a pass worth 256 tokens: one plain
    # pass (32 × 15 + 256 = 736) beats a prompt pass and the answers (256 + 4 × 6 + 32 × 8 + 256 = 792)
    adder = [4] * 20 + [5] * 7 + [6, 7, 8, 8, 8]
    assert passes.passes_cost([list(range(32))], [7] * 32, adder, 256) == 736
    assert not passes.share_pays([7] * 32, adder, 4, 256)
    # lesson 11's step: prompts of 9 and 13 tokens, answers of 4 to 42, a pass worth 64 tokens: sharing pays
    sums = [4] * 24 + [26, 26, 40, 40, 40, 42, 42, 42]
    assert passes.share_pays([9] * 16 + [13] * 16, sums, 4, 64)
    # and the passes follow the decision: a pass dearer than every prompt token, one forward of every row
    seen = _recorded_forwards(random_model)
    with torch.no_grad():
        _padding_free(random_model, batch, pass_cost=10_000)
    assert seen == [tuple(batch.input_ids.shape)]
    seen.clear()
    with torch.no_grad():                                   # a cheap pass: the distinct prompts' forward first
        _padding_free(random_model, batch, pass_cost=16)
    assert seen[0][0] == 7 and len(seen) > 2
