"""DPO on a group: a right and a wrong answer to the same prompt, and the preference loss.

Direct Preference Optimization (Rafailov et al. 2023, eq. 7) learns from pairs (y_w preferred to y_l)
with no reward model and no sampling during training: it raises the policy's log-ratio to the frozen
reference on y_w against that on y_l,

    L_DPO = −log σ( β · [ (log π_θ(y_w) − log π_ref(y_w)) − (log π_θ(y_l) − log π_ref(y_l)) ] )

where log π(y) = Σ_t log π(y_t | x, y_<t) is the answer's log-probability, summed over its tokens
(not averaged), and β > 0 (TRL's ``beta``, 0.1 by default) sets how far from π_ref the policy may
go. π_ref plays the part of GRPO's KL anchor: drop it and DPO just pushes log π_θ(y_w) up and
log π_θ(y_l) down without limit.

With a verifier, the pairs come from GRPO's own samples: of a prompt's G answers, one right (the
highest reward, y_w) and one wrong (the lowest, y_l). A prompt whose G rewards are all equal gives
no pair, exactly where GRPO's group is dead (Â = 0). Pairs re-sampled from the current policy at
every step make this online (iterative) DPO; pairs sampled once, before training, offline DPO.

Names follow TRL's ``DPOTrainer``: ``beta``, ``loss_type="sigmoid"`` (the paper's loss; TRL has
others), and the reference model ``ref_model``, whose log-probs here are ``ref_chosen_logps`` and
``ref_rejected_logps``. Shapes: rewards (B, G); logprobs, mask (N, T); sequence log-probs (P,)
for P pairs.
"""

import numpy as np
import torch
import torch.nn.functional as F

from grpo_edu.common import _checks
from grpo_edu.core.advantages import _as_rewards

LOSS_TYPES = ("sigmoid",)
"""``loss_type`` options: "sigmoid", the paper's −log σ(β·Δ) (TRL's default). TRL also has "hinge", "ipo", …"""


def preference_pairs(rewards):
    """One (chosen, rejected) pair per prompt whose G rewards are not all equal, (B, G) rewards in.

    chosen y_w: the first answer with the group's highest reward; rejected y_l: the first with the
    lowest (with a 0/1 reward: the first right and the first wrong answer, in sampling order).

    Returns ``(pairs, info)``: pairs (P, 2) long tensor of flat indices i = b·G + g into the N = B·G
    completions, column 0 chosen, column 1 rejected; ``info``: ``num_pairs`` P, ``prompts`` (P,) the
    prompt b of each pair, ``pair_fraction`` P / B (the share of prompts that gave a pair).
    """
    array, _ = _as_rewards(rewards)
    B, G = array.shape
    has_pair = array.max(axis=1) > array.min(axis=1)                  # not a dead group, (B,)
    prompts = np.flatnonzero(has_pair)                                 # (P,)
    chosen = prompts * G + array[prompts].argmax(axis=1)               # first highest reward, (P,)
    rejected = prompts * G + array[prompts].argmin(axis=1)             # first lowest reward, (P,)
    pairs = torch.as_tensor(np.stack([chosen, rejected], axis=1), dtype=torch.long)   # (P, 2)
    return pairs, {"num_pairs": len(prompts), "prompts": torch.as_tensor(prompts, dtype=torch.long),
                   "pair_fraction": len(prompts) / B}


def sequence_logprobs(logprobs, mask):
    """log π(y) = Σ_t log π(y_t | x, y_<t) over each answer's tokens, (N, T) → (N,), as TRL's DPO sums them."""
    if getattr(logprobs, "ndim", None) != 2 or tuple(mask.shape) != tuple(logprobs.shape):
        _checks.fail("mask", f"shape {tuple(mask.shape)} does not match logprobs shape "
                     f"{tuple(getattr(logprobs, 'shape', ()))}", "pass (N, T) log-probs and an (N, T) 0/1 mask")
    return (logprobs * mask.to(logprobs.dtype)).sum(-1)                # (N,)


def dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, *, beta=0.1,
             loss_type="sigmoid"):
    """The DPO loss, mean over the P pairs; see the module doc. Each argument is (P,) summed log-probs.

    ``ref_chosen_logps`` and ``ref_rejected_logps`` come from the frozen reference model (TRL's
    ``ref_model``) and get no gradient.

    Returns ``(loss, info)``; ``info`` as TRL logs it: ``chosen_rewards`` and ``rejected_rewards``
    (P,) β·(log π_θ − log π_ref), the implicit rewards; ``reward_margin`` their mean difference;
    ``reward_accuracy`` the share of pairs whose chosen answer has the larger implicit reward.
    """
    _checks.positive_float("beta", beta, fix="pass a DPO temperature β > 0 (TRL's default is 0.1)")
    _checks.choice("loss_type", loss_type, LOSS_TYPES)
    shape = tuple(getattr(chosen_logps, "shape", ()))
    if len(shape) != 1 or shape[0] < 1:
        _checks.fail("chosen_logps", f"must be a (P,) tensor of at least one pair, got shape {shape}",
                     "pass each chosen answer's summed log-prob, e.g. sequence_logprobs(logprobs, mask)[pairs[:, 0]]")
    for name, x in (("rejected_logps", rejected_logps), ("ref_chosen_logps", ref_chosen_logps),
                    ("ref_rejected_logps", ref_rejected_logps)):
        if tuple(getattr(x, "shape", ())) != shape:
            _checks.fail(name, f"shape {tuple(getattr(x, 'shape', ()))} does not match chosen_logps shape {shape}",
                         "pass one summed log-prob per pair, (P,) like chosen_logps")
    for name, x in (("chosen_logps", chosen_logps), ("rejected_logps", rejected_logps),
                    ("ref_chosen_logps", ref_chosen_logps), ("ref_rejected_logps", ref_rejected_logps)):
        if not bool(torch.isfinite(x).all()):         # NaN, or −inf (an answer of probability 0): a NaN loss
            _checks.fail(name, "holds NaN or infinite values, so the loss would be NaN",
                         "fix what produced them (a diverged model, or an answer the model gives probability 0) "
                         "before computing the DPO loss")
    # log π_θ(y) − log π_ref(y), for y_w and y_l
    chosen_logratios = chosen_logps - ref_chosen_logps.detach()               # (P,)
    rejected_logratios = rejected_logps - ref_rejected_logps.detach()         # (P,)
    # L = −log σ(β · [chosen log-ratio − rejected log-ratio])
    losses = -F.logsigmoid(beta * (chosen_logratios - rejected_logratios))   # (P,)
    loss = losses.mean()
    with torch.no_grad():
        chosen_rewards, rejected_rewards = beta * chosen_logratios, beta * rejected_logratios   # (P,)
        info = {"chosen_rewards": chosen_rewards, "rejected_rewards": rejected_rewards,
                "reward_margin": float((chosen_rewards - rejected_rewards).mean()),
                "reward_accuracy": float((chosen_rewards > rejected_rewards).float().mean())}
    return loss, info


def dpo_log(seq, chosen_rewards, rejected_rewards):
    """TRL's DPO log of one batch of P pairs, from their (P, 2) summed log-probs under π_θ before the update and
    :func:`dpo_loss`'s implicit rewards β·(log π_θ − log π_ref), (P,) each: ``rewards/chosen``, ``rewards/rejected``
    (the means), ``rewards/margins``, ``rewards/accuracies``, and ``logps/chosen``, ``logps/rejected`` (mean log π_θ).
    A chosen reward below 0 means the policy now gives its chosen answers *less* probability than π_ref did:
    "likelihood displacement" (Razin et al. 2024), which the margin alone hides."""
    return {"rewards/chosen": float(chosen_rewards.mean()), "rewards/rejected": float(rejected_rewards.mean()),
            "rewards/margins": float((chosen_rewards - rejected_rewards).mean()),
            "rewards/accuracies": float((chosen_rewards > rejected_rewards).float().mean()),
            "logps/chosen": float(seq[:, 0].mean()), "logps/rejected": float(seq[:, 1].mean())}
