"""The GRPO objective: a PPO-clipped surrogate with group advantages and a KL penalty.

DeepSeekMath (arXiv:2402.03300, eq. 3) maximises, per token t of completion o_i,

    min( r_{i,t} · Â_i ,  clip(r_{i,t}, 1 − ε, 1 + ε) · Â_i )  −  β · D_KL[π_θ ‖ π_ref]

    r_{i,t} = π_θ(o_{i,t} | q, o_{i,<t}) / π_θold(o_{i,t} | q, o_{i,<t})

We minimise the negative. The clip stops one batch from pushing the policy too far: once
the ratio leaves [1 − ε, 1 + ε] *in the direction the advantage wants*, the gradient is 0.
ε_high > ε gives the asymmetric "clip-higher" of DAPO (arXiv:2503.14476), which lets rare
good tokens grow faster. The KL term uses the k3 estimator (see ``grpo_edu.core.kl``).

How the per-token losses become one number is ``loss_type``; names and formulas follow
TRL's GRPOTrainer. With L_{i,t} the per-token loss, m_{i,t} the completion mask, N
sequences and T completion positions:

* ``"grpo"``: (1/N) Σ_i (1/|o_i|) Σ_t L_{i,t}. The paper's form. Each sequence weighs the
  same, so a token of a long answer counts less than a token of a short one: long wrong
  answers are penalised too little.
* ``"bnpo"``: Σ L / Σ m over this (micro-)batch. Every token weighs the same.
* ``"dapo"``: Σ L / (active tokens in the *whole* step). Identical to "bnpo" when the step
  is one micro-batch; under gradient accumulation pass ``num_active_tokens`` (the step's
  total), as TRL does with its global token count.
* ``"dr_grpo"``: Σ L / (N · max_completion_length). A constant normaliser, so no length
  bias at all (Dr. GRPO, arXiv:2503.20783).

Shapes: N sequences, T completion tokens. logprobs, old_logprobs, ref_logprobs, mask:
(N, T); advantages: (N,), one Â_i per answer (GRPO), or (N, T), one Â_{i,t} per token (PPO with a
critic, whose GAE gives every token its own advantage: ``grpo_edu.core.gae``).

Two additions beyond the paper. ``entropy`` with ``entropy_coef`` = c > 0 subtracts c times the
mean per-token entropy, an entropy bonus, to slow the entropy collapse lesson 11 measures. As in
TRL's ``entropy_coef``, the mean is over tokens whatever the ``loss_type`` (verl's ``entropy_coeff``
aggregates it like the loss instead). :func:`token_push` reads the length bias of each
``loss_type`` off the gradient itself.
"""

import torch

from grpo_edu.common import _checks
from grpo_edu.core.kl import kl_estimate


def _grpo(per_token, mask, **_):
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)    # mean over |o_i|, (N,)
    return per_seq.mean()


def _bnpo(per_token, mask, **_):
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


def _dapo(per_token, mask, num_active_tokens=None, **_):
    denom = mask.sum() if num_active_tokens is None else num_active_tokens
    return (per_token * mask).sum() / max(float(denom), 1.0)


def _dr_grpo(per_token, mask, max_completion_length=None, **_):
    N, T = mask.shape
    return (per_token * mask).sum() / (N * (max_completion_length or T))


AGGREGATIONS = {"grpo": _grpo, "bnpo": _bnpo, "dapo": _dapo, "dr_grpo": _dr_grpo}
"""How per-token losses become one number: function(per_token_loss, mask, ...) → scalar, one small function each."""


# --- the policy term per token: −(what the update maximises), given the ratio r and Â -----------------

def _clipped(ratio, adv, logprobs, *, eps_low, eps_high, **_):
    # PPO / GRPO: −min(r·Â, clip(r, 1−ε, 1+ε_high)·Â)
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    return -(ratio * adv).minimum(clipped * adv)


def _cispo(ratio, adv, logprobs, *, eps_high, **_):
    # CISPO (MiniMax-M1, arXiv:2506.13585): −sg(min(r, ε_max))·Â·log π_θ. The weight is clipped, never the
    # gradient: every token keeps a gradient, however far its ratio has moved (TRL's ε_high is ε_max itself)
    weight = ratio.clamp(max=eps_high).detach()
    return -weight * adv * logprobs


def _sapo(ratio, adv, logprobs, *, tau_pos, tau_neg, **_):
    # SAPO (arXiv:2511.20347): a soft gate instead of the clip, −σ(τ(r − 1))·(4/τ)·Â, τ by the sign of Â
    tau = torch.where(adv > 0, torch.as_tensor(tau_pos, dtype=ratio.dtype), torch.as_tensor(tau_neg, dtype=ratio.dtype))
    return -torch.sigmoid(tau * (ratio - 1)) * (4 / tau) * adv


