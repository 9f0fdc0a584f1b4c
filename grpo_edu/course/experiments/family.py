"""GRPO among its family, on one budget: ``grpo-edu family --seeds 0 1 2`` (or ``python -m grpo_edu.course.experiments.family``).

Every method of ``grpo_edu.training.trainers.family.METHODS`` trains one start model for the same number of steps
with the same B·G answers sampled per step, and is scored the same way: the bundled adder (``--model adder``,
the default; budget :data:`COMMON`) or lesson 11's sums model, whose worked answers run up to 42 tokens
(``--model sums``; budget :data:`SUMS` on ``GRPOConfig.preset("sums")``). Lesson 13 reads the stored runs
(``assets/family/`` and ``assets/family-sums/``); the comparison itself is lesson 12's, by the same functions
(``course.variants``: per-seed values, paired differences against GRPO, verdicts, the pooled spread and
how many seeds a gap needs).

Per run (:func:`run_method`): held-out accuracy at τ = 1 before and after (pass@1) and pass@8 after; the
generated tokens of the whole run and those generated until the training accuracy first reached
:data:`TARGET` (averaged over :data:`TARGET_WINDOW` steps); the mean answer length over the last quarter of
the steps; the entropy of the model reading the held-out prompts' right answers (fixed texts, so
comparable across methods); the steps skipped; the seconds per step. Per method, once per seed
(:func:`gradient_noise`): how noisy each method's gradient is on one fixed batch, over many resamples of
its G answers. Per method, in a child process (:func:`step_cost`): a step's time and the process's peak
memory, and the weights and optimizer state it trains (the critic's cost).

``--json FILE`` keeps the comparison as it is made: the file is written whole (atomically) after each
finished run, each seed's gradient noise and the step costs, so a kill loses at most the run in progress,
and ``--resume`` continues it, skipping the finished (method, seed) runs. A file made with other settings
(:func:`settings_of`: the model, its budget, ``--resamples``, this machine's kernels and torch) is refused.
"""

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time

COMMON = dict(batch_size=16, num_generations=8, total_training_steps=60, eval_size=200, sampler="engine")
"""The comparison's budget on the bundled adder: 16 prompts × 8 answers per step, 60 steps, scored on 200
held-out prompts; the engine sampler (lesson 13's runs pass it, whatever the default becomes)."""

SUMS = dict(batch_size=8, num_generations=8, total_training_steps=40, eval_size=200, sampler="engine")
"""The comparison's budget on lesson 11's model (``--model sums``), on top of ``GRPOConfig.preset("sums")``
(its model, task and 42 new tokens): 8 prompts × 8 answers per step, 40 steps, scored on 200 held-out
prompts. Its answers are up to 42 tokens against the adder's 4, so a step costs several adder steps;
the budget was sized by timing a GRPO run first, so that all 36 runs fit in about 40 minutes of one core."""

BUDGETS = {"adder": COMMON, "sums": SUMS}
"""model → its budget (``GRPOConfig`` fields): every method of one comparison gets the same one."""
MODELS = tuple(BUDGETS)
"""The models a comparison can run on (``--model``): ``adder`` (the bundled adder) and ``sums`` (lesson 11's)."""

ORDER = ("grpo", "reinforce", "ppo", "rft", "dpo", "dpo_offline")
"""The methods, in the order tables show them (the keys of ``training.family.METHODS``)."""
CONTROLS = ("reinforce_dr_grpo", "rft_answer_mean")
"""Lesson 13's controls, run on the sums model only when asked (``--methods``): ``reinforce`` with a constant
normaliser (``loss_type="dr_grpo"``) and ``rft`` with each answer averaged over its own tokens (DeepSeekMath's
RFT, eq. 8). Tables show them after :data:`ORDER`."""

METRICS = ("before", "after", "pass@8", "generated", "length", "entropy", "skipped", "seconds")
"""The numeric columns of a run's row (``tokens_to_target`` may be None: the run never reached the target)."""

TARGET = 0.7
"""The training accuracy "generated tokens to a target" waits for (a mean over :data:`TARGET_WINDOW` steps)."""
TARGET_WINDOW = 4
"""Steps the training accuracy is averaged over before it is compared with :data:`TARGET`."""

