"""Monte-Carlo step labels (Math-Shepherd), and how far they are from the exact ones.

Where nobody can check a step, Math-Shepherd (Wang et al. 2024) labels it by what happens after
it: from the solution cut just after step j, a *completer* model writes N endings; the step is
good if the endings reach the right answer.

* **hard** label: 1 when at least one of the N endings is right (Math-Shepherd's HE);
* **soft** label: the share of the N endings that are right (its SE), a number in [0, 1].

The last step is the answer itself, so its label is whether the answer is right (no sampling).

Such a label is a *value estimate* of the state after the step, not a verdict on the step (the Qwen
team's "Lessons of developing PRMs", 2025): a wrong step that a later step repairs is labelled good
(a false positive), and a right step whose completer then fails is labelled bad (a false negative),
more often as N is small or the completer weak. On the sums model the exact labels are known
(:mod:`~grpo_edu.training.task.sums_steps`), so :func:`confusion` measures the two errors.
"""

from __future__ import annotations

import torch

from grpo_edu.common import _checks
from grpo_edu.training.rollouts import engine
from grpo_edu.training.task.sums import FORMAT, final_answer
from grpo_edu.training.task.sums_steps import step_spans


def monte_carlo_labels(model, tokenizer, prompts, completions, answers, *, num_completions=8, seed=0,
                       temperature=1.0, max_new_tokens=42, batch_size=256):
    """Math-Shepherd's labels for every step of every (well-formed) completion, from ``num_completions`` endings each.

    ``prompts``, ``completions``, ``answers``: one entry per solution; ``model``: the completer. Returns
    ``(hard, info)``: ``hard[i]`` one 0/1 per step of solution i (:func:`~sums_steps.step_spans`); ``info`` holds
    ``soft`` (the share of right endings per step) and ``endings`` (the number of endings drawn).
    """
    _checks.positive_int("num_completions", num_completions,
                         fix="draw at least 1 ending from each step (Math-Shepherd used about 8)")
    _checks.positive_float("temperature", temperature, allow_zero=True,
                           fix="sample the endings at a temperature ≥ 0, e.g. 1.0 (0: greedy, N equal endings)")
    if not len(prompts) == len(completions) == len(answers):
        _checks.fail("completions", f"has {len(completions)} entries for {len(prompts)} prompts and "
                     f"{len(answers)} answers", "pass one prompt and one reference answer per completion")
    for i, completion in enumerate(completions):
        if not isinstance(completion, str) or not FORMAT.match(completion):
            _checks.fail(f"completions[{i}]", f"cannot be split into steps: {completion!r}",
                         "label well-formed completions only (SumsTask.well_formed); a malformed one has no steps")
    # every cut point: after each working step (the last step, the answer, is judged directly)
    cuts = [(i, prompts[i] + completions[i][:end]) for i in range(len(completions))
            for _, end in step_spans(completions[i])[:-1]]
    right = _right_endings(model, tokenizer, cuts, answers, num_completions, seed, temperature, max_new_tokens,
                           batch_size)
    hard, soft, k = [], [], 0
    for i, completion in enumerate(completions):
        steps = len(step_spans(completion))
        shares = [right[k + j] / num_completions for j in range(steps - 1)]
        k += steps - 1
        shares.append(float(final_answer(completion) == str(answers[i]).strip()))   # the answer: right or not
        soft.append(shares)
        hard.append([int(s > 0) for s in shares])
    return hard, {"soft": soft, "endings": len(cuts) * num_completions}


def _right_endings(model, tokenizer, cuts, answers, n, seed, temperature, max_new_tokens, batch_size):
    """How many of the ``n`` endings sampled from each cut reach the answer."""
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    was_training = model.training
    model.eval()
    counts = []
    chunk = max(1, batch_size // n)
    for start in range(0, len(cuts), chunk):
        part = cuts[start:start + chunk]
        texts = [text for _, text in part]
        with torch.no_grad():
            out = engine.generate(model, tokenizer, texts, num_generations=n, generator=generator,
                                  max_new_tokens=_room(model, tokenizer, texts, max_new_tokens), temperature=temperature)
        for c, (i, text) in enumerate(part):
            endings = out.completions[c * n:(c + 1) * n]
            working = text.split("=", 1)[1]                  # the prompt ends at its '='; the rest is the solution so far
            counts.append(sum(final_answer(working + e) == str(answers[i]).strip() for e in endings))
    model.train(was_training)
    return counts


def _room(model, tokenizer, texts, max_new_tokens):
    """``max_new_tokens``, or less where a cut late in a long solution leaves fewer of the model's positions."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if positions is None or tokenizer is None:
        return max_new_tokens
    longest = max(len(tokenizer(t)["input_ids"]) for t in texts)
    return max(1, min(max_new_tokens, positions - longest))


def confusion(exact, estimated):
    """The confusion matrix of estimated step labels against the exact ones (both ragged lists of 0/1).

    Returns ``(matrix, info)``: matrix ``{"tp", "fp", "fn", "tn"}`` with "positive" a step labelled right;
    info: ``precision``, ``recall`` (of right steps), ``false_positive_rate`` (wrong steps called right)
    and ``steps``.
    """
    if len(exact) != len(estimated):
        _checks.fail("estimated", f"has {len(estimated)} solutions for {len(exact)} in exact",
                     "pass the labels of the same solutions, in the same order")
    m = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for i, (e_row, m_row) in enumerate(zip(exact, estimated)):
        if len(e_row) != len(m_row):
            _checks.fail(f"estimated[{i}]", f"has {len(m_row)} steps for {len(e_row)} in exact[{i}]",
                         "label every step of each solution once")
        for e, est in zip(e_row, m_row):
            if e not in (0, 1) or est not in (0, 1):
                _checks.fail(f"estimated[{i}]", f"holds a label outside {{0, 1}} ({e!r}, {est!r})",
                             "pass hard labels (0 wrong, 1 right); threshold soft labels first")
            m[("t" if e == est else "f") + ("p" if est == 1 else "n")] += 1
    steps = sum(m.values())
    info = {"precision": m["tp"] / max(1, m["tp"] + m["fp"]), "recall": m["tp"] / max(1, m["tp"] + m["fn"]),
            "false_positive_rate": m["fp"] / max(1, m["fp"] + m["tn"]), "steps": steps}
    return m, info
