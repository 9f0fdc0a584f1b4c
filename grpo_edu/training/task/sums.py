"""Long answers: sums of 2 to 6 single-digit numbers, answered with or without written working.

Every other task in the course is answered in at most 4 tokens, so nothing about *length* can
be seen there. Here the model may write its working, one partial sum per step, before the
answer, or give the answer at once:

    prompt     3+8+5+9=
    worked     3+8=11;11+5=16;16+9=25#25    (26 tokens with <eos>)
    direct     #25                          (4 tokens with <eos>)

The answer always follows the last ``#`` (the way GSM8K ends a solution with ``#### 72``, or
R1-Zero puts it in ``<answer>…</answer>``), so a program can check it whatever came before.
A completion is *well formed* when it is zero or more steps ``a+b=c`` joined by ``;``, then
``#`` and a number (:data:`FORMAT`); its *working is right* when every step adds correctly and
follows the prompt's terms in order (:meth:`SumsTask.working_is_right`). These are three separate
checks: an answer can be right with wrong working, or well formed and wrong.

Working is the model's choice, so its length is too: 2 terms worked take 7 to 9 tokens, 6 terms
about 35, a direct answer 3 or 4. The terms are single digits: a 1M-parameter model learns to write
this working in a few hundred warm-up steps, where two-digit terms took thousands (measured while
building ``assets/tiny-sums``). That is what lets lesson 11 watch answers grow or shrink
under GRPO, and what makes ``loss_type`` (how a sequence's tokens are weighed) matter.

Standard library only, like ``tasks``: importing it stays instant.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from grpo_edu.common._checks import choice, fail, number_range, positive_int, split_sizes

SPLITS = ("train", "heldout")
FORMAT = re.compile(r"^(?:\d+\+\d+=\d+(?:;\d+\+\d+=\d+)*)?#\d+$")
"""A well-formed completion: optional steps ``a+b=c`` joined by ``;``, then ``#`` and the answer."""
STEP = re.compile(r"(\d+)\+(\d+)=(\d+)")


def terms_of(prompt: str) -> list[int]:
    """The numbers of a prompt: ``"12+7+30="`` → ``[12, 7, 30]``."""
    return [int(t) for t in prompt.rstrip("=").split("+")]


def worked_solution(terms: list[int]) -> str:
    """The working a careful student writes: running sums, one step each, then the answer."""
    steps, total = [], terms[0]
    for t in terms[1:]:
        steps.append(f"{total}+{t}={total + t}")
        total += t
    return ";".join(steps) + f"#{total}"


def final_answer(completion: str) -> str | None:
    """What follows the last ``#`` (stripped), or None when there is no ``#``."""
    if "#" not in completion:
        return None
    return completion.rsplit("#", 1)[1].strip()


