"""Rejection-sampling fine-tuning: keep the right answers, and imitate them.

The simplest way to learn from a verifier, under three names: RAFT (Dong et al. 2023, "reward
ranked fine-tuning"), expert iteration (Anthony et al. 2017; Havrilla et al. 2024 for LLM
reasoning) and STaR (Zelikman et al. 2022). Sample G answers per prompt, keep those the reward
accepts (the set K), and minimise the ordinary supervised loss on them, the negative
log-likelihood. Two normalisers are in use (``normaliser``):

* ``"tokens"`` (the default; what RAFT's and STaR's code do, as any SFT trainer does): a token mean
  over all kept tokens, so every kept token weighs the same and a long answer weighs more:

      L = −( Σ_{i∈K} Σ_t log π_θ(o_{i,t} | q, o_{<t}) ) / Σ_{i∈K} |o_i|

* ``"answer"`` (DeepSeekMath's RFT, appendix A.1.2, eq. 8): each answer averaged over its own tokens,
  then 1/G over all G answers, the rejected ones counting as 0:

      L = −(1/N) Σ_{i∈K} (1/|o_i|) Σ_t log π_θ(o_{i,t} | q, o_{<t})        (N = B·G)

  Its gradient is REINFORCE's with Â_i = R_i ∈ {0, 1} and GRPO's per-answer mean, without the KL
  term: the course's ``reinforce`` run. Since E[R·(1/|o|)·∇log π(o)] = ∇E[R/|o|], it maximises
  E[R/|o|], which prefers a short right answer to a long one (lesson 13).

It is a policy gradient in disguise: REINFORCE with Â_i = 1 for a kept answer and Â_i = 0 for
the rest, no ratio, no clip, no KL. Two differences from GRPO follow: a wrong answer is never
pushed down (its Â is 0, not negative), and a prompt whose G answers are all right still teaches
(GRPO's Â is 0 there).

When no answer of the batch is kept there is nothing to imitate. The loss is then 0 with no
gradient and ``info["skip"]`` is True: the trainer logs it and skips the optimizer step. It must
skip, not step: Adam's momentum would still move the weights on a zero gradient.

Shapes: rewards (B, G); logprobs, mask (N, T) with N = B·G; keep (B, G) or (N,).
"""

import numpy as np
import torch

from grpo_edu.common import _checks
from grpo_edu.core.advantages import _as_rewards


def select_correct(rewards, *, threshold=1.0, max_per_prompt=None):
    """Which answers to keep: reward ≥ ``threshold`` (a right answer, with a 0/1 reward).

    ``max_per_prompt`` k: keep at most the first k right answers of each prompt, in sampling order
    (RAFT keeps the best one, k = 1; expert iteration and STaR keep them all, None). G = 1 is allowed.

    Returns ``(keep, info)``: keep (B, G) bool, in the input's kind; ``info``: ``num_kept``,
    ``prompts_with_kept`` (prompts with at least one kept answer), ``kept_fraction`` (of the N
    answers), ``skip`` (True when nothing is kept: the step has nothing to learn from).
    """
    _checks.finite_float("threshold", threshold, fix="pass the smallest reward that counts as right, e.g. 1.0")
    if max_per_prompt is not None:
        _checks.positive_int("max_per_prompt", max_per_prompt,
                             fix="pass how many right answers to keep per prompt (RAFT: 1), or None for all")
    array, back = _as_rewards(rewards, min_group=1)
    keep = array >= threshold                                          # right answers, (B, G)
    if max_per_prompt is not None:
        keep &= np.cumsum(keep, axis=1) <= max_per_prompt              # the first k right ones, (B, G)
    num_kept = int(keep.sum())
    info = {"num_kept": num_kept, "prompts_with_kept": int(keep.any(axis=1).sum()),
            "kept_fraction": num_kept / keep.size, "skip": num_kept == 0}
    return back(keep), info


NORMALISERS = ("tokens", "answer")
"""``sft_loss``'s ``normaliser``: "tokens", a token mean over all kept tokens (RAFT, STaR, SFT); "answer",
each answer over its own tokens, then 1/N over all answers (DeepSeekMath's RFT, eq. 8)."""


def sft_loss(logprobs, mask, keep, *, normaliser="tokens"):
    """The negative log-likelihood of the kept answers; see the module doc.

    logprobs: (N, T) log π_θ of each completion token, with its gradient; mask: (N, T);
    keep: (N,) or (B, G) bool, from :func:`select_correct`. ``normaliser`` (:data:`NORMALISERS`): "tokens"
    divides by the kept tokens; "answer" divides each kept answer by its own length, then by N (the rows
    given, kept or not).

    Returns ``(loss, info)``; ``info``: ``num_kept``, ``num_tokens`` (kept tokens, the "tokens" denominator),
    ``skip``. With nothing kept the loss is 0, still attached to ``logprobs`` so ``backward()`` runs
    (and gives a zero gradient), and ``skip`` is True: skip the optimizer step.
    """
    if getattr(logprobs, "ndim", None) != 2:
        _checks.fail("logprobs", f"must be a (N, T) tensor, got shape {tuple(getattr(logprobs, 'shape', ()))}",
                     "pass one log-prob per completion token, completions along dim 0")
    if tuple(mask.shape) != tuple(logprobs.shape):
        _checks.fail("mask", f"shape {tuple(mask.shape)} does not match logprobs shape {tuple(logprobs.shape)}",
                     "pass one 0/1 per completion token, (N, T) like logprobs")
    _checks.choice("normaliser", normaliser, NORMALISERS)
    keep = torch.as_tensor(keep).reshape(-1)                           # (N,)
    if keep.dtype != torch.bool or keep.shape[0] != logprobs.shape[0]:
        _checks.fail("keep", f"must be {logprobs.shape[0]} booleans, one per completion, got "
                     f"{keep.dtype} of {keep.shape[0]}", "pass the mask select_correct(rewards) returns")
    kept = mask.to(logprobs.dtype) * keep.to(logprobs.dtype).unsqueeze(1)     # m_{i,t} for i ∈ K, (N, T)
    if not bool(torch.isfinite(logprobs.detach()).all()):     # NaN · 0 is NaN: even a dropped answer's would do
        _checks.fail("logprobs", "holds NaN or infinite values, so the loss would be NaN",
                     "fix what produced them (a diverged model) before computing the loss")
    num_tokens = int(kept.sum())
    if normaliser == "tokens":
        # L = −Σ_{i∈K,t} log π_θ(o_{i,t}) / Σ_{i∈K} |o_i|
        loss = -(logprobs * kept).sum() / max(num_tokens, 1)
    else:
        lengths = mask.to(logprobs.dtype).sum(1).clamp(min=1)                 # |o_i|, (N,)
        # L = −(1/N) Σ_{i∈K} (1/|o_i|) Σ_t log π_θ(o_{i,t})
        loss = -((logprobs * kept).sum(1) / lengths).sum() / logprobs.shape[0]
    return loss, {"num_kept": int(keep.sum()), "num_tokens": num_tokens, "skip": num_tokens == 0}
