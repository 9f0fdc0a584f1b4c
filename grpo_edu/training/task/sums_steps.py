"""Exact step labels for the sums model's working: which step of an answer went wrong.

A process reward model (PRM) scores each *step* of a solution instead of its final answer.
Every public PRM learns from labels that are themselves noisy: people marking steps of MATH
solutions (PRM800K, Lightman et al. 2023) or Monte-Carlo completions (Math-Shepherd, Wang et
al. 2024). The sums model writes its working one partial sum at a time, so here the label of
every step is known exactly, by a few lines of arithmetic (lesson 17b):

    prompt       3+8+5+9=
    completion   3+8=11;11+5=17;17+9=26#26
    steps        "3+8=11;"   "11+5=17;"   "17+9=26#"   "26"
    labels       1           0            1            1

**What counts as a right step.** A step is judged *given the steps before it*, as PRM800K's
raters and ProcessBench's "first error" judge a step: it is right when it does what a careful
student does next, starting from what is already written.

* a working step ``a+b=c`` is right when ``a`` is the previous step's result (the first term,
  for the first step), ``b`` is the prompt's next term, and ``c = a + b``;
* the answer (after ``#``) is right when it equals the last written result plus the terms the
  working has not added yet (for a direct answer, ``#25``: the sum of all the terms).

So the first 0 is where the solution first went wrong, and a step that correctly continues from
a wrong one is still right: in the example above only ``11+5=17`` is wrong, and the answer 26 is
wrong because of it, not on its own. Errors can *cancel*: ``3+8=12;12+5=16#16`` for ``3+8+5=``
has the right answer with two wrong steps (12 ≠ 11, then 12 + 5 ≠ 16). That is the "right
answer, wrong working" case that outcome rewards pay for and that Uesato et al. (2022) counted
among GSM8K solutions (14.0 % with outcome supervision, 3.4 % with process supervision).

Why this definition and not "the step's result equals the true running sum": the true-sum rule
would call ``12+5=16`` right (16 is the true sum of 3, 8 and 5) although its addition is wrong,
and would call every step after a first error wrong although each adds correctly: it labels the
*state*, where a PRM is meant to label the *step*.

Each step's characters are given too (:func:`step_spans`): a working step owns its ``;`` or
``#``, and the answer step owns the answer's digits. The character tokenizer of the sums model
has one token per character, so a step's last character is its end token, DeepSeekMath's
index(j) (§4.1.3).

Standard library only, like :mod:`~grpo_edu.training.task.sums`.
"""

from __future__ import annotations

import re

from grpo_edu.common._checks import fail
from grpo_edu.training.task.sums import FORMAT, STEP, terms_of

_PROMPT = re.compile(r"^\d+(?:\+\d+)+=$")


def _check_prompt(prompt: str) -> list[int]:
    if not isinstance(prompt, str) or not _PROMPT.match(prompt.strip()):
        fail("prompt", f"is not a sums prompt: {prompt!r}",
             "pass the prompt as the task writes it, numbers joined by '+' and ending in '=', e.g. '3+8+5='")
    return terms_of(prompt.strip())


def step_spans(completion: str) -> list[tuple[int, int]]:
    """Each step's characters ``[start, end)`` in ``completion``: the working steps (each with its
    ``;`` or ``#``), then the answer (with the ``#`` too when there is no working). A completion outside the task's format has no steps: it is
    refused (check ``SumsTask.well_formed`` first when completions may be malformed).

    >>> step_spans("3+8=11;11+5=16#16")
    [(0, 7), (7, 15), (15, 17)]
    """
    if not isinstance(completion, str) or not FORMAT.match(completion):
        fail("completion", f"cannot be split into steps: {completion!r} is not steps 'a+b=c' joined by ';', "
             "then '#' and a number", "pass a well-formed completion (SumsTask.well_formed), "
             "with no surrounding spaces or end token; score malformed ones as wrong as a whole")
    if completion.startswith("#"):                           # a direct answer: one step, '#' and the answer
        return [(0, len(completion))]
    spans, start = [], 0
    for match in re.finditer(r"[;#]", completion):
        spans.append((start, match.end()))
        start = match.end()
    spans.append((start, len(completion)))
    return spans


