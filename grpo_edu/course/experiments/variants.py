"""GRPO's variants side by side, on lesson 11's model: ``grpo-edu variants --seeds 0 1 2``
(or ``python -m grpo_edu.course.experiments.variants --seeds 0 1 2``).

Every variant trains the same model (``assets/tiny-sums``, the ``sums`` preset) on the same prompts
for the same number of steps, and is scored the same way. All of them make two updates per batch
(``num_iterations=2``): with one, GSPO, CISPO and SAPO have exactly GRPO's gradient (the policy has
not moved from the sampler yet), and the race would only show that. The variants are the
settings a learner meets in TRL and verl (``VARIANTS``); lesson 12 reads them.

Per run: held-out accuracy at τ = 1 before and after (pass@1), pass@8 after, the mean length of
right and wrong answers, the entropy, the share cut at the length limit, the share of dead groups
and the share of tokens the clip or gate bound (each the mean over the last quarter of the steps,
:func:`tail_window`: steps 13–16 of 16, where the linear schedule runs at ≤ 25 % of the peak learning
rate), the completions generated (dynamic sampling draws more) and the wall time.
"""

import argparse
import functools
import math
import statistics
import time

COMMON = dict(batch_size=8, num_generations=8, num_iterations=2, total_training_steps=16, eval_size=200)
"""The race's budget: the ``sums`` preset with 8 prompts × 8 answers, two updates per batch, 16 steps."""

