"""PPO's critic: GAE(γ, λ) advantages and returns, and the clipped value loss.

A 3-token case worked by hand, the reductions to REINFORCE (γ = λ = 1), properties, equality with
verl's own ``compute_gae_advantage_return`` and ``compute_value_loss``, and bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from grpo_edu.core.advantages import group_advantages, reinforce_advantages
from grpo_edu.core.gae import gae_advantages, outcome_token_rewards, value_loss

# One answer of 3 tokens with reward R = 1 (on its last token), the critic's V = [0.5, 0.6, 0.8],
# γ = 0.9, λ = 0.5 (so γλ = 0.45). Worked backwards from the last token, V after it being 0:
#   δ_2 = 1 + 0.9·0   − 0.8 = 0.2          Â_2 = 0.2
#   δ_1 = 0 + 0.9·0.8 − 0.6 = 0.12         Â_1 = 0.12 + 0.45·0.2  = 0.21
#   δ_0 = 0 + 0.9·0.6 − 0.5 = 0.04         Â_0 = 0.04 + 0.45·0.21 = 0.1345
#   R_t = Â_t + V_t = [0.6345, 0.81, 1.0]
# A second answer of 2 tokens (then padding), reward 0, V = [0.4, 0.2, 9.0] (9.0 sits on the padding):
#   δ_1 = 0 − 0.2 = −0.2                   Â_1 = −0.2
#   δ_0 = 0.9·0.2 − 0.4 = −0.22            Â_0 = −0.22 + 0.45·(−0.2) = −0.31
VALUES = torch.tensor([[0.5, 0.6, 0.8], [0.4, 0.2, 9.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
REWARDS = torch.tensor([1.0, 0.0], dtype=torch.float64)


def test_a_three_token_answer_by_hand():
    adv, info = gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=0.5)
    assert adv.flatten().tolist() == pytest.approx([0.1345, 0.21, 0.2, -0.31, -0.2, 0.0])
    assert info["deltas"].flatten().tolist() == pytest.approx([0.04, 0.12, 0.2, -0.22, -0.2, 0.0])
    assert info["returns"].flatten().tolist() == pytest.approx([0.6345, 0.81, 1.0, 0.09, 0.0, 0.0])


def test_the_outcome_reward_sits_on_the_last_completion_token():
    token_rewards = outcome_token_rewards(torch.tensor([2.0, 3.0]), MASK)
    assert token_rewards.tolist() == [[0.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    same, _ = gae_advantages(token_rewards, VALUES, MASK, gamma=0.9, lam=0.5)   # (N, T) rewards: used as they are
    outcome, _ = gae_advantages(torch.tensor([2.0, 3.0]), VALUES, MASK, gamma=0.9, lam=0.5)
    assert torch.equal(same, outcome)
    hole = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0]])                            # a tool's output at t = 2
    assert outcome_token_rewards(torch.tensor([5.0]), hole).tolist() == [[0.0, 0.0, 0.0, 5.0, 0.0]]


def test_lambda_zero_is_the_one_step_td_error_and_lambda_one_the_monte_carlo_return():
    adv0, info = gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=0.0)
    assert torch.allclose(adv0, info["deltas"])                                # Â_t = δ_t
    adv1, _ = gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=1.0)
    # λ = 1: Â_t = γ^(|o|−1−t)·R − V_t, the discounted return minus the critic's guess
    discounted = torch.tensor([[0.81, 0.9, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(adv1, (discounted - VALUES) * MASK)


def test_with_gamma_and_lambda_one_and_no_critic_gae_is_reinforce():
    rewards = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], dtype=torch.float64)     # (B, G)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]],
                        dtype=torch.float64)                                         # (N, T)
    adv, info = gae_advantages(rewards.reshape(-1), torch.zeros_like(mask), mask)    # V = 0
    expected = torch.as_tensor(reinforce_advantages(rewards)).reshape(-1, 1) * mask  # Â = R on every token
    assert torch.equal(adv, expected) and torch.equal(info["returns"], expected)
    # V = a constant b: REINFORCE with baseline b, Â = R − b
    adv_b, _ = gae_advantages(rewards.reshape(-1), torch.full_like(mask, 0.25), mask)
    assert torch.allclose(adv_b, (rewards.reshape(-1, 1) - 0.25) * mask)
    # V = the group's mean reward: GRPO's Â without the division by σ (Dr. GRPO, scale="none")
    group_mean = rewards.mean(1).repeat_interleave(3).reshape(-1, 1).expand_as(mask)
    adv_mu, _ = gae_advantages(rewards.reshape(-1), group_mean, mask)
    grpo = torch.as_tensor(group_advantages(rewards, scale="none")).reshape(-1, 1) * mask
    assert torch.allclose(adv_mu, grpo)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 10_000))
def test_with_gamma_and_lambda_one_the_returns_are_the_reward_whatever_the_critic(N, T, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()                     # (N, T)
    rewards, values = torch.randn(N, generator=g).double(), torch.randn(N, T, generator=g).double()
    adv, info = gae_advantages(rewards, values, mask)
    # Σ of the δ's telescopes: Â_t = R − V_t, so R_t = Â_t + V_t = R on every token
    assert torch.allclose(info["returns"], rewards[:, None] * mask)
    assert torch.allclose(adv, (rewards[:, None] - values) * mask)


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.integers(0, 10_000))
def test_gae_is_the_discounted_sum_of_td_errors(gamma, lam, seed):
    g = torch.Generator().manual_seed(seed)
    values, rewards = torch.randn(3, 5, generator=g).double(), torch.randn(3, generator=g).double()
    mask = torch.ones(3, 5, dtype=torch.float64)
    adv, info = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    # Â_t = Σ_{k≥t} (γλ)^(k−t) δ_k, computed here directly rather than by the recursion
    weights = torch.tensor([[(gamma * lam) ** (k - t) if k >= t else 0.0 for k in range(5)] for t in range(5)],
                           dtype=torch.float64)
    assert torch.allclose(adv, info["deltas"] @ weights.T)


def test_whiten_standardises_over_the_active_tokens_and_leaves_the_returns():
    raw, info = gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=0.5)
    white, info_w = gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=0.5, whiten=True)
    active = white[MASK.bool()]
    assert float(active.mean()) == pytest.approx(0.0, abs=1e-12)
    assert float(active.std()) == pytest.approx(1.0, abs=1e-6)                         # unbiased, as verl's
    assert torch.equal(info["returns"], info_w["returns"])
    assert white[1, 2] == 0 and raw[1, 2] == 0                                         # 0 off the mask


# --- the clipped value loss ---------------------------------------------------------------------------

def test_the_value_loss_by_hand():
    # token 1: V_old = 0.5, V = 1.0, R = 1.2, ε_v = 0.2: clip(V) = 0.7, (V − R)² = 0.04, (0.7 − 1.2)² = 0.25:
    #   the clipped term is the larger; ½·0.25 = 0.125, and no gradient (clip(V) does not move with V)
    # token 2: V = 0.6 is inside 0.5 ± 0.2, both terms (0.6 − 1.2)² = 0.36: ½·0.36 = 0.18, gradient V − R = −0.6
    values = torch.tensor([[1.0, 0.6, 7.0]], requires_grad=True)                     # 7.0 is padding
    old, returns, mask = torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[1.2, 1.2, 0.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    loss, info = value_loss(values, old, returns, mask, cliprange_value=0.2)
    assert loss.item() == pytest.approx((0.125 + 0.18) / 2)
    assert info["clip_fraction"] == 0.5
    (grad,) = torch.autograd.grad(loss, values)
    assert grad.flatten().tolist() == pytest.approx([0.0, -0.6 / 2, 0.0])


def test_a_wide_clip_range_is_the_plain_squared_error():
    torch.manual_seed(0)
    values, old, returns = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)
    loss, info = value_loss(values, old, returns, torch.ones(4, 3), cliprange_value=1e6)
    assert loss.item() == pytest.approx(float(0.5 * ((values - returns) ** 2).mean()))
    assert info["clip_fraction"] == 0.0


# --- against verl's own code ------------------------------------------------------------------------------

def _verl(*names):
    """verl's functions of these names from its installed core_algos.py, with the verl_F helpers they
    call, run with only torch (verl itself needs Ray to import, which the tests do not install)."""
    import ast
    import importlib.util
    import types

    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed (pip install --no-deps verl)")
    from pathlib import Path

    root = Path(spec.origin).parent
    namespace = {"torch": torch, "np": np}
    helpers = types.SimpleNamespace()
    for path, wanted, into in (
            (root / "utils" / "torch_functional.py",
             ("masked_sum", "masked_mean", "masked_var", "masked_whiten", "clip_by_value"), helpers),
            (root / "trainer" / "ppo" / "core_algos.py", names, None)):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in wanted:
                node.decorator_list = []
                code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec",
                               flags=__import__("__future__").annotations.compiler_flag, dont_inherit=True)
                exec(code, namespace)                                      # noqa: S102 (verl's own source)
                if into is not None:
                    setattr(into, node.name, namespace[node.name])
    namespace["verl_F"] = helpers
    missing = [n for n in names if n not in namespace]
    assert not missing, f"verl's core_algos.py no longer defines {missing}"
    return [namespace[n] for n in names]


def _batch(seed, N=6, T=7):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()                      # (N, T), right-padded
    rewards = torch.randint(0, 2, (N,), generator=g).float()                          # 0/1 outcome rewards
    values = torch.randn(N, T, generator=g)
    return rewards, values, mask


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.5), (1.0, 0.0)])
def test_gae_equals_verls_compute_gae_advantage_return(gamma, lam):
    (verl_gae,) = _verl("compute_gae_advantage_return")
    rewards, values, mask = _batch(0)
    theirs_adv, theirs_ret = verl_gae(outcome_token_rewards(rewards, mask), values, mask, gamma, lam)
    ours, info = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam, whiten=True)   # verl always whitens
    on = mask.bool()
    assert torch.allclose(ours[on], theirs_adv[on], atol=1e-5)
    assert torch.allclose(info["returns"][on], theirs_ret[on], atol=1e-6)


def test_gae_equals_verl_with_token_rewards_and_a_hole_in_the_mask():
    """verl skips tokens the model did not write (a tool's output in the middle): so do we."""
    (verl_gae,) = _verl("compute_gae_advantage_return")
    _, values, _ = _batch(1, N=3, T=6)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.float32)
    token_rewards = torch.randn(3, 6, generator=torch.Generator().manual_seed(2)) * mask   # e.g. a KL penalty per token
    theirs_adv, theirs_ret = verl_gae(token_rewards, values, mask, 0.95, 0.9)
    ours, info = gae_advantages(token_rewards, values, mask, gamma=0.95, lam=0.9, whiten=True)
    on = mask.bool()
    assert torch.allclose(ours[on], theirs_adv[on], atol=1e-5)
    assert torch.allclose(info["returns"][on], theirs_ret[on], atol=1e-6)


