"""Lesson 18's runs: sampling and training apart, on ``tiny-sums`` (the ``sums`` preset).

==============  ===================================================================================================
part            what it measures
==============  ===================================================================================================
``sweep``       lag k = 0, 1, 2, 4, 8 with the PPO clip against the sampler (TRL's async loss): held-out accuracy
                after the same number of sampled answers, the spread of log π_θ/μ and the clip fraction per step
``ladder``      the five corrections (``core.off_policy``) at one lag (:data:`LADDER_LAG`), one update per batch
``ladder_mb``   the same five with :data:`LADDER_MINI_BATCHES` updates per batch (mini-batches, as AReaL's default),
                where π_θ leaves π_prox within the batch and the clip against π_prox binds
``mismatch``    no staleness, only a sampler that is not the trainer: bfloat16 vs float32, and top-k renormalised
                (the kept mass S becomes every token's ratio: TRL issue #6789); no training, one batch
``wallclock``   the same run synchronous (one process) and with the sampler in a second process, lag 1, timed
``timing``      each lag's run timed as it would run: k = 0 in one process, k ≥ 1 with the sampler in a second;
                when each step ended, start-up included (:func:`accuracy_at_seconds` reads the sweep with it);
                and a free-running sampler (``max_staleness`` 4, TRL's default): the staleness it settles at
==============  ===================================================================================================

Every training run: :data:`COMMON` on the ``sums`` preset, seeds 0–2. Stored in ``assets/async-runs/`` with the
command that made each file; :func:`stored` reads them. Wall-clock numbers depend on the machine and on what else
runs on it: the file says how many cores the machine had and its load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from grpo_edu.common._checks import fail, write_result_file
from grpo_edu.training.model.models import ASSETS

COMMON = dict(batch_size=8, num_generations=8, total_training_steps=40, beta=0.0, learning_rate=3e-4,
              eval_size=128, eval_every=5, lr_scheduler_type="constant")
"""The settings of every run (on ``GRPOConfig.preset("sums")``): 64 answers a step, 2,560 in a run, held-out
accuracy on 128 prompts every 5 steps."""
LAGS = (0, 1, 2, 4, 8)
LADDER_LAG = 4
LADDER_MINI_BATCHES = 4
"""Updates per batch in ``ladder_mb``: AReaL's ``ppo_n_minibatches`` default; verl's 1024/256."""
FREE_MAX_STALENESS = 4
"""The free-running sampler's bound in ``timing``: TRL's default ``max_staleness``."""
CORRECTIONS = ("none", "behaviour_clip", "decoupled", "token_tis", "sequence_mask")
TOP_KS = (2, 3, 5)
STORE = ASSETS / "async-runs"
KEEP = ("step", "reward_mean", "accuracy", "clip_fraction", "log_ratio_std", "log_ratio_p05", "log_ratio_p95",
        "kl_behaviour", "masked_fraction", "truncated_fraction", "policy_version", "staleness", "dropped_batches",
        "samples_drawn", "seconds")


def _config(seed, **overrides):
    from grpo_edu.training.trainers.config import GRPOConfig

    return GRPOConfig.preset("sums", **{**COMMON, "seed": seed, **overrides})


def train_run(seed, lag, correction="behaviour_clip", **overrides):
    """One lagged run (one process); its per-step metrics (:data:`KEEP`) and held-out accuracy before and after."""
    from grpo_edu.training.asynchronous.lagged import AsyncGRPOTrainer

    trainer = AsyncGRPOTrainer(_config(seed, policy_lag=lag, off_policy_correction=correction, **overrides))
    history = trainer.train(progress=False)
    return {"seed": seed, "lag": lag, "correction": correction, "mini_batches": trainer.config.mini_batches,
            "evals": trainer.evals,
            "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native"),
            "history": [{k: m.get(k) for k in KEEP} for m in history]}


def _run_path(folder, part, seed, lag, correction):
    return Path(folder) / part / f"seed{seed}-lag{lag}-{correction}.json"


def _stored_run(path, seed, lag, correction, mini_batches):
    """The run stored at ``path`` if it is the one asked for (``None`` when there is none); a damaged file, or one
    made with other settings, is refused with the fix."""
    if not path.exists():
        return None
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
        found = (run["seed"], run["lag"], run["correction"], run.get("mini_batches", 1), len(run["history"]))
    except (ValueError, KeyError, TypeError) as err:
        fail("--out", f"{path} is not a stored run this command can read ({err})",
             "delete it, or pass --overwrite to run it again")
    wanted = (seed, lag, correction, mini_batches, COMMON["total_training_steps"])
    if found != wanted:
        fail("--out", f"{path} holds a run with other settings (seed, lag, correction, mini_batches, steps = "
             f"{found}, not {wanted})", "pass --overwrite to run it again, or another --out")
    return run


def _runs(part, jobs, folder, overwrite=False, **overrides):
    """Run ``jobs`` ((seed, lag, correction) each) seed by seed, each run stored in ``folder/part/`` as soon as it
    ends; a run already there is read back, not run again (checked to be the same run), unless ``overwrite``.
    ``overrides``: GRPOConfig settings of every run (``mini_batches``). Returns them all."""
    mini_batches = overrides.get("mini_batches", 1)
    if not overwrite:                                   # every stored run checked before the first one starts
        for job in jobs:
            _stored_run(_run_path(folder, part, *job), *job, mini_batches)
    out = []
    (folder / part).mkdir(parents=True, exist_ok=True)
    for seed, lag, correction in sorted(jobs):
        path = _run_path(folder, part, seed, lag, correction)
        run = None if overwrite else _stored_run(path, seed, lag, correction, mini_batches)
        if run is None:
            run = train_run(seed, lag, correction, **overrides)
            write_result_file(path, json.dumps(run), overwrite=True)
        out.append(run)
    return out


def sweep(seeds, folder=STORE, overwrite=False):
    return _runs("sweep", [(s, k, "behaviour_clip") for k in LAGS for s in seeds], folder, overwrite)


def ladder(seeds, folder=STORE, overwrite=False, mini_batches=1):
    """The five corrections at :data:`LADDER_LAG`; ``mini_batches`` updates per batch (stored in ``ladder`` at 1,
    ``ladder_mb`` otherwise)."""
    part = "ladder" if mini_batches == 1 else "ladder_mb"
    return _runs(part, [(s, LADDER_LAG, c) for c in CORRECTIONS for s in seeds], folder, overwrite,
                 **({} if mini_batches == 1 else {"mini_batches": mini_batches}))


def _sample_topk(model, prompt_ids, steps, top_k, generator):
    """Sample ``steps`` tokens per row with top-k renormalised; per token log π (full softmax) and log μ (top-k)."""
    ids, full, kept, mass = prompt_ids, [], [], []
    for _ in range(steps):
        logits = model(input_ids=ids).logits[:, -1].float()                         # (N, V)
        log_pi = logits.log_softmax(-1)                                              # the trainer's π
        top = logits.topk(top_k, dim=-1)
        masked = torch.full_like(logits, -math.inf).scatter(-1, top.indices, top.values)
        log_mu = masked.log_softmax(-1)                                              # renormalised over the top k
        token = torch.multinomial(log_mu.exp(), 1, generator=generator)              # (N, 1)
        mass.append(log_pi.gather(-1, top.indices).exp().sum(-1, keepdim=True))     # S = Σ_{top k} π, (N, 1)
        full.append(log_pi.gather(-1, token))
        kept.append(log_mu.gather(-1, token))
        ids = torch.cat([ids, token], dim=1)
    return torch.cat(full, 1), torch.cat(kept, 1), torch.cat(mass, 1)                # (N, T) each


def mismatch(seeds, steps=20):
    """bfloat16 sampler vs float32 trainer, and top-k renormalised sampling, on one batch per seed."""
    from grpo_edu.core.off_policy import behaviour_gap, sequence_mask, token_tis   # noqa: F401
    from grpo_edu.training.rollouts.rollout import completion_logprobs
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    out = {"bf16": [], "topk": []}
    for seed in seeds:
        trainer = GRPOTrainer(_config(seed, sampling_dtype="bfloat16", eval_size=0))
        prompts = [r["prompt"] for r in trainer.batch_for(1)]
        rollout = trainer._sample(prompts)                                           # drawn under bf16 autocast
        with torch.no_grad():
            fp32, _ = completion_logprobs(trainer.model, rollout.input_ids, rollout.attention_mask,
                                          rollout.completion_ids.shape[1])
        mask = rollout.completion_mask.float()
        _, gap = behaviour_gap(fp32, rollout.logprobs, mask)
        (_, w_tis), tis = token_tis(fp32, fp32, rollout.logprobs, mask, cap=2.0)
        (_, w_seq), seq = sequence_mask(fp32, fp32, rollout.logprobs, mask, cap=3.0)
        log_W = ((fp32 - rollout.logprobs) * mask).sum(-1)
        out["bf16"].append({"seed": seed, **gap, "tis_truncated_fraction": tis["truncated_fraction"],
                            "sequences_masked": seq["sequences_masked"],
                            "sequence_log_ratio_std": float(log_W.std()), "mean_length": float(mask.sum(1).mean())})
        model = trainer.model.eval()
        g = torch.Generator().manual_seed(seed)
        for top_k in TOP_KS:
            ids = trainer.tokenizer([prompts[0]], return_tensors="pt")["input_ids"].repeat(32, 1)
            with torch.no_grad():
                log_pi, log_mu, masses = _sample_topk(model, ids, steps, top_k, g)
            ratio = (log_pi - log_mu).exp()                                          # π/μ per token
            out["topk"].append({"seed": seed, "top_k": top_k, "mean_kept_mass": float(masses.mean()),
                                "min_kept_mass": float(masses.min()), "ratio_mean": float(ratio.mean()),
                                "max_ratio_minus_mass": float((ratio - masses).abs().max()),
                                "sequence_weight_median": float(ratio.prod(-1).median()), "tokens": steps})
    return out


def wallclock(seed=0, steps=12):
    """The same lag-1 run in one process and in two, timed; and the synchronous run (lag 0) in one process."""
    from grpo_edu.training.asynchronous.lagged import AsyncGRPOTrainer
    from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer

    rows = {}
    for name, cls, lag in (("synchronous", AsyncGRPOTrainer, 0), ("one_process_lag1", AsyncGRPOTrainer, 1),
                           ("two_processes_lag1", TwoProcessGRPOTrainer, 1)):
        trainer = cls(_config(seed, policy_lag=lag, total_training_steps=steps, eval_size=0))
        start = time.perf_counter()
        history = trainer.train(progress=False)
        rows[name] = {"seconds": time.perf_counter() - start, "steps": steps,
                      "reward_mean": [m["reward_mean"] for m in history],
                      "timeline": getattr(trainer, "timeline", [])}
    return rows


def timing(seed=0, steps=None):
    """Seconds from the start to the end of each step, for every lag of :data:`LAGS`: k = 0 synchronous in one
    process, k ≥ 1 with the sampler in a second process (the same batches as the sweep's one-process runs); and
    ``"free"``: a free-running sampler bounded by :data:`FREE_MAX_STALENESS`, with each batch's staleness."""
    from grpo_edu.training.asynchronous.lagged import AsyncGRPOTrainer
    from grpo_edu.training.asynchronous.processes import TwoProcessGRPOTrainer

    length = {"eval_size": 0, **({"total_training_steps": steps} if steps else {})}
    runs = {str(lag): (TwoProcessGRPOTrainer if lag else AsyncGRPOTrainer, {"policy_lag": lag}, {}) for lag in LAGS}
    runs["free"] = (TwoProcessGRPOTrainer, {"max_staleness": FREE_MAX_STALENESS}, {"free_running": True})
    out = {}
    for name, (cls, settings, kwargs) in runs.items():
        ends = []
        trainer = cls(_config(seed, **settings, **length), callbacks=[lambda m: ends.append(time.perf_counter())],
                      **kwargs)
        start = time.perf_counter()
        trainer.train(progress=False)
        out[name] = {"seconds_at_step": [e - start for e in ends],
                     "reward_mean": [m["reward_mean"] for m in trainer.history]}
        if name == "free":
            out[name].update(max_staleness=FREE_MAX_STALENESS, staleness=[m["staleness"] for m in trainer.history])
        print(f"{name}: {len(ends)} steps in {ends[-1] - start:.1f} s", flush=True)
    return out


def accuracy_at_seconds(runs, seconds_at_step, budget):
    """Held-out accuracy after ``budget`` seconds for one lag: the runs' evaluations (``runs``, one per seed, every
    few steps) read at the step the timed run had reached by then (``seconds_at_step``, seconds from the start to
    each step's end), linearly between the two evaluations around it. Returns ``(accuracy, info)``: the mean over the
    seeds; info ``steps`` (steps done, fractional), ``each`` (per seed)."""
    times = [0.0] + list(seconds_at_step)
    if budget >= times[-1]:
        steps = float(len(seconds_at_step))
    else:
        k = max(i for i, t in enumerate(times) if t <= budget)
        steps = k + (budget - times[k]) / (times[k + 1] - times[k])

    def at(evals):
        points = [(e["step"], e["accuracy"]) for e in evals]
        for (s0, a0), (s1, a1) in zip(points, points[1:]):
            if s0 <= steps <= s1:
                return a0 + (a1 - a0) * (steps - s0) / (s1 - s0)
        return points[-1][1]

    each = [at(r["evals"]) for r in sorted(runs, key=lambda r: r["seed"])]
    return sum(each) / len(each), {"steps": steps, "each": each}


def accuracy_se(*groups, n=COMMON["eval_size"]):
    """The evaluation's standard error: of a mean over seeds of held-out accuracies (one group, one accuracy per
    seed), or of the difference of two such means (two groups of the same seeds). Each accuracy is measured on
    ``n`` prompts with one answer each, binomial: variance p(1 − p)/n; a mean over m seeds divides the variances'
    sum by m². Returns a float."""
    m = len(groups[0])
    return math.sqrt(sum(p * (1 - p) / n for group in groups for p in group)) / m


def summary(runs, by="lag"):
    """One row per ``by`` value (lag or correction), means over the seeds: held-out accuracy before and after,
    and over the steps after the first k (where the lag is in force) the log-ratio spread σ(log π_θ/μ), the clip
    fraction, the masked fraction and KL(μ‖π)."""
    rows = {}
    for run in runs:
        rows.setdefault(run[by], []).append(run)
    table = []
    for key, group in rows.items():
        def mean(values):
            values = [v for v in values if v is not None]
            return sum(values) / len(values) if values else None

        def late(name):
            return mean([mean([m[name] for m in r["history"][r["lag"]:]]) for r in group])

        table.append({by: key, "seeds": sorted(r["seed"] for r in group),
                      "accuracy_before": mean([r["evals"][0]["accuracy"] for r in group]),
                      "accuracy_after": mean([r["evals"][-1]["accuracy"] for r in group]),
                      "accuracy_after_each": [r["evals"][-1]["accuracy"] for r in sorted(group, key=lambda r: r["seed"])],
                      "reward_late": mean([mean([m["reward_mean"] for m in r["history"][len(r["history"]) // 2:]])
                                           for r in group]),
                      "log_ratio_std": late("log_ratio_std"), "clip_fraction": late("clip_fraction"),
                      "masked_fraction": late("masked_fraction"), "kl_behaviour": late("kl_behaviour"),
                      "samples": group[0]["history"][-1]["samples_drawn"]})
    return table


def plot_timeline(timeline, ax=None):
    """The two processes over time: one bar per batch drawn (sampler) and trained on (trainer), each labelled with
    the policy version that drew it."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(9, 2.4))[1]
    t0 = min(row["draw_started"] for row in timeline)
    for row in timeline:
        ax.barh(1, row["draw_ended"] - row["draw_started"], left=row["draw_started"] - t0, color="tab:blue",
                edgecolor="white")
        ax.text((row["draw_started"] + row["draw_ended"]) / 2 - t0, 1, f"b{row['step']}\nv{row['policy_version']}",
                ha="center", va="center", fontsize=7, color="white")
        ax.barh(0, row["train_ended"] - row["train_started"], left=row["train_started"] - t0, color="tab:orange",
                edgecolor="white")
        ax.text((row["train_started"] + row["train_ended"]) / 2 - t0, 0, f"s{row['step']}", ha="center",
                va="center", fontsize=7)
    ax.set_yticks([0, 1], ["trainer", "sampler"])
    ax.set_xlabel("seconds")
    return ax


def plot_sweep(runs, seconds_at_step=None, axes=None):
    """Held-out accuracy (mean over seeds) for each lag against answers sampled, and against seconds given
    ``{lag: seconds from the start to each step's end}`` (the ``timing`` part)."""
    import matplotlib.pyplot as plt

    axes = axes if axes is not None else plt.subplots(1, 2 if seconds_at_step else 1, figsize=(10, 3.2),
                                                      squeeze=False)[1][0]
    for lag in sorted({r["lag"] for r in runs}):
        group = [r for r in runs if r["lag"] == lag]
        steps = [e["step"] for e in group[0]["evals"]]
        accuracy = [sum(r["evals"][i]["accuracy"] for r in group) / len(group) for i in range(len(steps))]
        per_step = group[0]["history"][0]["samples_drawn"]
        axes[0].plot([s * per_step for s in steps], accuracy, "o-", ms=3, label=f"k = {lag}")
        if seconds_at_step:
            times = [0.0] + list(seconds_at_step[lag])
            axes[1].plot([times[s] for s in steps], accuracy, "o-", ms=3, label=f"k = {lag}")
    axes[0].set_xlabel("answers sampled")
    axes[0].set_ylabel("held-out accuracy (mean of seeds)")
    axes[0].legend(fontsize=7)
    if seconds_at_step:
        axes[1].set_xlabel("seconds (each lag's timed run, start-up included)")
    return axes


def stored(part, folder=STORE):
    """The stored runs of ``part``: sweep and ladder, the list of runs in ``assets/async-runs/<part>/`` (one file a
    run); mismatch, wallclock and timing, the ``result`` of ``assets/async-runs/<part>.json``. ``folder``:
    ``STORE / "portable"`` holds the sweep and the ladder again on the portable kernels."""
    folder = Path(folder)
    if (folder / part).is_dir():
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((folder / part).glob("*.json"))]
    return json.loads((folder / f"{part}.json").read_text(encoding="utf-8"))["result"]


def stored_meta(part, folder=STORE):
    """What ``assets/async-runs/<part>.json`` records beside its result: command, settings, cores, load_average…"""
    meta = json.loads((Path(folder) / f"{part}.json").read_text(encoding="utf-8"))
    meta.pop("result")
    return meta


def _check_arguments(args):
    """Everything that could stop the command from storing its result, checked before any run: the seeds, the
    ``--out`` folder (created now), ``<part>.json`` (replaced only with ``--overwrite``) and the stored runs."""
    from grpo_edu.common._checks import output_file_problem

    if any(s < 0 for s in args.seeds):
        fail("--seeds", f"must be ≥ 0, got {args.seeds}", "pass seeds such as 0 1 2")
    folder = Path(args.out) if args.out else STORE
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        fail("--out", f"{folder} cannot be made a folder ({err.strerror})", "pass a folder you can write to")
    problem = output_file_problem(folder / f"{args.part}.json", overwrite=args.overwrite)
    if problem:
        fail("--out", *problem)
    if args.part in ("sweep", "ladder", "ladder_mb") and not args.overwrite:
        mini_batches = LADDER_MINI_BATCHES if args.part == "ladder_mb" else 1
        jobs = ([(s, k, "behaviour_clip") for k in LAGS for s in args.seeds] if args.part == "sweep"
                else [(s, LADDER_LAG, c) for c in CORRECTIONS for s in args.seeds])
        for job in jobs:
            _stored_run(_run_path(folder, args.part, *job), *job, mini_batches)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.asynchronous",
                                     description="Lesson 18's runs; writes assets/async-runs/<part>.json")
    parser.add_argument("part", choices=("sweep", "ladder", "ladder_mb", "mismatch", "wallclock", "timing"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default=None, help="the folder to write into (default assets/async-runs)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace <part>.json and run the stored runs of <part>/ again")
    args = parser.parse_args(argv)
    try:
        _check_arguments(args)
    except ValueError as err:
        parser.error(str(err))
    torch.set_num_threads(1)
    start = time.perf_counter()
    folder = Path(args.out) if args.out else STORE
    overwrite = args.overwrite
    result = {"sweep": lambda: sweep(args.seeds, folder, overwrite),
              "ladder": lambda: ladder(args.seeds, folder, overwrite),
              "ladder_mb": lambda: ladder(args.seeds, folder, overwrite, mini_batches=LADDER_MINI_BATCHES),
              "mismatch": lambda: mismatch(args.seeds), "wallclock": lambda: wallclock(args.seeds[0]),
              "timing": lambda: timing(args.seeds[0])}[args.part]()
    kernels = os.environ.get("ATEN_CPU_CAPABILITY")
    command = (("" if kernels is None else f"ATEN_CPU_CAPABILITY={kernels} ")
               + "OMP_NUM_THREADS=1 python -m grpo_edu.course.experiments.asynchronous " + " ".join(argv or sys.argv[1:]))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"command": command, "settings": COMMON, "cores": os.cpu_count(), "load_average": load,
                       "kernels": kernels or "native",
                       "seconds": time.perf_counter() - start, "result": result}, indent=1)
    print(write_result_file(folder / f"{args.part}.json", text, overwrite=args.overwrite))


if __name__ == "__main__":
    main()