VARIANTS = {
    "grpo": {},
    "dr_grpo": dict(loss_type="dr_grpo", scale="none"),
    "dapo": dict(loss_type="dapo", epsilon_high=0.28, mask_truncated_completions=True, dynamic_sampling=True),
    "gspo": dict(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    "dapo_loss": dict(loss_type="dapo"),
    "cispo": dict(loss_type="cispo", epsilon_high=5.0),
    "sapo": dict(loss_type="sapo"),
    "rloo": dict(advantage_estimator="rloo"),
    "reinforce++": dict(advantage_estimator="reinforce_plus_plus_baseline"),
}
"""Each variant's settings on top of :data:`COMMON` (``GRPOConfig`` fields; lesson 12's map gives TRL's names).
``dapo_loss`` is a control, not a published variant: DAPO's token-level mean alone (no clip-higher, no
masking, no dynamic sampling), the aggregation CISPO uses, so that CISPO can be compared with it."""

METRICS = ("before", "after", "pass@8", "len_right", "len_wrong", "entropy", "truncated", "dead", "clip", "generated",
           "seconds")


def run_variant(name, seed=0, *, steps=None, eval_size=None, progress=False):
    """Train variant ``name`` from the bundled sums model: (row, info).

    ``row``: :data:`METRICS` plus ``clip`` (the share of tokens the clip or gate bound, last quarter)
    and ``curve`` (the training reward per step). ``info``: ``trainer`` (its ``history`` and ``model``).
    ``steps`` and ``eval_size`` (held-out prompts) override :data:`COMMON`'s.
    """
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

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


def tail_window(total_steps=None):
    """The steps the race's last-quarter metrics average over, and the learning rate there:
    {"first", "last", "lr_share_first", "lr_share_last"} (shares of the peak rate, under the ``sums``
    preset's linear decay to 0). For the race's 16 steps: steps 13–16, at 25 % down to 6 % of the peak."""
    from grpo_edu.core.schedule import learning_rate_at

    total = COMMON["total_training_steps"] if total_steps is None else total_steps
    first = total - max(1, total // 4) + 1
    return {"first": first, "last": total, "lr_share_first": learning_rate_at(first, total, 1.0),
            "lr_share_last": learning_rate_at(total, total, 1.0)}


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
    kernels. The variants come in the order of :data:`VARIANTS`. Lesson 12 reads the full race from here:
    nine settings over three seeds and two kernel sets take about 25 minutes of one core, far beyond a
    lesson's three.
    """
    import json
    from pathlib import Path

    from grpo_edu.common import _checks
    from grpo_edu.training.model.models import ASSETS

    folder = Path(folder) if folder is not None else ASSETS / RACE_DIR
    files = sorted(folder.glob("*.json"))
    if not files:
        _checks.fail("folder", f"holds no race file (*.json) at {folder}",
                     "make one with python -m grpo_edu.course.experiments.variants --seeds 0 1 2 --json FILE")
    merged, info = {}, {"files": []}
    for path in files:
        stored = json.loads(path.read_text(encoding="utf-8"))
        for name, rows in stored["results"].items():
            merged.setdefault(name, []).extend({**row, "kernels": stored["cpu_capability"]} for row in rows)
        info["files"].append({"file": path.name, "command": stored["command"], "kernels": stored["cpu_capability"],
                              "seeds": sorted({row["seed"] for rows in stored["results"].values() for row in rows})})
    order = [*VARIANTS, *sorted(set(merged) - set(VARIANTS))]                  # the order of VARIANTS, not of the files
    return {name: merged[name] for name in order if name in merged}, info


def step_times(names=tuple(VARIANTS), *, steps=6, warmup=2, seed=0):
    """Seconds per training step of each variant, run one after another in this process (no
    evaluation): {variant: {"s_per_step", "completions_per_step", "vs_grpo"}}. The race's own
    ``seconds`` include evaluation and, when races run side by side, other processes' load; this
    is the clean comparison (``grpo-edu variants --time``)."""
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

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


def per_seed(results, key="after"):
    """{variant: {seed: value}}: each seed's ``key``, the mean over the kernel sets it ran on.

    The seed is what makes two runs independent (other prompts' samples, another trajectory); the
    two kernel sets replay the same seed and agree to the digit in almost every case
    (:func:`kernel_agreement`), so they count as one run, not two.
    """
    out = {}
    for name, rows in results.items():
        values = {}
        for row in rows:
            values.setdefault(row["seed"], []).append(row[key])
        out[name] = {seed: sum(v) / len(v) for seed, v in sorted(values.items())}
    return out


def kernel_agreement(results, key="after"):
    """How often the kernel sets gave the same ``key`` for the same (variant, seed):
    {"pairs", "same", "differing": [(variant, seed, largest gap)]}. Only (variant, seed) pairs
    run on more than one kernel set count."""
    pairs, differing = 0, []
    for name, rows in results.items():
        by_seed = {}
        for row in rows:
            by_seed.setdefault(row["seed"], []).append(row[key])
        for seed, values in sorted(by_seed.items()):
            if len(values) < 2:
                continue
            pairs += 1
            if max(values) != min(values):
                differing.append((name, seed, max(values) - min(values)))
    return {"pairs": pairs, "same": pairs - len(differing), "differing": differing}


def paired_differences(results, key="after", baseline="grpo"):
    """{variant: {seed: value − baseline's value on the same seed}} for every variant but ``baseline``.

    Pairing by seed removes what the seed does to every variant alike (the prompts drawn, the
    model's luck on them), so the spread of these differences is the noise a comparison has to
    beat. Only seeds the baseline also ran are kept.
    """
    values = per_seed(results, key)
    if baseline not in values:
        from grpo_edu.common import _checks

        _checks.fail("baseline", f"{baseline!r} is not in the race (it holds {', '.join(values)})",
                     "pass a variant the race ran, e.g. baseline='grpo'")
    base = values[baseline]
    return {name: {seed: v - base[seed] for seed, v in seeds.items() if seed in base}
            for name, seeds in values.items() if name != baseline}


RESOLVED = 0.10
"""The rule lesson 12 reads its three seeds by: a mean paired difference under 10 points of accuracy is
"unresolved". A convention sized to the race, not a test: one paired difference varies by about 5 points
(:func:`pooled_spread`), and :func:`verdict` also asks every seed to agree in sign."""


def verdict(differences, resolved=RESOLVED):
    """"ahead" or "behind" when every paired difference has that sign and their mean is at least
    ``resolved`` in size; otherwise "unresolved". ``differences``: the per-seed differences of one
    variant (a list, or {seed: difference})."""
    diffs = list(differences.values()) if isinstance(differences, dict) else list(differences)
    if not diffs:
        from grpo_edu.common import _checks

        _checks.fail("differences", "is empty", "pass one variant's per-seed differences (paired_differences)")
    mean = sum(diffs) / len(diffs)
    if all(d < 0 for d in diffs) and mean <= -resolved:
        return "behind"
    if all(d > 0 for d in diffs) and mean >= resolved:
        return "ahead"
    return "unresolved"


def pooled_spread(differences):
    """The standard deviation of a paired difference, pooled over variants: √(Σ (d − d̄_variant)² / Σ (n − 1)).

    ``differences``: {variant: {seed: difference}} (:func:`paired_differences`). Each variant's
    mean is taken out first, so a real gap between variants does not count as noise; a variant
    with one seed adds nothing.
    """
    squares, dof = 0.0, 0
    for diffs in differences.values():
        d = list(diffs.values()) if isinstance(diffs, dict) else list(diffs)
        if len(d) < 2:
            continue
        mean = sum(d) / len(d)
        squares += sum((x - mean) ** 2 for x in d)
        dof += len(d) - 1
    if dof == 0:
        from grpo_edu.common import _checks

        _checks.fail("differences", "holds no variant with two or more seeds, so there is no spread to measure",
                     "pass paired_differences of a race run over several seeds")
    return (squares / dof) ** 0.5


def _t_cdf(x, df, intervals=200):
    """Student's t distribution's CDF at ``x`` with ``df`` degrees of freedom (Simpson's rule on the density)."""
    if x < 0:
        return 1.0 - _t_cdf(-x, df, intervals)
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    density = lambda u: norm * (1 + u * u / df) ** (-(df + 1) / 2)   # noqa: E731
    h = x / intervals
    inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, intervals))
    return 0.5 + h / 3 * (density(0.0) + inner + density(x))


def t_quantile(p, df):
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`_t_cdf`);
    e.g. t_quantile(0.975, 2) = 4.303, the factor of a 95 % interval from three paired differences."""
    from grpo_edu.common import _checks

    if not _checks.is_finite_number(p) or not 0 < p < 1:
        _checks.fail("p", f"must lie strictly between 0 and 1, got {p!r}", "e.g. p=0.975")
    if not _checks.is_finite_number(df) or df <= 0:
        _checks.fail("df", f"must be a positive number, got {df!r}", "pass the number of differences − 1")
    return _t_quantile(float(p), float(df))


@functools.lru_cache(maxsize=256)
def _t_quantile(p, df):
    if p < 0.5:
        return -_t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2
    for _ in range(45):                                          # the bracket shrinks to ~1e-13 of its width
        mid = (low + high) / 2
        low, high = (mid, high) if _t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def seeds_to_resolve(spread, gap=0.05, *, alpha=0.05, power=0.8):
    """How many seeds a paired comparison needs to detect a true mean difference of ``gap`` (a paired
    t-test at level ``alpha``, two-sided, with probability ``power``), when one paired difference has
    standard deviation ``spread``: the smallest n with n ≥ ((t_{1−α/2, n−1} + t_{power, n−1})·spread / gap)².

    With many seeds the t quantiles become the normal ones, 1.96 and 0.84, and n ≈ 7.85·(spread / gap)²;
    with few, the t quantiles are larger and ask more. A gap as large as the spread needs 10 seeds.
    """
    from grpo_edu.common import _checks

    for name, value in (("spread", spread), ("gap", gap)):
        if not _checks.is_finite_number(value) or value <= 0:
            _checks.fail(name, f"must be a positive number, got {value!r}",
                         "pass spread from pooled_spread and gap as a share of accuracy, e.g. 0.05 for 5 points")
    for name, value in (("alpha", alpha), ("power", power)):
        if not _checks.is_finite_number(value) or not 0 < value < 1:
            _checks.fail(name, f"must lie strictly between 0 and 1, got {value!r}", "e.g. alpha=0.05, power=0.8")
    z = statistics.NormalDist().inv_cdf
    n = max(2, math.ceil(((z(1 - alpha / 2) + z(power)) * spread / gap) ** 2))   # the normal answer: a lower bound
    while n < ((t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * spread / gap) ** 2:
        n += 1
    return n


def difference_rows(results, key="after", baseline="grpo", *, resolved=RESOLVED):
    """One dict per variant (for ``viz.Table``): its per-seed differences against ``baseline`` in points
    (seed order), their mean, and its :func:`verdict`."""
    rows = []
    for name, diffs in paired_differences(results, key, baseline).items():
        d = list(diffs.values())
        rows.append({"variant": name,
                     f"{key} − {baseline}, per seed {', '.join(map(str, diffs))} (points)":
                         ", ".join(f"{100 * x:+.1f}" for x in d),
                     "mean (points)": f"{100 * sum(d) / len(d):+.1f}", "verdict": verdict(d, resolved)})
    return rows


def _cell(values):
    """median [min, max] of a metric over runs (just the value for one run)."""
    med = statistics.median(values)
    return f"{med:.4g}" if len(values) == 1 else f"{med:.4g} [{min(values):.4g}, {max(values):.4g}]"


def summary_rows(results, metrics=METRICS):
    """One dict per variant: each metric as "median [min, max]" over its runs (for ``viz.Table``)."""
    return [{"variant": name, **{m: _cell([r[m] for r in rows]) for m in metrics}} for name, rows in results.items()]


def format_table(results, metrics=METRICS, first="variant"):
    """One line per variant (``first`` names the column: lesson 13 says "method"): the median over seeds, then
    [min, max] when there are several."""
    rows = summary_rows(results, metrics)
    table = [[first, *metrics]] + [[row["variant"], *(row[m] for m in metrics)] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def _check_args(parser, args):
    """Every argument, before the race (a 20-minute race must not end on a bad --json path)."""
    seeds = check_seeds_names_steps(parser, args, "--variants", args.variants, COMMON["total_training_steps"])
    if args.time and args.json:
        parser.error("--json: --time writes no file (it prints each variant's step time). Fix: drop --json, or "
                     "drop --time to race and write the rows")
    if args.time and args.seeds is not None:
        parser.error("--seeds: --time times seed 0 only. Fix: drop --seeds, or drop --time to race over seeds")
    check_json_target(parser, args)
    args.seeds = seeds


def check_seeds_names_steps(parser, args, names_flag, names, default_steps):
    """What every comparison over seeds checks before its first run (lessons 12 and 13): seeds of 0 or more,
    each seed and each name given once, --steps of 1 or more. Returns the seeds (default: 0)."""
    seeds = args.seeds if args.seeds is not None else [0]
    for seed in seeds:
        if seed < 0:
            parser.error(f"--seeds: {seed} is negative. Fix: give seeds of 0 or more, e.g. --seeds 0 1 2")
    for flag, values in (("--seeds", seeds), (names_flag, names)):
        twice = sorted({v for v in values if values.count(v) > 1}, key=str)
        if twice:
            parser.error(f"{flag}: {twice[0]} is given twice, so its runs would be counted twice. Fix: give each once")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps: is {args.steps}. Fix: give 1 or more (default {default_steps})")
    return seeds


def write_stored(args, argv, program, fields, *, during="the runs"):
    """Write a comparison's ``--json`` file (checked before the runs by :func:`check_json_target`): the command
    that made it, this CPU's kernel set and torch's version, then ``fields``. A file that appeared meanwhile is
    kept, and the runs go to a free name beside it, which is printed."""
    import json
    import sys

    import torch

    from grpo_edu.common import _checks

    stored = {"command": f"{program} " + " ".join(sys.argv[1:] if argv is None else argv), **fields,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}
    written = _checks.write_result_file(args.json, json.dumps(stored, indent=1), overwrite=args.overwrite)
    if str(written) != args.json:
        print(f"{args.json} appeared during {during} (another run?): kept it, and wrote {written}")


def check_json_target(parser, args):
    """--overwrite only with --json, and a --json file that can be written (a long run must not end on a bad path)."""
    from grpo_edu.common import command_line

    if args.overwrite and not args.json:
        parser.error("--overwrite: replaces the --json file, but no --json is given. Fix: drop --overwrite, or "
                     "add --json FILE")
    if args.json:
        command_line.check_output(parser, "--json", args.json, overwrite=args.overwrite)


def main(argv=None):
    from grpo_edu.common import command_line

    parser = argparse.ArgumentParser(prog="grpo-edu variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=None, help=f"default {COMMON['total_training_steps']}")
    parser.add_argument("--json", metavar="FILE", help="also write every run's row as JSON (an existing file is "
                                                       "refused unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="let --json replace an existing file")
    parser.add_argument("--time", action="store_true",
                        help="instead of the race, time each variant's training step (seed 0, no evaluation)")
    args = command_line.parse_args(parser, argv)
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
        write_stored(args, argv, "grpo-edu variants", {"results": results}, during="the race")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