FAMILY_DIRS = {"adder": "family", "sums": "family-sums"}
"""model → the folder under ``assets/`` that holds its stored runs (``--json`` files), read by :func:`stored_runs`.
A sibling folder per model, not a subfolder, so that no reader that globs one folder can merge two models."""
FAMILY_DIR = FAMILY_DIRS["adder"]


def _check_model(model):
    from grpo_edu.common import _checks

    _checks.choice("model", model, MODELS)


def budget(model="adder"):
    """The ``GRPOConfig`` fields of ``model``'s comparison: the preset's (sums) under :data:`BUDGETS`' own."""
    from grpo_edu.training.trainers.config import PRESETS

    _check_model(model)
    return {**PRESETS.get(model, {}), **BUDGETS[model]}


def _config(seed, steps=None, eval_size=None, model="adder", num_iterations=None):
    from grpo_edu.training.trainers.config import GRPOConfig

    settings = {**budget(model), "seed": seed}
    if num_iterations is not None:
        settings["num_iterations"] = num_iterations
    if steps is not None:
        settings["total_training_steps"] = steps
    if eval_size is not None:
        settings["eval_size"] = eval_size
    return GRPOConfig(**settings)


def tokens_to_target(history, completions_per_step, target=TARGET, window=TARGET_WINDOW):
    """(step, generated tokens) when the mean training accuracy of the last ``window`` steps first reached
    ``target``; (None, None) when it never did. Tokens count every sampled answer's tokens, ``<eos>`` included:
    a step adds its mean answer length × ``completions_per_step`` (B·G)."""
    tokens, accuracies = 0.0, []
    for m in history:
        tokens += m["completion_length"] * completions_per_step
        accuracies.append(m["accuracy"])
        recent = accuracies[-window:]
        if len(recent) == window and sum(recent) / window >= target:
            return m["step"], tokens
    return None, None


def _mean_of(history, key):
    """The mean of ``key`` over the steps that logged a number for it; None when none did."""
    values = [m[key] for m in history if isinstance(m.get(key), (int, float))]
    return statistics.fmean(values) if values else None


