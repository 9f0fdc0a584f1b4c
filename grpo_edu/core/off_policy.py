"""Off-policy corrections: training π_θ on answers that an older or different policy μ sampled.

Three policies meet when sampling and training run apart (verl's "three-policy framework",
``docs/algo/rollout_corr_math.md``; Hilton et al., arXiv:2110.00641):

* μ = π_behav, ``behaviour_logprobs``: the policy that *sampled* the answer. Asynchronous: the trainer's
  weights of k updates ago (staleness k). Mismatch: the same weights in another precision or with top-k.
* π_prox, ``proximal_logprobs``: the trainer's weights at the start of this batch (verl's π_old, AReaL's
  proximal policy). With one update per batch it equals π_θ before the update, so r = π_θ/π_prox = 1.
* π_θ, ``logprobs``: the policy being trained (with gradient).

Each correction answers two questions, and returns them as ``(old_logprobs, weights)``, which
:func:`grpo_edu.core.losses.grpo_loss` takes as its π_θold and its ``sampler_weights``:

==================  ======================  ==============================================  =====================
correction          PPO ratio r against     weight per token (no gradient)                  source's name
==================  ======================  ==============================================  =====================
``none``            π_θ (r = 1)             1                                               —
``behaviour_clip``  μ                       1                                               TRL AsyncGRPO loss;
                                                                                            verl ``bypass_mode``
``decoupled``       π_prox                  w = π_prox/μ, 0 where w > C (filter)            AReaL
                                                                                            ``use_decoupled_loss``
``token_tis``       π_prox                  min(π_prox/μ, C)                                verl ``rollout_is=token``
``sequence_mask``   π_prox                  W_i = Π_t π_prox/μ, 0 where W_i > C             TRL ``sequence_mask``
==================  ======================  ==============================================  =====================

Every function takes (N, T) log-probs of the sampled tokens and a (N, T) mask and returns
``((old_logprobs, weights), info)``; ``weights`` is None where no weight applies. ``info`` holds
the behaviour ratio's spread (``log_ratio_std``: σ of log(π_prox/μ) over the active tokens), its
5 % and 95 % quantiles, ``kl_behaviour`` (k3 estimate of KL(μ ‖ π_prox), samples from μ),
``masked_fraction`` (active tokens whose weight is 0) and ``truncated_fraction`` (tokens whose
weight the cap lowered).
"""

import torch

from grpo_edu.common import _checks
from grpo_edu.core.kl import kl_estimate
from grpo_edu.core.losses import grpo_loss


def _check_cap(name, cap, correction, *, allow_none=False):
    """A cap C of π_prox/μ must be above 1: at C ≤ 1 even the tokens μ got exactly right (w = 1) are cut."""
    if cap is None and allow_none:
        return
    if cap is None or not _checks.is_finite_number(cap) or cap <= 1:
        _checks.fail(name, f"is {cap!r}, but {correction} caps the weight π_prox/μ at it, and at a cap ≤ 1 even the "
                     "tokens the sampler got exactly right (weight 1) would be cut or lowered",
                     "pass a cap above 1: 2.0 is verl's rollout_is_threshold, 3.0 TRL's "
                     "vllm_importance_sampling_clip_max, AReaL's behav_imp_weight_cap must also be > 1")


def _check_shapes(logprobs, proximal_logprobs, behaviour_logprobs, mask):
    shape = tuple(logprobs.shape)
    if len(shape) != 2:
        _checks.fail("logprobs", f"must be a (N, T) tensor, got shape {shape}",
                     "pass one log-prob per completion token, sequences along dim 0")
    for name, x in (("proximal_logprobs", proximal_logprobs), ("behaviour_logprobs", behaviour_logprobs),
                    ("mask", mask)):
        if tuple(x.shape) != shape:
            _checks.fail(name, f"shape {tuple(x.shape)} does not match logprobs shape {shape}",
                         "pass one value per completion token, (N, T) like logprobs")


def _checked_inputs(logprobs, proximal_logprobs, behaviour_logprobs, mask):
    """Shapes checked, and μ's log-probs made safe to use: a NaN or ±inf where the mask is 1 is refused (no sampled
    token has μ = 0 or a NaN); where it is 0 (padding, tokens after the end) any value is replaced by π_prox's, so a
    padded −inf cannot turn the loss into NaN through 0 · ∞. Returns the behaviour log-probs to use, (N, T)."""
    _check_shapes(logprobs, proximal_logprobs, behaviour_logprobs, mask)
    active = mask.bool()
    bad = active & ~torch.isfinite(behaviour_logprobs)
    if bad.any():
        _checks.fail("behaviour_logprobs", f"is NaN or ±inf at {int(bad.sum())} active token(s) (mask = 1), first at "
                     f"row, position {tuple(int(i) for i in bad.nonzero()[0])}: the sampler gave a sampled token "
                     "probability 0, or no number", "pass the sampler's log-probs of the tokens it drew (finite), "
                     "with mask 0 on padding")
    return torch.where(active, behaviour_logprobs, proximal_logprobs.detach())


