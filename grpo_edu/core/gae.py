"""PPO's critic: token-level advantages by GAE(γ, λ) and the clipped value loss.

GRPO has no critic: the group's mean reward is the baseline. PPO as RLHF uses it (InstructGPT,
verl's default ``adv_estimator=gae``) learns one instead, a value head V(s_t) that predicts, at
each completion token t, the reward still to come. The advantage of token t is then how much
better things went than V expected, smoothed over the following tokens (Schulman et al. 2016,
"High-dimensional continuous control using generalized advantage estimation", eq. 16):

    δ_t = r_t + γ·V_{t+1} − V_t                 (the TD error; V after the last token is 0)
    Â_t = δ_t + γλ·Â_{t+1}  = Σ_{k≥t} (γλ)^{k−t} δ_k
    R_t = Â_t + V_t                             (the λ-return: the critic's target)

With an outcome reward, r_t is 0 on every token but the last completion token, which gets R_i.
γ = λ = 1 makes Â_t = R_i − V_t: the Monte-Carlo return minus the critic's guess. With V = 0
that is REINFORCE without a baseline (Â = R); with V = a constant b, REINFORCE with baseline b;
with V = the group's mean, GRPO's Â without σ (``scale="none"``, Dr. GRPO). λ < 1 trusts the
critic more: less variance, more bias when V is wrong.

The critic is trained on R_t with PPO's clipped value loss (verl's ``compute_value_loss``):

    L^V = ½ · max( (V − R)²,  (clip(V, V_old − ε_v, V_old + ε_v) − R)² )

the same idea as the policy's clip: one batch cannot move a value far from V_old, the critic's
prediction when the batch was sampled. Token-mean over the completion tokens.

Shapes: N completions, T completion tokens. values, old_values, mask, token rewards: (N, T);
an outcome reward: (N,). Everything is torch; rewards and returns never need gradients.
"""

import torch

from grpo_edu.common import _checks


def _check_rate(arg, value, meaning):
    if not (_checks.is_finite_number(value) and 0 <= value <= 1):
        _checks.fail(arg, f"must be a number in [0, 1], got {value!r}",
                     f"pass {meaning} between 0 and 1 (verl's default is 1.0; PPO papers use 0.95–0.99)")


def _check_shapes(mask, **tensors):
    if getattr(mask, "ndim", None) != 2:
        _checks.fail("mask", f"must be a (N, T) tensor, got shape {tuple(getattr(mask, 'shape', ()))}",
                     "pass 1 on each completion token and 0 on padding, one row per completion")
    for name, x in tensors.items():
        if tuple(x.shape) != tuple(mask.shape):
            _checks.fail(name, f"shape {tuple(x.shape)} does not match mask shape {tuple(mask.shape)}",
                         "pass one value per completion token, (N, T) like mask")


def outcome_token_rewards(rewards, mask):
    """The outcome reward R_i placed on the last completion token of each row, 0 elsewhere, (N, T).

    rewards: (N,), one per completion (a (B, G) table flattened); mask: (N, T), 1 on the answer's tokens.
    """
    mask = torch.as_tensor(mask)
    rewards = torch.as_tensor(rewards, dtype=torch.get_default_dtype() if not torch.is_floating_point(mask)
                              else mask.dtype).reshape(-1)                      # (N,)
    if getattr(mask, "ndim", None) != 2 or rewards.shape[0] != mask.shape[0]:
        _checks.fail("rewards", f"shape {tuple(rewards.shape)} needs one reward per row of mask "
                     f"{tuple(mask.shape)}", "pass (N,) rewards and an (N, T) mask, e.g. rewards.reshape(-1)")
    if not (mask != 0).any(-1).all():
        _checks.fail("mask", "has a row with no completion token", "every completion needs at least one token")
    positions = torch.arange(1, mask.shape[1] + 1)                              # 1..T, (T,)
    last = ((mask != 0) * positions).argmax(-1)                                 # the last active position, (N,)
    token_rewards = torch.zeros(mask.shape, dtype=rewards.dtype)                 # (N, T)
    token_rewards[torch.arange(mask.shape[0]), last] = rewards                   # r_t = R_i on that token
    return token_rewards


def _whiten(x, mask, eps=1e-8):
    """(x − mean) / sqrt(var + eps) over the masked entries, var unbiased (verl's ``masked_whiten``)."""
    n = mask.sum()
    mean = (x * mask).sum() / n
    var = ((x - mean) ** 2 * mask).sum() / n * n / (n - 1)
    return (x - mean) * torch.rsqrt(var + eps)