def test_the_value_loss_equals_verls_compute_value_loss():
    (verl_value_loss,) = _verl("compute_value_loss", "agg_loss")[:1]
    _, old, mask = _batch(3)
    g = torch.Generator().manual_seed(4)
    returns = torch.randn(old.shape, generator=g)
    values = (old + 0.6 * torch.randn(old.shape, generator=g)).requires_grad_(True)   # some move past ±0.5
    theirs, clipfrac = verl_value_loss(values, returns, old, mask, cliprange_value=0.5, loss_agg_mode="token-mean")
    ours, info = value_loss(values, old, returns, mask, cliprange_value=0.5)
    assert 0 < info["clip_fraction"] < 1
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-6)
    assert info["clip_fraction"] == pytest.approx(float(clipfrac), abs=1e-6)
    g_theirs = torch.autograd.grad(theirs, values, retain_graph=True)[0]
    g_ours = torch.autograd.grad(ours, values)[0]
    assert torch.allclose(g_theirs, g_ours, atol=1e-7)


# --- bad input ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, arg", [
    (dict(gamma=1.5), "gamma"), (dict(gamma=-0.1), "gamma"), (dict(lam=2.0), "lam"), (dict(lam=math.nan), "lam"),
    (dict(gamma=True), "gamma"),
])
def test_gamma_and_lambda_outside_zero_one_are_refused(kwargs, arg):
    with pytest.raises(ValueError, match=rf"^{arg}: must be a number in \[0, 1\].*Fix: pass"):
        gae_advantages(REWARDS, VALUES, MASK, **kwargs)