def step_labels(prompt: str, completion: str) -> list[int]:
    """One label per step of ``completion``, 1 right and 0 wrong, the answer last (module doc).

    >>> step_labels("3+8+5=", "3+8=11;11+5=16#16")
    [1, 1, 1]
    >>> step_labels("3+8+5=", "3+8=12;12+5=16#16")     # errors that cancel: right answer
    [0, 0, 1]
    >>> step_labels("3+8+5=", "#16")
    [1]
    """
    terms = _check_prompt(prompt)
    step_spans(completion)                                    # refuses a completion with no steps
    working, answer = completion.rsplit("#", 1)
    steps = STEP.findall(working)
    labels = [_step_label(a, b, c, i, terms, steps) for i, (a, b, c) in enumerate(steps)]
    written = int(steps[-1][2]) if steps else terms[0]        # what the working reached
    rest = sum(terms[len(steps) + 1:])                        # the terms it has not added yet
    labels.append(int(int(answer) == written + rest))
    return labels                                             # one per span of step_spans


def _step_label(a, b, c, i, terms, steps) -> int:
    """Step ``i`` (``a+b=c``): starts from the previous result, adds the next term, adds correctly."""
    previous = terms[0] if i == 0 else int(steps[i - 1][2])
    if i + 1 >= len(terms):                                   # a step past the last term
        return 0
    return int(int(a) == previous and int(b) == terms[i + 1] and int(c) == int(a) + int(b))


def first_error(labels: list[int]) -> int:
    """The index of the first wrong step, or -1 when every step is right (ProcessBench's label)."""
    for j, label in enumerate(labels):
        if label not in (0, 1):
            fail("labels", f"holds {label!r} at step {j}", "pass step labels of 0 (wrong) or 1 (right)")
    return next((j for j, label in enumerate(labels) if label == 0), -1)


def right_answer_wrong_working(prompts: list[str], completions: list[str], answers: list[str]) -> tuple[float, dict]:
    """The share of right-answered completions with at least one wrong step (Uesato et al.'s "trace
    error"), over the well-formed ones; malformed completions are counted apart in ``info``.

    Returns ``(rate, info)``: ``info`` has ``right`` (right answers among well-formed completions),
    ``right_wrong_working`` (those with a wrong step), ``malformed`` and ``total``.
    """
    if not len(prompts) == len(completions) == len(answers):
        fail("completions", f"has {len(completions)} entries for {len(prompts)} prompts and {len(answers)} answers",
             "pass one prompt and one reference answer per completion (repeat each G times)")
    right = wrong_working = malformed = 0
    for prompt, completion, answer in zip(prompts, completions, answers):
        completion = completion.strip()
        if not FORMAT.match(completion):
            malformed += 1
            continue
        if completion.rsplit("#", 1)[1] != str(answer).strip():
            continue
        right += 1
        wrong_working += int(0 in step_labels(prompt, completion))
    rate = wrong_working / right if right else 0.0
    return rate, {"right": right, "right_wrong_working": wrong_working, "malformed": malformed,
                  "total": len(completions)}


def step_rewards(prompt: str, completion: str) -> tuple[list[float], list[int]]:
    """The exact checker as a process reward: ``(rewards, ends)``, one 0/1 reward per step and each step's end
    (in characters, exclusive). A completion outside the format cannot be split: it is one step, rewarded 0
    (as an outcome reward scores it wrong), ending at its last character.

    >>> step_rewards("3+8+5=", "3+8=12;12+5=16#16")
    ([0.0, 0.0, 1.0], [7, 15, 17])
    >>> step_rewards("3+8+5=", "3+8=11;11")
    ([0.0], [9])
    """
    completion = completion.strip()
    if not FORMAT.match(completion):
        return [0.0], [len(completion)]
    return [float(label) for label in step_labels(prompt, completion)], [end for _, end in step_spans(completion)]
