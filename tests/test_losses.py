"""The clipped GRPO loss: hand cases, invariants, aggregations, gradients and bad input."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from grpo_edu.core.losses import AGGREGATIONS, grpo_loss


def _inputs(N=4, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    lp = (torch.randn(N, T, generator=g) * 0.3 - 1.0).requires_grad_()
    old = lp.detach() + torch.randn(N, T, generator=g) * 0.3
    ref = lp.detach() + torch.randn(N, T, generator=g) * 0.1
    adv = torch.randn(N, generator=g)
    mask = torch.ones(N, T)
    mask[0, 3:] = 0
    mask[2, 1:] = 0
    return lp, old, adv, mask, ref


def test_on_policy_loss_is_minus_mean_advantage():
    # r = 1 everywhere: L = −Â per token, and the clip does not bind
    lp = torch.full((2, 3), -1.0, requires_grad=True)
    adv = torch.tensor([1.5, -0.5])
    loss, info = grpo_loss(lp, lp.detach(), adv, torch.ones(2, 3))
    assert loss.item() == pytest.approx(-0.5)
    assert info["clip_fraction"] == 0 and info["ratio_mean"] == 1.0
    loss.backward()
    # d/dlogπ of −r·Â at r = 1 is −Â, averaged over 3 tokens and 2 sequences
    torch.testing.assert_close(lp.grad, (-adv / 6).unsqueeze(1).expand(2, 3))


def test_clip_hand_cases():
    # one token each: r = 1.5 with Â > 0 (clipped at 1.2), r = 0.5 with Â < 0 (clipped at 0.8),
    # r = 1.5 with Â < 0 (not clipped: the min keeps the worse value), r = 0.9 with Â > 0
    r = torch.tensor([[1.5], [0.5], [1.5], [0.9]])
    lp = r.log().requires_grad_()
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, info = grpo_loss(lp, torch.zeros(4, 1), adv, torch.ones(4, 1))
    expected = torch.tensor([-1.2, 0.8, 1.5, -0.9]).mean()
    assert loss.item() == pytest.approx(expected.item())
    assert info["clip_fraction"] == 0.5
    assert info["clip_high_fraction"] == 0.25 and info["clip_low_fraction"] == 0.25
    loss.backward()
    # clipped tokens get no gradient; the others get −r·Â / N
    torch.testing.assert_close(lp.grad.squeeze(1), torch.tensor([0.0, 0.0, 1.5 / 4, -0.9 / 4]))


def test_epsilon_high_is_asymmetric():
    r = torch.tensor([[1.25]])
    lp = r.log()
    adv = torch.tensor([1.0])
    loss_sym, info_sym = grpo_loss(lp, torch.zeros(1, 1), adv, torch.ones(1, 1), epsilon=0.2)
    loss_hi, info_hi = grpo_loss(lp, torch.zeros(1, 1), adv, torch.ones(1, 1), epsilon=0.2, epsilon_high=0.28)
    assert loss_sym.item() == pytest.approx(-1.2) and info_sym["clip_fraction"] == 1
    assert loss_hi.item() == pytest.approx(-1.25) and info_hi["clip_fraction"] == 0


def _aggregate_by_hand(per_token, mask, loss_type, max_completion_length=None):
    """Each loss_type's normaliser, written out over Python lists of sequences and tokens."""
    N, T = mask.shape
    rows = [[float(per_token[i, t]) for t in range(T) if mask[i, t]] for i in range(N)]
    if loss_type == "grpo":                                   # mean over |o_i|, then over sequences
        return sum(sum(r) / len(r) for r in rows if r) / N
    if loss_type in ("bnpo", "dapo"):                         # one mean over every active token
        return sum(map(sum, rows)) / max(sum(map(len, rows)), 1)
    return sum(map(sum, rows)) / (N * (max_completion_length or T))   # dr_grpo: a constant


def _weights_by_hand(mask, loss_type):
    """d(loss)/d(per-token loss): the weight each token gets in the aggregate."""
    N, T = mask.shape
    if loss_type == "grpo":
        return mask / (mask.sum(1, keepdim=True).clamp(min=1) * N)
    if loss_type in ("bnpo", "dapo"):
        return mask / mask.sum().clamp(min=1)
    return mask / (N * T)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_kl_term_adds_beta_times_k3(loss_type):
    lp, old, adv, mask, ref = _inputs()
    base, _ = grpo_loss(lp, old, adv, mask, loss_type=loss_type)
    with_kl, info = grpo_loss(lp, old, adv, mask, ref_logprobs=ref, beta=0.3, loss_type=loss_type)
    d = (ref - lp.detach()).double()
    k3 = d.exp() - d - 1                                       # k3 = π_ref/π − log(π_ref/π) − 1, per token
    assert info["kl_mean"] == pytest.approx(float(k3[mask.bool()].mean()), rel=1e-5)
    expected = 0.3 * _aggregate_by_hand(k3, mask, loss_type)
    assert expected > 1e-4
    assert with_kl.item() - base.item() == pytest.approx(expected, abs=1e-6)   # float32 difference of two sums
    assert info["kl_loss"] == pytest.approx(expected, rel=1e-5)


