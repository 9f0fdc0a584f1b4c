"""GRPO's variants side by side, on lesson 11's model: ``grpo-edu variants --seeds 0 1 2``
(or ``python -m grpo_edu.course.variants --seeds 0 1 2``).

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

METRICS = ("before", "after", "pass@8", "len_right", "len_wrong", "entropy", "truncated", "dead", "clip", "generated",
           "seconds")


def run_variant(name, seed=0, *, steps=None, eval_size=None, progress=False):
    """Train variant ``name`` from the bundled sums model: (row, info).

    ``row``: :data:`METRICS` plus ``clip`` (the share of tokens the clip or gate bound, last quarter)
    and ``curve`` (the training reward per step). ``info``: ``trainer`` (its ``history`` and ``model``).
    ``steps`` and ``eval_size`` (held-out prompts) override :data:`COMMON`'s.
    """
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
    row = {"before": trainer.evals[0]["accuracy"], "after": trainer.evals[-1]["accuracy"],
           "pass@8": sum(solved) / len(solved), "len_right": mean("completion_length_correct"),
           "len_wrong": mean("completion_length_wrong"), "entropy": mean("entropy"),
           "truncated": mean("truncated_fraction"), "dead": mean("dead_group_fraction"), "generated": generated,
           "seconds": seconds, "clip": mean("clip_fraction"), "curve": [m["reward_mean"] for m in history]}
    return row, {"trainer": trainer}


def race(names=tuple(VARIANTS), seeds=(0,), *, steps=None, progress=False):
    """{variant: [row per seed]} for every variant and seed (see :func:`run_variant`); each row also
    holds its ``seed``."""
    return {name: [{**run_variant(name, seed, steps=steps, progress=progress)[0], "seed": seed} for seed in seeds]
            for name in names}


RACE_DIR = "variants-race"
"""The folder under ``assets/`` that holds stored races (``--json`` files), read by :func:`stored_race`."""


def stored_race(folder=None):
    """Every stored race under ``assets/variants-race`` (or ``folder``), merged: ({variant: [rows]}, info).

    Each row gains ``kernels``, the CPU kernels it ran on (``torch.backends.cpu.get_cpu_capability()``,
    "DEFAULT" under ``ATEN_CPU_CAPABILITY=default``); ``info`` lists the files, their commands, seeds and
    kernels. Lesson 12 reads the full race from here: eight variants over three seeds and two kernel
    sets take about 20 minutes of one core, far beyond a lesson's three.
    """
    import json
    from pathlib import Path

    from grpo_edu.common import _checks
    from grpo_edu.training.models import ASSETS

    folder = Path(folder) if folder is not None else ASSETS / RACE_DIR
    files = sorted(folder.glob("*.json"))
    if not files:
        _checks.fail("folder", f"holds no race file (*.json) at {folder}",
                     "make one with python -m grpo_edu.course.variants --seeds 0 1 2 --json FILE")
    merged, info = {}, {"files": []}
    for path in files:
        stored = json.loads(path.read_text(encoding="utf-8"))
        for name, rows in stored["results"].items():
            merged.setdefault(name, []).extend({**row, "kernels": stored["cpu_capability"]} for row in rows)
        info["files"].append({"file": path.name, "command": stored["command"], "kernels": stored["cpu_capability"],
                              "seeds": sorted({row["seed"] for rows in stored["results"].values() for row in rows})})
    return merged, info


def step_times(names=tuple(VARIANTS), *, steps=6, warmup=2, seed=0):
    """Seconds per training step of each variant, run one after another in this process (no
    evaluation): {variant: {"s_per_step", "completions_per_step", "vs_grpo"}}. The race's own
    ``seconds`` include evaluation and, when races run side by side, other processes' load; this
    is the clean comparison (``grpo-edu variants --time``)."""
    from grpo_edu.training.config import GRPOConfig
    from grpo_edu.training.trainer import GRPOTrainer

    out = {}
    for name in names:
        settings = {**COMMON, **VARIANTS[name], "seed": seed, "eval_size": 0, "total_training_steps": warmup + steps}
        trainer = GRPOTrainer(GRPOConfig.preset("sums", **settings))
        for _ in range(warmup):
            trainer.step()
        start = time.perf_counter()
        metrics = [trainer.step() for _ in range(steps)]
        seconds = (time.perf_counter() - start) / steps
        sampled = sum(m.get("sampled_groups", settings["batch_size"]) for m in metrics) / steps
        out[name] = {"s_per_step": seconds, "completions_per_step": sampled * settings["num_generations"]}
    base = out.get("grpo", next(iter(out.values())))["s_per_step"]
    for row in out.values():
        row["vs_grpo"] = row["s_per_step"] / base
    return out


def _cell(values):
    """median [min, max] of a metric over runs (just the value for one run)."""
    med = statistics.median(values)
    return f"{med:.4g}" if len(values) == 1 else f"{med:.4g} [{min(values):.4g}, {max(values):.4g}]"


def summary_rows(results, metrics=METRICS):
    """One dict per variant: each metric as "median [min, max]" over its runs (for ``viz.Table``)."""
    return [{"variant": name, **{m: _cell([r[m] for r in rows]) for m in metrics}} for name, rows in results.items()]


def format_table(results):
    """One line per variant: the median over seeds, then [min, max] when there are several."""
    rows = summary_rows(results)
    table = [["variant", *METRICS]] + [[row["variant"], *(row[m] for m in METRICS)] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def _check_args(parser, args):
    """Every argument, before the race (a 20-minute race must not end on a bad --json path)."""
    from grpo_edu.common import _checks

    seeds = args.seeds if args.seeds is not None else [0]
    for seed in seeds:
        if seed < 0:
            parser.error(f"--seeds: {seed} is negative. Fix: give seeds of 0 or more, e.g. --seeds 0 1 2")
    for flag, values in (("--seeds", seeds), ("--variants", args.variants)):
        twice = sorted({v for v in values if values.count(v) > 1}, key=str)
        if twice:
            parser.error(f"{flag}: {twice[0]} is given twice, so its runs would be counted twice. Fix: give each once")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps: is {args.steps}. Fix: give 1 or more (default {COMMON['total_training_steps']})")
    if args.time and args.json:
        parser.error("--json: --time writes no file (it prints each variant's step time). Fix: drop --json, or "
                     "drop --time to race and write the rows")
    if args.time and args.seeds is not None:
        parser.error("--seeds: --time times seed 0 only. Fix: drop --seeds, or drop --time to race over seeds")
    if args.overwrite and not args.json:
        parser.error("--overwrite: replaces the --json file, but no --json is given. Fix: drop --overwrite, or "
                     "add --json FILE")
    if args.json:
        problem = _checks.output_file_problem(args.json, overwrite=args.overwrite)
        if problem:
            parser.error(f"--json: {problem[0]}. Fix: {problem[1]}")
    args.seeds = seeds


def main(argv=None):
    parser = argparse.ArgumentParser(prog="grpo-edu variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=None, help=f"default {COMMON['total_training_steps']}")
    parser.add_argument("--json", metavar="FILE", help="also write every run's row as JSON (an existing file is "
                                                       "refused unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="let --json replace an existing file")
    parser.add_argument("--time", action="store_true",
                        help="instead of the race, time each variant's training step (seed 0, no evaluation)")
    args = parser.parse_args(argv)
    _check_args(parser, args)
    if args.time:
        rows = step_times(args.variants, steps=args.steps or 6)
        for name, row in rows.items():
            print(f"{name:12s} {row['s_per_step']:.3f} s/step  {row['vs_grpo']:.2f}× grpo  "
                  f"{row['completions_per_step']:.0f} completions/step")
        return 0
    start = time.perf_counter()
    results = race(args.variants, args.seeds, steps=args.steps, progress=True)
    print(format_table(results))
    print(f"{len(args.variants)} variants × {len(args.seeds)} seeds in {time.perf_counter() - start:.0f} s")
    if args.json:
        import json

        import sys

        import torch

        stored = {"command": "grpo-edu variants " + " ".join(sys.argv[1:] if argv is None else argv),
                  "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                  "results": results}
        from grpo_edu.common import _checks

        written = _checks.write_result_file(args.json, json.dumps(stored, indent=1), overwrite=args.overwrite)
        if str(written) != args.json:
            print(f"{args.json} appeared during the race (another run?): kept it, and wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