def gae_advantages(rewards, values, mask, *, gamma=1.0, lam=1.0, whiten=False):
    """Â_t by GAE(γ, λ) and the returns R_t = Â_t + V_t; see the module doc.

    rewards: (N,) an outcome reward per completion (put on its last token) or (N, T) token rewards
    (e.g. an outcome reward plus a per-token KL penalty, PPO-RLHF's form). values: (N, T) V(s_t), the
    critic's value at each completion token. mask: (N, T). ``gamma`` γ and ``lam`` λ in [0, 1]
    (verl's ``algorithm.gamma`` and ``algorithm.lam``, both 1.0 by default).

    A padded position passes Â and V through unchanged, as verl's loop does, so right padding
    (and tokens the model did not write, in the middle) neither adds a TD error nor breaks the chain.
    ``whiten=True`` standardises Â over all active tokens afterwards, as verl always does for GAE
    (the returns stay unwhitened).

    Returns ``(advantages, info)``: advantages (N, T); ``info["returns"]`` (N, T) R_t, the value
    loss's target; ``info["deltas"]`` (N, T) δ_t. All three are 0 off the mask.
    """
    _check_rate("gamma", gamma, "the discount γ")
    _check_rate("lam", lam, "the GAE λ")
    values = torch.as_tensor(values)
    _check_shapes(mask, values=values)
    if whiten and mask.sum() < 2:
        _checks.fail("whiten", "needs at least 2 completion tokens to standardise over",
                     "pass a larger batch, or whiten=False")
    mask = mask.to(values.dtype)                                                # (N, T)
    rewards = torch.as_tensor(rewards)
    if rewards.ndim == 1:
        rewards = outcome_token_rewards(rewards, mask)                          # r_t, (N, T)
    _check_shapes(mask, rewards=rewards)
    for name, x in (("rewards", rewards), ("values", values)):
        if not torch.isfinite(x).all():
            _checks.fail(name, "holds NaN or infinite values",
                         "fix what produced them (the reward function, or a diverged critic) before computing Â")
    values, rewards = values.detach(), rewards.to(values.dtype)

    T = mask.shape[1]
    next_value = torch.zeros_like(values[:, 0])                                 # V_{t+1}, (N,); 0 after the end
    next_adv = torch.zeros_like(values[:, 0])                                   # Â_{t+1}, (N,)
    advantages, deltas = torch.zeros_like(values), torch.zeros_like(values)     # (N, T)
    for t in reversed(range(T)):
        m = mask[:, t]                                                          # (N,)
        # δ_t = r_t + γ·V_{t+1} − V_t
        delta = rewards[:, t] + gamma * next_value - values[:, t]               # (N,)
        # Â_t = δ_t + γλ·Â_{t+1}
        adv = delta + gamma * lam * next_adv                                    # (N,)
        # off the mask, carry V_{t+1} and Â_{t+1} through to the token before
        next_value = m * values[:, t] + (1 - m) * next_value
        next_adv = m * adv + (1 - m) * next_adv
        advantages[:, t], deltas[:, t] = next_adv, delta * m
    returns = (advantages + values) * mask                                      # R_t = Â_t + V_t, (N, T)
    if whiten:
        advantages = _whiten(advantages, mask)                                  # verl's masked_whiten
    return advantages * mask, {"returns": returns, "deltas": deltas}


def value_loss(values, old_values, returns, mask, *, cliprange_value=0.5):
    """PPO's clipped value loss ½·max((V − R)², (clip(V, V_old ± ε_v) − R)²), token-mean over the mask.

    values: (N, T) the critic's predictions now (with their gradient); old_values: (N, T) its
    predictions when the batch was sampled; returns: (N, T) the targets R_t from
    :func:`gae_advantages`. ``cliprange_value`` ε_v > 0 is verl's ``critic.cliprange_value`` (0.5)
    and TRL's PPO ``cliprange_value`` (0.2).

    Returns ``(loss, info)``; ``info``: ``clip_fraction`` (active tokens where the clipped term is the
    larger, so the gradient through V is 0 there), ``value_mean``, ``return_mean``.
    """
    _checks.positive_float("cliprange_value", cliprange_value,
                           fix="pass the value clip range ε_v > 0 (verl: 0.5, TRL's PPO: 0.2)")
    _check_shapes(mask, values=values, old_values=old_values, returns=returns)
    mask = mask.to(values.dtype)                                                # (N, T)
    old_values, returns = old_values.detach(), returns.detach()
    # clip(V, V_old − ε_v, V_old + ε_v)
    clipped = torch.minimum(torch.maximum(values, old_values - cliprange_value), old_values + cliprange_value)   # (N, T)
    unclipped_loss = (values - returns) ** 2                                    # (V − R)², (N, T)
    clipped_loss = (clipped - returns) ** 2                                     # (clip(V) − R)², (N, T)
    per_token = 0.5 * torch.maximum(unclipped_loss, clipped_loss)               # (N, T)
    active = mask.sum().clamp(min=1)
    loss = (per_token * mask).sum() / active                                    # token-mean
    with torch.no_grad():
        info = {
            "clip_fraction": float(((clipped_loss > unclipped_loss).to(mask.dtype) * mask).sum() / active),
            "value_mean": float((values * mask).sum() / active),
            "return_mean": float((returns * mask).sum() / active),
        }
    return loss, info


def explained_variance(values, returns, mask):
    """How much of the returns' spread the critic explains: 1 − Var(R − V) / Var(R) over the mask's tokens.

    verl logs it as ``critic/vf_explained_var`` (its ``compute_data_metrics``), from the values the batch
    was scored with. 1: V predicts every return; 0: V is no better than one constant (the batch's mean
    return, a constant baseline); below 0: worse than that constant. GRPO's group mean is a baseline per
    prompt, so a critic has to beat 0 by a margin before it can match it.

    values, returns, mask: (N, T). Returns ``(ev, info)``; ``ev`` is None when the returns do not vary
    (Var(R) = 0: nothing to explain); ``info``: ``return_variance``, ``residual_variance``.
    """
    _check_shapes(mask, values=values, returns=returns)
    real = mask.bool()
    v, r = values.detach()[real].double(), returns.detach()[real].double()     # the active tokens, (K,)
    if r.numel() < 2:
        return None, {"return_variance": 0.0, "residual_variance": 0.0}
    var_r = float(r.var(unbiased=False))                                        # Var(R)
    var_res = float((r - v).var(unbiased=False))                                # Var(R − V)
    ev = None if var_r == 0 else 1.0 - var_res / var_r                          # 1 − Var(R − V) / Var(R)
    return ev, {"return_variance": var_r, "residual_variance": var_res}
