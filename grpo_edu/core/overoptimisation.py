"""Over-optimisation: how far a policy has moved from its start, and Gao et al.'s curves of gold reward against it.

Optimise a proxy reward (a learned reward model) and the proxy's score keeps rising, while the true
("gold") score rises, peaks and falls (Goodhart's law). Gao, Schulman and Hilton (2022, "Scaling Laws for
Reward Model Overoptimization", arXiv 2210.10760) measure both against the distance

    d = √KL(π ‖ π_init)

and find two functional forms for the gold score's gain R(d) = gold(d) − gold(0):

    best-of-n:  R_bon(d) = d (α_bon − β_bon · d)           peak at d* = α / (2β)
    RL:         R_RL(d)  = d (α_RL − β_RL · log d)         peak at d* = exp(α/β − 1)

Best-of-n (sample n answers, keep the one the proxy likes best) needs no training. Its KL from the sampling
policy is at most (Stiennon et al. 2020, appendix; Gao et al. §2 use it as if it were exact)

    KL_bon(n) ≤ log n − (n − 1) / n

an upper bound, reached only when no answer is drawn twice (Beirami et al. 2024, "Theoretical guarantees on the
best-of-n alignment policy", arXiv 2401.01879). Where outcomes repeat, or the proxy ties them, the exact KL of a
discrete π, its outcomes ordered by the proxy (F the CDF, F⁻ the CDF below y, ties broken at random), is

    P_bon(y) = F(y)ⁿ − F⁻(y)ⁿ          KL(π_bon ‖ π) = Σ_y P_bon(y) log(P_bon(y) / π(y))

(:func:`kl_best_of_n_exact`): two equally likely outcomes give 0.668 nats at n = 8 against the bound's 1.204,
and never more than log 2, whatever n.

Both forms are linear in (α, β), so least squares fits them exactly (no iterative optimiser).
Everything here is numpy/float math: arrays in, ``(result, info)`` out.
"""

import math
import sys

import numpy as np

from grpo_edu.common import _checks

FORMS = ("bon", "rl")
"""Gao's two functional forms: "bon", d(α − βd); "rl", d(α − β log d)."""


def kl_best_of_n(n):
    """The bound KL_bon(n) ≤ log n − (n − 1)/n, in nats, for n ≥ 1 (0 at n = 1): exact only when no outcome repeats
    (:func:`kl_best_of_n_exact` is the exact value). Returns ``(kl, info)``, info ``{"d": √KL}``."""
    _checks.positive_int("n", n, fix="pass the number of samples best-of-n draws, n ≥ 1")
    kl = math.log(n) - (n - 1) / n
    return kl, {"d": math.sqrt(kl)}



def kl_best_of_n_exact(scores, n, probs=None):
    """The exact KL(π_bon ‖ π) of best-of-n over a discrete π, in nats (Beirami et al. 2024, eq. 2 with ties).

    ``scores`` (K,): the proxy's score of each outcome; ``probs`` (K,): π of each (default 1/K each: the empirical
    distribution of K samples, a repeated answer passed once per draw with the same score). Outcomes with equal
    scores form one atom s whose ties best-of-n breaks at random, so within it P_bon ∝ π and only the atoms count:

        F(s) = Σ_{s' ≤ s} π(s'),   P_bon(s) = F(s)ⁿ − F⁻(s)ⁿ,   KL = Σ_s P_bon(s) log(P_bon(s) / π(s))

    Returns ``(kl, info)``; info: ``d`` (√KL), ``bound`` (log n − (n − 1)/n, which kl never exceeds), ``atoms``
    (distinct scores with π > 0), ``largest_atom`` (the largest π of one)."""
    _checks.positive_int("n", n, fix="pass the number of samples best-of-n draws, n ≥ 1")
    scores = np.asarray(scores, dtype=float).ravel()
    if scores.size == 0 or not np.all(np.isfinite(scores)):
        _checks.fail("scores", "must be a non-empty list of finite numbers", "pass the proxy's score of each outcome")
    if probs is None:
        probs = np.full(scores.size, 1.0 / scores.size)
    probs = np.asarray(probs, dtype=float).ravel()
    if probs.shape != scores.shape or not np.all(np.isfinite(probs)) or probs.min() < 0 \
            or abs(probs.sum() - 1.0) > 1e-6:
        _checks.fail("probs", f"must be {scores.size} numbers ≥ 0 that sum to 1",
                     "pass π of each outcome, or None for the empirical distribution of the samples")
    atoms, where = np.unique(scores, return_inverse=True)            # (S,) in increasing order
    p = np.bincount(where, weights=probs, minlength=atoms.size)      # π(s), (S,)
    F = np.minimum(np.cumsum(p), 1.0)                                 # F(s)
    F_below = np.concatenate([[0.0], F[:-1]])                         # F⁻(s)
    # P_bon(s) = F(s)ⁿ − F⁻(s)ⁿ: the best of n draws lands on atom s
    p_bon = F ** n - F_below ** n                                     # (S,)
    keep = (p > 0) & (p_bon > 0)
    kl = max(float(np.sum(p_bon[keep] * np.log(p_bon[keep] / p[keep]))), 0.0)   # ≥ 0 up to float rounding
    bound, _ = kl_best_of_n(n)
    return kl, {"d": math.sqrt(kl), "bound": bound, "atoms": int((p > 0).sum()), "largest_atom": float(p.max())}

