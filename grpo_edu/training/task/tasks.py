"""Verifiable tasks: prompts whose answers a program can check exactly.

GRPO needs a reward for every sampled answer. The cheapest honest reward is a *verifier*:
a few lines of code that say whether an answer is right (DeepSeekMath calls these
rule-based rewards). Arithmetic is the smallest such world: the prompt ``"12+34="`` has
exactly one right answer, ``"46"``, and checking it needs no model and no judgement.

Each task has two fixed splits. ``"train"`` feeds the trainer; ``"heldout"`` is never
trained on, so accuracy measured there tells whether the model learned *addition* or only
memorised the prompts it saw. Both splits are shuffled with a seed stored in the task, so
every reader gets the same rows in the same order.

This module uses only the standard library: importing it must stay instant, because the
first lessons use the tasks long before any model is loaded.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass

from grpo_edu.common._checks import choice, fail, number_range, positive_int, split_sizes

SPLITS = ("train", "heldout")
PROMPT_FILE_TYPES = (".json", ".jsonl", ".csv")


@dataclass(frozen=True)
class ArithmeticTask:
    """``a <op> b =`` with integer operands in ``[low, high]``, answered in decimal.

    The rows are built from operand pairs. When the space of pairs is small (two-digit
    operands: 8100 pairs) every pair is used, shuffled; the first ``heldout_size`` pairs
    form the held-out split and the rest the train split. When it is large (three-digit:
    810 000 pairs) only ``heldout_size + train_size`` distinct pairs are drawn, which is
    plenty for a laptop and keeps ``split`` fast. A pair belongs to one split only, so
    train and held-out never share a prompt.
    """

    name: str
    """Registry key, e.g. ``"addition"``."""
    description: str
    """One sentence for the lessons and ``grpo-edu`` listings."""
    op: str
    """``"+"`` or ``"-"``: the character in the prompt, and the operation."""
    low: int
    """Smallest operand (inclusive)."""
    high: int
    """Largest operand (inclusive)."""
    heldout_size: int = 500
    """Pairs reserved for evaluation; never in the train split."""
    train_size: int | None = None
    """Pairs in the train split; ``None`` means every pair not held out."""
    ordered: bool = False
    """Only pairs with ``a ≥ b`` (subtraction without negative answers)."""
    seed: int = 1234
    """Seed of the shuffle; part of the task's identity, not a training knob."""

    def __post_init__(self):
        choice("op", self.op, ("+", "-"))
        number_range(self.low, self.high)
        n = self.high - self.low + 1
        split_sizes(self.heldout_size, self.train_size, n * (n + 1) // 2 if self.ordered else n * n,
                    what=f"operand pairs in [{self.low}, {self.high}]", more="widen [low, high]")

    def split(self, split: str, n: int | None = None) -> list[dict]:
        """Rows ``{"prompt", "answer"}`` of ``split``; the first ``n`` of them if given.

        The order is already shuffled (deterministically), so ``n=k`` is a fair sample.
        """
        choice("split", split, SPLITS)
        if n is not None:
            positive_int("n", n, fix="pass a row count ≥ 1, or n=None for the whole split")
        pairs = _shuffled_pairs(self)
        chosen = pairs[: self.heldout_size] if split == "heldout" else pairs[self.heldout_size:]
        if n is not None:
            chosen = chosen[:n]
        return [self.row(a, b) for a, b in chosen]

    def row(self, a: int, b: int) -> dict:
        """The prompt/answer row for one operand pair: ``row(12, 34)`` → ``12+34=`` / ``46``."""
        result = a + b if self.op == "+" else a - b
        return {"prompt": f"{a}{self.op}{b}=", "answer": str(result)}

    @property
    def max_answer_chars(self) -> int:
        """Longest answer in characters; generation needs this many tokens plus ``<eos>``."""
        largest = 2 * self.high if self.op == "+" else self.high - self.low
        return len(str(largest))

    def is_correct(self, completion: str, answer: str) -> bool:
        """Exact match after stripping surrounding whitespace.

        ``completion`` is the generated text only: no prompt, no special tokens. No partial
        credit and no number parsing: ``"046"`` and ``"46.0"`` are wrong, because a lenient
        checker is a reward the policy can learn to game.
        """
        return completion.strip() == str(answer).strip()

    def reward(self, prompts: list[str], completions: list[str], answer: list[str],
               **kwargs) -> list[float]:
        """1.0 for each correct completion, else 0.0.

        The signature is TRL's reward-function protocol: one list per dataset column, the
        column with the reference being ``answer``; extra columns arrive in ``kwargs`` and
        are ignored.
        """
        if len(completions) != len(answer):
            fail("answer", f"has {len(answer)} entries for {len(completions)} completions",
                 "pass one reference answer per completion (repeat each answer G times)")
        return [1.0 if self.is_correct(c, a) else 0.0 for c, a in zip(completions, answer)]


