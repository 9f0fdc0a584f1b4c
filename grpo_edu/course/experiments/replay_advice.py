"""The replay article's advice, measured on lesson 06's forgetting experiment (回放建议，实测).

Source article 000 gives four pieces of advice this module puts to the test, each as one change
to phase B of :mod:`grpo_edu.course.experiments.forgetting` (addition learned in phase A, subtraction in phase
B, A's notebook replayed):

* the ratio: new:replayed 7:3 or 8:2, "raise it to 6:4 late in training";
* refresh: "every 10–20 rounds, delete the old samples with low advantage";
* compute: "replayed samples need no new generation or scoring, which saves compute";
* the success measure: "with replay the model reaches the same result in fewer rounds".

A step's cost is mostly generation (see ``seconds``), and grpo_edu's replay *adds* rows to a step's
B·G fresh ones (``trainer._with_replayed``): that protects A but saves nothing. Replay saves
generation only when the replayed rows *replace* fresh ones, which the variant "7:3 in place of
fresh rows" does: 11 prompts × G = 8 fresh answers plus 38 replayed, about as many rows as the
default step's 128, for 31 % fewer completions generated and scored.

Training efficiency is counted here as the article means it, per step, and also per completion
generated (the compute): the first probe at which subtraction (B) reaches :data:`TARGET`, and the
first at which both tasks do (without replay, addition falls below it).

``python -m grpo_edu.course.experiments.replay_advice --seeds 0 1 2 --json FOLDER`` runs every variant and
prints one line per run (about 4 minutes a seed on one core); lesson 06 reads the stored results in
``assets/replay-advice/``, made by that command with this CPU's kernels and with
``ATEN_CPU_CAPABILITY=default --label default``. The stored ``seconds per step`` were timed while other
work shared the CPU: read the step times from ``grpo-edu bench --replay`` instead.
"""

import argparse
import json
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

from grpo_edu.common import command_line
from grpo_edu.common._checks import write_result_file
from grpo_edu.course.experiments import forgetting
from grpo_edu.training.model.models import ASSETS

ASSETS_FOLDER = ASSETS / "replay-advice"
"""Where the stored runs lesson 06 reads live (seeds 0–2, this CPU's kernels and the portable ones)."""
TARGET = 0.70
"""Held-out accuracy a task must reach for "steps to target" (B starts at 55–60 %, A at 76–77 %)."""
PROBE_EVERY = 10
"""Probe both tasks every this many steps: steps to target are read to within 10 steps."""
LATE_STEP, LATE_RATIO = 100, 0.4
"""The article's "6:4 late in training": from step 100 of 150 on."""
REFRESH_EVERY, MAX_AGE, KEEP_ADVANTAGE = 10, 20, 1.0
"""Refresh every 10 steps (the article: every 10–20 rounds); a sample older than 20 steps is old; the
low-advantage ones are those with Â < 1 (with G = 8, a right answer in a group where 4 or more of 8 were right)."""

VARIANTS = {
    "no replay": dict(replay_ratio=0.0),
    "8:2": dict(replay_ratio=0.2),
    "7:3": dict(replay_ratio=0.3),
    "7:3, then 6:4 from step 100": dict(replay_ratio=0.3, late=(LATE_STEP, LATE_RATIO)),
    "7:3 in place of fresh rows": dict(replay_ratio=0.3, batch_size=11),
    "7:3, refresh: drop every old sample": dict(replay_ratio=0.3, replay_refresh_every=REFRESH_EVERY,
                                               replay_max_age=MAX_AGE),
    "7:3, refresh: drop old samples with Â < 1": dict(replay_ratio=0.3, replay_refresh_every=REFRESH_EVERY,
                                                      replay_max_age=MAX_AGE,
                                                      replay_refresh_keep_advantage=KEEP_ADVANTAGE),
}
"""Each variant's phase-B settings (the rest as lesson 06: lr 1e-3, 150 steps, B = 16, G = 8)."""


def first_step(steps, values, target=TARGET):
    """The first probe step whose value reaches ``target``, or None when none does."""
    return next((s for s, v in zip(steps, values) if v >= target), None)


def summarize(name, record, *, seed, batch_size, num_generations):
    """One run's row: accuracies, steps (and completions generated) to the target, cost per step."""
    a, b = record.accuracy[forgetting.TASK_A], record.accuracy[forgetting.TASK_B]
    steps = record.steps
    both = [min(x, y) for x, y in zip(a, b)]
    per_step = batch_size * num_generations                       # completions generated and scored per step
    rows = [per_step / (1 - m.get("replay_share", 0.0)) for m in record.history]   # fresh + replayed
    b_at, both_at = first_step(steps, b), first_step(steps, both)
    return {
        "variant": name, "seed": seed,
        "A before": a[0], "A lowest": min(a), "A after": a[-1], "B before": b[0], "B after": b[-1],
        "steps to B target": b_at, "steps to both targets": both_at,
        "completions per step": per_step,
        "completions to both targets": None if both_at is None else both_at * per_step,
        "rows per step": statistics.mean(rows),
        "seconds per step": statistics.mean(m["seconds"] for m in record.history),
        "curves": {"steps": steps, "A": a, "B": b},
        "notebook share of A": record.notebook_share.get(forgetting.TASK_A, []),
    }