def _basis(d, form):
    """The two columns whose weights are (α, −β): d and d² (bon), or d and d·log d (rl)."""
    if form == "bon":
        return np.stack([d, d * d], axis=1)                     # (K, 2)
    return np.stack([d, d * np.log(d)], axis=1)                 # (K, 2)


def gao_curve(d, alpha, beta, form):
    """R(d) for the form: d(α − βd) ("bon") or d(α − β log d) ("rl"); R(0) = 0. Returns ``(R, info)``."""
    _checks.choice("form", form, FORMS)
    d = np.asarray(d, dtype=float)
    if d.size and (not np.all(np.isfinite(d)) or d.min() < 0):
        _checks.fail("d", "must be finite and ≥ 0 (it is √KL)", "pass square roots of KL divergences")
    safe = np.where(d > 0, d, 1.0)                              # d log d → 0 as d → 0
    value = d * (alpha - beta * d) if form == "bon" else np.where(d > 0, d * (alpha - beta * np.log(safe)), 0.0)
    return value, {"form": form, "alpha": float(alpha), "beta": float(beta)}


def peak_d(alpha, beta, form):
    """The d where R(d) peaks: α/(2β) for "bon", exp(α/β − 1) for "rl"; inf when β ≤ 0 (no peak), and inf when the
    peak lies beyond any float (a nearly straight curve: β tiny against α), never an overflow.

    Returns ``(d_star, info)`` with ``info["R_peak"]`` the curve's value there."""
    _checks.choice("form", form, FORMS)
    if beta <= 0:
        return math.inf, {"R_peak": math.inf}
    # bon: dR/dd = α − 2βd = 0;  rl: dR/dd = α − β log d − β = 0
    exponent = alpha / beta - 1 if form == "rl" else 0.0
    if exponent > math.log(sys.float_info.max) - 1:             # exp would overflow: the peak is out of reach
        return math.inf, {"R_peak": math.inf}
    d_star = alpha / (2 * beta) if form == "bon" else math.exp(exponent)
    if not math.isfinite(d_star) or not math.isfinite(beta * d_star):
        return math.inf, {"R_peak": math.inf}
    value, _ = gao_curve(np.array([d_star]), alpha, beta, form)
    return d_star, {"R_peak": float(value[0])}


def fit_gao(d, R, form):
    """Least-squares (α, β) of R ≈ R_form(d), the curve through the origin. ``d`` ≥ 0 and ``R`` the gold gain.

    Returns ``((alpha, beta), info)``; info: ``d_peak`` (where the fitted curve peaks), ``R_peak``,
    ``r2`` (the share of R's variance about 0 the fit explains), ``points`` K.
    """
    _checks.choice("form", form, FORMS)
    d, R = np.asarray(d, dtype=float).ravel(), np.asarray(R, dtype=float).ravel()
    if d.shape != R.shape:
        _checks.fail("R", f"has {R.size} values for {d.size} distances", "pass one gold gain per d")
    keep = d > 0                                            # d = 0 says nothing: every form is 0 there
    if keep.sum() < 2:
        _checks.fail("d", f"has {int(keep.sum())} points with d > 0", "pass at least two distances d > 0 to fit two parameters")
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(R))) or d.min() < 0:
        _checks.fail("d", "and R must be finite, with d ≥ 0", "drop NaN points; d is a square root of a KL")
    X, y = _basis(d[keep], form), R[keep]                   # (K, 2), (K,)
    (alpha, minus_beta), *_ = np.linalg.lstsq(X, y, rcond=None)
    alpha, beta = float(alpha), float(-minus_beta)
    residual = y - X @ np.array([alpha, -beta])
    r2 = 1.0 - float(residual @ residual) / max(float(y @ y), 1e-12)
    d_star, peak = peak_d(alpha, beta, form)
    return (alpha, beta), {"d_peak": d_star, "R_peak": peak["R_peak"], "r2": r2, "points": int(keep.sum())}
