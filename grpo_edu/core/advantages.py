"""Group-relative advantages: how GRPO turns G rewards per prompt into a training signal.

For one prompt, G completions o_1..o_G get rewards R_1..R_G. GRPO needs no critic: the
group itself is the baseline (DeepSeekMath, eq. 3, "outcome supervision"):

    Â_i = (R_i − μ_group) / (σ_group + eps)

Every token of completion o_i gets the same Â_i.

Precise choices, and where they come from:

* σ is the *unbiased* (Bessel, divide by G − 1) standard deviation. That is what
  ``torch.std`` gives by default and what TRL's GRPOTrainer and verl's GRPO advantage
  compute. numpy's ``np.std`` divides by G unless ``ddof=1``; lesson 02 compares the two.
* eps defaults to 1e-4 as in TRL; verl uses 1e-6. It only matters when σ is tiny.
* A group whose rewards are all equal carries no signal: its advantages are exactly 0,
  never NaN, whatever eps is (σ = 0 would otherwise give 0/eps = 0 anyway, but a
  floating-point mean can be off by 1 ulp, and 1e-17 / 1e-4 is not 0).

Shapes: rewards are (B, G): B prompts, G completions each. Accepts a numpy array, a list
of lists (numpy comes back) or a torch tensor (a tensor with the same dtype and device
comes back). The arithmetic is done once, in float64 numpy; rewards never need gradients.
"""

import numpy as np

from grpo_edu.common import _checks

SCALES = ("group", "batch", "none")
"""``scale`` options. "group": divide by each group's σ (DeepSeekMath, TRL's default
``scale_rewards="group"``). "batch": divide by σ over the whole batch, keep the per-group
mean (TRL's ``scale_rewards="batch"``, more robust when a group's σ is tiny). "none": no
division, Â_i = R_i − μ (Dr. GRPO, arXiv:2503.20783, which argues the division biases
updates toward too-easy and too-hard prompts)."""


def _as_rewards(rewards, arg="rewards", *, min_group=2):
    """Check a (B, G) reward array and return (float64 numpy copy, function back to the input kind).

    ``min_group``: the smallest G allowed; 2 for a group baseline, 1 where none is needed."""
    if _checks.is_torch(rewards):
        import torch  # only when the caller already uses torch

        device, dtype = rewards.device, rewards.dtype
        if not torch.is_floating_point(rewards):
            dtype = torch.get_default_dtype()
        array = rewards.detach().to("cpu", torch.float64).numpy()

        def back(x):
            return torch.as_tensor(x).to(device=device, dtype=dtype if x.dtype != bool else torch.bool)
    else:
        try:
            array = np.asarray(rewards, dtype=np.float64)
        except (ValueError, TypeError):
            _checks.fail(arg, "is ragged or not numeric (groups of different sizes?)",
                         "pass a (B, G) array: B prompts, each with exactly G rewards")

        def back(x):
            return x
    if array.ndim != 2:
        _checks.fail(arg, f"must have shape (B, G), got shape {array.shape}",
                     "group the rewards by prompt, e.g. rewards.reshape(B, G); "
                     "for a single prompt use [rewards]")
    if array.shape[0] < 1:
        _checks.fail(arg, "holds no group (B = 0)", "pass at least one prompt's rewards")
    if array.shape[1] < min_group:
        _checks.fail(arg, f"has G = {array.shape[1]} completion per group",
                     "sample at least 2 completions per prompt (G ≥ 2); a group of one has no baseline"
                     if min_group == 2 else f"sample at least {min_group} completion per prompt")
    if not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0].tolist()
        _checks.fail(arg, f"holds NaN or infinite values (first at index {bad})",
                     "fix the reward function so it returns a finite number for every completion")
    return array, back


def _constant_rows(array):
    """(B,) bool: groups whose rewards are all exactly equal."""
    return array.max(axis=1) == array.min(axis=1)


def group_stats(rewards, *, ddof=1):
    """Per-group mean μ and standard deviation σ of (B, G) rewards.

    ``ddof=1`` is the unbiased σ GRPO uses; ``ddof=0`` the population σ (numpy's default).
    Returns ``(mu, sigma)``, each (B,), in the input's kind.
    """
    array, back = _as_rewards(rewards)
    _checks.choice("ddof", ddof, (0, 1))
    mu = array.mean(axis=1)                 # μ_group, (B,)
    sigma = array.std(axis=1, ddof=ddof)    # σ_group, (B,)
    sigma[_constant_rows(array)] = 0.0      # exact 0 for a constant group
    return back(mu), back(sigma)


