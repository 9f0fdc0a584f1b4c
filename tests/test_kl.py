"""The three KL estimators."""

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from grpo_edu.core.kl import kl_estimate


def test_hand_computed():
    lp, ref = np.log(0.5), np.log(0.25)     # log π_ref − log π = −log 2
    d = lp - ref
    assert kl_estimate(lp, ref, "k1") == pytest.approx(np.log(2))
    assert kl_estimate(lp, ref, "k2") == pytest.approx(0.5 * d ** 2)
    assert kl_estimate(lp, ref, "k3") == pytest.approx(0.5 - (-np.log(2)) - 1)


def test_equal_policies_give_zero():
    lp = torch.randn(3, 5)
    for kind in ("k1", "k2", "k3"):
        assert torch.equal(kl_estimate(lp, lp.clone(), kind), torch.zeros(3, 5))


@given(arrays(np.float64, st.integers(1, 20), elements=st.floats(-8, 0)),
       arrays(np.float64, st.integers(1, 20), elements=st.floats(-8, 0)))
def test_k3_and_k2_never_negative(a, b):
    n = min(len(a), len(b))
    assert (kl_estimate(a[:n], b[:n], "k3") >= -1e-12).all()
    assert (kl_estimate(a[:n], b[:n], "k2") >= 0).all()


def test_k1_and_k3_unbiased_on_samples():
    # sample tokens from π over a 5-token vocabulary; the mean estimate ≈ exact KL(π‖π_ref)
    g = torch.Generator().manual_seed(0)
    pi = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05])
    ref = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.2])
    exact = float((pi * (pi / ref).log()).sum())
    tokens = torch.multinomial(pi, 400_000, replacement=True, generator=g)
    lp, lref = pi.log()[tokens], ref.log()[tokens]
    k1 = kl_estimate(lp, lref, "k1").mean().item()
    k3 = kl_estimate(lp, lref, "k3").mean().item()
    k2 = kl_estimate(lp, lref, "k2").mean().item()
    assert k1 == pytest.approx(exact, abs=3e-3)
    assert k3 == pytest.approx(exact, abs=3e-3)
    assert k2 != pytest.approx(exact, abs=3e-3)   # k2 is biased at this distance
    assert kl_estimate(lp, lref, "k1").min() < 0 <= kl_estimate(lp, lref, "k3").min()


def test_gradient_of_k3_by_hand():
    # k3 = e^(ref − lp) − (ref − lp) − 1, so d k3 / d lp = 1 − e^(ref − lp): zero at lp = ref,
    # positive where π > π_ref (the penalty pushes log π down) and negative where π < π_ref
    lp = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-1.5, -1.0, -0.5], dtype=torch.float64)
    kl_estimate(lp, ref, "k3").sum().backward()
    torch.testing.assert_close(lp.grad, 1 - torch.exp(ref - lp.detach()))
    assert lp.grad[0] > 0 > lp.grad[1] and lp.grad[2] == 0
    assert torch.autograd.gradcheck(lambda x: kl_estimate(x, ref, "k3"), (lp,))


def test_bad_input():
    with pytest.raises(ValueError, match="^kind: unknown value 'k4'"):
        kl_estimate(torch.zeros(2), torch.zeros(2), kind="k4")
    with pytest.raises(ValueError, match="^ref_logprobs: shape"):
        kl_estimate(torch.zeros(2, 3), torch.zeros(2, 4))