def run_method(name, seed=0, *, steps=None, eval_size=None, model="adder", num_iterations=None, progress=False):
    """Train method ``name`` from ``model`` (:data:`MODELS`: the bundled adder or lesson 11's sums model) on
    its budget (:func:`budget`), with ``num_iterations`` updates per batch when given: (row, info). ``row``:
    :data:`METRICS`, ``tokens_to_target``, ``steps_to_target``, ``curve`` (training accuracy per step), and the
    means over the run of ``clip_fraction`` (the ratio clip), and for PPO ``value_clip_fraction`` and
    ``explained_variance`` (also ``explained_variance_last``, over the last quarter); ``info["trainer"]``."""
    from grpo_edu.training.task.evaluation import answer_entropy
    from grpo_edu.training.trainers.family import make_trainer

    if name not in ORDER + CONTROLS:
        raise ValueError(f"name: unknown method {name!r}. Fix: use one of {', '.join(ORDER + CONTROLS)}.")
    config = _config(seed, steps, eval_size, model, num_iterations)
    trainer = make_trainer(name, config)
    rows = trainer.eval_rows
    entropy_before, _ = answer_entropy(trainer.model, trainer.tokenizer, [r["prompt"] for r in rows],
                                       [r["answer"] for r in rows])
    start = time.perf_counter()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                       # skipped steps are counted in the row
        trainer.train(progress=progress)
    seconds = time.perf_counter() - start
    history = trainer.history
    N = config.batch_size * config.num_generations
    tail = history[-max(1, len(history) // 4):]
    eight = trainer.evaluate(num_samples=8)["samples"]
    solved = [any(s[3] for s in eight[i:i + 8]) for i in range(0, len(eight), 8)]
    entropy_after, _ = answer_entropy(trainer.model, trainer.tokenizer, [r["prompt"] for r in rows],
                                      [r["answer"] for r in rows])
    step_to, tokens_to = tokens_to_target(history, N)
    row = {"before": trainer.evals[0]["accuracy"], "after": trainer.evals[-1]["accuracy"],
           "pass@8": sum(solved) / len(solved),
           "generated": sum(m["completion_length"] * N for m in history),
           "length": statistics.fmean(m["completion_length"] for m in tail),
           "entropy": entropy_after, "entropy_before": entropy_before,
           "skipped": sum(bool(m.get("skipped")) for m in history),
           "seconds": statistics.median(m["seconds"] for m in history), "run_seconds": seconds,
           "steps_to_target": step_to, "tokens_to_target": tokens_to,
           "curve": [m["accuracy"] for m in history],
           "clip_fraction": _mean_of(history, "clip_fraction")}
    if any("value_clip_fraction" in m for m in history):                      # PPO: its critic's diagnostics
        row.update(value_clip_fraction=_mean_of(history, "value_clip_fraction"),
                   explained_variance=_mean_of(history, "explained_variance"),
                   explained_variance_last=_mean_of(tail, "explained_variance"))
    return row, {"trainer": trainer}


def comparison(names=ORDER, seeds=(0,), *, steps=None, model="adder", num_iterations=None, progress=False, results=None,
               on_row=None):
    """{method: [row per seed]} for every method and seed (:func:`run_method`); each row also holds its ``seed``.

    ``results``: rows already made (a resumed comparison's), whose (method, seed) runs are skipped; ``on_row``:
    called with the results after each finished run, so a caller can keep them as they come (``--json``)."""
    _check_model(model)
    results = {} if results is None else results
    for name in names:
        for seed in seeds:
            if any(row["seed"] == seed for row in results.get(name, [])):
                continue                                            # finished before: kept as it is
            row = run_method(name, seed, steps=steps, model=model, num_iterations=num_iterations, progress=progress)[0]
            results.setdefault(name, []).append({**row, "seed": seed})
            if on_row is not None:
                on_row(results)
    return results


# --- the gradient's noise on one fixed batch ---------------------------------------------------------------
def method_loss(name, model, rollout, rewards, *, critic=None, ref_logprobs=None, family=None):
    """The loss ``name``'s trainer would take on ``rollout`` at the start of training (one update, r = 1,
    no KL term), from the library's own functions. ``critic``: PPO's value model (its values give GAE's
    baseline); ``ref_logprobs``: π_ref's (N, T) log-probs for DPO (the start model: all log-ratios 0).
    Returns the loss, or None when the method has nothing to learn from this batch."""
    import torch

    from grpo_edu.core.advantages import estimate_advantages
    from grpo_edu.core.dpo import dpo_loss, preference_pairs, sequence_logprobs
    from grpo_edu.core.gae import gae_advantages
    from grpo_edu.core.losses import grpo_loss
    from grpo_edu.core.rejection_sampling import select_correct, sft_loss
    from grpo_edu.training.trainers.family import FamilyConfig
    from grpo_edu.training.rollouts.rollout import completion_logprobs
    from grpo_edu.training.rollouts.tools import trained_mask

    f = family or FamilyConfig()
    mask = trained_mask(rollout)                                  # every method's rule (a tool's replies out)
    logprobs, _ = completion_logprobs(model, rollout.input_ids, rollout.attention_mask, mask.shape[1])
    if name in ("grpo", "reinforce", "reinforce_dr_grpo"):
        adv = estimate_advantages(rewards, estimator=name.removesuffix("_dr_grpo")).reshape(-1)   # (N,)
        loss_type = "dr_grpo" if name == "reinforce_dr_grpo" else "grpo"
        return grpo_loss(logprobs, logprobs.detach(), adv.to(logprobs.dtype), mask, loss_type=loss_type)[0]
    if name == "ppo":
        with torch.no_grad():
            values = critic(rollout.input_ids, rollout.attention_mask, mask.shape[1])      # (N, T)
        adv, _ = gae_advantages(rewards.reshape(-1).float(), values, mask, gamma=f.gamma, lam=f.lam,
                                whiten=f.whiten_advantages)
        return grpo_loss(logprobs, logprobs.detach(), adv, mask)[0]
    if name in ("rft", "rft_answer_mean"):
        keep, info = select_correct(rewards, threshold=f.threshold, max_per_prompt=f.max_per_prompt)
        normaliser = "answer" if name == "rft_answer_mean" else f.rft_normaliser
        return None if info["skip"] else sft_loss(logprobs, mask, keep.reshape(-1), normaliser=normaliser)[0]
    if name in ("dpo", "dpo_offline"):
        pairs, info = preference_pairs(rewards)
        if info["num_pairs"] == 0:
            return None
        seq, ref = sequence_logprobs(logprobs, mask), sequence_logprobs(ref_logprobs, mask)   # (N,)
        return dpo_loss(seq[pairs[:, 0]], seq[pairs[:, 1]], ref[pairs[:, 0]], ref[pairs[:, 1]], beta=f.beta)[0]
    raise ValueError(f"name: unknown method {name!r}. Fix: use one of {', '.join(ORDER + CONTROLS)}.")


def gradient_noise(names=ORDER, *, resamples=24, seed=0, batch_size=None, num_generations=None,
                   model="adder", progress=False):
    """How noisy each method's gradient is on one fixed batch of prompts, from ``model``'s start.

    The same ``batch_size`` prompts (the seed's first training batch) get ``resamples`` fresh draws of
    ``num_generations`` answers (both default to ``model``'s budget: B and G); each draw gives each method
    one gradient g_r (all weights, flattened). Returned per method:
    ``noise_to_signal`` = mean_r ‖g_r − ḡ‖² / ‖ḡ‖², the summed variance over the squared mean: scale-free,
    so methods whose losses differ in size compare (1 would be noise as large as the signal); and
    ``used`` (draws that gave the method something to learn from); ‖ḡ‖² is corrected for ḡ's own noise
    (minus the summed variance / draws), and the ratio is None when the signal is not resolved (≤ 0). PPO's critic is fresh (V = 0 at the
    start), so its noise is that of its first steps. ``progress``: a bar over the draws.
    """
    import torch

    from grpo_edu.common.progress import progress_bar

    from grpo_edu.training.model.critic import Critic
    from grpo_edu.training.rollouts.engine import generate
    from grpo_edu.training.rollouts.rollout import completion_logprobs

    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = _config(seed, eval_size=0, model=model)
    if num_generations is not None:                                # the rewards are scored in groups of G
        config = dataclasses.replace(config, num_generations=num_generations)
    base = GRPOTrainer(config)
    batch_size = base.config.batch_size if batch_size is None else batch_size
    num_generations = base.config.num_generations
    model, tokenizer = base.model, base.tokenizer
    rows = base.batch_for(1)[:batch_size]
    critic = Critic(model)
    grads = {name: [] for name in names}
    generator = torch.Generator().manual_seed(seed * 1_000_003 + 7)
    params = [p for p in model.parameters() if p.requires_grad]
    bar = progress_bar(resamples, desc=f"gradient noise (seed {seed})", unit="draw", disable=not progress)
    for _ in range(resamples):
        model.eval()
        with torch.no_grad():
            rollout = generate(model, tokenizer, [r["prompt"] for r in rows], num_generations=num_generations,
                               max_new_tokens=base.config.max_completion_length, generator=generator)
            ref, _ = completion_logprobs(model, rollout.input_ids, rollout.attention_mask,
                                         rollout.completion_ids.shape[1])
        model.train()
        rewards, _ = base._score(rows, rollout)
        for name in names:
            loss = method_loss(name, model, rollout, rewards, critic=critic, ref_logprobs=ref)
            if loss is None:
                continue
            g = torch.autograd.grad(loss, params, allow_unused=True)
            grads[name].append(torch.cat([(x if x is not None else torch.zeros_like(p)).reshape(-1)
                                          for x, p in zip(g, params)]).double())
        bar.update(1)
    bar.close()
    out = {}
    for name, gs in grads.items():
        if len(gs) < 2:
            out[name] = {"noise_to_signal": None, "used": len(gs)}
            continue
        G, n = torch.stack(gs), len(gs)                                            # (draws, weights)
        mean = G.mean(0)
        spread = ((G - mean) ** 2).sum(1).sum() / (n - 1)                          # E‖g − E g‖², unbiased
        signal = (mean ** 2).sum() - spread / n                                    # ‖E g‖², unbiased (ḡ's own noise out)
        out[name] = {"noise_to_signal": float(spread / signal) if signal > 0 else None, "used": n,
                     "noise": float(spread), "signal": float(signal)}
    return out


# --- a step's cost, in a child process (the critic's memory) ------------------------------------------------
def _step_cost_child(name, steps, warmup, model="adder"):
    """In this process: time ``steps`` steps of ``name`` on ``model`` after ``warmup``; count what it trains."""
    import resource

    import torch

    from grpo_edu.training.trainers.family import make_trainer

    config = _config(0, steps=steps + warmup, eval_size=0, model=model)
    trainer = make_trainer(name, config)
    times = []
    for i in range(steps + warmup):
        start = time.perf_counter()
        trainer.step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    models = [trainer.model] + ([trainer.critic] if hasattr(trainer, "critic") else [])
    trained = sum(p.numel() for m in models for p in m.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in trainer.ref_model.parameters()) if trainer.ref_model is not None else 0
    return {"method": name, "median_step_s": statistics.median(times),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "trained_weights": trained, "frozen_weights": frozen,
            # float32 weights + gradients + AdamW's two moments, and the frozen reference's weights
            "state_mib": (trained * 4 * 4 + frozen * 4) / 2 ** 20, "torch_threads": torch.get_num_threads()}


def step_cost(names=ORDER, *, steps=8, warmup=2, model="adder"):
    """{method: its step's cost} on ``model``'s budget, each method in a fresh child process, one after the other (bench-style):
    ``median_step_s``, ``peak_rss_mib`` (the child's peak resident memory), ``trained_weights`` (the policy's,
    plus the critic's for PPO), ``frozen_weights`` (π_ref) and ``state_mib`` (their float32 weights, gradients
    and AdamW moments). Time and resident memory depend on the machine; the weight counts do not."""
    _check_model(model)
    out = {}
    for name in names:
        code = (f"import json; from grpo_edu.course.experiments.family import _step_cost_child; "
                f"print(json.dumps(_step_cost_child({name!r}, {steps}, {warmup}, {model!r})))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the step-cost child of {name!r} failed:\n{done.stderr[-2000:]}")
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# --- stored runs and their tables ---------------------------------------------------------------------------
def stored_runs(folder=None, model="adder", methods=None):
    """Every stored run of ``model`` under its folder (:data:`FAMILY_DIRS`: ``assets/family`` for the adder,
    ``assets/family-sums`` for the sums model) or ``folder``, merged: ({method: [rows]}, info), as
    ``variants.stored_race`` merges lesson 12's race. ``info`` also holds ``model``, ``gradient_noise`` and
    ``step_cost`` ({kernels: {seed or "cost": …}}) where a file has them. A file of another model is refused
    (files without a ``model`` field are the adder's, written before the field existed). ``methods``: keep only
    these methods (rows, noise and cost), e.g. :data:`ORDER` without the controls."""
    from pathlib import Path

    from grpo_edu.common import _checks
    from grpo_edu.course import variants
    from grpo_edu.training.model.models import ASSETS

    _check_model(model)
    folder = Path(folder) if folder is not None else ASSETS / FAMILY_DIRS[model]
    if not sorted(folder.glob("*.json")):
        _checks.fail("folder", f"holds no stored family run (*.json) at {folder}",
                     f"make one with grpo-edu family{'' if model == 'adder' else ' --model ' + model} "
                     "--seeds 0 1 2 --json FILE")
    files = {path: json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))}
    for path, stored in files.items():
        if stored.get("model", "adder") != model:
            _checks.fail("model", f"is {model!r}, but {path} holds runs of the {stored.get('model', 'adder')!r} "
                         "model", f"read that folder with model={stored.get('model', 'adder')!r}, or keep each "
                         "model's runs in its own folder (FAMILY_DIRS)")
    results, info = variants.stored_race(folder)
    info["model"], info["gradient_noise"], info["step_cost"] = model, {}, {}
    for path, stored in files.items():
        kernels = stored["cpu_capability"]
        for seed, noise in stored.get("gradient_noise", {}).items():        # two files of one kernel set: merged
            kept = {name: v for name, v in noise.items() if methods is None or name in methods}
            if kept:
                info["gradient_noise"].setdefault(kernels, {}).setdefault(int(seed), {}).update(kept)
        cost = {name: v for name, v in (stored.get("step_cost") or {}).items() if methods is None or name in methods}
        if cost:
            info["step_cost"].setdefault(kernels, {}).update(cost)
    order = (*ORDER, *CONTROLS, *sorted(set(results) - set(ORDER) - set(CONTROLS)))
    return {name: results[name] for name in order if name in results and (methods is None or name in methods)}, info