def group_advantages(rewards, *, eps=1e-4, scale="group"):
    """Â_i = (R_i − μ_group) / (σ + eps) for rewards of shape (B, G); see the module doc.

    ``scale`` picks σ: "group" (σ of each group), "batch" (σ of all B·G rewards, mean still
    per group), "none" (no division: Â_i = R_i − μ_group, Dr. GRPO). Returns (B, G).

    >>> group_advantages([[1, 0, 0, 1]]).round(4).tolist()
    [[0.8659, -0.8659, -0.8659, 0.8659]]
    """
    _checks.choice("scale", scale, SCALES)
    _checks.positive_float("eps", eps, allow_zero=True)
    array, back = _as_rewards(rewards)

    mu = array.mean(axis=1, keepdims=True)                      # μ_group, (B, 1)
    if scale == "group":
        denom = array.std(axis=1, ddof=1, keepdims=True) + eps  # σ_group + eps, (B, 1)
    elif scale == "batch":
        denom = array.std(ddof=1) + eps                         # σ_batch + eps, over all B·G
    else:
        denom = 1.0                                             # "none": Â_i = R_i − μ
    with np.errstate(divide="ignore", invalid="ignore"):
        adv = (array - mu) / denom                              # Â_i, (B, G)
    adv[_constant_rows(array)] = 0.0                            # no signal: exactly 0, never NaN
    return back(adv)


def zero_std_groups(rewards):
    """(B,) bool mask: groups whose G rewards are all equal, so every Â_i = 0.

    Such a "dead" group contributes no policy gradient (only the KL term, if β > 0).
    DAPO's dynamic sampling drops them and samples other prompts instead.
    """
    array, back = _as_rewards(rewards)
    return back(_constant_rows(array))


def rank_advantages(rewards):
    """Rank-based advantages: ranks within each group mapped to [0, 1], then centred.

    A robust alternative when reward values are badly scaled or have outliers (seed 004:
    "turn the in-group order into a 0–1 uniform reward"). Ties share their average rank,
    so a constant group gives 0. Only the order of the rewards matters, not their sizes.
    Returns (B, G) with each row summing to 0.
    """
    array, back = _as_rewards(rewards)
    B, G = array.shape
    # rank of each entry within its row; ties get the average of the ranks they span
    less = (array[:, None, :] < array[:, :, None]).sum(axis=2)     # (B, G): how many are smaller
    equal = (array[:, None, :] == array[:, :, None]).sum(axis=2)   # (B, G): how many are equal (incl. self)
    rank = less + (equal - 1) / 2.0                                 # average rank in 0..G-1, (B, G)
    u = rank / (G - 1)                                              # in [0, 1], (B, G)
    return back(u - u.mean(axis=1, keepdims=True))


def dead_group_probability(p, num_generations, *, batch_size=1):
    """P(a group is dead) = p^G + (1 − p)^G for a prompt answered correctly with prob. p.

    With a 0/1 reward, a group carries no signal when all G answers are right (p^G) or all
    are wrong ((1 − p)^G). With ``batch_size`` B > 1 it is the chance that *every* group of
    a step is dead, (p^G + (1 − p)^G)^B, assuming all B prompts share the same p (a
    simplification: real prompts differ in difficulty). Works elementwise on arrays of p.
    """
    _checks.positive_int("num_generations", num_generations, minimum=1)
    _checks.positive_int("batch_size", batch_size)
    p_arr = np.asarray(p, dtype=np.float64)
    if not ((p_arr >= 0) & (p_arr <= 1)).all():
        _checks.fail("p", f"must be a probability in [0, 1], got {p!r}", "pass a success rate between 0 and 1")
    group = p_arr ** num_generations + (1 - p_arr) ** num_generations    # P(one group dead)
    out = group ** batch_size                                            # all B groups dead
    return float(out) if out.ndim == 0 else out


# --- other baselines: RLOO and REINFORCE++ (verl's algorithm.adv_estimator) ----------------------

