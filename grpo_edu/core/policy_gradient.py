"""The policy gradient under GRPO, on a toy policy you can see whole (lessons 02 and 04).

GRPO's loss is built on one fact from reinforcement learning: to make a sampled answer o
more likely when its advantage Â is positive (and less likely when negative), minimise

    L = −Â · log π_θ(o)          ∇L = −Â · ∇ log π_θ(o)     (the log-derivative trick)

because E_{o∼π}[R(o) ∇ log π(o)] = ∇ E_{o∼π}[R(o)]: the sampled term is an unbiased estimate
of the gradient of the expected reward (REINFORCE, Williams 1992). Everything here runs on
a *toy policy*: a softmax over V logits, one logit per possible answer, so every
probability and every expectation can be computed exactly and compared with samples.

Four demonstrations, each a pure function returning ``(result, info)``:

* ``log_derivative_step``: one gradient step on −Â·log π(o); probabilities before/after.
* ``gradient_estimates``: many seeded batches of G answers; a baseline b leaves the
  gradient unbiased when b does not depend on the answer itself, and lowers its variance.
* ``advantage_distribution``: the exact spread of a right answer's Â for a given G, so
  the noise of the group's μ and σ can be read off against G.
* ``importance_weighted_mean``: answers sampled from π_θold still estimate averages under
  π_θ once each is weighted by r = π_θ/π_θold. This is why the ratio r sits in the loss.

``policy_updates`` runs a few optimizer steps of ``grpo_loss`` on a fixed batch of the
toy policy (lesson 02: what Adam does to a rescaled advantage).
"""

import math

import numpy as np
import torch

from grpo_edu.common import _checks
from grpo_edu.core.advantages import group_advantages

BASELINES = ("none", "group_mean", "leave_one_out")
"""``gradient_estimates`` baselines. "none": b = 0 (plain REINFORCE). "group_mean": b = μ of
the G rewards, the answer's own reward included (GRPO's R − μ, i.e. ``scale="none"``).
"leave_one_out": b = mean of the *other* G − 1 rewards (RLOO, Ahmadian et al. 2024)."""


def _logits(logits):
    x = torch.as_tensor(logits, dtype=torch.float64)
    if x.ndim != 1 or x.numel() < 2:
        _checks.fail("logits", f"must be a 1-D array of at least 2 logits, got shape {tuple(x.shape)}",
                     "pass one logit per possible answer, e.g. [1.0, 0.0, -1.0]")
    return x


def log_derivative_step(logits, answer, advantage, *, lr=1.0):
    """One SGD step on L = −Â·log π(answer) for a softmax policy over ``len(logits)`` answers.

    Returns ``(new_logits, info)``: ``info["probs_before"]``, ``info["probs_after"]``, the loss
    and ``info["grad"]`` = ∂L/∂logits from autograd, which equals −Â·(onehot(answer) − π).
    All arrays are float64 numpy, shape (V,).
    """
    z = _logits(logits).clone().requires_grad_(True)
    if isinstance(answer, bool) or not isinstance(answer, (int, np.integer)) or not 0 <= answer < z.numel():
        _checks.fail("answer", f"{answer} is not one of the {z.numel()} answers", f"pass 0 … {z.numel() - 1}")
    _checks.positive_float("lr", lr)

    logprobs = z.log_softmax(-1)                       # log π(a) for every answer, (V,)
    loss = -float(advantage) * logprobs[int(answer)]   # L = −Â · log π(o)
    loss.backward()
    new_z = (z - lr * z.grad).detach()                 # θ ← θ − lr · ∇L
    info = {"probs_before": logprobs.exp().detach().numpy(), "probs_after": new_z.softmax(-1).numpy(),
            "grad": z.grad.numpy().copy(), "loss": loss.item()}
    return new_z.numpy(), info