UPDATES_DIR = "family-updates4"
"""The folder under ``assets/`` of the adder's GRPO and PPO runs with four updates per batch (``--num-iterations
4``), where the ratio clip and the value clip can act; read by :func:`stored_updates`, never merged with
:data:`FAMILY_DIRS`' one-update runs."""


def stored_updates(folder=None):
    """The stored runs with four updates per batch (:data:`UPDATES_DIR`), as :func:`stored_runs` reads a folder."""
    from grpo_edu.training.model.models import ASSETS

    return stored_runs(folder if folder is not None else ASSETS / UPDATES_DIR)


def target_rows(results):
    """Per method: in how many runs the training accuracy reached :data:`TARGET`, and the median steps and
    generated tokens to it over those runs (for ``viz.Table``)."""
    rows = []
    for name, runs in results.items():
        reached = [r for r in runs if r["tokens_to_target"] is not None]
        rows.append({"method": name, "reached the target": f"{len(reached)} of {len(runs)} runs",
                     "steps to it (median)": statistics.median(r["steps_to_target"] for r in reached) if reached else None,
                     "generated tokens to it (median)":
                         statistics.median(r["tokens_to_target"] for r in reached) if reached else None})
    return rows


def noise_rows(info):
    """Per method: the gradient's noise-to-signal ratio, median [min, max] over every stored (seed, kernel set)."""
    from grpo_edu.course.experiments.variants import _cell

    values = {}
    for seeds in info["gradient_noise"].values():
        for noise in seeds.values():
            for name, v in noise.items():
                if v["noise_to_signal"] is not None:
                    values.setdefault(name, []).append(v["noise_to_signal"])
    return [{"method": name, "noise / signal (median [min, max])": _cell(values[name])}
            for name in ORDER + CONTROLS if name in values]