def run_seed(seed, names=None, *, out=sys.stdout):
    """Phase A once for ``seed``, then phase B once per variant; prints and returns one row per run."""
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.model.models import load_model_and_tokenizer, two_task_model_dir

    unknown = [n for n in names or () if n not in VARIANTS]
    if unknown:
        raise ValueError(f"names: unknown variant(s) {unknown}. Fix: use names from replay_advice.VARIANTS: "
                         f"{list(VARIANTS)}.")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        model, tokenizer = load_model_and_tokenizer(two_task_model_dir())
        start, _ = forgetting.phase_a(model, tokenizer, Path(folder) / "a.sqlite", seed=seed, progress=False)
        for i, name in enumerate(names or VARIANTS):
            settings = dict(VARIANTS[name])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")            # ratio 0 warns (outside 10–50 %); asked for here
                record = forgetting.phase_b(start, Path(folder) / "a.sqlite", learning_rate=1e-3, seed=seed,
                                            progress=False, probe_every=PROBE_EVERY, name=f"v{i}", **settings)
            defaults = GRPOConfig()
            row = summarize(name, record, seed=seed, num_generations=defaults.num_generations,
                            batch_size=settings.get("batch_size", defaults.batch_size))
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("curves", "notebook share of A")},
                             ensure_ascii=False), flush=True, file=out)
    return rows


def table(rows):
    """Median [min, max] over the stored runs of each variant, in VARIANTS' order."""
    def spread(values, digits):
        values = [v for v in values if v is not None]
        if not values:
            return "never"
        fmt = f"{{:.{digits}f}}"
        return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"

    out = []
    for name in VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        if not mine:
            continue
        never = sum(r["steps to both targets"] is None for r in mine)
        out.append({"variant": name, "runs": len(mine),
                    "A after (lowest)": f"{spread([r['A after'] for r in mine], 3)} ({spread([r['A lowest'] for r in mine], 3)})",
                    "B after": spread([r["B after"] for r in mine], 3),
                    "steps to B ≥ 70 %": spread([r["steps to B target"] for r in mine], 0),
                    "steps to both ≥ 70 %": spread([r["steps to both targets"] for r in mine], 0)
                    + (f" ({never} never)" if never else ""),
                    "completions per step": mine[0]["completions per step"],
                    "rows per step": round(statistics.median(r["rows per step"] for r in mine))})
    return out


def plot(rows, names=None):
    """Held-out accuracy of addition (A, left) and subtraction (B, right) along phase B: one line per
    variant, the median over its stored runs at each probe, with the 70 % target dashed."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    palette = ("#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b")
    for name, color in zip(VARIANTS, palette):
        mine = [r for r in rows if r["variant"] == name]
        if not mine or (names and name not in names):
            continue
        steps = mine[0]["curves"]["steps"]
        for ax, task in zip(axes, ("A", "B")):
            curve = np.median(np.array([r["curves"][task] for r in mine], dtype=float), axis=0)
            ax.plot(steps, curve, color=color, lw=2.4 if name == "7:3" else 1.3, label=name)
    for ax, title in zip(axes, (f"A: {forgetting.TASK_A} (the old task)", f"B: {forgetting.TASK_B} (the new task)")):
        ax.axhline(TARGET, color="black", lw=0.8, ls="--")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("phase-B step")
    axes[0].set_ylabel("held-out accuracy (median over runs)")
    axes[0].legend(fontsize=7, loc="lower left")
    return fig


def stored(folder=None):
    """Every row stored in ``assets/replay-advice/`` (or ``folder``): the runs lesson 06 reads."""
    folder = Path(folder) if folder else ASSETS_FOLDER
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"folder: no stored runs in {folder}. Fix: run python -m grpo_edu.course.experiments.replay_advice "
                                f"--seeds 0 1 2 --json {folder}")
    rows = []
    for f in files:
        data = json.loads(f.read_text(encoding="utf-8"))
        kernels = data["ATEN_CPU_CAPABILITY"] or "native"
        rows += [{**row, "kernels": kernels} for row in data["rows"]]
    return rows


def by_run(rows):
    """{(kernels, seed): {variant: row}}: the variants of one phase A side by side (same seed, same kernels)."""
    runs = {}
    for row in rows:
        runs.setdefault((row.get("kernels", "native"), row["seed"]), {})[row["variant"]] = row
    return runs


def _seed_file(label, seed):
    return f"{label}-seed{seed}.json"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.replay_advice",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=None)
    parser.add_argument("--json", metavar="FOLDER", help="also write each seed's rows to FOLDER/<label>-seed<N>.json")
    parser.add_argument("--label", default="native", help="file-name label, e.g. the kernel set (default: native)")
    parser.add_argument("--overwrite", action="store_true", help="let --json replace stored seeds' files")
    args = command_line.parse_args(parser, argv)
    if args.json:                                          # before any run: stored seeds are kept unless --overwrite
        command_line.check_output(parser, "--json", args.json, overwrite=args.overwrite,
                                  names=[_seed_file(args.label, seed) for seed in args.seeds])
    import os
    import platform

    import torch

    rows = []
    for seed in args.seeds:
        mine = run_seed(seed, args.variants)
        rows += mine
        if args.json:
            folder = Path(args.json)
            folder.mkdir(parents=True, exist_ok=True)
            capability = os.environ.get("ATEN_CPU_CAPABILITY", "")
            meta = {"command": (f"ATEN_CPU_CAPABILITY={capability} " if capability else "")
                    + f"OMP_NUM_THREADS=1 python -m grpo_edu.course.experiments.replay_advice --seeds {seed} --json {args.json} "
                    f"--label {args.label}",
                    "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", ""),
                    "torch": torch.__version__, "machine": platform.machine()}
            write_result_file(folder / _seed_file(args.label, seed),
                              json.dumps({**meta, "rows": mine}, ensure_ascii=False, indent=1), overwrite=args.overwrite)
    for row in table(rows):
        print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
