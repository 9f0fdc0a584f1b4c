"""A reward for the answer's shape, ``<think>…</think><answer>…</answer>``, by a regular expression.

DeepSeek-R1's recipe pays a small format reward beside the answer's reward, so that the model keeps its working
and its answer apart where a parser can find them. The regex decides what "the format" is, and a regex that
wants other than the model writes pays nothing, ever: unsloth #1761 reports format rewards always 0 (a pattern
without ``re.DOTALL``, broken by the newlines the model wrote inside the tags), dllm #118 a strict format that
wants a newline after ``</answer>``, so an answer ending at the tag scores 0. :data:`NEWLINE_FORMAT` wants a
newline after each tag, which the words model does not write. A reward
that is 0 for every answer of every group gives every advantage 0 (lesson 03): GRPO learns nothing from it,
and no error is raised. Lesson 16's clinic measures it; the cure is to check the regex on the model's own
samples before training (:func:`match_share`).
"""

from __future__ import annotations

import re

FORMAT = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.S)
"""The shape, whitespace allowed between and around the parts: what the course pays for."""
NEWLINE_FORMAT = re.compile(r"<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>", re.S)
"""The shape with a newline required after every opening tag and before every closing one (open-r1's format
reward moved to such a pattern, its PR #418), which a model that writes ``<think>3+4=7</think><answer>7</answer>``
never matches."""


def format_reward(pattern=FORMAT, *, weight=1.0):
    """A reward function (TRL's signature) paying ``weight`` for a completion that ``pattern`` matches whole
    (``fullmatch``: nothing before or after), else 0. Completions as strings or TRL's assistant messages."""
    from grpo_edu.training.text.chat import completion_text

    pattern = re.compile(pattern) if isinstance(pattern, str) else pattern

    def shape(prompts, completions, **kwargs):
        return [weight if pattern.fullmatch(completion_text(c)) else 0.0 for c in completions]

    shape.__name__ = "format"
    return shape


def match_share(pattern, texts):
    """The share of ``texts`` that ``pattern`` matches whole: check a format regex on the model's own samples
    before a run (0.0 means the reward is 0 for every answer: no signal)."""
    pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
    return sum(bool(pattern.fullmatch(t)) for t in texts) / max(len(texts), 1)