def paired_intervals(differences, *, alpha=0.05):
    """An interval for each method's mean paired difference against GRPO, from the spread pooled over all of
    them, corrected for the k comparisons made at once (Bonferroni): mean ± t_{1−α/(2k), df} · s / √n, with s
    the pooled SD of one paired difference (``variants.pooled_spread``) and df = Σ (n − 1) its degrees of
    freedom. Five methods on three seeds: df = 10, t_{0.995, 10} = 3.17. A method whose interval leaves 0 out is
    "behind" or "ahead" at family level α; otherwise "unresolved".

    ``differences``: {method: {seed: difference}} (``variants.paired_differences``). Returns (rows, info):
    rows for ``viz.Table`` (per-seed differences, mean, ±, verdict, all in points), info: ``spread``, ``df``,
    ``t``, ``comparisons``, and ``verdicts`` {method: verdict}, ``half_widths`` {method: ± as a fraction}."""
    from grpo_edu.course.experiments.variants import pooled_spread, t_quantile

    spread = pooled_spread(differences)
    k = len(differences)
    df = sum(len(d) - 1 for d in differences.values() if len(d) > 1)
    t = t_quantile(1 - alpha / (2 * k), df)
    rows, verdicts, halves = [], {}, {}
    for name, diffs in differences.items():
        d = list(diffs.values())
        mean, half = sum(d) / len(d), t * spread / len(d) ** 0.5              # d̄ ± t·s/√n
        verdicts[name] = "unresolved" if abs(mean) <= half else ("ahead" if mean > 0 else "behind")
        halves[name] = half
        rows.append({"method": name, "per seed (points)": ", ".join(f"{100 * x:+.1f}" for x in d),
                     "mean (points)": f"{100 * mean:+.1f}", "± (points)": f"{100 * half:.1f}",
                     "verdict": verdicts[name]})
    return rows, {"spread": spread, "df": df, "t": t, "comparisons": k, "verdicts": verdicts, "half_widths": halves}


