"""core.preference and core.overoptimisation: hand-computed cases, invariants, refusals."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from grpo_edu.core.overoptimisation import fit_gao, gao_curve, kl_best_of_n, peak_d
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


def test_kl_best_of_n_matches_sampling():
    """KL_bon is exact: on a uniform base over K outcomes, best-of-n's law is P(rank k) = (k^n − (k−1)^n)/K^n."""
    K, n = 1000, 8
    k = np.arange(1, K + 1, dtype=float)
    p = (k / K) ** n - ((k - 1) / K) ** n
    kl = float(np.sum(p * np.log(p * K)))
    assert kl == pytest.approx(kl_best_of_n(n)[0], abs=5e-3)


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


def test_fit_refusals():
    with pytest.raises(ValueError, match="form"):
        fit_gao([1, 2], [1, 2], "ppo")
    with pytest.raises(ValueError, match="R"):
        fit_gao([1, 2], [1], "bon")
    with pytest.raises(ValueError, match="d"):
        fit_gao([0, 1], [0, 1], "bon")
