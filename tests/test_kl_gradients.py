"""What the KL estimators do as loss terms (lesson 04b), against gradients derived by hand.

For a softmax π = softmax(z) and a fixed q = π_ref (derivations in the comments):
    ∇_z KL(q ‖ π) = π − q                       (−Σ_x q_x log π_x differentiated)
    ∇_z KL(π ‖ q) = π ⊙ (log(π/q) − KL(π ‖ q))
"""

import numpy as np
import pytest
import torch

from grpo_edu.core.kl_gradients import estimator_gradient, kl_gradients


@pytest.fixture
def pair():
    gen = torch.Generator().manual_seed(0)
    ref_logits = torch.randn(12, generator=gen, dtype=torch.float64)
    logits = ref_logits + 0.5 * torch.randn(12, generator=gen, dtype=torch.float64)
    return logits, ref_logits.log_softmax(-1)


def _by_hand(logits, ref_logprobs):
    pi = logits.softmax(-1).numpy()
    q = ref_logprobs.exp().numpy()
    log_ratio = np.log(pi) - np.log(q)
    reverse_kl = float(pi @ log_ratio)
    return pi * (log_ratio - reverse_kl), pi - q, reverse_kl


def test_kl_gradients_match_the_hand_formulas(pair):
    reverse, info = kl_gradients(*pair)
    hand_reverse, hand_forward, reverse_kl = _by_hand(*pair)
    np.testing.assert_allclose(reverse.numpy(), hand_reverse, atol=1e-12)
    np.testing.assert_allclose(info["forward"].numpy(), hand_forward, atol=1e-12)
    assert info["reverse_kl"] == pytest.approx(reverse_kl)
    assert not np.allclose(hand_reverse, hand_forward, atol=1e-3)      # the two really differ here


def test_k1_gradient_averages_to_zero(pair):
    grad, info = estimator_gradient(*pair, "k1")
    np.testing.assert_allclose(grad.numpy(), 0.0, atol=1e-12)
    assert info["value"] == pytest.approx(_by_hand(*pair)[2])            # but its value is the KL


def test_k2_follows_the_reverse_kl_and_k3_the_forward_kl(pair):
    hand_reverse, hand_forward, _ = _by_hand(*pair)
    k2, _ = estimator_gradient(*pair, "k2")
    k3, info = estimator_gradient(*pair, "k3")
    np.testing.assert_allclose(k2.numpy(), hand_reverse, atol=1e-12)
    np.testing.assert_allclose(k3.numpy(), hand_forward, atol=1e-12)
    assert info["value"] == pytest.approx(_by_hand(*pair)[2])            # k3's value is unbiased


def test_ratio_weighted_k3_follows_the_reverse_kl_with_the_same_value(pair):
    plain, plain_info = estimator_gradient(*pair, "k3")
    weighted, weighted_info = estimator_gradient(*pair, "k3", ratio_weighted=True)
    np.testing.assert_allclose(weighted.numpy(), _by_hand(*pair)[0], atol=1e-12)
    assert weighted_info["value"] == pytest.approx(plain_info["value"])   # r = 1 in value
    assert not torch.allclose(weighted, plain)


def test_sampled_tokens_give_the_sample_mean_gradient(pair):
    logits, ref = pair
    tokens = torch.tensor([3, 3, 7])
    grad, _ = estimator_gradient(logits, ref, "k3", tokens=tokens)
    # ∇k3(x) = (1 − ρ(x))·(onehot(x) − π), averaged over the three tokens
    pi = logits.softmax(-1).numpy()
    rho = (ref.exp().numpy() / pi)
    expected = np.mean([(1 - rho[x]) * (np.eye(12)[x] - pi) for x in (3, 3, 7)], axis=0)
    np.testing.assert_allclose(grad.numpy(), expected, atol=1e-12)
    many = torch.multinomial(logits.softmax(-1), 100_000, replacement=True,
                             generator=torch.Generator().manual_seed(1))
    sampled, _ = estimator_gradient(logits, ref, "k3", tokens=many)
    np.testing.assert_allclose(sampled.numpy(), _by_hand(logits, ref)[1], atol=0.01)


def test_inputs_are_checked(pair):
    logits, ref = pair
    with pytest.raises(ValueError, match="^kind:"):
        estimator_gradient(logits, ref, "k4")
    with pytest.raises(ValueError, match="^ref_logprobs:"):
        estimator_gradient(logits, ref[:5])
    with pytest.raises(ValueError, match="^logits:"):
        kl_gradients(logits[None], ref)