def format_table(results):
    """One line per method: each metric's median over the runs, then [min, max] when there are several."""
    from grpo_edu.course.experiments.variants import format_table

    return format_table(results, METRICS, first="method")


MAX_RESAMPLES = 1000
"""The most answer draws ``--resamples`` takes per seed: each draw samples B·G answers and takes one backward
pass per method (the default, 24, resolves every method's noise; a million would run for days)."""


def stored_budget(args):
    """The budget a comparison's file records: the model's, with ``--num-iterations`` where it was given."""
    return {**budget(args.model), **({"num_iterations": args.num_iterations} if args.num_iterations is not None
                                     else {})}


def settings_of(args):
    """What makes two comparisons' rows comparable, so that a file can be resumed: the model, its budget with
    ``--steps`` applied, the gradient-noise draws, and this machine's kernel set and torch version."""
    import torch

    return {"model": args.model, "budget": {**stored_budget(args), **({"total_training_steps": args.steps}
                                                                       if args.steps is not None else {})},
            "resamples": args.resamples, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__}


def _check_args(parser, args):
    """Every argument, before any run (a long comparison must not end on a bad --json path)."""
    from grpo_edu.course.experiments.variants import check_json_target, check_seeds_names_steps

    seeds = check_seeds_names_steps(parser, args, "--methods", args.methods,
                                    BUDGETS[args.model]["total_training_steps"])
    if args.num_iterations is not None and args.num_iterations < 1:
        parser.error(f"--num-iterations: is {args.num_iterations}. Fix: give 1 or more updates per batch")
    if not 2 <= args.resamples <= MAX_RESAMPLES:
        parser.error(f"--resamples: is {args.resamples}. Fix: give 2 or more (a variance needs two draws) and at "
                     f"most {MAX_RESAMPLES} (each draw samples every answer again; the default is 24)")
    for seed in seeds:                                          # each run's settings, as its trainer checks them
        try:
            _config(seed, args.steps, model=args.model)
        except ValueError as err:
            flag = {"seed": "--seeds", "total_training_steps": "--steps"}.get(str(err).split(":")[0], "--seeds")
            parser.error(f"{flag}: {str(err).split(': ', 1)[-1]}")
    args.seeds = seeds
    args.stored = None
    if args.resume:
        args.stored = _resumed(parser, args)
        return
    if args.json and not args.overwrite and os.path.lexists(args.json):
        parser.error(f"--json: {args.json} already exists (an earlier run's results?). Fix: pass --resume to "
                     "continue that comparison, --overwrite to replace it, or another file name")
    check_json_target(parser, args)


