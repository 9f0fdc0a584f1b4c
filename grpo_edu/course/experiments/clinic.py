"""The diagnostics clinic (诊断门诊): sick GRPO runs made on purpose, read by ``diagnose``, then fixed.

Lessons 09 (cases 1–3) and 09b (cases 4–7) run each case below for 60 steps on the bundled model.
A case changes one thing in the default config (or the reward) to make a known illness; ``expected`` is the finding
``grpo_edu.beyond.diagnose.diagnose`` should rank first, and ``fix`` is the change that cures it.
``advice`` are the practical guide's (seed 004) troubleshooting remedies the lesson puts to
the test on the same case.

``python -m grpo_edu.course.experiments.clinic --seeds 0 1 2`` runs every case and its fix and prints, for each,
the first finding and the held-out accuracy of the sick and the fixed run: the table in the
lesson's summary, for any seed.
"""

import argparse
import json
import sys
import time
from dataclasses import dataclass, field

from grpo_edu.beyond.diagnose import diagnose
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.task.rewards import brevity_reward, combine, correctness

STEPS = 60
"""Steps of every clinic run: long enough for each illness to show, short enough for a lesson."""
EVAL_SIZE = 200
"""Held-out prompts per evaluation (sampled at τ = 1, so accuracy is the policy's, not greedy)."""
EVAL_EVERY = 20
"""Held-out evaluation at steps 0, 20, 40, 60: four points, enough for the reward-vs-accuracy rule."""


# --- rewards with a bug or a loophole, as a user might write them -----------------------------
def str_vs_int_reward(prompts, completions, answer, **kwargs):
    """A broken reward: it parses the completion to an int and compares it with ``answer``,
    which is a *string* ("46"). ``46 == "46"`` is False in Python, so it pays 0 for everything."""
    return [1.0 if c.strip().isdigit() and int(c.strip()) == a else 0.0 for c, a in zip(completions, answer)]


def brevity_if_correct(max_length=4):
    """Brevity paid only for a right answer: the gate that closes lesson 07's loophole."""
    short = brevity_reward(max_length)

    def reward(prompts, completions, answer, **kwargs):
        right = correctness(prompts, completions, answer)
        return [s * r for s, r in zip(short(prompts, completions), right)]
    reward.__name__ = reward.__qualname__ = f"brevity_if_correct(max_length={max_length})"
    return reward


REWARDS = {
    "task": None,                                                   # the task's own 0/1 reward
    "str_vs_int": combine(correctness=(str_vs_int_reward, 1.0)),
    "brevity 0.8": combine(correctness=(correctness, 0.2), brevity=(brevity_reward(4), 0.8)),
    "brevity 0.8, gated": combine(correctness=(correctness, 0.2), brevity=(brevity_if_correct(4), 0.8)),
}
"""Reward setups by name; None is the task's exact-match reward."""


@dataclass(frozen=True)
class Case:
    """One illness: the config change (and reward) that causes it, its cure, the guide's advice."""

    title: str
    sick: dict
    """GRPOConfig overrides of the sick run."""
    expected: str
    """The finding ``diagnose`` should rank first."""
    fix: dict = field(default_factory=dict)
    """Overrides of the cured run ({} = the default config)."""
    reward: str = "task"
    """Key of :data:`REWARDS` for the sick run."""
    fix_reward: str = "task"
    advice: dict = field(default_factory=dict)
    """The guide's remedies tried on the sick run: {label: (overrides, reward key)}."""
    change: str = ""
    """The one change from the default run, named by its setting and not by its illness: what a lesson shows
    before the reveal, where the title would give the diagnosis away."""


