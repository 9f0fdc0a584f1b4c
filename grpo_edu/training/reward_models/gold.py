"""The gold judge: what we really want from an answer, as a program with several facets.

Gao et al. (2022) use a large reward model as "gold"; here the gold is exact and cheap, so a learner can
watch it while a learned proxy is optimised. For the ``sums`` task (``a+b+…=``) an answer earns

    gold = 1.0 · [the answer after the last ``#`` is right]
         + 0.5 · [it shows working, and every step of it is right]     (``SumsTask.working_is_right``)
         − 0.5 · [it is longer than the careful student's worked solution]   (a sensible length)
         − 0.5 · [it is not in the task's format]

so a right answer with right working scores 1.5, a right direct answer 1.0, right working that ends in a
wrong sum 0.5, junk −0.5 or −1.0. The proxy reward model never sees this function, only pairs that it
ordered (``preference_data``): whatever the pairs do not pin down, the proxy may value wrongly.
"""

import math
import numbers

from grpo_edu.common import _checks
from grpo_edu.training.task.sums import SumsTask, terms_of, worked_solution

FACETS = ("answer", "working", "length", "format")


class SumsGoldJudge:
    """``judge(prompts, completions, answer)`` → gold scores (a reward function, TRL's protocol); see the module doc.

    ``weights``: {facet: weight} for :data:`FACETS` (the module doc's 1.0, 0.5, −0.5, −0.5 by default)."""

    __name__ = "gold"

    def __init__(self, task=None, weights=None):
        self.task = task or SumsTask("sums", "")
        self.weights = {"answer": 1.0, "working": 0.5, "length": -0.5, "format": -0.5, **(weights or {})}
        for facet, w in self.weights.items():
            _checks.choice("weights", facet, FACETS)
            _checks.finite_float(f"weights[{facet!r}]", w)

    def facets(self, prompt, completion, answer):
        """{facet: 0 or 1} for one answer: right answer, right working shown, too long, malformed."""
        c = completion.strip()
        return {"answer": int(self.task.is_correct(c, answer)),
                "working": int(";" in c or "=" in c.split("#")[0]) * int(self.task.working_is_right(prompt, c)),
                "length": int(len(c) > len(worked_solution(terms_of(prompt)))),
                "format": int(not self.task.well_formed(c))}

    def __call__(self, prompts, completions, answer, **kwargs):
        if len(answer) != len(completions):
            _checks.fail("answer", f"has {len(answer)} entries for {len(completions)} completions",
                         "pass one reference answer per completion")
        return [sum(self.weights[f] * v for f, v in self.facets(p, c, a).items())
                for p, c, a in zip(prompts, completions, answer)]


def gold_scores(judge, prompts, completions, answers):
    """The judge's scores, checked: one finite number per completion, or an error naming ``gold``."""
    values = judge(prompts=list(prompts), completions=list(completions), answer=list(answers))
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) != len(completions):
        _checks.fail("gold", f"returned {type(values).__name__} {values!r:.60}, not {len(completions)} numbers",
                     "make the judge return one float per completion")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            _checks.fail("gold", f"returned {v!r} for completion {i}, not a finite number",
                         "make the judge return a float for every completion (no text, None or NaN)")
    return [float(v) for v in values]