def behaviour_gap(proximal_logprobs, behaviour_logprobs, mask):
    """How far the sampler μ was from the trainer's π_prox, per token (no gradient):

        w_t = π_prox(o_t) / μ(o_t) = exp(log π_prox − log μ)

    Returns ``(w, info)``: w (N, T), 1 off the mask; ``info``: ``log_ratio_std``, ``log_ratio_p05``,
    ``log_ratio_p95``, ``kl_behaviour`` (k3 of KL(μ ‖ π_prox)) over the active tokens.
    """
    mask = mask.to(proximal_logprobs.dtype)                                        # (N, T)
    log_w = ((proximal_logprobs - behaviour_logprobs) * mask).detach()              # log w, 0 off the mask
    active = log_w[mask.bool()]
    info = {"log_ratio_std": float(active.std(unbiased=False)) if active.numel() else 0.0,
            "log_ratio_p05": float(active.quantile(0.05)) if active.numel() else 0.0,
            "log_ratio_p95": float(active.quantile(0.95)) if active.numel() else 0.0,
            "kl_behaviour": float((kl_estimate(behaviour_logprobs, proximal_logprobs, "k3") * mask).sum()
                                  / mask.sum().clamp(min=1))}
    return log_w.exp(), info


def _with_stats(weights, raw, mask, info):
    """Add the masked and truncated shares of the active tokens to ``info``."""
    m = mask.bool().expand_as(weights) if weights.shape != mask.shape else mask.bool()
    n = max(int(mask.sum()), 1)
    w, r = weights.expand_as(mask)[m], raw.expand_as(mask)[m]
    info.update(masked_fraction=float((w == 0).sum()) / n,
                truncated_fraction=float(((w < r) & (w > 0)).sum()) / n,
                weight_mean=float(w.mean()) if w.numel() else 1.0)
    return info


def no_correction(logprobs, proximal_logprobs, behaviour_logprobs, mask, *, cap=None):
    """No correction: train on μ's answers as if π_θ had sampled them.

        r = π_θ / sg(π_θ) = 1,   loss_t = −Â · r   (gradient −Â ∇log π_θ, the on-policy REINFORCE direction)

    Stale answers enter with full weight and nothing limits how far a step moves on them.
    ``cap`` is accepted and ignored. Returns ``((logprobs.detach(), None), info)``.
    """
    behaviour_logprobs = _checked_inputs(logprobs, proximal_logprobs, behaviour_logprobs, mask)
    _, info = behaviour_gap(proximal_logprobs, behaviour_logprobs, mask)
    return (logprobs.detach(), None), {**info, "masked_fraction": 0.0, "truncated_fraction": 0.0,
                                       "weight_mean": 1.0}


def behaviour_clip(logprobs, proximal_logprobs, behaviour_logprobs, mask, *, cap=None):
    """PPO's clip against the behaviour policy: π_θold := μ, the sampler's own log-probs.

        r_t = π_θ(o_t) / μ(o_t),   loss_t = −min(r_t Â, clip(r_t, 1 − ε, 1 + ε) Â)

    TRL's ``AsyncGRPOTrainer`` (``compute_loss``: ``exp(log_probs − old_log_probs)`` with the rollout worker's
    log-probs) and verl's ``bypass_mode: true`` with ``loss_type: ppo_clip`` (two policies, π_old = π_rollout).
    A stale answer starts with r ≠ 1, so the clip binds on it from the first update: staleness shows up
    as clip fraction. ``cap`` is ignored. Returns ``((behaviour_logprobs, None), info)``.
    """
    behaviour_logprobs = _checked_inputs(logprobs, proximal_logprobs, behaviour_logprobs, mask)
    _, info = behaviour_gap(proximal_logprobs, behaviour_logprobs, mask)
    return (behaviour_logprobs.detach(), None), {**info, "masked_fraction": 0.0, "truncated_fraction": 0.0,
                                                 "weight_mean": 1.0}


def decoupled(logprobs, proximal_logprobs, behaviour_logprobs, mask, *, cap=None):
    """Decoupled PPO (Hilton et al. 2021, arXiv:2110.00641; AReaL ``use_decoupled_loss``; verl ``bypass_mode:
    false``): clip against the proximal policy, correct for the sampler with an importance weight.

        r_t = π_θ / π_prox,   w_t = π_prox / μ,   loss_t = −w_t · min(r_t Â, clip(r_t, 1 ± ε) Â)

    AReaL's cap C (``behav_imp_weight_cap``, later ``behave_imp_weight_cap``, now ``actor.rejection_sampling``,
    off by default): a token whose w_t > C is *filtered* (weight 0), not truncated.
    ``cap`` None keeps every token; otherwise it must be > 1. Returns ``((proximal_logprobs, w), info)``.
    """
    behaviour_logprobs = _checked_inputs(logprobs, proximal_logprobs, behaviour_logprobs, mask)
    _check_cap("cap", cap, "decoupled PPO (AReaL's behav_imp_weight_cap)", allow_none=True)
    w, info = behaviour_gap(proximal_logprobs, behaviour_logprobs, mask)           # π_prox/μ, (N, T)
    kept = w if cap is None else w.masked_fill(w > cap, 0.0)                       # AReaL filters w > C
    return (proximal_logprobs.detach(), kept), _with_stats(kept, w, mask, info)


