"""Training a reward model on preference pairs: minibatches of pairs, the Bradley–Terry loss, AdamW.

Each step scores a minibatch of P pairs in one forward pass, chosen texts first then rejected (TRL's
``DataCollatorForPreference`` layout: the batch's first half chosen, second half rejected), and takes
``core.preference.bradley_terry_loss`` of the two halves, with TRL's ``margin`` column and
``center_rewards_coefficient``. It logs TRL's names: ``loss``, ``accuracy``, ``margin``.
TRL's defaults that matter here: ``learning_rate=1e-4`` (ours is larger: a 1M-parameter model), dropout
off (the bundled models have none), whole texts never truncated.
"""

import random

import torch

from grpo_edu.common import _checks
from grpo_edu.core.preference import bradley_terry_loss
from grpo_edu.training.reward_models.preference_data import check_pairs
from grpo_edu.training.reward_models.reward_model import (check_reward_model, check_tokenizer_matches, score_ids,
                                                         text_ids)
from grpo_edu.training.trainers.config import LIMITS, _in_range


def pair_rewards(model, tokenizer, pairs):
    """(r_c, r_r), (P,) each, in one forward pass over the 2P texts (chosen first, as TRL batches them)."""
    prompts = [p["prompt"] for p in pairs]
    ids = (text_ids(tokenizer, prompts, [p["chosen"] for p in pairs])
           + text_ids(tokenizer, prompts, [p["rejected"] for p in pairs]))
    return torch.chunk(score_ids(model, ids), 2)                    # (2P,) → (P,), (P,)


def pair_loss(model, tokenizer, pairs, *, center_rewards_coefficient=None):
    """The BT loss on ``pairs`` (with each pair's ``margin`` when the pairs carry one: all do, or none,
    :func:`check_pairs`); ``(loss, info)``."""
    pairs = check_pairs(pairs)
    rewards_chosen, rewards_rejected = pair_rewards(model, tokenizer, pairs)
    margin = None
    if "margin" in pairs[0]:
        margin = torch.tensor([float(p["margin"]) for p in pairs], device=rewards_chosen.device)   # (P,)
    return bradley_terry_loss(rewards_chosen, rewards_rejected, margin=margin,
                              center_rewards_coefficient=center_rewards_coefficient)


def train_reward_model(model, tokenizer, pairs, *, epochs=4, batch_size=32, learning_rate=1e-3,
                       center_rewards_coefficient=None, seed=0):
    """Fit ``model`` (a one-label reward model) to ``pairs`` in place; returns ``(model, history)``.

    ``history``: one dict per step, ``{"step", "loss", "accuracy", "margin"}`` (TRL's names)."""
    check_reward_model(model)
    check_tokenizer_matches(model, tokenizer)
    pairs = check_pairs(pairs)
    _checks.positive_int("epochs", epochs)
    _checks.positive_int("batch_size", batch_size)
    _checks.positive_float("learning_rate", learning_rate)
    _in_range("learning_rate", learning_rate, *LIMITS["learning_rate"])   # the policy's bound: 5.0 diverges
    order = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    model.train()
    history = []
    for _ in range(epochs):
        shuffled = list(pairs)
        order.shuffle(shuffled)
        for start in range(0, len(shuffled), batch_size):
            loss, info = pair_loss(model, tokenizer, shuffled[start:start + batch_size],
                                   center_rewards_coefficient=center_rewards_coefficient)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append({"step": len(history) + 1, "loss": float(loss.detach()), "accuracy": info["accuracy"],
                            "margin": info["margin"]})
    model.eval()
    return model, history


@torch.no_grad()
def pair_accuracy(model, tokenizer, pairs, *, batch_size=128):
    """The share of ``pairs`` whose chosen answer the model scores higher (TRL's ``accuracy``) → ``(acc, info)``."""
    pairs = check_pairs(pairs)
    model.eval()
    wins, margins = 0, []
    for start in range(0, len(pairs), batch_size):
        c, r = pair_rewards(model, tokenizer, pairs[start:start + batch_size])
        wins += int((c > r).sum())
        margins.append(c - r)
    return wins / len(pairs), {"margin": float(torch.cat(margins).mean()), "pairs": len(pairs)}