@dataclass(frozen=True)
class SumsTask:
    """``a+b+…=`` with ``min_terms`` to ``max_terms`` numbers in ``[low, high]``; the answer is the sum.

    The splits are drawn once from a seeded generator, without repeats: ``heldout_size``
    prompts first, then ``train_size``; a prompt belongs to one split only. Each draw picks the
    number of terms uniformly from ``min_terms..max_terms``, but only 81 two-term and 729
    three-term sums exist, so once the held-out split has taken its share (63 and 117 of its 500)
    the train split holds few short prompts: 18 with two terms, 612 with three, the rest 4 to 6.
    """

    name: str
    description: str
    chars = ";#"
    """Characters this task needs beyond the course's tokenizer (``make_model.task_chars``)."""
    min_terms: int = 2
    max_terms: int = 6
    low: int = 1
    high: int = 9
    heldout_size: int = 500
    train_size: int = 20_000
    seed: int = 4321

    def __post_init__(self):
        number_range(self.low, self.high)
        positive_int("min_terms", self.min_terms, fix="pass the fewest numbers a prompt adds, 1 or more")
        positive_int("max_terms", self.max_terms, minimum=self.min_terms,
                     fix=f"pass the most numbers a prompt adds, at least min_terms ({self.min_terms})")
        n = self.high - self.low + 1
        split_sizes(self.heldout_size, self.train_size, sum(n ** k for k in range(self.min_terms, self.max_terms + 1)),
                    what=f"sums of {self.min_terms} to {self.max_terms} numbers in [{self.low}, {self.high}]",
                    more="widen [low, high] or allow more terms")

    def split(self, split: str, n: int | None = None) -> list[dict]:
        """Rows ``{"prompt", "answer"}`` of ``split`` (the first ``n`` if given; already shuffled)."""
        choice("split", split, SPLITS)
        if n is not None:
            positive_int("n", n, fix="pass a row count ≥ 1, or n=None for the whole split")
        drawn = _drawn_terms(self)
        chosen = drawn[: self.heldout_size] if split == "heldout" else drawn[self.heldout_size:]
        return [self.row(terms) for terms in chosen[:n]]

    def row(self, terms) -> dict:
        """``row([3, 8, 5])`` → ``{"prompt": "3+8+5=", "answer": "16"}``."""
        return {"prompt": "+".join(map(str, terms)) + "=", "answer": str(sum(terms))}

    @property
    def min_completion_tokens(self) -> int:
        """The shortest answer that can be right, in tokens: ``#`` and the smallest sum, then ``<eos>``."""
        return len(f"#{self.min_terms * self.low}") + 1

    @property
    def max_answer_chars(self) -> int:
        """The longest worked solution in characters (every term ``high``); add 1 for ``<eos>``."""
        return len(worked_solution([self.high] * self.max_terms))

    def is_correct(self, completion: str, answer: str) -> bool:
        """The number after the last ``#`` equals the answer exactly (``"#049"`` is wrong)."""
        return final_answer(completion) == str(answer).strip()

    def well_formed(self, completion: str) -> bool:
        """Steps ``a+b=c`` joined by ``;`` (or none), then ``#`` and a number: :data:`FORMAT`."""
        return bool(FORMAT.match(completion.strip()))

    def working_is_right(self, prompt: str, completion: str) -> bool:
        """Well formed, and each step adds correctly and follows the prompt's terms in order
        (a running sum). A direct answer has no working, so nothing in it is wrong."""
        if not self.well_formed(completion):
            return False
        steps = STEP.findall(completion.split("#")[0])
        if not steps:
            return True
        terms = terms_of(prompt)
        total = terms[0]
        for (a, b, c), t in zip(steps, terms[1:]):
            if int(a) != total or int(b) != t or int(c) != total + t:
                return False
            total += t
        return len(steps) == len(terms) - 1

    def demonstration(self, row: dict, worked: bool) -> str:
        """The completion a warm-up shows for ``row``: its worked solution, or the answer alone."""
        return worked_solution(terms_of(row["prompt"])) if worked else f"#{row['answer']}"

    def reward(self, prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """1.0 for each correct completion, else 0.0 (TRL's reward-function protocol)."""
        if len(completions) != len(answer):
            fail("answer", f"has {len(answer)} entries for {len(completions)} completions",
                 "pass one reference answer per completion (repeat each answer G times)")
        return [1.0 if self.is_correct(c, a) else 0.0 for c, a in zip(completions, answer)]


def format_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 for a completion in the task's format (:data:`FORMAT`), right or wrong, else 0.0.

    DeepSeek-R1-Zero's format reward (arXiv:2501.12948, §2.2.2) paid for ``<think>…</think>``
    around the reasoning; here the format is steps, ``#``, the answer. It is a rule, not a
    model, so it cannot be fooled into paying for anything but the format.
    """
    return [1.0 if FORMAT.match(c.strip()) else 0.0 for c in completions]


@functools.cache
def _drawn_terms(task: SumsTask) -> tuple[tuple[int, ...], ...]:
    """Distinct term lists in the task's fixed order: held-out first, then train."""
    rng = random.Random(task.seed)
    seen: dict[tuple[int, ...], None] = {}          # a dict keeps the drawing order
    while len(seen) < task.heldout_size + task.train_size:
        k = rng.randint(task.min_terms, task.max_terms)
        seen.setdefault(tuple(rng.randint(task.low, task.high) for _ in range(k)), None)
    return tuple(seen)
