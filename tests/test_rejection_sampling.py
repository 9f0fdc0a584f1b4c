"""Rejection-sampling fine-tuning (RAFT, expert iteration, STaR): keep the right answers, imitate them."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from grpo_edu.core.losses import grpo_loss, reinforce_loss
from grpo_edu.core.rejection_sampling import select_correct, sft_loss

REWARDS = [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]          # B = 2 prompts, G = 3: the first has two right answers


def test_only_the_right_answers_are_kept():
    keep, info = select_correct(REWARDS)
    assert keep.tolist() == [[True, False, True], [False, False, False]]
    assert info == {"num_kept": 2, "prompts_with_kept": 1, "kept_fraction": 2 / 6, "skip": False}
    keep, _ = select_correct([[0.9, 0.2, 0.5]], threshold=0.5)            # a graded reward: ≥ threshold
    assert keep.tolist() == [[True, False, True]]
    keep, info = select_correct(REWARDS, max_per_prompt=1)              # RAFT: the first right answer only
    assert keep.tolist() == [[True, False, False], [False, False, False]] and info["num_kept"] == 1
    keep, _ = select_correct(torch.tensor(REWARDS))
    assert isinstance(keep, torch.Tensor) and keep.dtype == torch.bool


def test_the_loss_by_hand():
    # answers 0 and 2 are kept. log π of their tokens: answer 0 = [log 0.5, log 0.25] (2 tokens),
    # answer 2 = [log 0.5] (1 token, then padding). Answer 1 (wrong, log π = −9) must not count.
    #   L = −(log 0.5 + log 0.25 + log 0.5) / 3 = (4·log 2) / 3 = 0.924196
    logprobs = torch.tensor([[math.log(0.5), math.log(0.25)], [-9.0, -9.0], [math.log(0.5), -7.0]],
                            requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    keep, _ = select_correct([REWARDS[0]])
    loss, info = sft_loss(logprobs, mask, keep)
    assert loss.item() == pytest.approx(4 * math.log(2) / 3)
    assert info == {"num_kept": 2, "num_tokens": 3, "skip": False}
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert grad.flatten().tolist() == pytest.approx([-1 / 3, -1 / 3, 0, 0, -1 / 3, 0])   # wrong answers: no push


def test_no_right_answer_is_a_flagged_skip_never_a_crash():
    logprobs = torch.randn(6, 4, requires_grad=True)
    keep, info = select_correct([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert info["skip"] and info["num_kept"] == 0
    loss, info = sft_loss(logprobs, torch.ones(6, 4), keep)
    assert info["skip"] and info["num_tokens"] == 0
    assert loss.item() == 0.0 and math.isfinite(loss.item())
    loss.backward()                                                   # runs, and moves nothing
    assert torch.equal(logprobs.grad, torch.zeros(6, 4))


def _random_batch(B, G, seed, T=5):
    """0/1 rewards (B, G), float64 log-probs (N, T) that take a gradient, and a mask (N, T) of random lengths ≥ 1."""
    g = torch.Generator().manual_seed(seed)
    N = B * G
    rewards = torch.randint(0, 2, (B, G), generator=g).double()
    logprobs = torch.randn(N, T, generator=g, dtype=torch.float64).requires_grad_(True)
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (N, 1), generator=g)).double()
    return rewards, logprobs, mask


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 10_000))
def test_it_is_reinforce_with_a_zero_one_advantage_over_the_kept_tokens(B, G, seed):
    rewards, logprobs, mask = _random_batch(B, G, seed)
    keep, info = select_correct(rewards)
    ours, _ = sft_loss(logprobs, mask, keep)
    # REINFORCE with Â_i = 1 if kept else 0, each token weighed by 1 / (kept tokens): bnpo over the kept mask
    kept_mask = mask * keep.reshape(-1, 1).double()
    theirs, _ = reinforce_loss(logprobs, keep.reshape(-1).double(), kept_mask, loss_type="bnpo")
    assert torch.allclose(ours, theirs)
    assert info["skip"] == (not bool(keep.any()))


def test_the_per_answer_mean_by_hand():
    # DeepSeekMath's eq. 8: each kept answer over its own tokens, then 1/N over all N = 3 answers:
    #   L = −(1/3)·[(log 0.5 + log 0.25)/2 + log 0.5/1] = −(1/3)·(−1.5·log 2 − log 2) = (2.5·log 2)/3 = 0.577623
    logprobs = torch.tensor([[math.log(0.5), math.log(0.25)], [-9.0, -9.0], [math.log(0.5), -7.0]],
                            requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    keep, _ = select_correct([REWARDS[0]])
    loss, info = sft_loss(logprobs, mask, keep, normaliser="answer")
    assert loss.item() == pytest.approx(2.5 * math.log(2) / 3)
    assert info == {"num_kept": 2, "num_tokens": 3, "skip": False}
    (grad,) = torch.autograd.grad(loss, logprobs)
    # the one-token answer's token gets twice the push of each of the two-token answer's: 1/(3·1) against 1/(3·2)
    assert grad.flatten().tolist() == pytest.approx([-1 / 6, -1 / 6, 0, 0, -1 / 3, 0])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 10_000))
def test_deepseekmaths_rft_is_reinforce_with_the_per_answer_mean_and_no_kl(B, G, seed):
    """Eq. 8's RFT and the course's ``reinforce`` (Â = R, loss_type "grpo") have one loss and one gradient
    on-policy (r = 1), without REINFORCE's KL term: what lesson 13's control rests on."""
    rewards, logprobs, mask = _random_batch(B, G, seed)
    keep, _ = select_correct(rewards)
    ours, _ = sft_loss(logprobs, mask, keep, normaliser="answer")
    theirs, _ = grpo_loss(logprobs, logprobs.detach(), rewards.reshape(-1), mask, loss_type="grpo")
    (g_ours,) = torch.autograd.grad(ours, logprobs)
    (g_theirs,) = torch.autograd.grad(theirs, logprobs)
    assert torch.allclose(g_ours, g_theirs)


def test_bad_input_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r"^threshold: must be a finite number.*Fix"):
        select_correct(REWARDS, threshold=math.nan)
    with pytest.raises(ValueError, match=r"^max_per_prompt: must be an integer ≥ 1.*Fix"):
        select_correct(REWARDS, max_per_prompt=0)
    with pytest.raises(ValueError, match=r"^rewards: must have shape \(B, G\)"):
        select_correct([1.0, 0.0])
    logprobs, mask = torch.zeros(3, 2), torch.ones(3, 2)
    with pytest.raises(ValueError, match=r"^mask: shape \(3, 3\) does not match logprobs shape \(3, 2\).*Fix"):
        sft_loss(logprobs, torch.ones(3, 3), np.array([True, False, True]))
    with pytest.raises(ValueError, match=r"^normaliser: unknown value 'mean'.*Fix"):
        sft_loss(logprobs, mask, np.array([True, False, True]), normaliser="mean")
    with pytest.raises(ValueError, match=r"^keep: must be 3 booleans, one per completion.*Fix"):
        sft_loss(logprobs, mask, torch.tensor([True, False]))
    with pytest.raises(ValueError, match=r"^keep: must be 3 booleans.*Fix"):
        sft_loss(logprobs, mask, torch.tensor([1.0, 0.0, 1.0]))           # rewards passed for the kept mask


@pytest.mark.parametrize("keep", [[True, False], [False, True]], ids=["on a kept answer", "on a dropped one"])
def test_nan_log_probs_are_refused_not_a_nan_loss(keep):
    """NaN · 0 is NaN, so a dropped answer's NaN would make the loss NaN too."""
    logprobs = torch.tensor([[math.nan, -1.0], [-1.0, -1.0]])
    with pytest.raises(ValueError, match="^logprobs: holds NaN or infinite values.*Fix: "):
        sft_loss(logprobs, torch.ones(2, 2), torch.tensor(keep))