LOSS_TYPES = {**{name: (_clipped, aggregate) for name, aggregate in AGGREGATIONS.items()},
              "cispo": (_cispo, _dapo), "sapo": (_sapo, _grpo)}
"""loss_type → (the per-token policy term, its aggregation). CISPO averages over the step's tokens as DAPO
does, SAPO over each answer's tokens as GRPO does (TRL and verl agree on both). At r = 1 (one update per
batch, num_iterations = 1) the three terms have the same gradient, −Â·∇log π: the variants differ only once the policy
has moved away from the sampler."""

IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
"""``"token"``: one ratio per token (GRPO). ``"sequence"``: GSPO (arXiv:2507.18071), one ratio per answer,
exp of the mean of its tokens' log-ratios, clipped as a whole (TRL's ``importance_sampling_level``)."""

TOKEN_COUNT_TYPES = ("dapo", "cispo")
"""Loss types normalised by the step's token count (``num_active_tokens`` under gradient accumulation)."""


def _check_inputs(logprobs, old_logprobs, advantages, mask, ref_logprobs, beta, epsilon,
                  epsilon_high, loss_type, max_completion_length, num_active_tokens, entropy=None, entropy_coef=0.0,
                  importance_sampling_level="token", sapo_temperatures=(1.0, 1.05)):
    _checks.choice("loss_type", loss_type, tuple(LOSS_TYPES))
    _checks.choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    check_cispo_cap(loss_type, epsilon_high)
    for name, tau in zip(("sapo_temperature_pos", "sapo_temperature_neg"), sapo_temperatures):
        _checks.positive_float(name, tau, fix="pass a gate temperature > 0 (TRL: 1.0 for Â > 0, 1.05 for Â ≤ 0)")
    _checks.positive_float("entropy_coef", entropy_coef, allow_zero=True,
                           fix="pass a bonus weight ≥ 0 (0 turns it off, as in TRL)")
    if entropy_coef > 0 and entropy is None:
        _checks.fail("entropy", f"is None but entropy_coef = {entropy_coef} asks for an entropy bonus",
                     "pass the per-token entropy with its gradient (completion_logprobs(..., entropy_grad=True))")
    _checks.positive_float("epsilon", epsilon, fix="pass a clip range > 0, usually 0.2")
    if epsilon_high is not None:
        _checks.positive_float("epsilon_high", epsilon_high,
                               fix="pass a clip range > 0 (DAPO uses 0.28), or None to use epsilon")
    _checks.positive_float("beta", beta, allow_zero=True, fix="pass a KL coefficient ≥ 0 (0 turns KL off)")
    if getattr(logprobs, "ndim", None) != 2:
        _checks.fail("logprobs", f"must be a (N, T) tensor, got shape {tuple(getattr(logprobs, 'shape', ()))}",
                     "pass one log-prob per completion token, sequences along dim 0")
    shape = tuple(logprobs.shape)
    for name, x in (("old_logprobs", old_logprobs), ("mask", mask), ("ref_logprobs", ref_logprobs),
                    ("entropy", entropy)):
        if x is not None and tuple(x.shape) != shape:
            _checks.fail(name, f"shape {tuple(x.shape)} does not match logprobs shape {shape}",
                         "pass one value per completion token, (N, T) like logprobs")
    if tuple(advantages.shape) not in (shape[:1], shape):
        _checks.fail("advantages", f"shape {tuple(advantages.shape)} should be (N,) = ({shape[0]},), or (N, T) = "
                     f"{shape} for one advantage per token",
                     "pass one advantage per sequence, e.g. group_advantages(rewards).reshape(-1)")
    if beta > 0 and ref_logprobs is None:
        _checks.fail("ref_logprobs", f"is None but beta = {beta} asks for a KL term",
                     "pass the reference model's log-probs, or set beta=0")
    if max_completion_length is not None:
        _checks.positive_int("max_completion_length", max_completion_length, minimum=shape[1],
                             fix=f"pass the generation limit, at least the {shape[1]} positions given")
    if num_active_tokens is not None and loss_type not in TOKEN_COUNT_TYPES:
        _checks.fail("num_active_tokens", f"only applies to loss_type 'dapo' or 'cispo', not {loss_type!r}",
                     "drop it, or use loss_type='dapo'")


def check_cispo_cap(loss_type, epsilon_high):
    """CISPO caps the weight r at ε_high itself (ε_max, ScaleRL's 5.0), not at 1 + ε: it needs one ≥ 1."""
    if loss_type == "cispo" and (epsilon_high is None or epsilon_high < 1):
        _checks.fail("epsilon_high", f"is {epsilon_high!r}, but loss_type='cispo' caps the weight r at epsilon_high "
                     "itself, so below 1 it would shrink even on-policy tokens (r = 1)",
                     "pass epsilon_high=5.0 with loss_type='cispo' (ScaleRL's ε_max, TRL's advice)")


