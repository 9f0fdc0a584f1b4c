"""Which task can a real model learn with GRPO? Its accuracy before RL, measured on candidate tasks.

GRPO learns only from groups whose rewards differ (lesson 03): a task the model never gets right, or always
does, gives it nothing to push on. So before a run on SmolLM2-135M-Instruct (``--model smollm2``), each
candidate task is measured as the model answers it *before* any RL: 8 answers per prompt sampled at T = 1
through its chat template, and per candidate

* pass@1, the mean sampled accuracy (with its standard error over prompts);
* pass@8, the share of prompts with at least one right answer among the 8 (unbiased, Chen et al. 2021);
* mixed groups, the share of prompts whose 8 rewards are not all equal: the groups that carry a gradient.

A task suits GRPO when pass@1 is between about 10 % and 60 % and most groups are mixed. Every candidate asks
for a short answer in a fixed form ("Answer with the number only."), graded two ways: *strict*, the whole answer
is the right one (spaces, quotes, a final full stop and case ignored), and *lenient*, the last number, quoted
letter or "even"/"odd" in the answer is (:data:`EXTRACTORS`), since a small instruct model answers in sentences.

Run it (about a minute per candidate at 16 prompts on a 2-core CPU)::

    python -m grpo_edu.beyond.real_model --model smollm2 --prompts 16 --samples 8 --seed 0
"""

import argparse
import math
import random
import re
from dataclasses import dataclass

from grpo_edu.common import _checks

WORDS = ("apple", "banana", "cherry", "dog", "elephant", "flower", "garden", "house", "island", "jacket", "kitten",
         "lemon", "mountain", "night", "orange", "pencil", "queen", "river", "sun", "table", "umbrella", "village",
         "window", "yellow", "zebra", "bread", "chair", "doctor", "engine", "forest", "guitar", "horse", "monkey",
         "needle", "ocean", "piano", "rabbit", "silver", "tiger", "water")
"""Common English words, each a handful of tokens, for the letter tasks."""


@dataclass(frozen=True)
class Candidate:
    """A verifiable task in one sentence: ``question`` filled from ``draw(rng)`` → (fields, answer)."""
    name: str
    question: str
    draw: object
    """``draw(rng)`` → ``(fields, answer)``: the question's blanks and the one right answer."""
    kind: str
    """What the lenient grader looks for (:data:`EXTRACTORS`): "number", "letter" or "parity"."""


def _sum(rng):
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return {"a": a, "b": b}, str(a + b)


def _two_numbers(rng):
    a, b = rng.sample(range(10, 100), 2)
    return {"a": a, "b": b}, str(max(a, b))


def _word(rng, pick):
    w = rng.choice(WORDS)
    return {"w": w}, pick(w)


def _parity(rng):
    n = rng.randint(10, 99)
    return {"n": n}, "even" if n % 2 == 0 else "odd"


def _next(rng):
    n = rng.randint(10, 98)
    return {"n": n}, str(n + 1)


CANDIDATES = {c.name: c for c in (
    Candidate("one-digit sum", "What is {a} + {b}? Answer with the number only.", _sum, "number"),
    Candidate("first letter", "What is the first letter of the word '{w}'? Answer with one letter.",
              lambda rng: _word(rng, lambda w: w[0]), "letter"),
    Candidate("last letter", "What is the last letter of the word '{w}'? Answer with one letter.",
              lambda rng: _word(rng, lambda w: w[-1]), "letter"),
    Candidate("larger number", "Which number is larger, {a} or {b}? Answer with the number only.", _two_numbers, "number"),
    Candidate("next number", "What number comes right after {n}? Answer with the number only.", _next, "number"),
    Candidate("even or odd", "Is {n} even or odd? Answer with one word.", _parity, "parity"),
    Candidate("word length", "How many letters are in the word '{w}'? Answer with the number only.",
              lambda rng: _word(rng, lambda w: str(len(w))), "number"),
)}
"""The candidate tasks, by name."""


def normalise(text):
    """The answer as graded: surrounding spaces, quotes and a final full stop removed, lower case."""
    return str(text).strip().strip("'\"`").rstrip(".").strip().strip("'\"`").casefold()


EXTRACTORS = {
    "number": re.compile(r"-?\d+"),                                       # the last integer
    "letter": re.compile(r"[\"'‘“*]([A-Za-z])[\"'’”*]"),                  # the last letter in quotes
    "parity": re.compile(r"\b(even|odd)\b", re.IGNORECASE),              # the last "even" or "odd"
}
"""What the lenient grader reads from an answer in sentences, per candidate kind: the last match."""


def is_correct(completion, answer, kind=None):
    """Strict (``kind`` None): the whole answer is the expected one (:func:`normalise` on both). Lenient: the
    whole answer is, or the last match of ``EXTRACTORS[kind]`` in it is ("6 + 6 = 12" → 12; "… is 'z'." → z)."""
    if normalise(completion) == normalise(answer):
        return True
    if kind is None:
        return False
    found = EXTRACTORS[kind].findall(str(completion))
    return bool(found) and normalise(found[-1]) == normalise(answer)