def rloo_advantages(rewards):
    """RLOO's leave-one-out baseline (Ahmadian et al. 2024; verl's ``adv_estimator=rloo``), (B, G):

        Â_i = R_i − (1/(G − 1)) Σ_{j≠i} R_j  =  G/(G − 1) · (R_i − μ_group)

    Each answer is compared with the *other* G − 1, so its own reward does not lower its own
    baseline; no division by σ. A constant group gives exactly 0.
    """
    array, back = _as_rewards(rewards)
    G = array.shape[1]
    others = (array.sum(axis=1, keepdims=True) - array) / (G - 1)     # mean of the other G − 1, (B, G)
    adv = array - others
    adv[_constant_rows(array)] = 0.0
    return back(adv)


def reinforce_pp_advantages(rewards, lengths=None, *, eps=1e-8):
    """REINFORCE++ with a group baseline (Hu 2025; verl's ``adv_estimator=reinforce_plus_plus_baseline``), (B, G):

        c_i = R_i − μ_group,   Â_i = (c_i − mean(c)) / sqrt(var(c) + eps)

    the group-centred rewards whitened over the whole *batch* (not per group), so a group of
    nearly equal rewards is not blown up by its tiny σ. verl whitens over tokens, so a long
    answer weighs more in mean(c) and var(c): pass ``lengths`` ((B, G) token counts) to match
    it; without them every answer weighs 1. var is unbiased over the weights' total, as verl's.
    """
    array, back = _as_rewards(rewards)
    centred = array - array.mean(axis=1, keepdims=True)               # c_i, (B, G)
    centred[_constant_rows(array)] = 0.0
    w = np.ones_like(array) if lengths is None else np.asarray(lengths, dtype=np.float64).reshape(array.shape)
    if (w <= 0).any():
        _checks.fail("lengths", "holds a count ≤ 0", "pass each answer's number of tokens (≥ 1)")
    total = w.sum()
    if total <= 1:
        _checks.fail("rewards", "hold a single token's worth of answers", "whiten over at least two")
    mean = (w * centred).sum() / total                                # token-weighted mean(c)
    var = (w * (centred - mean) ** 2).sum() / total * total / (total - 1)   # unbiased, as verl's masked_var
    return back((centred - mean) / np.sqrt(var + eps))


def reinforce_advantages(rewards):
    """REINFORCE without a baseline (Williams 1992), (B, G):  Â_i = R_i.

    The reward itself is the advantage. With a 0/1 reward a wrong answer gets Â = 0 and is never pushed
    down, and a group that is all right still pushes every answer up. Unbiased for E[R] only under a
    loss that sums each answer's tokens (or divides by a constant: ``loss_type="dr_grpo"``). Under the
    default ``loss_type="grpo"`` each answer is averaged over its own |o| tokens, and since
    E[R·(1/|o|)·∇log π(o)] = ∇E[R/|o|], the update maximises the reward per token E[R/|o|], which prefers
    short answers: on lesson 11's sums model it collapsed to bare answers (lesson 13, section 6b).
    A baseline removes the push on all-right groups without bias; whether it lowers the gradient's
    noise depends on the task: ``policy_gradient.gradient_estimates`` with ``baseline="none"`` measures
    it, and lesson 13 measured GRPO's baseline *raising* the noise-to-signal ratio on the adder.
    Not one of verl's estimators; G = 1 is allowed, since there is no group to compare with.
    """
    array, back = _as_rewards(rewards, min_group=1)
    return back(array.copy())                                         # Â_i = R_i, (B, G)


ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline", "reinforce")
"""``advantage_estimator`` options, verl's names: GRPO's group-normalised Â (:func:`group_advantages`),
RLOO's leave-one-out baseline, REINFORCE++'s batch-whitened group baseline; and "reinforce", ours
(verl has none): the reward itself, no baseline (:func:`reinforce_advantages`)."""


def estimate_advantages(rewards, *, estimator="grpo", scale="group", lengths=None):
    """Â for (B, G) rewards by ``estimator`` (:data:`ESTIMATORS`); ``scale`` applies to "grpo" only,
    ``lengths`` to "reinforce_plus_plus_baseline" only. Returns (B, G)."""
    _checks.choice("estimator", estimator, ESTIMATORS)
    if estimator == "grpo":
        return group_advantages(rewards, scale=scale)
    if estimator == "rloo":
        return rloo_advantages(rewards)
    if estimator == "reinforce":
        return reinforce_advantages(rewards)
    return reinforce_pp_advantages(rewards, lengths)