def sequence_ratio(logprobs, old_logprobs, mask):
    """GSPO's sequence-level ratio (arXiv:2507.18071, eq. 7), one per answer, (N,):

        s_i = (π_θ(o_i) / π_θold(o_i))^(1/|o_i|) = exp( (1/|o_i|) Σ_t (log π_θ − log π_θold)_{i,t} )

    the geometric mean of the answer's token ratios, so its size does not grow with the length.
    Returns ``(s, info)``; ``info["log_ratio"]``: (N,) the mean log-ratio before the exp.
    """
    mask = mask.to(logprobs.dtype)                                                   # (N, T)
    mean_log = ((logprobs - old_logprobs) * mask).sum(-1) / mask.sum(-1).clamp(min=1)   # (N,)
    return mean_log.exp(), {"log_ratio": mean_log}


def grpo_loss(logprobs, old_logprobs, advantages, mask, *, ref_logprobs=None, beta=0.0,
              epsilon=0.2, epsilon_high=None, loss_type="grpo", max_completion_length=None,
              num_active_tokens=None, entropy=None, entropy_coef=0.0, importance_sampling_level="token",
              sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, sampler_weights=None):
    """The clipped GRPO loss (to minimise) and an info dict; see the module doc.

    Per token: L = −min(r·Â, clip(r, 1 − ε, 1 + ε_high)·Â) + β·k3, r = exp(logprobs − old_logprobs).
    ``loss_type`` "cispo" and "sapo" swap the policy term (:data:`LOSS_TYPES`);
    ``importance_sampling_level="sequence"`` makes r one number per answer (GSPO).
    ``sampler_weights`` ((N, T), no gradient): truncated importance-sampling weights
    min(π_θold / π_sampler, C) for a sampler that is not the trainer (lower precision, vLLM); they
    multiply the policy term, not the KL, as TRL's ``vllm_importance_sampling_correction`` does.
    ``old_logprobs`` and ``ref_logprobs`` are treated as constants (no gradient flows into them).
    With ``entropy_coef`` = c > 0 the loss also gets −c·H̄, H̄ the mean of ``entropy`` ((N, T), with its
    gradient) over the active tokens, or Σ H / ``num_active_tokens`` when that is given (a step split
    into micro-batches then adds up to the step's mean).

    ``info`` (python floats): ``clip_fraction`` (active tokens where the clip binds:
    r < 1 − ε with Â < 0, or r > 1 + ε_high with Â > 0), ``clip_low_fraction``,
    ``clip_high_fraction``, ``ratio_mean``, ``kl_mean`` (k3 over active tokens; 0 without
    ``ref_logprobs``), ``policy_loss``, ``kl_loss`` (β-weighted, same aggregation),
    ``num_active_tokens``.
    """
    _check_inputs(logprobs, old_logprobs, advantages, mask, ref_logprobs, beta, epsilon,
                  epsilon_high, loss_type, max_completion_length, num_active_tokens, entropy, entropy_coef,
                  importance_sampling_level, (sapo_temperature_pos, sapo_temperature_neg))
    eps_low = epsilon
    eps_high = epsilon if epsilon_high is None else epsilon_high
    mask = mask.to(logprobs.dtype)                                   # (N, T)
    adv = advantages.to(logprobs.dtype)
    if adv.ndim == 1:
        adv = adv.unsqueeze(1)                                       # Â_i broadcast over tokens, (N, 1)

    # r_{i,t} = π_θ / π_θold, computed in log space
    if importance_sampling_level == "sequence":                      # GSPO: one ratio s_i per answer, (N, 1)
        ratio = sequence_ratio(logprobs, old_logprobs.detach(), mask)[0].unsqueeze(1)
    else:
        ratio = (logprobs - old_logprobs.detach()).exp()             # (N, T)
    term, aggregate = LOSS_TYPES[loss_type]
    policy_term = term(ratio, adv, logprobs, eps_low=eps_low, eps_high=eps_high,
                                          tau_pos=sapo_temperature_pos, tau_neg=sapo_temperature_neg)
    policy_term = policy_term.expand_as(logprobs)                    # (N, T)
    if sampler_weights is not None:                                  # truncated IS: the sampler was not π_θold
        policy_term = policy_term * sampler_weights.detach()

    kl = None
    if ref_logprobs is not None:
        kl = kl_estimate(logprobs, ref_logprobs.detach(), kind="k3")  # D_KL per token, (N, T)
    per_token = policy_term + beta * kl if beta > 0 else policy_term

    opts = {"max_completion_length": max_completion_length, "num_active_tokens": num_active_tokens}
    loss = aggregate(per_token, mask, **opts)
    if entropy_coef > 0:                                             # − c·H̄: the entropy bonus (TRL's entropy_coef)
        loss = loss - entropy_coef * _dapo(entropy, mask, num_active_tokens)

    with torch.no_grad():
        active = mask.sum().clamp(min=1)
        ratio = ratio.expand_as(logprobs)                            # (N, T) for the statistics
        if loss_type == "cispo":                                     # the weight was capped at ε_max
            low, high = torch.zeros_like(mask), (ratio > eps_high).to(mask.dtype) * mask
        elif loss_type == "sapo":                                    # a soft gate: nothing is cut off
            low = high = torch.zeros_like(mask)
        else:
            low = ((ratio < 1 - eps_low) & (adv < 0)).to(mask.dtype) * mask
            high = ((ratio > 1 + eps_high) & (adv > 0)).to(mask.dtype) * mask
        info = {
            "clip_fraction": float((low + high).sum() / active),
            "clip_low_fraction": float(low.sum() / active),
            "clip_high_fraction": float(high.sum() / active),
            "ratio_mean": float((ratio * mask).sum() / active),
            "kl_mean": float((kl * mask).sum() / active) if kl is not None else 0.0,
            "policy_loss": float(aggregate(policy_term, mask, **opts)),
            "kl_loss": float(aggregate(beta * kl, mask, **opts)) if kl is not None and beta > 0 else 0.0,
            "num_active_tokens": int(mask.sum()),
        }
    return loss, info