def gradient_estimates(logits, rewards, *, num_generations, num_batches=10_000, baseline="none", seed=0):
    """Many policy-gradient estimates of ∇_logits E_{a∼π}[R(a)], each from one group of G answers.

    ``rewards``: R(a) for each of the V answers. For each of ``num_batches`` batches, G answers
    are sampled from π = softmax(logits) (numpy, seeded) and the estimate is

        ĝ = (1/G) Σ_i (R_i − b_i) · ∇ log π(a_i),      ∇_logits log π(a) = onehot(a) − π

    with b_i from ``baseline`` (see :data:`BASELINES`). Returns ``(estimates, info)``:
    ``estimates`` (num_batches, V); ``info["exact"]`` the true gradient Σ_a π(a)·R(a)·(onehot(a) − π),
    ``info["mean"]``, ``info["standard_error"]`` (per component) and ``info["spread"]``, the
    root of the summed variances: how far one batch's estimate typically lies from the mean.
    """
    _checks.choice("baseline", baseline, BASELINES)
    _checks.positive_int("num_generations", num_generations, minimum=2)
    _checks.positive_int("num_batches", num_batches, minimum=2)
    probs = _logits(logits).softmax(-1).numpy()                     # π, (V,)
    R = np.asarray(rewards, dtype=np.float64)
    if R.shape != probs.shape:
        _checks.fail("rewards", f"shape {R.shape} should be ({probs.size},), one reward per answer",
                     "pass R(a) for every possible answer")
    G, V = num_generations, probs.size

    rng = np.random.default_rng(seed)
    answers = rng.choice(V, size=(num_batches, G), p=probs)         # G answers per batch, (n, G)
    r = R[answers]                                                  # R_i, (n, G)
    if baseline == "none":
        weight = r                                                  # R_i − 0
    elif baseline == "group_mean":
        weight = group_advantages(r, scale="none")                  # R_i − μ (μ includes R_i)
    else:
        weight = r - (r.sum(axis=1, keepdims=True) - r) / (G - 1)   # R_i − mean of the others
    score = np.eye(V)[answers] - probs                              # ∇ log π(a_i) = onehot − π, (n, G, V)
    estimates = (weight[..., None] * score).mean(axis=1)            # ĝ per batch, (n, V)

    exact = probs * (R - probs @ R)                                 # Σ_a π(a) R(a) (onehot(a) − π)
    std = estimates.std(axis=0, ddof=1)
    info = {"exact": exact, "mean": estimates.mean(axis=0), "standard_error": std / math.sqrt(num_batches),
            "spread": float(np.sqrt((std ** 2).sum()))}
    return estimates, info


def advantage_distribution(p, num_generations, *, eps=1e-4):
    """Exact distribution of the advantage Â of one *right* answer (0/1 reward, success rate p).

    Given that this answer is right, the other G − 1 are right independently with probability p,
    so the group holds k right answers with probability C(G−1, k−1)·p^(k−1)·(1−p)^(G−k). Each
    k gives one value of Â, computed by ``group_advantages`` on the group [1]*k + [0]*(G − k)
    (k = G is a dead group: Â = 0). Returns ``((values, probs), info)``, arrays of length G
    for k = 1 … G; ``info``: "mean", "std", "dead" (P(k = G)), "limit" = √((1 − p)/p), the
    advantage an infinitely large group would give, and "mu_std" = √(p(1 − p)/G), the
    standard deviation of the group mean μ.
    """
    G = _checks.positive_int("num_generations", num_generations, minimum=2)
    if not 0 < p < 1:
        _checks.fail("p", f"must lie strictly between 0 and 1, got {p!r}", "pass a success rate such as 0.5")
    ks = np.arange(1, G + 1)
    groups = (np.arange(G)[None, :] < ks[:, None]).astype(np.float64)        # row k−1: k ones, (G, G)
    values = group_advantages(groups, eps=eps)[:, 0]                         # Â of a right answer, (G,)
    probs = np.array([math.comb(G - 1, k - 1) * p ** (k - 1) * (1 - p) ** (G - k) for k in ks])
    mean = float(probs @ values)
    info = {"mean": mean, "std": float(np.sqrt(probs @ (values - mean) ** 2)), "dead": float(probs[-1]),
            "limit": math.sqrt((1 - p) / p), "mu_std": math.sqrt(p * (1 - p) / G)}
    return (values, probs), info


