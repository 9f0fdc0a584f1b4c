"""Process supervision: GRPO's advantages from a reward for every step (DeepSeekMath §4.1.3).

Outcome supervision (:mod:`~grpo_edu.core.advantages`) gives one reward per completion and the
same Â to all its tokens. With a process reward, each of a completion's steps has its own
reward, and DeepSeekMath's GRPO+PS turns them into a per-token advantage in two moves:

1. normalise every step reward in the group: for G completions o_1..o_G, with K_i steps each,
   R = {r_i^index(j)} holds all their step rewards, and

       r̃_i^index(j) = (r_i^index(j) − mean(R)) / std(R)

2. a token's advantage is the sum of the normalised rewards of the steps that end at or after it:

       Â_{i,t} = Σ_{index(j) ≥ t} r̃_i^index(j)

   where index(j) is the token index of step j's last token. A token before a wrong step (a
   negative r̃) carries that step's blame, and the tokens of the steps after it do not.

``form="min"`` replaces the sum in (2) by the minimum over the same steps, PURE's "min-form"
credit assignment (Cheng et al. 2025, arXiv:2504.15275): a token is worth the worst step still
ahead of it. Summing rewards that a learned PRM hands out invites the policy to farm steps; PURE
found sum-form RL against a PRM collapsing from the start and min-form not. (PURE takes the
minimum of the raw step rewards before its own baseline; here the minimum is taken after
DeepSeekMath's normalisation, so that both forms share step 1 and differ only in step 2.)

Precise choices: std is the unbiased one (ddof = 1), as everywhere in the course; eps = 1e-4 is
added to it, as in :func:`~grpo_edu.core.advantages.group_advantages`; a group whose step rewards
are all equal gets exactly 0; tokens after the last step's end (padding) get 0. One group at a
time: step rewards and step ends are ragged lists (completions have different step counts).
"""

from __future__ import annotations

import numpy as np

from grpo_edu.common import _checks

FORMS = ("sum", "min")
"""How a token's advantage gathers the normalised rewards of the steps ahead: DeepSeekMath's sum, PURE's min."""


def _check_group(step_rewards, step_ends, lengths):
    """Validate one group's ragged step rewards and step ends against the completions' lengths."""
    if not isinstance(step_rewards, (list, tuple)) or len(step_rewards) < 2:
        _checks.fail("step_rewards", "must hold one list of step rewards per completion, for at least 2 completions",
                     "pass [[r_1^1, r_1^2, …], [r_2^1, …], …] for one prompt's G ≥ 2 completions")
    if not (len(step_ends) == len(lengths) == len(step_rewards)):
        _checks.fail("step_ends", f"has {len(step_ends)} completions and lengths {len(lengths)}, "
                     f"for {len(step_rewards)} in step_rewards", "pass one entry per completion in all three")
    for i, (rewards, ends, length) in enumerate(zip(step_rewards, step_ends, lengths)):
        _checks.positive_int(f"lengths[{i}]", length, minimum=0)
        if len(rewards) != len(ends):
            _checks.fail(f"step_ends[{i}]", f"has {len(ends)} step ends for {len(rewards)} step rewards",
                         "give each step its reward and the token index of its last token")
        if any(not _checks.is_finite_number(r) for r in rewards):
            _checks.fail(f"step_rewards[{i}]", f"holds a value that is not a finite number: {list(rewards)!r}",
                         "fix the process reward so every step gets a finite number")
        if list(ends) != sorted(set(ends)) or any(not (0 <= e < length) for e in ends):
            _checks.fail(f"step_ends[{i}]", f"must be increasing token indices inside the completion "
                         f"(0 … {length - 1}), got {list(ends)!r}",
                         "pass the index of each step's last token, in order")


def process_advantages(step_rewards, step_ends, lengths, *, eps: float = 1e-4, form: str = "sum"):
    """Per-token advantages of one group from its step rewards (module doc, DeepSeekMath §4.1.3).

    ``step_rewards[i][j]``: r_i^index(j), the reward of completion i's step j; ``step_ends[i][j]``:
    index(j), the token index of that step's last token; ``lengths[i]``: completion i's token count.
    Returns ``(advantages, info)``: advantages (G, T) float64 with T = max(lengths), 0 past each
    completion's last step; info holds ``normalised`` (the r̃ per completion, ragged), ``mean`` and ``std``.

    >>> adv, info = process_advantages([[1, 0], [1, 1]], [[1, 3], [1, 3]], [4, 4])
    >>> adv.round(3).tolist()
    [[-1.0, -1.0, -1.5, -1.5], [1.0, 1.0, 0.5, 0.5]]
    """
    _checks.choice("form", form, FORMS)
    _checks.positive_float("eps", eps, allow_zero=True)
    _check_group(step_rewards, step_ends, lengths)
    flat = np.array([r for rewards in step_rewards for r in rewards], dtype=np.float64)   # R, all steps
    if flat.size == 0:
        _checks.fail("step_rewards", "holds no step at all", "give every completion at least one scored step")
    mean = flat.mean()
    std = flat.std(ddof=1) if flat.size > 1 else 0.0
    constant = flat.max() == flat.min()
    T = max(lengths)
    advantages = np.zeros((len(lengths), T))                                              # (G, T)
    normalised = []
    for i, (rewards, ends) in enumerate(zip(step_rewards, step_ends)):
        # r̃_i^index(j) = (r_i^index(j) − mean(R)) / (std(R) + eps); exactly 0 when R is constant
        r_tilde = np.zeros(len(rewards)) if constant else (np.asarray(rewards, float) - mean) / (std + eps)
        normalised.append(r_tilde)
        for t in range(ends[-1] + 1 if len(ends) else 0):
            ahead = r_tilde[np.asarray(ends) >= t]                  # the steps with index(j) ≥ t
            # Â_{i,t} = Σ_{index(j) ≥ t} r̃_i^index(j)  (sum form); min over the same steps (min form)
            advantages[i, t] = ahead.sum() if form == "sum" else ahead.min()
    return advantages, {"normalised": normalised, "mean": float(mean), "std": float(std)}