def token_push(advantages, mask, *, loss_type="grpo", max_completion_length=None, ratio=None, **variant):
    """How hard one step pushes each token's log-prob, under ``loss_type``.

    The push is −∂loss/∂log π_θ(o_{i,t}) at β = 0: positive raises the token, negative lowers it.
    It is read off the gradient of :func:`grpo_loss` itself, so it is exactly what the trainer's
    backward pass sees. On-policy (``ratio`` None: r = 1) it is Â_i / (N·|o_i|) for ``"grpo"``:
    a token of a long answer is pushed less than a token of a short one with the same Â,
    which is the length bias Dr. GRPO removes (Â_i / (N·T_max) for ``"dr_grpo"``, and
    Â_i / (tokens in the step) for ``"dapo"``).

    ``ratio``: (N, T) token ratios r = π_θ / π_θold after the policy has moved (lesson 12): the push
    then shows where each variant's clip, cap or gate acts. ``variant``: the other settings of
    :func:`grpo_loss` (``epsilon``, ``epsilon_high``, ``importance_sampling_level``, ``sapo_temperature_*``).

    advantages: (N,); mask: (N, T). Returns ``(push, info)``: push (N, T), 0 off the mask;
    ``info["per_sequence"]``: (N,) each completion's total push, Σ_t push_{i,t}.
    """
    mask = torch.as_tensor(mask, dtype=torch.float64)                             # (N, T)
    advantages = torch.as_tensor(advantages, dtype=torch.float64)                 # (N,)
    old = torch.zeros_like(mask)                                                  # log π_θold
    start = old if ratio is None else torch.as_tensor(ratio, dtype=torch.float64).log()   # log π_θ = log r
    logprobs = start.clone().requires_grad_(True)
    loss, _ = grpo_loss(logprobs, old, advantages, mask, loss_type=loss_type,
                        max_completion_length=max_completion_length, **variant)
    (grad,) = torch.autograd.grad(loss, logprobs)                                 # ∂loss/∂log π, (N, T)
    push = -grad * mask                                                           # (N, T)
    return push, {"per_sequence": push.sum(-1)}


def reinforce_loss(logprobs, advantages, mask, *, loss_type="dapo", max_completion_length=None):
    """The minimal form, as nanochat's RL script writes it: −Â_i · log π_θ(o_{i,t}) per token,
    aggregated by ``loss_type`` (nanochat divides by the step's tokens, "dapo"). No ratio, no clip,
    no KL: REINFORCE with the group's mean as baseline.

    With one update per batch (num_iterations = 1) and β = 0 it has exactly the gradient of :func:`grpo_loss`:
    at r = 1 the clip never binds and ∇r = ∇log π. Its *value* differs (it is not 0 on-policy).
    Returns ``(loss, info)`` with ``info["num_active_tokens"]``.
    """
    _checks.choice("loss_type", loss_type, tuple(AGGREGATIONS))
    mask = mask.to(logprobs.dtype)                                            # (N, T)
    per_token = -advantages.to(logprobs.dtype).unsqueeze(1) * logprobs        # −Â_i·log π, (N, T)
    loss = AGGREGATIONS[loss_type](per_token, mask, max_completion_length=max_completion_length)
    return loss, {"num_active_tokens": int(mask.sum())}
