"""Preference pairs: two answers to one prompt, the one the gold judge scores higher marked "chosen".

A pair is a dict as TRL's preference datasets hold it (implicit-prompt form split out):
``{"prompt", "chosen", "rejected"}`` and optionally ``"margin"`` (Llama 2's margin, here the gold gap when
asked for). The reward model learns from these pairs alone; the judge's facets stay hidden.

:func:`sample_pairs` draws ``num_generations`` answers per prompt from a model (the backbone, so the pairs
look like what the policy writes), scores them with the gold judge, and keeps one pair per prompt whose
answers the judge tells apart: two answers picked at random among those with different gold scores.
:func:`check_pairs` refuses what would teach nothing or break the loss, naming the field.
"""

import random

import torch

from grpo_edu.common import _checks
from grpo_edu.training.reward_models.gold import gold_scores
from grpo_edu.training.rollouts import engine


def check_pairs(pairs, arg="pairs"):
    """Refuse an empty set, a pair that is not a dict or lacks its fields, a pair whose chosen and rejected are
    the same text, or margins on some pairs only.

    A margin is a column, as in TRL's preference datasets (``datasets`` columns are all rows' or none's): every
    pair carries one, or none does. Missing is never read as 0, since a pair without one in a set with margins is
    more likely a mistake than a claim that the two answers are equally far apart."""
    if not isinstance(pairs, (list, tuple)) or not pairs:
        _checks.fail(arg, "is empty: there is nothing to learn a preference from",
                     "pass at least one pair {'prompt', 'chosen', 'rejected'} (sample_pairs makes them)")
    with_margin = [isinstance(pair, dict) and "margin" in pair for pair in pairs]
    for i, pair in enumerate(pairs):
        if not isinstance(pair, dict):
            _checks.fail(f"{arg}[{i}]", f"is a {type(pair).__name__}, not a dict",
                         "give each pair as {'prompt': …, 'chosen': …, 'rejected': …}")
        if any(with_margin) and not with_margin[i]:
            first = with_margin.index(True)
            _checks.fail(f"{arg}[{i}].margin", f"is missing, while {arg}[{first}] has one: margins are a column, on "
                         "every pair or on none", "give every pair a margin (0.0 where the answers are only "
                         "ordered), or drop margin from all of them")
        missing = [k for k in ("prompt", "chosen", "rejected") if not isinstance(pair.get(k), str)]
        if missing:
            _checks.fail(f"{arg}[{i}]", f"has no text for {missing}", "give each pair a prompt, chosen and rejected")
        if pair["chosen"] == pair["rejected"]:
            _checks.fail(f"{arg}[{i}].rejected", f"is the same text as chosen ({pair['chosen']!r})",
                         "drop the pair: a preference between an answer and itself says nothing")
        if "margin" in pair:
            _checks.finite_float(f"{arg}[{i}].margin", pair["margin"], fix="give a number, or leave margin out")
    return list(pairs)


def sample_pairs(model, tokenizer, rows, judge, *, num_generations=8, max_new_tokens=40, temperature=1.0,
                 seed=0, with_margin=False, batch_size=64):
    """One gold-labelled pair per row whose sampled answers the judge tells apart. Returns ``(pairs, info)``.

    ``rows``: dataset rows ``{"prompt", "answer"}``; ``judge``: a gold reward function (``gold.SumsGoldJudge``).
    ``info``: ``rows`` asked, ``pairs`` kept, ``tied_rows`` (every answer scored the same: no pair)."""
    generator = torch.Generator().manual_seed(seed)
    picker = random.Random(seed)
    pairs, tied = [], 0
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        rollout = engine.generate(model, tokenizer, [r["prompt"] for r in batch], num_generations=num_generations,
                                  max_new_tokens=max_new_tokens, temperature=temperature, generator=generator)
        G = num_generations
        prompts = [r["prompt"] for r in batch for _ in range(G)]
        answers = [r["answer"] for r in batch for _ in range(G)]
        gold = gold_scores(judge, prompts, rollout.completions, answers)
        for b, row in enumerate(batch):
            group = {rollout.completions[b * G + g]: gold[b * G + g] for g in range(G)}   # distinct texts
            texts = list(group)
            candidates = [(x, y) for x in texts for y in texts if group[x] > group[y]]
            if not candidates:
                tied += 1
                continue
            chosen, rejected = picker.choice(candidates)
            pair = {"prompt": row["prompt"], "chosen": chosen, "rejected": rejected}
            if with_margin:
                pair["margin"] = group[chosen] - group[rejected]
            pairs.append(pair)
    return pairs, {"rows": len(rows), "pairs": len(pairs), "tied_rows": tied}