def test_mismatched_shapes_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r"^values: shape \(2, 2\) does not match mask shape \(2, 3\).*Fix"):
        gae_advantages(REWARDS, VALUES[:, :2], MASK)
    with pytest.raises(ValueError, match=r"^rewards: shape \(3,\) needs one reward per row.*Fix"):
        gae_advantages(torch.ones(3), VALUES, MASK)
    with pytest.raises(ValueError, match=r"^rewards: shape \(2, 2\) does not match.*Fix"):
        gae_advantages(torch.ones(2, 2), VALUES, MASK)
    with pytest.raises(ValueError, match=r"^mask: has a row with no completion token"):
        gae_advantages(REWARDS, VALUES, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"^rewards: holds NaN or infinite values.*Fix"):
        gae_advantages(torch.tensor([1.0, math.nan]), VALUES, MASK)
    with pytest.raises(ValueError, match=r"^values: holds NaN or infinite values.*Fix"):
        gae_advantages(REWARDS, VALUES * math.inf, MASK)
    with pytest.raises(ValueError, match=r"^returns: shape \(2, 2\) does not match.*Fix"):
        value_loss(VALUES, VALUES, VALUES[:, :2], MASK)
    with pytest.raises(ValueError, match=r"^cliprange_value: must be a finite number > 0.*Fix"):
        value_loss(VALUES, VALUES, VALUES, MASK, cliprange_value=0.0)


def test_explained_variance_by_hand_and_at_its_landmarks():
    """verl's critic/vf_explained_var: 1 − Var(R − V)/Var(R) over the active tokens."""
    from grpo_edu.core.gae import explained_variance

    returns = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])                  # the 9 is off the mask
    assert explained_variance(returns, returns, mask)[0] == pytest.approx(1.0)         # V = R
    assert explained_variance(torch.full_like(returns, 0.5), returns, mask)[0] == pytest.approx(0.0)   # a constant
    # V = 0.8 on the right answer's tokens, 0.4 on the wrong's: R − V = 0.2, 0.2, −0.4, −0.4, Var = 0.09; Var(R) = 0.25
    values = torch.tensor([[0.8, 0.8, 0.0], [0.4, 0.4, 0.0]])
    ev, info = explained_variance(values, returns, mask)
    assert ev == pytest.approx(1 - 0.09 / 0.25) and info["return_variance"] == pytest.approx(0.25)
    assert explained_variance(values, torch.ones(2, 3), mask)[0] is None            # nothing to explain
