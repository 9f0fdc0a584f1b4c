"""Sums a calculator helps with: two terms of 1 to 3 digits, answered after ``#``, with or without a call.

    prompt        347+85=
    with a call   [347+85]=432#432      the model writes "[347+85]", the calculator "=432", the model "#432"
    direct        #432                  the model adds in its head

A 2-layer model adds two single digits in its head well, three-digit numbers badly (lesson 11's
``sums`` task needed single digits for that reason). Copying the prompt into a call, and the
calculator's reply after ``#``, is easy for attention. So the tool helps on most prompts and is not
needed on some: whether to call is a choice GRPO can shape (lesson 15). The warm-up shows half the
rows with a call and half without (``make_model --worked-fraction 0.5``), with the calculator's reply
left out of the loss: in training, as in the rollouts, those tokens are the tool's, not the model's.

The answer is what follows the last ``#``, as in ``sums``; a reply ``=432`` is not an answer. Standard
library only at import, like ``tasks`` and ``sums``.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from grpo_edu.common._checks import choice, fail, number_range, positive_int, split_sizes
from grpo_edu.training.task.sums import final_answer

SPLITS = ("train", "heldout")
FORMAT = re.compile(r"^(?:\[\d+\+\d+\]=-?\d+)?#\d+$")
"""A well-formed completion: at most one call ``[a+b]`` with its reply, then ``#`` and the answer."""
CALL = re.compile(r"\[[^\[\]]*\]")


@dataclass(frozen=True)
class CalcTask:
    """``a+b=`` with each term's digit count uniform in 1..``max_digits``; the answer is the sum.

    The splits are drawn once from a seeded generator without repeats: ``heldout_size`` prompts first,
    then ``train_size``.
    """

    name: str
    description: str
    chars = "[]?#"
    """Characters this task needs beyond the course's tokenizer: the call's brackets, the calculator's
    error reply ``=?``, and ``#`` before the answer (``make_model.task_chars``)."""
    max_digits: int = 3
    heldout_size: int = 500
    train_size: int = 20_000
    seed: int = 2468
    uses_calculator = True
    """Its answers are sampled and scored with ``tools.Tool()`` (the calculator) in the loop."""

    def __post_init__(self):
        positive_int("max_digits", self.max_digits, fix="pass the most digits a term may have, 1 or more")
        terms = 10 ** self.max_digits - 1                    # 1 … 10^D − 1
        split_sizes(self.heldout_size, self.train_size, terms * terms,
                    what=f"pairs of terms of up to {self.max_digits} digits", more="allow more digits")

    def split(self, split: str, n: int | None = None) -> list[dict]:
        """Rows ``{"prompt", "answer"}`` of ``split`` (the first ``n`` if given; already shuffled)."""
        choice("split", split, SPLITS)
        if n is not None:
            positive_int("n", n, fix="pass a row count ≥ 1, or n=None for the whole split")
        drawn = _drawn_pairs(self)
        chosen = drawn[: self.heldout_size] if split == "heldout" else drawn[self.heldout_size:]
        return [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in chosen[:n]]

    @property
    def min_completion_tokens(self) -> int:
        """The shortest answer that can be right: ``#``, the smallest sum (2), ``<eos>``."""
        return 3

    @property
    def max_answer_chars(self) -> int:
        """The longest demonstration, ``[999+999]=1998#1998``; add 1 for ``<eos>``."""
        top = 10 ** self.max_digits - 1
        return len(self.demonstration({"prompt": f"{top}+{top}=", "answer": str(2 * top)}, True))

    def is_correct(self, completion: str, answer: str) -> bool:
        """The number after the last ``#`` equals the answer exactly."""
        return final_answer(completion) == str(answer).strip()

    def well_formed(self, completion: str) -> bool:
        """At most one call with its reply, then ``#`` and a number (:data:`FORMAT`)."""
        return bool(FORMAT.match(completion.strip()))

    def demonstration(self, row: dict, worked: bool) -> str:
        """What a warm-up shows: ``[a+b]=s#s`` (a call, ``worked``) or ``#s``."""
        answer = row["answer"]
        return f"[{row['prompt'].rstrip('=')}]={answer}#{answer}" if worked else f"#{answer}"

    def demonstration_mask(self, text: str) -> list[int]:
        """1 on each character the model writes, 0 on the calculator's reply (``=`` and digits after ``]``)."""
        mask, i = [1] * len(text), 0
        for match in CALL.finditer(text):
            i = match.end()
            reply = re.match(r"=-?\d+|=\?", text[i:])
            if reply:
                mask[i:i + reply.end()] = [0] * reply.end()
        return mask

    def reward(self, prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """1.0 for each correct completion, else 0.0 (TRL's reward-function protocol)."""
        if len(completions) != len(answer):
            fail("answer", f"has {len(answer)} entries for {len(completions)} completions",
                 "pass one reference answer per completion (repeat each answer G times)")
        return [1.0 if self.is_correct(c, a) else 0.0 for c, a in zip(completions, answer)]


def calls_in(completion: str) -> int:
    """How many calls a completion's text holds (``[`` … ``]``)."""
    return len(CALL.findall(completion))


@functools.cache
def _drawn_pairs(task: CalcTask) -> tuple[tuple[int, int], ...]:
    """Distinct (a, b) pairs in the task's fixed order: held-out first, then train."""
    rng = random.Random(task.seed)

    def term():
        digits = rng.randint(1, task.max_digits)
        return rng.randint(1 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)

    seen: dict[tuple[int, int], None] = {}
    while len(seen) < task.heldout_size + task.train_size:
        seen.setdefault((term(), term()), None)
    return tuple(seen)
