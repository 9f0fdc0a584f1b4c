"""core.preference and core.overoptimisation: hand-computed cases, invariants, refusals."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from grpo_edu.core.overoptimisation import fit_gao, gao_curve, kl_best_of_n, kl_best_of_n_exact, peak_d
from grpo_edu.core.preference import bradley_terry_loss


def test_bt_loss_by_hand():
    # pairs (r_c, r_r) = (2, 0) and (0, 1): −log σ(2) = 0.126928, −log σ(−1) = 1.313262
    loss, info = bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert loss.item() == pytest.approx((0.126928 + 1.313262) / 2, abs=1e-5)
    assert info["accuracy"] == 0.5 and info["margin"] == pytest.approx(0.5)
    assert (info["min_reward"], info["max_reward"], info["mean_reward"]) == (0.0, 2.0, 0.75)


def test_margin_and_centring_by_hand():
    # m = 1: −log σ(2 − 0 − 1) = −log σ(1) = 0.313262; centring 0.5 · (2 + 0)² = 2
    loss, info = bradley_terry_loss(torch.tensor([2.0]), torch.tensor([0.0]), margin=torch.tensor([1.0]),
                                    center_rewards_coefficient=0.5)
    assert loss.item() == pytest.approx(0.313262 + 2.0, abs=1e-5)
    assert info["center_loss"] == pytest.approx(4.0) and info["bt_loss"] == pytest.approx(0.313262, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=6), st.floats(-5, 5))
def test_bt_sees_only_differences(scores, shift):
    """Without centring, adding a constant to every score changes nothing; with it, the loss grows off 0."""
    c, r = torch.tensor(scores), torch.tensor(scores[::-1])
    a, _ = bradley_terry_loss(c, r)
    b, _ = bradley_terry_loss(c + shift, r + shift)
    assert a.item() == pytest.approx(b.item(), abs=1e-4)


def test_preference_refusals():
    with pytest.raises(ValueError, match="rewards_rejected"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="rewards_chosen"):
        bradley_terry_loss(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match="center_rewards_coefficient"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(2), center_rewards_coefficient=-1.0)


def test_kl_best_of_n_by_hand():
    assert kl_best_of_n(1)[0] == 0.0
    assert kl_best_of_n(2)[0] == pytest.approx(math.log(2) - 0.5)           # 0.193147
    kl, info = kl_best_of_n(256)
    assert kl == pytest.approx(5.545177 - 255 / 256, abs=1e-6) and info["d"] == pytest.approx(math.sqrt(kl))
    with pytest.raises(ValueError, match="n"):
        kl_best_of_n(0)


def test_kl_bound_is_tight_without_repeats():
    """log n − (n−1)/n is reached only when no outcome repeats: K = 1000 equally likely, distinct outcomes, where
    best-of-n's law is P(rank k) = (k^n − (k−1)^n)/K^n, come within 5e-3 of it (the one regime the old test saw)."""
    K, n = 1000, 8
    k = np.arange(1, K + 1, dtype=float)
    p = (k / K) ** n - ((k - 1) / K) ** n
    kl = float(np.sum(p * np.log(p * K)))
    assert kl == pytest.approx(kl_best_of_n(n)[0], abs=5e-3)
    assert kl_best_of_n_exact(np.arange(K), n)[0] == pytest.approx(kl, rel=1e-9)


def test_kl_bound_is_strict_with_two_outcomes():
    """Beirami et al. 2024: two equally likely outcomes at n = 8 give KL = 0.668 nats, not the formula's 1.204.
    The best of 8 is the better outcome with 1 − 2⁻⁸: KL = (1 − 2⁻⁸) log(2(1 − 2⁻⁸)) + 2⁻⁸ log(2 · 2⁻⁸)."""
    kl, info = kl_best_of_n_exact([0.3, 1.7], 8)
    top, bottom = 1 - 2.0 ** -8, 2.0 ** -8
    assert kl == pytest.approx(top * math.log(2 * top) + bottom * math.log(2 * bottom), rel=1e-12)
    assert round(kl, 3) == 0.668 and round(info["bound"], 3) == 1.204 == round(kl_best_of_n(8)[0], 3)
    assert info["atoms"] == 2 and info["largest_atom"] == 0.5
    assert kl_best_of_n_exact([0.0, 1.0], 256)[0] <= math.log(2) < kl_best_of_n(256)[0]   # two atoms: ≤ log 2 at any n


