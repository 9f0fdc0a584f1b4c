"""The answer pulled out of free text, in two grades, and what each gets wrong.

A chat model answers in words: ``<think>Tom has 3, buys 4 more: 3 + 4 = 7</think><answer>7</answer>``. The
reward needs one number from it, and the way it is pulled out decides which answers count as right:

* :func:`strict_answer` reads only the ``<answer>…</answer>`` tag, and only when the tag holds a bare number.
  It marks RIGHT answers WRONG whenever the form slips: a correct number written without the tag, a tag
  holding words (``<answer>7 apples</answer>``), an answer cut before its closing tag. It pays, too, an answer
  that closed its tag and then rambled to the length cap without its end token: the model never finished.
* :func:`lenient_answer` takes the last number anywhere in the text. It marks WRONG answers RIGHT: an answer
  cut off mid-working whose last number happens to be the result (the model never answered), a number
  written after the tag (``<answer>8</answer> or 7``), the right number inside the working followed by no
  answer at all.

CS336's grader and Raschka's chapter 3 parser make the two choices; lesson 16's clinic counts both kinds of
mistake on the same sampled answers (:func:`grader_disagreement`).
"""

from __future__ import annotations

import re

from grpo_edu.common._checks import fail

OPEN, CLOSE = "<answer>", "</answer>"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
"""A number as the course's tasks write them: an optional minus, digits, an optional decimal part."""
BARE_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*")


def first_tag(text):
    """What the first ``<answer>…</answer>`` holds (the first ``<answer>``, up to the next ``</answer>``), or None.

    Two ``str.find`` calls, so linear in the text: when the first ``<answer>`` has no ``</answer>`` after it, no
    later one has either. (A regex search ``<answer>(.*?)</answer>`` gives the same span, but retries from every
    ``<answer>`` to the end of the text: quadratic on a long run of unclosed tags, 14 s for 20,000 of them.)"""
    start = text.find(OPEN)
    if start < 0:
        return None
    end = text.find(CLOSE, start + len(OPEN))
    return None if end < 0 else text[start + len(OPEN):end]


def strict_answer(text):
    """The number inside the first ``<answer>`` tag when the tag holds nothing else; else None."""
    inside = first_tag(text)
    if inside is None:
        return None
    bare = BARE_NUMBER.fullmatch(inside)
    return bare.group(1) if bare else None


def lenient_answer(text):
    """The last number anywhere in the text; None when it has none."""
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else None


def careful_answer(text, ended):
    """The answer a careful reader takes, the reference both grades are measured against: none when the answer
    was cut before its end token (``ended`` False: the model never answered); else the one number inside the
    ``<answer>`` tag, words around it allowed (``7 apples``); with no tag, the one number written after
    ``</think>``. Two numbers where one is wanted, or none: None (no answer given)."""
    if not ended:
        return None
    tag = first_tag(text)
    where = tag if tag is not None else text.split("</think>")[-1] if "</think>" in text else ""
    numbers = NUMBER.findall(where)
    return numbers[0] if len(numbers) == 1 else None


GRADERS = {"strict": strict_answer, "lenient": lenient_answer}
"""grade → its extractor."""


def same_number(got, answer):
    """Whether two numbers written as text are equal (``"7"``, ``"7.0"``, ``" 7 "``): each must be a number as
    :data:`NUMBER` writes it, and they are compared exactly, as decimals (``decimal.Decimal``). Not as floats: a
    float keeps about 16 digits, so ``12345678901234567891`` would equal ``…890``, ``7.0000000000000001`` would
    equal ``7``, and two 400-digit numbers would both be infinity."""
    from decimal import Decimal

    if got is None:
        return False
    got, answer = str(got).strip(), str(answer).strip()
    if not (NUMBER.fullmatch(got) and NUMBER.fullmatch(answer)):
        return False
    return Decimal(got) == Decimal(answer)


def is_right(text, answer, grade="strict"):
    """Whether ``text`` answers ``answer`` under ``grade`` ("strict" or "lenient")."""
    from grpo_edu.common._checks import choice

    choice("grade", grade, tuple(GRADERS))
    return same_number(GRADERS[grade](text), answer)


def answer_reward(grade="strict"):
    """A reward function (TRL's signature) paying 1.0 when the answer is right under ``grade``; it reads
    completions as strings or as TRL's conversational ``[{"role": "assistant", …}]``."""
    from grpo_edu.training.text.chat import completion_text

    def reward(prompts, completions, answer, **kwargs):
        if len(completions) != len(answer):
            fail("answer", f"has {len(answer)} entries for {len(completions)} completions",
                 "pass one reference answer per completion (repeat each answer G times)")
        return [float(is_right(completion_text(c), a, grade)) for c, a in zip(completions, answer)]

    reward.__name__ = f"{grade}_answer"
    return reward


def grader_disagreement(texts, answers, ended):
    """Both grades on the same answers, against :func:`careful_answer` (``ended``: which answers wrote their end
    token). Returns ``(counts, info)``: ``counts[grade] = {"right_marked_wrong", "wrong_marked_right"}`` and
    ``info["disagree"]``, how many answers the two grades score differently."""
    if not len(texts) == len(answers) == len(ended):
        fail("ended", f"texts, answers and ended have {len(texts)}, {len(answers)} and {len(ended)} entries",
             "pass one answer and one ended flag per text")
    counts, marks = {}, {}
    truth = [same_number(careful_answer(t, e), a) for t, a, e in zip(texts, answers, ended)]
    for grade, extract in GRADERS.items():
        marks[grade] = [same_number(extract(t), a) for t, a in zip(texts, answers)]
        counts[grade] = {"right_marked_wrong": sum(t and not m for t, m in zip(truth, marks[grade])),
                         "wrong_marked_right": sum(m and not t for t, m in zip(truth, marks[grade]))}
    return counts, {"disagree": sum(a != b for a, b in zip(marks["strict"], marks["lenient"])), "marks": marks, "truth": truth}