CASES = {
    "lr_10x": Case(
        "learning rate 10× too high", {"learning_rate": 3e-3}, "reward_collapse", change="learning_rate = 3e-3",
        advice={"raise the KL coefficient (β 0.04 → 0.4)": ({"learning_rate": 3e-3, "beta": 0.4}, "task")}),
    # the guide's third remedy, accumulating gradients, is not a run: its first update is the whole batch's up to
    # float rounding (lesson 09 shows it in one step), so its run is the sick run again
    "broken_reward": Case("a broken reward (str compared with int)", {}, "reward_always_zero",
                          reward="str_vs_int", change="a reward function of the user's own"),
    "cold": Case(
        "temperature too low (τ = 0.3)", {"temperature": 0.3}, "no_reward_signal", change="temperature = 0.3",
        advice={"raise G (8 → 16)": ({"temperature": 0.3, "num_generations": 16}, "task"),
                "lower the KL coefficient (β 0.04 → 0)": ({"temperature": 0.3, "beta": 0.0}, "task"),
                "raise the temperature (0.3 → 0.7)": ({"temperature": 0.7}, "task")}),
    "G2": Case("G = 2", {"num_generations": 2}, "few_live_groups", change="num_generations = 2",
               advice={"G = 2 with 4× the prompts (batch_size 64)": ({"num_generations": 2, "batch_size": 64},
                                                                      "task")}),
    "beta_10": Case("β too large (β = 10)", {"beta": 10.0}, "no_progress", change="beta = 10"),
    "truncated": Case("answers cut off (max_completion_length = 2)", {"max_completion_length": 2},
                      "completion_truncated", change="max_completion_length = 2"),
    "hackable": Case("a hackable reward (brevity weighted 0.8)", {}, "reward_up_accuracy_down",
                     reward="brevity 0.8", fix_reward="brevity 0.8, gated",
                     change="reward 0.2 × correctness + 0.8 × brevity"),
}
"""The lesson's cases, in its order."""


def config(overrides, *, seed=0, steps=STEPS, **more):
    """The clinic's GRPOConfig: the defaults, ``steps`` steps, held-out evals every 20 steps."""
    return GRPOConfig(**{"total_training_steps": steps, "eval_size": EVAL_SIZE, "eval_every": EVAL_EVERY,
                         "seed": seed, **overrides, **more})


def run(overrides=None, reward="task", *, seed=0, steps=STEPS, progress=False):
    """Train one clinic run and return its trainer (``.history``, ``.evals``, ``.config``)."""
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    if reward not in REWARDS:
        raise ValueError(f"reward: unknown setup {reward!r}. Fix: use one of {', '.join(map(repr, REWARDS))}.")
    composite = REWARDS[reward]
    trainer = GRPOTrainer(config(overrides or {}, seed=seed, steps=steps),
                          reward_funcs=None if composite is None else composite.reward_funcs,
                          reward_weights=None if composite is None else composite.reward_weights)
    trainer.train(progress=progress)
    return trainer


class Runs(dict):
    """Runs by (overrides, reward), each trained once: cases share their cure (the default run)."""

    def __init__(self, seed=0, steps=STEPS):
        super().__init__()
        self.seed, self.steps = seed, steps

    def get_run(self, overrides=None, reward="task"):
        key = (json.dumps(overrides or {}, sort_keys=True), reward)
        if key not in self:
            self[key] = run(overrides, reward, seed=self.seed, steps=self.steps)
        return self[key]


def heldout_gain(trainer):
    """Held-out accuracy at the end minus at the start (step 0)."""
    return trainer.evals[-1]["accuracy"] - trainer.evals[0]["accuracy"]


def first_finding(trainer):
    """The name of the finding ``diagnose`` ranks first, or "none"."""
    findings = diagnose(trainer.history, trainer.evals, config=trainer.config)
    return findings[0].name if findings else "none"


def report(seed=0, names=None, *, steps=STEPS, out=sys.stdout):
    """Run each case and its cure for ``seed``; print and return one row per case."""
    unknown = [n for n in names or () if n not in CASES]
    if unknown:
        raise ValueError(f"names: unknown case(s) {unknown}. Fix: use names from clinic.CASES: {list(CASES)}.")
    runs, rows = Runs(seed, steps), []
    for name in names or CASES:
        case = CASES[name]
        start = time.time()
        sick, cured = runs.get_run(case.sick, case.reward), runs.get_run(case.fix, case.fix_reward)
        row = {"seed": seed, "case": name, "first finding": first_finding(sick), "expected": case.expected,
               "sick: held-out start": sick.evals[0]["accuracy"], "sick: end": sick.evals[-1]["accuracy"],
               "fixed: end": cured.evals[-1]["accuracy"], "fixed: first finding": first_finding(cured)}
        for label, (overrides, reward) in case.advice.items():
            row[f"advice: {label}: end"] = runs.get_run(overrides, reward).evals[-1]["accuracy"]
        rows.append(row)
        print(json.dumps(row, ensure_ascii=False), f"({time.time() - start:.0f} s)", file=out, flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.clinic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=None)
    args = parser.parse_args(argv)
    bad = 0
    for seed in args.seeds:
        for row in report(seed, args.cases):
            bad += row["first finding"] != row["expected"]
    print(f"{bad} case(s) where diagnose's first finding was not the expected one")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
