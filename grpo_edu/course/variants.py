"""GRPO's variants side by side, on lesson 11's model: ``python -m grpo_edu.course.variants --seeds 0 1 2``.

Every variant trains the same model (``assets/tiny-sums``, the ``sums`` preset) on the same prompts
for the same number of steps, and is scored the same way. All of them make two updates per batch
(``num_iterations=2``): with one, GSPO, CISPO and SAPO have exactly GRPO's gradient (the policy has
not moved from the sampler yet), and the race would only show that. The variants are the
settings a learner meets in TRL and verl (``VARIANTS``); lesson 12 reads them.

Per run: held-out accuracy at τ = 1 before and after (pass@1), pass@8 after, the mean length of
right and wrong answers, the entropy, the share cut at the length limit, the share of dead groups
(each over the last quarter of the steps), the completions generated (dynamic sampling draws more)
and the wall time.
"""

import argparse
import statistics
import time

COMMON = dict(batch_size=8, num_generations=8, num_iterations=2, total_training_steps=16, eval_size=200)
"""The race's budget: the ``sums`` preset with 8 prompts × 8 answers, two updates per batch, 16 steps."""

VARIANTS = {
    "grpo": {},
    "dr_grpo": dict(loss_type="dr_grpo", scale="none"),
    "dapo": dict(loss_type="dapo", epsilon_high=0.28, mask_truncated_completions=True, dynamic_sampling=True),
    "gspo": dict(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    "cispo": dict(loss_type="cispo", epsilon_high=5.0),
    "sapo": dict(loss_type="sapo"),
    "rloo": dict(advantage_estimator="rloo"),
    "reinforce++": dict(advantage_estimator="reinforce_plus_plus_baseline"),
}
"""Each variant's settings on top of :data:`COMMON` (TRL's names; see the README's variants table)."""

METRICS = ("before", "after", "pass@8", "len_right", "len_wrong", "entropy", "truncated", "dead", "generated", "seconds")


def run_variant(name, seed=0, *, steps=None, eval_size=None, progress=False):
    """Train variant ``name`` from the bundled sums model; return its row of :data:`METRICS`.
    ``steps`` and ``eval_size`` (held-out prompts) override :data:`COMMON`'s."""
    from grpo_edu.training.config import GRPOConfig
    from grpo_edu.training.trainer import GRPOTrainer

    if name not in VARIANTS:
        raise ValueError(f"name: unknown variant {name!r}. Fix: use one of {', '.join(VARIANTS)}.")
    settings = {**COMMON, **VARIANTS[name], "seed": seed}
    if steps is not None:
        settings["total_training_steps"] = steps
    if eval_size is not None:
        settings["eval_size"] = eval_size
    trainer = GRPOTrainer(GRPOConfig.preset("sums", **settings))
    start = time.perf_counter()
    trainer.train(progress=progress)
    seconds = time.perf_counter() - start
    history = trainer.history
    tail = history[-max(1, len(history) // 4):]                       # the last quarter of the steps

    def mean(key):
        values = [m[key] for m in tail if m.get(key) is not None]
        return sum(values) / len(values) if values else float("nan")
    eight = trainer.evaluate(num_samples=8)["samples"]
    solved = [any(s[3] for s in eight[i:i + 8]) for i in range(0, len(eight), 8)]
    generated = sum(m.get("sampled_groups", settings["batch_size"]) * settings["num_generations"] for m in history)
    return {"before": trainer.evals[0]["accuracy"], "after": trainer.evals[-1]["accuracy"],
            "pass@8": sum(solved) / len(solved), "len_right": mean("completion_length_correct"),
            "len_wrong": mean("completion_length_wrong"), "entropy": mean("entropy"),
            "truncated": mean("truncated_fraction"), "dead": mean("dead_group_fraction"), "generated": generated,
            "seconds": seconds}


def race(names=tuple(VARIANTS), seeds=(0,), *, steps=None, progress=False):
    """{variant: [row per seed]} for every variant and seed (see :func:`run_variant`)."""
    return {name: [run_variant(name, seed, steps=steps, progress=progress) for seed in seeds] for name in names}


def format_table(results):
    """One line per variant: the median over seeds, then [min, max] when there are several."""
    def cell(values):
        med = statistics.median(values)
        return f"{med:.4g}" if len(values) == 1 else f"{med:.4g} [{min(values):.4g}, {max(values):.4g}]"
    table = [["variant", *METRICS]] + [[name, *(cell([r[m] for r in rows]) for m in METRICS)]
                                       for name, rows in results.items()]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="default: 0")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=None, help=f"default {COMMON['total_training_steps']}")
    parser.add_argument("--json", metavar="FILE", help="also write every run's row as JSON")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be ≥ 1")
    start = time.perf_counter()
    results = race(args.variants, args.seeds, steps=args.steps, progress=True)
    print(format_table(results))
    print(f"{len(args.variants)} variants × {len(args.seeds)} seeds in {time.perf_counter() - start:.0f} s")
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