# Task is the name the trainer and the lessons use; all tasks are arithmetic for now.
Task = ArithmeticTask


@functools.cache
def _shuffled_pairs(task: ArithmeticTask) -> tuple[tuple[int, int], ...]:
    """Operand pairs in the task's fixed order: held-out first, then train."""
    rng = random.Random(task.seed)
    operands = range(task.low, task.high + 1)
    if task.train_size is None:
        pairs = [(a, b) for a in operands for b in operands if a >= b or not task.ordered]
        rng.shuffle(pairs)
        return tuple(pairs)
    # too many pairs to list: draw distinct ones until both splits are full
    wanted = task.heldout_size + task.train_size
    seen: dict[tuple[int, int], None] = {}  # a dict keeps the drawing order
    while len(seen) < wanted:
        a, b = rng.choice(operands), rng.choice(operands)
        if task.ordered and a < b:
            a, b = b, a
        seen.setdefault((a, b), None)
    return tuple(seen)


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        ArithmeticTask(
            name="addition",
            description="Two-digit addition, '12+34=' -> '46'. Operands 10..99 (8100 pairs); "
                        "500 held out, 7600 to train on. The bundled tiny model starts "
                        "around 40% here when sampling at temperature 1.",
            op="+", low=10, high=99),
        ArithmeticTask(
            name="subtraction",
            description="Two-digit subtraction without negatives, '57-12=' -> '45' "
                        "(a >= b, so answers are 0..89 with 1 or 2 digits). Operands 10..99 "
                        "(4095 pairs); 500 held out, 3595 to train on. Same characters as "
                        "addition, a new rule: the bundled addition model never gets it "
                        "right, so every GRPO group is all zeros until it is taught.",
            op="-", low=10, high=99, ordered=True),
        ArithmeticTask(
            name="addition3",
            description="Three-digit addition, '123+456=' -> '579' (answers up to 4 digits, "
                        "so generate 5 tokens). Operands 100..999; 500 held-out and 20000 "
                        "train pairs drawn without repeats. Too hard at first for the tiny "
                        "model: most groups score all zeros, the case where GRPO cannot learn.",
            op="+", low=100, high=999, train_size=20_000),
    )
}


from grpo_edu.training.task.sums import SumsTask  # noqa: E402  (the long-answer task builds on nothing above)

TASKS["sums"] = SumsTask(
    name="sums",
    description="Sums of 2 to 6 digits (1..9), answered after '#', with or without working: '3+8+5=' -> "
                "'3+8=11;11+5=16#16' or '#16'. 500 held out, 20000 to train on. Answers run from 3 to 39 "
                "characters: the task of lesson 11 (long answers) and its model, assets/tiny-sums.")

from grpo_edu.training.task.calc import CalcTask  # noqa: E402  (the tool task builds on sums' answer format)

TASKS["calc"] = CalcTask(
    name="calc",
    description="Sums of two numbers of 1 to 3 digits, '347+85=' -> '[347+85]=432#432' with a calculator call "
                "(the tool writes '=432') or '#432' without. 500 held out, 20000 to train on: the task of "
                "lesson 15 (tools) and its model, assets/tiny-calc.")


def get_task(name: str) -> Task:
    """The registered task called ``name``."""
    if name not in TASKS:
        fail("task", f"unknown task {name!r}", f"use one of {', '.join(sorted(TASKS))}")
    return TASKS[name]