def token_tis(logprobs, proximal_logprobs, behaviour_logprobs, mask, *, cap=2.0):
    """Token-level truncated importance sampling (verl ``rollout_is: token``, ``rollout_is_threshold`` C = 2.0;
    TRL's ``token_truncate``): the decoupled loss with each weight truncated, not filtered.

        r_t = π_θ / π_prox,   w_t = min(π_prox / μ, C),   loss_t = −w_t · min(r_t Â, clip(r_t, 1 ± ε) Â)

    The cap bounds the variance a token with tiny μ could add; C must be > 1.
    Returns ``((proximal_logprobs, w), info)``.
    """
    behaviour_logprobs = _checked_inputs(logprobs, proximal_logprobs, behaviour_logprobs, mask)
    _check_cap("cap", cap, "token-level truncated IS (verl's rollout_is_threshold)")
    w, info = behaviour_gap(proximal_logprobs, behaviour_logprobs, mask)           # (N, T)
    truncated = w.clamp(max=cap)                                                   # min(w, C): the cap on the top side
    return (proximal_logprobs.detach(), truncated), _with_stats(truncated, w, mask, info)


def sequence_mask(logprobs, proximal_logprobs, behaviour_logprobs, mask, *, cap=3.0, floor=None):
    """Sequence-level masked importance sampling, TRL's default ``vllm_importance_sampling_mode="sequence_mask"``
    with ``vllm_importance_sampling_clip_max`` C = 3.0 (``clip_min`` = ``floor``, default none):

        W_i = Π_t π_prox(o_{i,t}) / μ(o_{i,t}) = exp(Σ_t m_{i,t} (log π_prox − log μ)_{i,t}),
        weight_{i,t} = W_i if floor ≤ W_i ≤ C else 0

    One weight per answer, the product of its token ratios (so it grows with the length); an answer whose
    weight leaves [floor, C] is dropped whole. Returns ``((proximal_logprobs, W), info)``, W (N, 1).
    """
    behaviour_logprobs = _checked_inputs(logprobs, proximal_logprobs, behaviour_logprobs, mask)
    _check_cap("cap", cap, "sequence-level masking (TRL's vllm_importance_sampling_clip_max)")
    _, info = behaviour_gap(proximal_logprobs, behaviour_logprobs, mask)
    m = mask.to(proximal_logprobs.dtype)                                            # (N, T)
    log_W = ((proximal_logprobs - behaviour_logprobs) * m).detach().sum(-1, keepdim=True)   # Σ_t log w, (N, 1)
    W = log_W.exp()                                                                  # (N, 1)
    outside = (W > cap) if floor is None else (W > cap) | (W < floor)
    kept = W.masked_fill(outside, 0.0)                                               # (N, 1)
    info = _with_stats(kept.expand_as(m), W.expand_as(m), m, info)
    info["sequences_masked"] = float(outside.float().mean())
    return (proximal_logprobs.detach(), kept), info


CORRECTIONS = {"none": no_correction, "behaviour_clip": behaviour_clip, "decoupled": decoupled,
               "token_tis": token_tis, "sequence_mask": sequence_mask}
"""name → correction; the config's ``off_policy_correction`` picks one."""

DEFAULT_CAPS = {"none": None, "behaviour_clip": None, "decoupled": None, "token_tis": 2.0, "sequence_mask": 3.0}
"""Each correction's cap in its source: verl's rollout_is_threshold 2.0, TRL's clip_max 3.0; AReaL's is off by
default."""


def correct(name, logprobs, proximal_logprobs, behaviour_logprobs, mask, *, cap=None):
    """Apply the correction called ``name`` (:data:`CORRECTIONS`); ``cap`` None takes its source's default.
    Returns ``((old_logprobs, weights), info)``."""
    _checks.choice("off_policy_correction", name, tuple(CORRECTIONS))
    cap = DEFAULT_CAPS[name] if cap is None else cap
    return CORRECTIONS[name](logprobs, proximal_logprobs, behaviour_logprobs, mask, cap=cap)


def off_policy_loss(name, logprobs, proximal_logprobs, behaviour_logprobs, advantages, mask, *, cap=None,
                    **loss_settings):
    """The GRPO loss on answers μ sampled, corrected by ``name``: :func:`correct`, then
    :func:`grpo_edu.core.losses.grpo_loss` with π_θold and the weights it returns.
    ``loss_settings``: grpo_loss's (``epsilon``, ``loss_type``, …). Returns ``(loss, info)``, both infos merged."""
    (old, weights), info = correct(name, logprobs, proximal_logprobs, behaviour_logprobs, mask, cap=cap)
    if weights is not None:
        weights = weights.expand_as(logprobs)                                        # (N, T)
    loss, loss_info = grpo_loss(logprobs, old, advantages, mask, sampler_weights=weights, **loss_settings)
    return loss, {**loss_info, **info}
