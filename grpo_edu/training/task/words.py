"""Word problems in English and Chinese, answered in tags: the task of the model with words (lesson 16).

Every other task is written in the characters of arithmetic. Here the prompt is a sentence, in one of
two languages, and the answer is free text with a shape a program can read, the shape DeepSeek-R1-Zero
asked for (arXiv:2501.12948, §2.2.1):

    prompt     Tom has 3 apples and buys 4 more. How many apples does Tom have now?
    prompt     小明有9个苹果，吃了4个，还剩几个苹果？
    answer     <think>3+4=7</think><answer>7</answer>
    answer     <think>9-4=5</think><answer>5</answer>

The numbers are small (1 to 9), the operation is + or −, chosen by the verb ("buys", "又买了" add;
"eats", "吃了" take away), so the model must read the words to know what to compute. A row holds the
question as ``prompt`` (the user's words only); the chat model sees it inside its chat template, after
the task's :data:`SYSTEM_PROMPT` (:meth:`WordsTask.messages` gives the turns, the tokenizer renders them).

Two checks, as ``sums`` has: :meth:`WordsTask.is_correct` reads the number inside ``<answer>…</answer>``
(strictly: the tag, an integer, nothing else), :meth:`WordsTask.well_formed` wants the whole shape
(:data:`FORMAT`). Standard library only, like ``tasks``: importing it stays instant.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from grpo_edu.common._checks import choice, fail, number_range, positive_int, split_sizes

SPLITS = ("train", "heldout")
SYSTEM_PROMPT = "Think, then answer: <think>working</think><answer>number</answer>"
"""The instruction every prompt opens with (the system turn)."""
FORMAT = re.compile(r"^<think>[^<>]*</think><answer>-?\d+</answer>$")
"""A well-formed answer: working inside ``<think>``, then an integer inside ``<answer>``, nothing around."""
ANSWER_TAG = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")

NAMES_EN = ("Tom", "Anna", "Ben", "Mia", "Sam", "Lucy")
NAMES_ZH = ("小明", "小红", "李雷", "韩梅梅", "小刚", "小丽")
ITEMS_EN = ("apples", "pens", "books", "cards", "eggs", "stickers")
ITEMS_ZH = (("苹果", "个"), ("铅笔", "支"), ("书", "本"), ("卡片", "张"), ("鸡蛋", "个"), ("贴纸", "张"))
TEMPLATES = {
    ("en", "+"): ("{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?",
                  "{name} had {a} {item}. A friend gave {name} {b} more. How many {item} does {name} have?"),
    ("en", "-"): ("{name} has {a} {item} and gives away {b}. How many {item} are left?",
                  "{name} had {a} {item} and lost {b}. How many {item} does {name} have now?"),
    ("zh", "+"): ("{name}有{a}{unit}{item}，又买了{b}{unit}，一共有几{unit}{item}？",
                  "{name}有{a}{unit}{item}，朋友又给了{b}{unit}，现在有几{unit}{item}？"),
    ("zh", "-"): ("{name}有{a}{unit}{item}，送给朋友{b}{unit}，还剩几{unit}{item}？",
                  "{name}有{a}{unit}{item}，丢了{b}{unit}，还剩几{unit}{item}？"),
}
"""Two sentences per language and operation; the verb says which operation."""


def working(a: int, op: str, b: int) -> str:
    """The working a student writes: ``working(3, "+", 4)`` → ``"3+4=7"``."""
    return f"{a}{op}{b}={a + b if op == '+' else a - b}"


def solution(a: int, op: str, b: int) -> str:
    """The whole answer: ``<think>3+4=7</think><answer>7</answer>``."""
    return f"<think>{working(a, op, b)}</think><answer>{a + b if op == '+' else a - b}</answer>"


REFERENCE = re.compile(r"\s*([+-]?)(\d+)(?:\.(\d+))?\s*")
"""A reference answer: an integer, or a number with a decimal part (``7.0``, a CSV's or JSON's float)."""


def _integer_text(sign: str, digits: str) -> str:
    """An integer written one way: no ``+``, no leading zeros, ASCII digits, ``-0`` as ``0``. Digit by digit, so a
    number of any length is read (``int()`` refuses past 4,300 digits)."""
    import unicodedata

    digits = "".join(str(unicodedata.digit(c)) for c in digits).lstrip("0") or "0"
    return digits if digits == "0" or sign != "-" else "-" + digits


def tagged_answer(completion: str) -> str | None:
    """The integer inside the last ``<answer>…</answer>`` (spaces around it allowed), or None."""
    found = ANSWER_TAG.findall(completion)
    if not found:
        return None
    return _integer_text("-" if found[-1].startswith("-") else "", found[-1].lstrip("-"))


def reference_answer(answer) -> str | None:
    """A reference answer as the integer the tag must hold: ``"7"``, ``7``, ``" 7 "``, ``"7.0"`` and ``7.0`` all give
    ``"7"`` (a dataset's numbers often arrive as floats). None when it is no whole number (``"7.5"``, ``"seven"``):
    no integer in a tag can equal it (:func:`check_reference_answers` refuses such rows up front)."""
    found = REFERENCE.fullmatch(str(answer))
    if found is None or (found.group(3) or "0").strip("0"):
        return None
    return _integer_text(found.group(1), found.group(2))


def check_reference_answers(answers) -> None:
    """Refuse, naming the first, reference answers that are not whole numbers: the words task's answers are
    integers in ``<answer>`` tags, so such a row's reward would be 0 whatever the model wrote."""
    for i, a in enumerate(answers):
        if reference_answer(a) is None:
            fail(f"answer (row {i})", f"is {a!r}, not a whole number, so no <answer>N</answer> can ever match it "
                 "and every reward on that row would be 0", "write each answer as an integer ('7'; '7.0' is "
                 "read as 7), or use a task whose answers may be other numbers")


@dataclass(frozen=True)
class WordsTask:
    """Word problems ``a + b`` or ``a − b`` (``a ≥ b``) with numbers in ``[low, high]``, in English and Chinese.

    The splits are drawn once from a seeded generator, without repeats: ``heldout_size`` distinct
    questions first, then ``train_size``; a question belongs to one split only (the same sum may be
    asked in other words in both). Each draw picks the language, the operation, a sentence, a name,
    an item and the two numbers uniformly.
    """

    name: str
    description: str
    low: int = 1
    high: int = 9
    heldout_size: int = 500
    train_size: int = 10_000
    seed: int = 5678
    system_prompt: str = SYSTEM_PROMPT
    max_completion_tokens: int = 24
    """New tokens a sampled answer may take: the longest worked answer is 17 tokens of the bundled BPE, then
    ``<|im_end|>``; the rest is room to ramble, so an answer that never ends is cut here."""

    def __post_init__(self):
        number_range(self.low, self.high, fix_low="pass the smallest count, 0 or more (a count is never negative)")
        split_sizes(self.heldout_size, self.train_size, distinct_questions(self.low, self.high),
                    what=f"questions with numbers in [{self.low}, {self.high}]", more="widen [low, high]")

    def split(self, split: str, n: int | None = None) -> list[dict]:
        """Rows ``{"prompt", "answer"}`` of ``split`` (the first ``n`` if given; already shuffled)."""
        choice("split", split, SPLITS)
        if n is not None:
            positive_int("n", n, fix="pass a row count ≥ 1, or n=None for the whole split")
        drawn = _drawn_rows(self)
        chosen = drawn[: self.heldout_size] if split == "heldout" else drawn[self.heldout_size:]
        return [{"prompt": p, "answer": a} for p, a, _ in chosen[:n]]

    def demonstrations(self, split: str = "train") -> list[dict]:
        """Rows ``{"prompt", "answer"}`` whose answer is the whole worked answer (:func:`solution`): what a
        warm-up shows the model."""
        choice("split", split, SPLITS)
        drawn = _drawn_rows(self)
        chosen = drawn[: self.heldout_size] if split == "heldout" else drawn[self.heldout_size:]
        return [{"prompt": p, "answer": worked} for p, _, worked in chosen]

    def messages(self, prompt: str) -> list[dict]:
        """The chat turns of one question: the system instruction, then the user's words (TRL's
        conversational ``prompt``)."""
        if not isinstance(prompt, str) or not prompt.strip():
            fail("prompt", f"must be a non-empty question string, got {prompt!r}", "pass a row's 'prompt'")
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": prompt}]

    @property
    def min_completion_tokens(self) -> int:
        """A lower bound on the tokens of a right answer: the tags and a digit, then the end token (a BPE
        merges at most this far: each tag is one token at best)."""
        return 6

    @property
    def max_answer_chars(self) -> int:
        """The longest worked answer in characters (end token not counted)."""
        return len(solution(self.high, "+", self.high))

    def is_correct(self, completion: str, answer: str) -> bool:
        """The integer in the last ``<answer>`` tag equals the answer (a number elsewhere counts for nothing); the
        answer is read as a number, so ``"7.0"`` is 7 (:func:`reference_answer`)."""
        expected = reference_answer(answer)
        return expected is not None and tagged_answer(completion) == expected

    def well_formed(self, completion: str) -> bool:
        """``<think>…</think><answer>N</answer>`` and nothing else: :data:`FORMAT`."""
        return bool(FORMAT.match(completion.strip()))

    def check_rows(self, rows: list[dict]) -> None:
        """Refuse rows whose ``answer`` no tag can match (:func:`check_reference_answers`); the trainer runs it on
        every row before training (``chat_tokenizer.render_prompts``)."""
        check_reference_answers([r["answer"] for r in rows if "answer" in r])

    def reward(self, prompts: list, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """1.0 for each correct completion, else 0.0 (TRL's reward-function protocol)."""
        if len(completions) != len(answer):
            fail("answer", f"has {len(answer)} entries for {len(completions)} completions",
                 "pass one reference answer per completion (repeat each answer G times)")
        return [1.0 if self.is_correct(c, a) else 0.0 for c, a in zip(completions, answer)]


def format_reward(prompts: list, completions: list[str], **kwargs) -> list[float]:
    """1.0 for an answer in the task's shape (:data:`FORMAT`), right or wrong, else 0.0 (R1-Zero's format reward)."""
    return [1.0 if FORMAT.match(c.strip()) else 0.0 for c in completions]


def question(rng: random.Random, low: int, high: int) -> tuple[str, str, str]:
    """One random question: ``(prompt, answer, worked answer)``."""
    language, op = rng.choice(("en", "zh")), rng.choice("+-")
    a, b = rng.randint(low, high), rng.randint(low, high)
    if op == "-" and a < b:
        a, b = b, a
    sentence = rng.choice(TEMPLATES[language, op])
    if language == "en":
        text = sentence.format(name=rng.choice(NAMES_EN), item=rng.choice(ITEMS_EN), a=a, b=b)
    else:
        item, unit = rng.choice(ITEMS_ZH)
        text = sentence.format(name=rng.choice(NAMES_ZH), item=item, unit=unit, a=a, b=b)
    return text, str(a + b if op == "+" else a - b), solution(a, op, b)


def distinct_questions(low: int, high: int) -> int:
    """How many different questions :func:`question` can write with numbers in ``[low, high]``: each
    sentence × name × item, times the number pairs (every ordered pair for ``+``, ``a ≥ b`` for ``−``)."""
    n = high - low + 1
    pairs = {"+": n * n, "-": n * (n + 1) // 2}
    fillers = {"en": len(NAMES_EN) * len(ITEMS_EN), "zh": len(NAMES_ZH) * len(ITEMS_ZH)}
    return sum(len(sentences) * fillers[language] * pairs[op] for (language, op), sentences in TEMPLATES.items())


@functools.cache
def _drawn_rows(task: WordsTask) -> tuple[tuple[str, str, str], ...]:
    """Distinct questions in the task's fixed order, held-out first: ``(prompt, answer, worked answer)``."""
    rng = random.Random(task.seed)
    seen: dict[str, tuple[str, str, str]] = {}          # a dict keeps the drawing order
    while len(seen) < task.heldout_size + task.train_size:
        row = question(rng, task.low, task.high)
        seen.setdefault(row[0], row)
    return tuple(seen.values())