def load_prompts(source) -> list[dict]:
    """Rows ``{"prompt": str[, "answer": str]}`` from a file, a dataset or a list of dicts.

    ``source`` may be a path to ``.json`` (a list of objects), ``.jsonl`` (one object a
    line) or ``.csv`` (a header row naming the columns), UTF-8 with or without the
    byte-order mark spreadsheets write; anything with ``column_names`` that iterates over
    dict rows (a Hugging Face ``datasets.Dataset``); or a list of dicts. Every row needs a
    non-empty string ``"prompt"``; ``"answer"`` is optional (in every row or in none) and
    kept as a string. Other columns are dropped. Everything is checked before a row is
    returned, so a bad row 900 fails at once instead of halfway through training.
    """
    if isinstance(source, (str, os.PathLike)):
        where = os.fspath(source)
        raw = _read_prompt_file(where)
    elif hasattr(source, "column_names") or isinstance(source, (list, tuple)):
        where = f"the {type(source).__name__} passed as source"
        raw = list(source)
    else:
        fail("source", f"cannot read prompts from a {type(source).__name__}",
             "pass a path to a .json/.jsonl/.csv file, a datasets.Dataset or a list of dicts")
    if not raw:
        fail("source", f"{where} holds no rows", "give at least one row with a 'prompt'")
    rows = [_clean_row(row, index, where) for index, row in enumerate(raw)]
    lacking = [i for i, row in enumerate(rows) if "answer" not in row]
    if 0 < len(lacking) < len(rows):   # a reward function gets whole columns: a gap would fail mid-run
        fail("source", f"row {lacking[0]} of {where} has no 'answer' while {len(rows) - len(lacking)} other rows "
             f"have one ({len(lacking)} rows lack it)",
             "give every row an 'answer', or none (then pass reward functions that do not need one)")
    return rows


class PromptFileNotFoundError(FileNotFoundError, ValueError):
    """A missing prompt file: a ``FileNotFoundError`` that is also the course's ``ValueError``."""


def _read_prompt_file(path: str) -> list:
    """The raw rows of a prompt file, by extension."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in PROMPT_FILE_TYPES:
        fail("source", f"unsupported file type {extension or '(none)'!r} for {path}",
             f"save the prompts as one of {', '.join(PROMPT_FILE_TYPES)}")
    if not os.path.isfile(path):
        raise PromptFileNotFoundError(
            f"source: no file at {path}. Fix: check the path (relative paths start from "
            f"{os.getcwd()}).")
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")                            # -sig: skip a spreadsheet's byte-order mark
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        fail("source", f"{path} is not UTF-8 text: line {line} holds the byte {data[error.start]:#04x}",
             "save the file as UTF-8 (a spreadsheet's 'CSV UTF-8'; iconv -f GBK -t UTF-8 for a GBK file)")
    if extension == ".csv":
        try:
            return list(csv.DictReader(io.StringIO(text, newline="")))
        except csv.Error as error:                                  # e.g. a field over csv's 131,072 characters
            fail("source", f"{path} is not a CSV file this reader can read ({error})",
                 "keep each field under 131,072 characters (a long text belongs in .jsonl), and quote fields "
                 "that hold commas or line breaks")
    if extension == ".jsonl":
        return [_parse_json(line, f"line {n} of {path}")
                for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    rows = _parse_json(text, path)
    if not isinstance(rows, list):
        fail("source", f"{path} holds a JSON {type(rows).__name__}, not a list of objects",
             'write [{"prompt": ...}, ...], or use .jsonl with one object per line')
    return rows


def _parse_json(text: str, where: str):
    """``json.loads`` whose error says which file and line was bad."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        fail("source", f"{where} is not valid JSON ({error})", "fix the JSON syntax there")


def _clean_row(row, index: int, where: str) -> dict:
    """Check one row and keep its prompt (and answer, as a string)."""
    prompt = row.get("prompt") if isinstance(row, Mapping) else None
    if not isinstance(prompt, str) or not prompt.strip():
        fail("source", f"row {index} of {where} has no non-empty string 'prompt' (got {row!r})",
             "give every row a 'prompt' field holding the question text")
    clean = {"prompt": prompt}
    if row.get("answer") is not None:
        clean["answer"] = str(row["answer"])
    return clean

from grpo_edu.training.task.words import WordsTask  # noqa: E402  (the chat task: a question in words, tags in reply)

TASKS["words"] = WordsTask(
    name="words",
    description="Word problems in English and Chinese, 'Tom has 3 apples and buys 4 more. …' or '小明有9个苹果，吃了4个，"
                "…' -> '<think>3+4=7</think><answer>7</answer>', numbers 1..9, + or -. 500 held out, 10000 to train "
                "on; the prompt is rendered by the model's chat template: the task of lesson 16 and its model, "
                "assets/tiny-words.")
