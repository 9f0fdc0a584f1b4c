"""REINFORCE without a baseline: Â = R, the estimator beside GRPO's, RLOO and REINFORCE++."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from grpo_edu.core.advantages import ESTIMATORS, estimate_advantages, group_advantages, reinforce_advantages
from grpo_edu.core.losses import reinforce_loss


def test_the_reward_is_the_advantage():
    assert reinforce_advantages([[1, 0, 0, 1], [1, 1, 1, 1]]).tolist() == [[1, 0, 0, 1], [1, 1, 1, 1]]
    # a group that is all right still pushes every answer up, where GRPO's Â is 0
    assert group_advantages([[1, 1, 1, 1]]).tolist() == [[0, 0, 0, 0]]
    r = torch.tensor([[0.5, -2.0]], dtype=torch.float32)
    adv = reinforce_advantages(r)
    assert isinstance(adv, torch.Tensor) and adv.dtype == torch.float32 and torch.equal(adv, r)
    adv[0, 0] = 9.0
    assert r[0, 0] == 0.5                                                   # a copy, not the caller's tensor


def test_one_answer_per_prompt_is_enough():
    assert reinforce_advantages([[1.0], [0.0]]).tolist() == [[1.0], [0.0]]   # no group, no baseline needed
    with pytest.raises(ValueError, match=r"^rewards: has G = 0 completion per group.*Fix: sample at least 1"):
        reinforce_advantages(np.zeros((2, 0)))
    with pytest.raises(ValueError, match=r"^rewards: has G = 1.*G ≥ 2"):
        group_advantages([[1.0], [0.0]])                                    # GRPO's baseline needs a group


def test_it_is_an_advantage_estimator():
    assert "reinforce" in ESTIMATORS
    rewards = [[1.0, 0.0, 0.5]]
    assert estimate_advantages(rewards, estimator="reinforce").tolist() == rewards


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 6)), elements=st.floats(-5, 5)))
def test_the_group_mean_baseline_only_shifts_each_group(rewards):
    # Â_REINFORCE − Â_GRPO(scale="none") = μ_group, the same number for every answer of a group
    shift = reinforce_advantages(rewards) - group_advantages(rewards, scale="none")
    assert np.allclose(shift, rewards.mean(axis=1, keepdims=True))


def test_its_loss_pushes_each_answer_by_its_reward():
    logprobs = torch.zeros(3, 2, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    adv = torch.as_tensor(reinforce_advantages([[1.0, 0.0, 2.0]])).reshape(-1)           # (N,)
    loss, _ = reinforce_loss(logprobs, adv, mask, loss_type="dapo")                    # −Σ Â·log π / 5 tokens
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert (-grad).flatten().tolist() == pytest.approx([0.2, 0.2, 0.0, 0.0, 0.4, 0.4])   # a wrong answer: no push