def test_aggregations_by_hand():
    # per-token loss = −Â on policy; sequence 0 has 1 token with Â = 1, sequence 1 has 3 with Â = −1
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])
    got = {t: grpo_loss(lp, lp, adv, mask, loss_type=t)[0].item() for t in AGGREGATIONS}
    assert got["grpo"] == pytest.approx((-1 + 1) / 2)          # per-sequence means: −1 and +1
    assert got["bnpo"] == pytest.approx((-1 + 3) / 4)          # 4 active tokens
    assert got["dapo"] == pytest.approx((-1 + 3) / 4)
    assert got["dr_grpo"] == pytest.approx((-1 + 3) / (2 * 4))  # N · T
    dr = grpo_loss(lp, lp, adv, mask, loss_type="dr_grpo", max_completion_length=8)[0].item()
    assert dr == pytest.approx(2 / 16)
    dapo = grpo_loss(lp, lp, adv, mask, loss_type="dapo", num_active_tokens=10)[0].item()
    assert dapo == pytest.approx(2 / 10)


def test_masked_tokens_get_no_gradient():
    lp, old, adv, mask, ref = _inputs()
    for loss_type in AGGREGATIONS:
        lp.grad = None
        loss, _ = grpo_loss(lp, old, adv, mask, ref_logprobs=ref, beta=0.1, loss_type=loss_type)
        loss.backward()
        assert (lp.grad[mask == 0] == 0).all(), loss_type


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 10_000), st.sampled_from(sorted(AGGREGATIONS)))
def test_on_policy_loss_and_gradient_by_hand(N, T, seed, loss_type):
    """At r = 1 (π_θold = π_θ) the clip never binds: the loss is −Â per token, averaged by
    the loss_type's own formula, and d loss / d log π = −Â times that token's weight."""
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(N, T, generator=g, dtype=torch.float64).requires_grad_()
    adv = torch.randn(N, generator=g, dtype=torch.float64)
    mask = (torch.rand(N, T, generator=g) > 0.3).double()
    loss, info = grpo_loss(lp, lp.detach(), adv, mask, loss_type=loss_type, epsilon=0.2)
    assert info["clip_fraction"] == 0 and info["ratio_mean"] == pytest.approx(1.0 if mask.any() else 0.0)
    assert loss.item() == pytest.approx(_aggregate_by_hand(-adv[:, None].expand(N, T), mask, loss_type), abs=1e-12)
    loss.backward()
    torch.testing.assert_close(lp.grad, -adv[:, None] * _weights_by_hand(mask, loss_type))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_clipped_objective_never_exceeds_unclipped(seed):
    # PPO's surrogate is a pessimistic bound: per token, clipped loss ≥ unclipped loss
    lp, old, adv, mask, _ = _inputs(seed=seed)
    clipped, _ = grpo_loss(lp, old, adv, mask, loss_type="bnpo")
    unclipped, _ = grpo_loss(lp, old, adv, mask, loss_type="bnpo", epsilon=1e9)
    assert clipped.item() >= unclipped.item() - 1e-6


def test_gradient_matches_finite_difference():
    lp, old, adv, mask, ref = _inputs(N=3, T=4, seed=3)
    lp = lp.detach().double().requires_grad_()
    old, ref, adv, mask = old.double(), ref.double(), adv.double(), mask.double()
    assert torch.autograd.gradcheck(
        lambda x: grpo_loss(x, old, adv, mask, ref_logprobs=ref, beta=0.2, epsilon=10.0)[0], (lp,))


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "cispo", "sapo"])
def test_one_advantage_per_token_equal_along_the_answer_is_grpos_loss(loss_type):
    """PPO with a critic gives every token its own Â_{i,t} (N, T); repeated along each answer it is GRPO's Â_i."""
    lp, old, adv, mask, ref = _inputs()
    extra = dict(epsilon_high=5.0) if loss_type == "cispo" else {}
    per_answer, _ = grpo_loss(lp, old, adv, mask, ref_logprobs=ref, beta=0.1, loss_type=loss_type, **extra)
    per_token, _ = grpo_loss(lp, old, adv.unsqueeze(1).expand(-1, lp.shape[1]), mask, ref_logprobs=ref, beta=0.1,
                             loss_type=loss_type, **extra)
    torch.testing.assert_close(per_token, per_answer)
    changed = adv.unsqueeze(1).expand(-1, lp.shape[1]).clone()
    changed[1, 0] += 1.0                                               # one token's own advantage
    assert not torch.allclose(grpo_loss(lp, old, changed, mask, loss_type=loss_type, **extra)[0],
                              grpo_loss(lp, old, adv, mask, loss_type=loss_type, **extra)[0])


@pytest.mark.parametrize("change, match", [
    (dict(old_logprobs=torch.zeros(4, 5)), "^old_logprobs: shape"),
    (dict(mask=torch.ones(3, 6)), "^mask: shape"),
    (dict(advantages=torch.zeros(6, 4)), r"^advantages: shape .* should be \(N,\)"),
    (dict(logprobs=torch.zeros(24)), r"^logprobs: must be a \(N, T\)"),
    (dict(loss_type="ppo"), "^loss_type: unknown value 'ppo'"),
    (dict(epsilon=0.0), "^epsilon: "),
    (dict(epsilon=-0.2), "^epsilon: "),
    (dict(epsilon_high=0.0), "^epsilon_high: "),
    (dict(beta=-1.0), "^beta: "),
    (dict(beta=0.1, ref_logprobs=None), "^ref_logprobs: is None but beta"),
    (dict(ref_logprobs=torch.zeros(4, 2), beta=0.1), "^ref_logprobs: shape"),
    (dict(loss_type="dr_grpo", max_completion_length=3), "^max_completion_length: "),
    (dict(loss_type="grpo", num_active_tokens=10), "^num_active_tokens: "),
])
def test_bad_input(change, match):
    lp, old, adv, mask, ref = _inputs()
    kwargs = dict(logprobs=lp, old_logprobs=old, advantages=adv, mask=mask, ref_logprobs=ref)
    kwargs.update(change)
    with pytest.raises(ValueError, match=match):
        grpo_loss(**kwargs)