def test_kl_exact_matches_enumerating_every_draw():
    """P_bon(s) = F(s)ⁿ − F⁻(s)ⁿ with ties broken at random, against all K^n draws of n outcomes enumerated."""
    import itertools
    scores, probs, n = [2.0, 0.5, 2.0, 1.0], [0.1, 0.4, 0.3, 0.2], 4         # outcomes 0 and 2 tie
    p_bon = np.zeros(4)
    for draw in itertools.product(range(4), repeat=n):
        weight = math.prod(probs[i] for i in draw)
        best = max(scores[i] for i in draw)
        winners = [i for i in draw if scores[i] == best]                      # a random draw among the tied
        for i in winners:
            p_bon[i] += weight / len(winners)
    expected = float(np.sum(p_bon * np.log(p_bon / np.array(probs))))
    assert kl_best_of_n_exact(scores, n, probs)[0] == pytest.approx(expected, rel=1e-10)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=40), st.integers(1, 300))
def test_kl_exact_never_exceeds_the_bound(scores, n):
    """Any empirical distribution (repeats as repeated scores), any n: 0 ≤ exact KL ≤ log n − (n−1)/n, and
    breaking every tie (each sample its own outcome) never lowers it."""
    kl, info = kl_best_of_n_exact(scores, n)
    assert 0.0 <= kl <= info["bound"] + 1e-12
    untied, _ = kl_best_of_n_exact(np.array(scores) + np.arange(len(scores)) * 1e-3, n)
    assert kl <= untied + 1e-12


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 64))
def test_kl_exact_reaches_the_bound_without_ties(n):
    """In the limit of no repeated outcomes (K = 2¹⁶ distinct, equally likely) the exact KL is the bound."""
    kl, info = kl_best_of_n_exact(np.arange(2 ** 16), n)
    assert kl == pytest.approx(info["bound"], abs=1e-5)


def test_kl_exact_refusals():
    with pytest.raises(ValueError, match="n"):
        kl_best_of_n_exact([1.0, 2.0], 0)
    with pytest.raises(ValueError, match="scores"):
        kl_best_of_n_exact([1.0, float("nan")], 2)
    with pytest.raises(ValueError, match="probs"):
        kl_best_of_n_exact([1.0, 2.0], 2, probs=[0.5, 0.6])


def test_gao_forms_and_peaks_by_hand():
    # bon: α = 2, β = 1 → R(d) = d(2 − d), peak at d = 1 with R = 1
    d, info = peak_d(2.0, 1.0, "bon")
    assert d == 1.0 and info["R_peak"] == pytest.approx(1.0)
    # rl: α = 1, β = 1 → R(d) = d(1 − log d), peak at d = e^0 = 1, R = 1
    d, info = peak_d(1.0, 1.0, "rl")
    assert d == pytest.approx(1.0) and info["R_peak"] == pytest.approx(1.0)
    assert peak_d(1.0, 0.0, "bon")[0] == math.inf
    R, _ = gao_curve([0.0, 1.0, 2.0], 1.0, 0.5, "rl")
    assert list(R) == pytest.approx([0.0, 1.0, 2 * (1 - 0.5 * math.log(2))])


@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_recovers_known_parameters(form):
    d = np.linspace(0.1, 3.0, 20)
    R, _ = gao_curve(d, 1.3, 0.4, form)
    (alpha, beta), info = fit_gao(d, R, form)
    assert (alpha, beta) == (pytest.approx(1.3), pytest.approx(0.4)) and info["r2"] == pytest.approx(1.0)
    assert info["d_peak"] == pytest.approx(peak_d(1.3, 0.4, form)[0])


def test_a_nearly_straight_curve_has_no_peak_in_range_not_an_overflow():
    """Gao's RL form on a curve still rising straight (β tiny against α): exp(α/β − 1) is beyond any float, so the
    peak is inf, where it once raised OverflowError and killed the sweep that fitted it mid-run."""
    assert peak_d(1000.0, 1.0, "rl") == (math.inf, {"R_peak": math.inf})
    d = np.linspace(0.1, 3.0, 10)
    R, _ = gao_curve(d, 1.0, 1e-4, "rl")
    (alpha, beta), info = fit_gao(d, R, "rl")
    assert (alpha, beta) == (pytest.approx(1.0), pytest.approx(1e-4)) and info["d_peak"] == math.inf
    assert peak_d(1.0, 1e-320, "bon")[0] == math.inf


def test_fit_refusals():
    with pytest.raises(ValueError, match="form"):
        fit_gao([1, 2], [1, 2], "ppo")
    with pytest.raises(ValueError, match="R"):
        fit_gao([1, 2], [1], "bon")
    with pytest.raises(ValueError, match="d"):
        fit_gao([0, 1], [0, 1], "bon")
