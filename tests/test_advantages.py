"""Group advantages: hand-computed cases, invariants, properties and bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from grpo_edu.core.advantages import (
    dead_group_probability,
    group_advantages,
    group_stats,
    rank_advantages,
    zero_std_groups,
)


def test_hand_computed_default():
    # μ = 0.5, unbiased σ = sqrt(1/3) = 0.57735; 0.5 / (0.57735 + 1e-4) = 0.86587
    adv = group_advantages([[1, 0, 0, 1]])
    np.testing.assert_allclose(adv, [[0.8659, -0.8659, -0.8659, 0.8659]], atol=5e-5)
    assert adv[0, 0] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-4))


def test_population_vs_unbiased_sigma():
    mu, sigma1 = group_stats([[1, 0, 0, 1]])
    _, sigma0 = group_stats([[1, 0, 0, 1]], ddof=0)
    assert mu[0] == 0.5 and sigma0[0] == 0.5
    assert sigma1[0] == pytest.approx(math.sqrt(1 / 3))


def test_torch_in_torch_out_same_dtype():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float32)
    adv = group_advantages(r)
    assert isinstance(adv, torch.Tensor) and adv.dtype == torch.float32
    # matches torch's own unbiased std, which is what TRL uses
    expected = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(adv, expected)
    assert isinstance(zero_std_groups(r), torch.Tensor)


def test_constant_groups_are_exactly_zero_never_nan():
    r = np.array([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.3, 0.3, 0.3]])
    for scale in ("group", "batch", "none"):
        adv = group_advantages(r, scale=scale, eps=0.0)
        assert np.all(adv == 0.0), scale
    assert zero_std_groups(r).all()
    assert (rank_advantages(r) == 0).all()


def test_batch_scale_uses_batch_sigma_and_group_mean():
    r = np.array([[1.0, 0.0], [3.0, 3.0], [2.0, 0.0]])
    adv = group_advantages(r, scale="batch")
    sigma = r.std(ddof=1)
    np.testing.assert_allclose(adv[0], [0.5 / (sigma + 1e-4), -0.5 / (sigma + 1e-4)])
    np.testing.assert_allclose(adv[2], [1 / (sigma + 1e-4), -1 / (sigma + 1e-4)])
    np.testing.assert_allclose(adv[1], [0, 0])


def test_none_scale_is_dr_grpo():
    np.testing.assert_allclose(group_advantages([[2, 0, 0, 0]], scale="none"), [[1.5, -0.5, -0.5, -0.5]])


def test_rank_advantages_hand_case():
    # ranks of [3, 1, 2, 2]: 3, 0, 1.5, 1.5 → /3 → 1, 0, .5, .5 → centred
    np.testing.assert_allclose(rank_advantages([[3, 1, 2, 2]]), [[0.5, -0.5, 0, 0]])
    # only the order matters
    np.testing.assert_allclose(rank_advantages([[100, -5, 0.1]]), rank_advantages([[3, 1, 2]]))


def test_zero_std_groups_mask():
    assert zero_std_groups([[1, 1, 1], [0, 1, 0], [0, 0, 0]]).tolist() == [True, False, True]


def test_dead_group_probability():
    assert dead_group_probability(0.5, 4) == pytest.approx(2 * 0.5 ** 4)
    assert dead_group_probability(0.0, 8) == 1.0 and dead_group_probability(1.0, 8) == 1.0
    np.testing.assert_allclose(dead_group_probability(np.array([0.9, 0.1]), 2), [0.82, 0.82])


def test_dead_group_probability_matches_simulation():
    rng = np.random.default_rng(0)
    p, G, trials = 0.8, 4, 200_000
    correct = rng.random((trials, G)) < p
    simulated = zero_std_groups(correct.astype(float)).mean()
    assert simulated == pytest.approx(dead_group_probability(p, G), abs=0.005)


finite = st.floats(-10, 10, allow_nan=False, width=32)


@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 9)), elements=finite),
       st.sampled_from(["group", "batch", "none"]))
def test_advantages_sum_to_zero_per_group(r, scale):
    adv = group_advantages(r, scale=scale)
    assert np.isfinite(adv).all()
    np.testing.assert_allclose(adv.sum(axis=1), 0, atol=1e-6 * (1 + np.abs(adv).max()))


@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 9)), elements=finite),
       st.floats(-5, 5), st.floats(0.1, 10))
def test_group_scale_is_shift_and_scale_invariant(r, shift, scale):
    if (r.std(axis=1, ddof=1) < 1e-3).any():
        return  # eps matters for near-constant groups
    a = group_advantages(r, eps=0.0)
    b = group_advantages(r * scale + shift, eps=0.0)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def _average_ranks(row):
    """Ranks 0..G-1 by sorting; tied values share the mean of the positions they occupy."""
    order = sorted(range(len(row)), key=lambda i: row[i])
    ranks = [0.0] * len(row)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and row[order[end + 1]] == row[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2
        start = end + 1
    return ranks


@given(arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(2, 8)),
              elements=st.sampled_from([-2.0, 0.0, 0.5, 1.0, 3.0])))   # few values: many ties
def test_rank_advantages_match_sorted_ranks(r):
    """Against ranks found by sorting (not by counting, as the library does): centred
    (rank / (G − 1)), the same order as the rewards, ties equal."""
    a = rank_advantages(r)
    G = r.shape[1]
    for row_r, row_a in zip(r, a):
        u = np.array(_average_ranks(list(row_r))) / (G - 1)
        np.testing.assert_allclose(row_a, u - u.mean(), atol=1e-12)
        for i in range(G):
            for j in range(G):
                assert np.sign(row_a[i] - row_a[j]) == np.sign(row_r[i] - row_r[j])


@pytest.mark.parametrize("rewards, match", [
    ([1.0, 0.0, 1.0], r"^rewards: must have shape \(B, G\)"),
    ([[1.0, 0.0], [1.0]], "^rewards: is ragged"),
    ([[1.0], [0.0]], "^rewards: has G = 1"),
    ([[1.0, float("nan")]], "^rewards: holds NaN"),
    ([[1.0, float("inf")]], "^rewards: holds NaN or infinite"),
    (np.zeros((0, 4)), "^rewards: holds no group"),
])
def test_bad_rewards(rewards, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards)


def test_bad_options():
    with pytest.raises(ValueError, match="^scale: unknown value 'grop'.*'group'"):
        group_advantages([[1, 0]], scale="grop")
    with pytest.raises(ValueError, match="^eps: "):
        group_advantages([[1, 0]], eps=-1)
    with pytest.raises(ValueError, match="^p: "):
        dead_group_probability(1.5, 4)