def importance_weighted_mean(values, logprobs, old_logprobs):
    """Estimate E_{π_θ}[f] from answers sampled from π_θold: the mean of r·f, r = π_θ/π_θold.

    ``values``: f(a_i); ``logprobs``/``old_logprobs``: log π_θ(a_i) and log π_θold(a_i) of the
    same sampled answers, all shape (n,). Returns ``(estimate, info)`` with ``info``:
    "plain_mean" (the unweighted mean, which estimates E_{π_θold}[f] instead), "ratio_mean"
    (≈ 1 when the estimate is trustworthy), "ratio_max" and "effective_sample_size"
    (Σr)²/Σr², the number of equally weighted samples the weighted ones are worth.
    """
    f = np.asarray(values, dtype=np.float64)
    lp, old = np.asarray(logprobs, dtype=np.float64), np.asarray(old_logprobs, dtype=np.float64)
    if not f.shape == lp.shape == old.shape or f.ndim != 1:
        _checks.fail("values", f"shapes {f.shape}, {lp.shape}, {old.shape} must be the same (n,)",
                     "pass one value and two log-probabilities per sampled answer")
    ratio = np.exp(lp - old)                                    # r_i = π_θ(a_i) / π_θold(a_i)
    estimate = float((ratio * f).mean())                        # (1/n) Σ r_i f(a_i)
    info = {"plain_mean": float(f.mean()), "ratio_mean": float(ratio.mean()), "ratio_max": float(ratio.max()),
            "effective_sample_size": float(ratio.sum() ** 2 / (ratio ** 2).sum())}
    return estimate, info


OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}
"""``policy_updates`` optimizers (Adam without weight decay, so only the gradient's scale is in play)."""


def policy_updates(logits, answers, advantages, *, optimizer="adam", lr=0.05, steps=10, beta=0.0, ref_logits=None):
    """``steps`` optimizer updates of ``grpo_loss`` on one fixed batch of the toy policy.

    ``answers`` (N,): the sampled answers; ``advantages`` (N,): their Â. Each update is on-policy
    (π_θold = the current π_θ, so r = 1 and the policy term's gradient is −Â·∇log π(o)/N); with
    ``beta`` > 0 the β·k3 term against π_ref = softmax(``ref_logits``, default: the starting
    logits) is added. Returns ``(probs, info)``: the final probabilities (V,) and
    ``info["grad_norms"]``, the gradient norm before each update.
    """
    from grpo_edu.core.losses import grpo_loss

    _checks.choice("optimizer", optimizer, tuple(OPTIMIZERS))
    _checks.positive_int("steps", steps)
    z = _logits(logits).clone().requires_grad_(True)
    ref = (_logits(logits) if ref_logits is None else _logits(ref_logits)).log_softmax(-1)     # log π_ref, (V,)
    a = torch.as_tensor(answers, dtype=torch.long)                                              # (N,)
    adv = torch.as_tensor(advantages, dtype=torch.float64)                                      # (N,)
    mask = torch.ones(a.numel(), 1, dtype=torch.float64)                                        # one token each
    opt = OPTIMIZERS[optimizer]([z], lr=lr)
    grad_norms = []
    for _ in range(steps):
        logprobs = z.log_softmax(-1)[a][:, None]                                                # (N, 1)
        loss, _ = grpo_loss(logprobs, logprobs.detach(), adv, mask,
                            ref_logprobs=ref[a][:, None] if beta > 0 else None, beta=beta)
        opt.zero_grad()
        loss.backward()
        grad_norms.append(float(z.grad.norm()))
        opt.step()
    return z.detach().softmax(-1).numpy(), {"grad_norms": grad_norms}