def _resumed(parser, args):
    """The --json file a comparison resumes, read safely and checked against this run's settings."""
    from grpo_edu.common.safe_files import NotReadable, read_regular

    if not args.json or args.overwrite:
        parser.error("--resume: continues the comparison in a --json file. Fix: give --json FILE (the file an "
                     "earlier run was writing), without --overwrite")
    try:
        stored = json.loads(read_regular(args.json, 64 * 2 ** 20).decode("utf-8"))
    except (NotReadable, UnicodeDecodeError, json.JSONDecodeError) as err:
        parser.error(f"--resume: {args.json} cannot be resumed ({err}). Fix: give the --json file of a "
                     "grpo-edu family run, or start again with another --json file")
    if not isinstance(stored, dict) or not isinstance(stored.get("results"), dict) or "settings" not in stored:
        parser.error(f"--resume: {args.json} holds no family comparison's rows and settings. Fix: give the --json "
                     "file a grpo-edu family run was writing")
    def flat(settings):                                         # the budget's fields by their own names
        settings = dict(settings) if isinstance(settings, dict) else {}
        budget_fields = settings.pop("budget", None)
        return {**settings, **(budget_fields if isinstance(budget_fields, dict) else {"budget": budget_fields})}

    theirs, mine = flat(stored["settings"]), flat(settings_of(args))
    differ = [f"{key} {theirs.get(key)!r} there, {value!r} here" for key, value in mine.items()
              if theirs.get(key) != value]
    if differ:
        parser.error(f"--resume: {args.json} was made with other settings ({'; '.join(differ)}), so its rows and "
                     "this run's would not compare. Fix: resume it with the settings it was made with (its "
                     f"command: {stored.get('command')}), or start a new --json file")
    return stored