def rows(candidate, n, seed=0):
    """``n`` rows ``{"prompt": question, "answer": answer}`` of ``candidate``, drawn from ``seed``."""
    _checks.positive_int("n", n)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        fields, answer = candidate.draw(rng)
        out.append({"prompt": candidate.question.format(**fields), "answer": answer})
    return out


def group_stats(correct, num_samples):
    """pass@1 (± its standard error over prompts), pass@k for k = ``num_samples``, and the share of mixed groups,
    from ``correct``: one list of ``num_samples`` booleans per prompt. ``(stats, info)``."""
    from grpo_edu.training.task.evaluation import pass_at_k_curve

    counts = [sum(c) for c in correct]
    per_prompt = [c / num_samples for c in counts]
    mean = sum(per_prompt) / len(per_prompt)
    spread = (math.sqrt(sum((p - mean) ** 2 for p in per_prompt) / (len(per_prompt) - 1) / len(per_prompt))
              if len(per_prompt) > 1 else float("nan"))
    curve, info = pass_at_k_curve(counts, num_samples, [1, num_samples])
    mixed = sum(0 < c < num_samples for c in counts) / len(counts)
    return ({"pass@1": curve[1], "pass@1_se": spread, f"pass@{num_samples}": curve[num_samples], "mixed": mixed},
            {"counts": counts, **info})


def measure(model, tokenizer, candidate, *, prompts=16, samples=8, seed=0, max_new_tokens=24, system=None):
    """Sample ``samples`` answers at T = 1 to ``prompts`` questions of ``candidate`` through the chat template;
    ``(stats, info)`` as :func:`group_stats` under the lenient grader, with ``stats["strict pass@1"]`` (the whole
    answer exactly right); ``info["answers"]``: the (question, answer, right?) triples."""
    import torch

    from grpo_edu.training.rollouts.engine import generate

    _checks.positive_int("samples", samples, minimum=2)
    turns = [] if system is None else [{"role": "system", "content": system}]
    questions = rows(candidate, prompts, seed)
    rendered = [tokenizer.apply_chat_template(turns + [{"role": "user", "content": r["prompt"]}], tokenize=False,
                                              add_generation_prompt=True) for r in questions]
    out = generate(model, tokenizer, rendered, num_generations=samples, max_new_tokens=max_new_tokens,
                   temperature=1.0, generator=torch.Generator().manual_seed(seed))
    answers = [questions[i // samples]["answer"] for i in range(len(out.completions))]
    right = [is_correct(text, a, candidate.kind) for text, a in zip(out.completions, answers)]
    exact = [is_correct(text, a) for text, a in zip(out.completions, answers)]
    stats, info = group_stats([right[i * samples:(i + 1) * samples] for i in range(prompts)], samples)
    stats["strict pass@1"] = sum(exact) / len(exact)
    info["answers"] = [(questions[i // samples]["prompt"], text, ok) for i, (text, ok) in
                       enumerate(zip(out.completions, right))]
    info["ended"] = float((out.completion_ids == tokenizer.eos_token_id).any(1).float().mean())   # wrote <|im_end|>
    return stats, info


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.beyond.real_model",
                                     description="A real model's accuracy before RL on candidate GRPO tasks: "
                                                 "pass@1, pass@k and the share of groups with mixed rewards.")
    parser.add_argument("--model", default="smollm2", help="smollm2 (grpo-edu models get smollm2), a folder or a "
                                                           "hub id")
    parser.add_argument("--task", action="append", choices=sorted(CANDIDATES),
                        help="a candidate to measure (repeat for several; default: all)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--show", type=int, default=0, help="print this many sampled answers per candidate")
    args = parser.parse_args(argv)
    from grpo_edu.training.model.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(args.model)
    model.eval()
    k = args.samples
    print(f"{'candidate':15s} {'strict':>7s} {'pass@1':>14s} {f'pass@{k}':>7s} {'mixed':>6s} {'ended':>6s}   "
          f"({args.prompts} prompts × {k} answers at T = 1, seed {args.seed}, {args.max_new_tokens} new tokens; "
          "strict: the whole answer; the rest by the lenient grader)")
    for name in args.task or CANDIDATES:
        stats, info = measure(model, tokenizer, CANDIDATES[name], prompts=args.prompts, samples=k, seed=args.seed,
                              max_new_tokens=args.max_new_tokens)
        print(f"{name:15s} {stats['strict pass@1']:7.1%} {stats['pass@1']:7.1%} ± {stats['pass@1_se']:4.1%} "
              f"{stats[f'pass@{k}']:7.1%} {stats['mixed']:6.1%} {info['ended']:6.1%}", flush=True)
        for question, text, ok in info["answers"][:args.show]:
            print(f"    {'✓' if ok else '✗'} {question!r} → {text!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