def _finite(value):
    """``value`` with every NaN or infinite float as None: JSON has no NaN, and a reader must not meet one."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class _Kept:
    """A comparison's --json file, written whole after each finished run, atomically: a kill at any moment
    leaves the file of the last finished run (or none before the first), never a part of one."""

    def __init__(self, args, argv):
        self.args, self.path = args, args.json
        command = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--resume"]
        settings, before = settings_of(args), args.stored or {}
        self.stored = {"command": "grpo-edu family " + " ".join(command), "model": args.model,
                       "budget": stored_budget(args), "settings": settings,
                       "cpu_capability": settings["cpu_capability"], "torch": settings["torch"],
                       "results": before.get("results", {}), "gradient_noise": before.get("gradient_noise", {}),
                       "step_cost": before.get("step_cost")}
        self.written = args.resume                              # a resumed file is replaced from the first write

    def save(self):
        if not self.path:
            return
        from grpo_edu.common import _checks
        from grpo_edu.common.safe_files import replace_atomically

        text = json.dumps(_finite(self.stored), indent=1, allow_nan=False)
        if self.written:
            replace_atomically(self.path, text.encode("utf-8"))
            return
        written = _checks.write_result_file(self.path, text, overwrite=self.args.overwrite)
        if str(written) != self.path:
            print(f"{self.path} appeared before the first run finished (another run?): kept it, and writing to "
                  f"{written}")
        self.path, self.written = str(written), True


def main(argv=None):
    from grpo_edu.common import command_line

    parser = argparse.ArgumentParser(prog="grpo-edu family", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0")
    parser.add_argument("--methods", nargs="+", choices=ORDER + CONTROLS, default=list(ORDER),
                        help="default: the six of ORDER; the controls (CONTROLS: reinforce_dr_grpo, "
                             "rft_answer_mean) run only when named")
    parser.add_argument("--model", choices=MODELS, default="adder",
                        help="the start model: adder (the bundled adder, default) or sums (lesson 11's model, "
                             "long worked answers); each has its own budget (BUDGETS)")
    parser.add_argument("--steps", type=int, default=None,
                        help=", ".join(f"default {b['total_training_steps']} ({m})" for m, b in BUDGETS.items()))
    parser.add_argument("--num-iterations", type=int, default=None, metavar="MU",
                        help="optimizer updates per sampled batch for every method (GRPOConfig.num_iterations, "
                             "verl's ppo_epochs; default 1): from the second update on the ratio clip and PPO's "
                             "value clip can act. Store such runs in a folder of their own")
    parser.add_argument("--resamples", type=int, default=24,
                        help=f"answer draws per seed for the gradient's noise (default 24, 2 to {MAX_RESAMPLES})")
    parser.add_argument("--cost", action="store_true",
                        help="also time each method's step and measure its memory, each in a child process")
    parser.add_argument("--json", metavar="FILE", help="also write every run's row as JSON, each as soon as its run "
                                                       "finishes (an existing file is refused unless --overwrite "
                                                       "or --resume)")
    parser.add_argument("--overwrite", action="store_true", help="let --json replace an existing file")
    parser.add_argument("--resume", action="store_true",
                        help="continue the comparison in the --json file (after a kill or a crash): its finished "
                             "(method, seed) runs are kept, not run again; it must have the same settings")
    args = command_line.parse_args(parser, argv)
    _check_args(parser, args)
    start = time.perf_counter()
    kept = _Kept(args, argv)
    stored = kept.stored
    if args.stored:
        done = sum(len(rows) for rows in stored["results"].values())
        print(f"resuming {args.json}: {done} finished runs kept")
    results = comparison(args.methods, args.seeds, steps=args.steps, model=args.model,
                         num_iterations=args.num_iterations, progress=True, results=stored["results"],
                         on_row=lambda _: kept.save())
    stored["results"] = results
    noise = stored["gradient_noise"]
    for seed in args.seeds:
        missing = [name for name in args.methods if name not in noise.get(str(seed), {})]
        if missing:
            noise.setdefault(str(seed), {}).update(gradient_noise(missing, resamples=args.resamples, seed=seed,
                                                                  model=args.model, progress=True))
            kept.save()
    cost = stored.get("step_cost") or {}
    if args.cost and any(name not in cost for name in args.methods):
        cost.update(step_cost([name for name in args.methods if name not in cost], model=args.model))
        stored["step_cost"] = cost
        kept.save()
    print(format_table({name: results[name] for name in args.methods}))
    for name in args.methods:
        values = [noise[str(s)][name]["noise_to_signal"] for s in args.seeds]
        print(f"{name:12s} gradient noise / signal: " + ", ".join("-" if v is None else f"{v:.3g}" for v in values))
    if args.cost:
        for name in args.methods:
            row = cost[name]
            print(f"{name:12s} {row['median_step_s']:.3f} s/step  peak {row['peak_rss_mib']:.0f} MiB  "
                  f"{row['trained_weights']} trained weights, {row['frozen_weights']} frozen")
    print(f"{len(args.methods)} methods × {len(args.seeds)} seeds on the {args.model} model in {time.perf_counter() - start:.0f} s")
    kept.save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
