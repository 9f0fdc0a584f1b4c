"""Lesson 17's experiments: optimise a learned proxy reward and watch the gold reward rise, peak and fall.

The proxy is a reward model (``training/reward_models``) trained on a few gold-labelled preference pairs
sampled from ``assets/tiny-sums``; the gold is :class:`~grpo_edu.training.reward_models.gold.SumsGoldJudge`.
Two ways of optimising the proxy, each measured against d = √KL(π‖π_init) (Gao et al. 2022):

``best_of_n``  no training: sample n answers, keep the proxy's favourite; KL_bon ≤ log n − (n−1)/n
               (``core.overoptimisation.kl_best_of_n``, an upper bound), and the exact KL over the samples'
               empirical distribution (``kl_best_of_n_exact``); n = 1 … 256, every n read from the same 256
               samples per prompt split into 256/n disjoint groups
``grpo``       GRPOTrainer with the proxy as its reward function and the gold logged beside it
               (``reward_weights=[1, 0]``); every few steps, on fixed held-out prompts, the mean gold and
               proxy of fresh samples and KL(π‖π_init) = E_{y~π}[log π(y) − log π_init(y)] over those samples

The levers, each against the same curve: ``num_pairs`` (more preference data), ``ensemble`` (several RMs
on different pairs, combined by mean or min; Coste et al. 2023), ``beta`` (GRPO's KL penalty), and
``center_rewards_coefficient`` (TRL's centring; Eisenstein et al. 2023).

Stored sweeps (seeds 0–2): ``assets/overoptimisation/*.json``, each with the command that made it;
:func:`stored` reads them. Make them with ``python -m grpo_edu.course.experiments.overoptimisation --help``: a
sweep is written into ``runs/overoptimisation/`` in the working directory unless ``--out`` names a folder, and a
file already there is replaced only with ``--overwrite`` (checked before any work).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

from grpo_edu.common._checks import choice, fail
from grpo_edu.training.model.models import ASSETS

STORED = ASSETS / "overoptimisation"
NS = tuple(2 ** k for k in range(9))
"""best-of-n's n: 1, 2, 4, … 256."""
PROXIES = {
    "small": {"num_pairs": 64},
    "centred": {"num_pairs": 64, "center_rewards_coefficient": 0.1},
    "ensemble": {"num_pairs": 64, "ensemble": 3},
    "large": {"num_pairs": 256},
}
"""The proxies the levers compare: ``small`` is the baseline (few pairs), each other changes one thing.
``ensemble``: 3 members on the same 64 pairs, each with its own head seed and pair order (as Coste et al. vary
only the seed), read twice: their mean and their min. ``large`` needs more pairs, sampled when it is reached."""
POOL_ROWS = 12
"""Held-out prompts (after the RM's 200) best-of-n samples 256 answers each for."""
PAIR_ROWS = 100
"""Train prompts sampled for the small proxies' pairs (4 answers each; about 9 in 10 give a pair). ``large``
samples 3 × as many more."""
EVAL_ROWS = 100
"""Held-out prompts for the RM's held-out accuracy (pairs sampled the same way)."""


def _torch():
    import torch
    torch.set_num_threads(1)
    return torch


def base_policy():
    """(model, tokenizer): the bundled ``tiny-sums``, the policy before any optimisation."""
    from grpo_edu.training.model.models import load_model_and_tokenizer, sums_model_dir
    return load_model_and_tokenizer(str(sums_model_dir()))


def preference_sets(seed, policy=None, *, more=0):
    """(train pairs, held-out pairs) sampled from the base policy with ``seed``, labelled by the gold judge.
    ``more`` > 0: only ``more`` × PAIR_ROWS further train rows' pairs (for the ``large`` proxy), no held-out."""
    from grpo_edu.training.reward_models import gold, preference_data
    from grpo_edu.training.task.tasks import get_task
    model, tok = policy or base_policy()
    task, judge = get_task("sums"), gold.SumsGoldJudge()
    start = seed * 4 * PAIR_ROWS + (PAIR_ROWS if more else 0)           # each seed owns 4 × PAIR_ROWS train rows
    rows = task.split("train")[start:start + (more or 1) * PAIR_ROWS]
    train, _ = preference_data.sample_pairs(model, tok, rows, judge, num_generations=4, seed=seed + 100 * more)
    if more:
        return train, None
    heldout, _ = preference_data.sample_pairs(model, tok, task.split("heldout", EVAL_ROWS), judge,
                                              num_generations=4, seed=1000 + seed)
    return train, heldout


def train_proxy(pairs, heldout, *, num_pairs, seed, ensemble=1, combine="mean", center_rewards_coefficient=None,
                epochs=4, learning_rate=1e-3):
    """A proxy reward function trained on the first ``num_pairs`` pairs (each ensemble member with its own head seed
    and pair order), and ``info``: each member's held-out accuracy and ``models`` (to combine otherwise)."""
    from grpo_edu.training.model.models import sums_model_dir
    from grpo_edu.training.reward_models import reward_function, reward_model, reward_trainer
    if num_pairs > len(pairs):
        fail("num_pairs", f"{num_pairs} is more than the {len(pairs)} pairs sampled",
             "ask for fewer pairs or sample more rows (PAIR_ROWS)")
    models, accuracy = [], []
    for k in range(ensemble):
        rm, tok = reward_model.make_reward_model(sums_model_dir(), seed=seed * 10 + k)
        reward_trainer.train_reward_model(rm, tok, pairs[:num_pairs], epochs=epochs,
                                          learning_rate=learning_rate, seed=seed * 10 + k,
                                          center_rewards_coefficient=center_rewards_coefficient)
        accuracy.append(reward_trainer.pair_accuracy(rm, tok, heldout)[0])
        models.append(rm)
    proxy = reward_function.RewardModelReward(models, tok, combine=combine, name="proxy")
    return proxy, {"heldout_accuracy": accuracy, "models": models, "tokenizer": tok}


def sample_pool(policy, rows, *, n_max=256, seed=0, max_new_tokens=42):
    """n_max answers to each row from ``policy``: a list of (prompt, answer, [completions])."""
    torch = _torch()
    from grpo_edu.training.rollouts import engine
    model, tok = policy
    generator = torch.Generator().manual_seed(seed)
    pool = []
    for row in rows:
        r = engine.generate(model, tok, [row["prompt"]], num_generations=n_max, max_new_tokens=max_new_tokens,
                            generator=generator)
        pool.append((row["prompt"], row["answer"], r.completions))
    return pool


def best_of_n(pool, proxy, judge, ns=NS):
    """Mean gold and proxy of the proxy's pick among n, for each n, from the same samples.

    For each prompt its samples are cut into len/n disjoint groups of n and each group's proxy-best taken.
    Returns ``(curve, info)``: curve one dict per n ``{"n", "kl", "d", "kl_exact", "d_exact", "gold", "gold_se",
    "proxy"}``: ``kl`` the bound log n − (n−1)/n, ``kl_exact`` the exact KL of best-of-n over each prompt's
    empirical distribution of its samples (a repeated answer one outcome; ``core.overoptimisation.
    kl_best_of_n_exact``), averaged over prompts; ``gold_se`` the standard error of ``gold`` over its picks.
    info ``picks`` {n: [(prompt, answer, pick)]} for the smallest and largest n."""
    from grpo_edu.core.overoptimisation import kl_best_of_n, kl_best_of_n_exact
    from grpo_edu.training.reward_models.gold import gold_scores
    scored = []
    for prompt, answer, completions in pool:
        proxy_scores = proxy([prompt] * len(completions), completions)
        first = {}
        for c, s in zip(completions, proxy_scores):                   # one score per distinct answer: one outcome
            first.setdefault(c, s)
        gold = gold_scores(judge, [prompt] * len(completions), completions, [answer] * len(completions))
        scored.append((prompt, answer, completions, proxy_scores, gold, [first[c] for c in completions]))
    curve, kept = [], {}
    for n in ns:
        golds, proxies, picks = [], [], []
        for prompt, answer, completions, p, g, _ in scored:
            for start in range(0, len(completions) - n + 1, n):
                best = max(range(start, start + n), key=lambda i: p[i])
                golds.append(g[best]), proxies.append(p[best]), picks.append((prompt, answer, completions[best]))
        kl, info = kl_best_of_n(n)
        exact = sum(kl_best_of_n_exact(outcomes, n)[0] for *_, outcomes in scored) / len(scored)
        mean = sum(golds) / len(golds)
        spread = sum((x - mean) ** 2 for x in golds) / max(len(golds) - 1, 1)
        curve.append({"n": n, "kl": kl, "d": info["d"], "kl_exact": exact, "d_exact": math.sqrt(exact),
                      "gold": mean, "gold_se": math.sqrt(spread / len(golds)), "proxy": sum(proxies) / len(proxies)})
        if n in (min(ns), max(ns)):
            kept[n] = picks
    return curve, {"picks": kept}


def looks(answer):
    """What an answer looks like, whatever its arithmetic: ``writes_working`` (a step a+b=c) and
    ``repeats_last_sum`` (it ends "=s#s", its answer the last step's sum, right or wrong); each 0 or 1."""
    last = re.search(r"=(\d+)#(\d+)$", answer)
    return {"writes_working": int(bool(re.search(r"\d\+\d+=\d", answer))),
            "repeats_last_sum": int(bool(last) and last.group(1) == last.group(2))}


def pick_counts(picks, judge):
    """What best-of-n's picks (prompt, answer, pick) are: how many have each gold facet (``length``: longer than the
    careful worked solution; ``format``: malformed) and each of :func:`looks`' traits, and their mean length in
    characters and its standard deviation (``sd_length``)."""
    counts = {"picks": len(picks)}
    for prompt, answer, pick in picks:
        for facet, v in {**judge.facets(prompt, pick, answer), **looks(pick)}.items():
            counts[facet] = counts.get(facet, 0) + v
    lengths = [len(p[2]) for p in picks]
    counts["mean_length"] = sum(lengths) / max(len(lengths), 1)
    counts["sd_length"] = math.sqrt(sum((x - counts["mean_length"]) ** 2 for x in lengths) / max(len(lengths) - 1, 1))
    return counts


class StandardisedMin:
    """An ensemble's most pessimistic score after standardising each member: z_k = (r_k − m_k) / s_k, with m_k and
    s_k member k's mean and SD over ``reference`` answers (the base policy's), then min_k z_k. Bradley–Terry fixes
    a model's scores only up to a constant, so the raw min of uncentred members leans towards the member whose
    offset happens to be lowest; standardised, the min compares like with like. ``members``: one reward function
    per model; ``reference``: (prompts, completions)."""

    def __init__(self, members, reference):
        import numpy as np
        self.members = list(members)
        self.stats = []
        for member in self.members:
            r = np.asarray(member(*reference), dtype=float)                    # (R,)
            self.stats.append((float(r.mean()), float(r.std()) or 1.0))
        self.__name__ = self.__qualname__ = "proxy"

    def __call__(self, prompts, completions, **kwargs):
        import numpy as np
        z = [(np.asarray(m(prompts, completions), dtype=float) - mean) / sd   # (N,) each
             for m, (mean, sd) in zip(self.members, self.stats)]
        return np.min(np.stack(z), axis=0).tolist()                            # (M, N) → (N,)


def bon_sweep(seed, save=lambda result: None, *, proxies=None, result=None):
    """Seed ``seed``'s best-of-n sweep: each proxy of :data:`PROXIES` (``proxies``: only these names), their held-out
    accuracy, curves and fits. ``result``: a stored sweep of the same seed the new proxies are added to."""
    from grpo_edu.core.overoptimisation import fit_gao
    from grpo_edu.training.reward_models.gold import SumsGoldJudge
    from grpo_edu.training.reward_models.reward_function import RewardModelReward
    from grpo_edu.training.task.tasks import get_task
    _torch()
    policy = base_policy()
    train, heldout = preference_sets(seed, policy)
    rows = get_task("sums").split("heldout")[EVAL_ROWS + seed * POOL_ROWS:EVAL_ROWS + (seed + 1) * POOL_ROWS]
    pool = sample_pool(policy, rows, seed=seed)
    judge = SumsGoldJudge()
    result = result or {"seed": seed, "train_pairs": len(train), "heldout_pairs": len(heldout),
                        "pool_prompts": len(pool), "proxies": {}}
    for name, settings in PROXIES.items():
        if proxies is not None and name not in proxies:
            continue
        if settings["num_pairs"] > len(train):
            train = train + preference_sets(seed, policy, more=3)[0]
            result["train_pairs"] = len(train)
        proxy, info = train_proxy(train, heldout, seed=seed, **settings)
        reads = {name: proxy}
        if settings.get("ensemble", 1) > 1:
            members = [RewardModelReward([m], info["tokenizer"], name="proxy") for m in info["models"]]
            reference = ([p for p, _, cs in pool for _ in cs], [c for _, _, cs in pool for c in cs])
            reads = {f"{name}_mean": proxy,
                     f"{name}_min": RewardModelReward(info["models"], info["tokenizer"], combine="min", name="proxy"),
                     f"{name}_zmin": StandardisedMin(members, reference)}
        for read, fn in reads.items():
            curve, picks = best_of_n(pool, fn, judge)
            gains = [c["gold"] - curve[0]["gold"] for c in curve]
            fit, fit_info = fit_gao([c["d"] for c in curve], gains, "bon")
            result["proxies"][read] = {"settings": settings, "heldout_accuracy": info["heldout_accuracy"],
                                       "curve": curve, "fit_bon": {"alpha": fit[0], "beta": fit[1], **fit_info},
                                       "picks_at_max_n": picks["picks"][max(NS)],
                                       "counts": {n: pick_counts(p, judge) for n, p in picks["picks"].items()}}
            save(result)
            print(f"seed {seed} {read}: acc {info['heldout_accuracy']} gold {[round(c['gold'], 2) for c in curve]}",
                  flush=True)
    return result


def kl_to_init(policy, init, tokenizer, prompts, *, samples=4, seed=0, max_new_tokens=42):
    """KL(π‖π_init) = E_{y~π}[Σ_t log π(y_t|·) − log π_init(y_t|·)] over ``samples`` fresh answers per prompt,
    in nats per answer. Returns ``(kl, info)``; info ``prompts``, ``completions`` (the samples, for scoring)."""
    torch = _torch()
    from grpo_edu.training.rollouts import engine
    from grpo_edu.training.rollouts.rollout import completion_logprobs
    generator = torch.Generator().manual_seed(seed)
    was_training = policy.training
    policy.eval()
    with torch.no_grad():
        r = engine.generate(policy, tokenizer, prompts, num_generations=samples, max_new_tokens=max_new_tokens,
                            generator=generator)
        T = r.completion_ids.shape[1]
        logp, _ = completion_logprobs(policy, r.input_ids, r.attention_mask, T)          # (N, T)
        logp_init, _ = completion_logprobs(init, r.input_ids, r.attention_mask, T)       # (N, T)
        per_answer = ((logp - logp_init) * r.completion_mask).sum(-1)                     # (N,)
    policy.train(was_training)
    return float(per_answer.mean()), {"prompts": [p for p in prompts for _ in range(samples)],
                                      "completions": r.completions}


GRPO_SETTINGS = {"batch_size": 8, "num_generations": 8, "learning_rate": 1e-4, "eval_size": 0}
"""GRPO against the proxy: the ``sums`` preset with these (β and the steps from the command line)."""
MEASURE_PROMPTS = 12
"""Held-out prompts (after the RM's 200) the run's gold, proxy and KL are measured on."""
MEASURE_SAMPLES = 4
"""Fresh answers per measured prompt: each point's gold is the mean of MEASURE_PROMPTS × MEASURE_SAMPLES answers."""


def grpo_sweep(seed, *, beta=0.0, steps=24, every=2, proxy_name="small", learning_rate=None,
               save=lambda result: None):
    """GRPO against seed ``seed``'s proxy: every ``every`` steps the mean gold and proxy of fresh samples on fixed
    held-out prompts and KL(π‖π_init) over them; the gold gain fitted with both of Gao's forms."""
    from grpo_edu.training.reward_models.gold import SumsGoldJudge, gold_scores
    from grpo_edu.training.task.tasks import get_task
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer
    _torch()
    init, tok = base_policy()
    train, heldout = preference_sets(seed, (init, tok))
    proxy, info = train_proxy(train, heldout, seed=seed, **PROXIES[proxy_name])
    judge = SumsGoldJudge()
    rows = get_task("sums").split("heldout")[EVAL_ROWS:EVAL_ROWS + MEASURE_PROMPTS]
    answers = {r["prompt"]: r["answer"] for r in rows}
    settings = {**GRPO_SETTINGS, **({"learning_rate": learning_rate, "lr_scheduler_type": "constant"}
                                    if learning_rate is not None else {})}
    config = GRPOConfig.preset("sums", **settings, beta=beta, total_training_steps=steps, seed=seed)
    trainer = GRPOTrainer(config, reward_funcs=[proxy, judge], reward_weights=[1.0, 0.0])
    points, samples = [], {}

    def measure(step):
        kl, s = kl_to_init(trainer.model, init, tok, [r["prompt"] for r in rows], samples=MEASURE_SAMPLES,
                           seed=10_000 + step)
        gold = gold_scores(judge, s["prompts"], s["completions"], [answers[p] for p in s["prompts"]])
        prox = proxy(s["prompts"], s["completions"])
        mean = sum(gold) / len(gold)
        points.append({"step": step, "kl": kl, "d": math.sqrt(max(kl, 0.0)), "gold": mean,
                       "gold_se": math.sqrt(sum((g - mean) ** 2 for g in gold) / (len(gold) - 1) / len(gold)),
                       "proxy": sum(prox) / len(prox),
                       "mean_length": sum(map(len, s["completions"])) / len(s["completions"])})
        samples[str(step)] = list(zip(s["prompts"], s["completions"]))[:: 8]
        print(f"seed {seed} β {beta} step {step}: " + str({k: round(v, 3) for k, v in points[-1].items()}), flush=True)

    result = {"seed": seed, "beta": beta, "steps": steps, "settings": settings, "proxy": proxy_name,
              "heldout_accuracy": info["heldout_accuracy"], "points": points, "train_log": [], "fits": {},
              "samples": samples}
    measure(0)
    for step in range(1, steps + 1):
        m = trainer.step()
        result["train_log"].append({"step": step, "proxy": m["reward/proxy"], "gold": m["reward/gold"]})
        if step % every == 0:
            measure(step)
            if sum(p["d"] > 0 for p in points) >= 2:          # an early KL estimate can be ≤ 0 (noise): d = 0
                result["fits"] = fit_both(points)
            result["steps_done"] = step
            save(result)
    return result


def fit_both(points):
    """Both of Gao's forms fitted to the gold gain over a run's points {"d", "gold"}: {form: α, β, d_peak, r2…}."""
    from grpo_edu.core.overoptimisation import fit_gao
    gains = [p["gold"] - points[0]["gold"] for p in points]
    fits = {}
    for form in ("bon", "rl"):
        (alpha, b), fit_info = fit_gao([p["d"] for p in points], gains, form)
        fits[form] = {"alpha": alpha, "beta": b, **fit_info}
    return fits


RUNS = Path("runs") / "overoptimisation"
"""Where a sweep is written by default: ``runs/overoptimisation`` in the working directory, never the package's own
stored sweeps (:data:`STORED`, which lesson 17 reads); those are written only by naming them with ``--out``."""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.overoptimisation",
                                     description="Lesson 17's sweeps: best-of-n and GRPO against a learned proxy.")
    parser.add_argument("what", choices=("bon", "grpo", "report"), help="report: print the stored sweeps' tables")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", default=None,
                        help=f"bon, grpo: the folder the sweep is written into (default {RUNS} in the working "
                             "directory); report: the folder read (default the stored sweeps lesson 17 reads)")
    parser.add_argument("--overwrite", action="store_true",
                        help="let a sweep replace a file of the same name in --out (bon --proxies: those proxies)")
    parser.add_argument("--beta", type=float, default=0.0, help="grpo: the KL penalty β")
    parser.add_argument("--steps", type=int, default=24, help="grpo: training steps")
    parser.add_argument("--proxies", default=None,
                        help=f"bon: only these proxies (comma-separated, of {', '.join(PROXIES)}), added to the "
                             "seed's sweep in --out")
    parser.add_argument("--lr", type=float, default=None,
                        help="grpo: a constant learning rate in place of GRPO_SETTINGS' (1e-4, linear decay)")
    args = parser.parse_args(argv)
    if args.what == "report":
        try:
            report(args.out)
        except ValueError as e:                        # an empty or damaged folder: say which, no traceback
            parser.error(f"--out: {e}")
        return
    out, name, existing, names = _check_sweep_arguments(parser, args)
    t0 = time.time()
    environment = " ".join(f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS", "ATEN_CPU_CAPABILITY")
                           if k in os.environ)
    command = " ".join(filter(None, [environment, "python -m grpo_edu.course.experiments.overoptimisation",
                                     *(argv if argv is not None else sys.argv[1:])]))
    if existing is not None:
        command = existing.get("command", "?") + " && " + command
        t0 -= existing.get("seconds", 0)
    written = []

    def save(result):                     # after each proxy / each measurement: a stopped sweep keeps what it did
        from grpo_edu.common._checks import write_result_file
        from grpo_edu.common.safe_files import replace_atomically
        result["command"], result["seconds"] = command, round(time.time() - t0)
        result["kernels"] = os.environ.get("ATEN_CPU_CAPABILITY", "native")
        text = json.dumps(result, indent=1, sort_keys=True) + "\n"
        if written:                        # our own file: replaced whole or not at all
            replace_atomically(written[0], text.encode("utf-8"))
        else:                              # checked before the work; a file that appeared since is never replaced
            written.append(write_result_file(out / name, text, overwrite=args.overwrite or existing is not None))

    if args.what == "bon":
        result = bon_sweep(args.seed, save=save, proxies=names, result=existing)
    else:
        result = grpo_sweep(args.seed, beta=args.beta, steps=args.steps, learning_rate=args.lr, save=save)
    result["complete"] = True
    save(result)
    print(f"wrote {written[0]} in {result['seconds']} s")


def _check_sweep_arguments(parser, args):
    """Every argument of a bon or grpo sweep checked before any work: ``(out, file name, the stored sweep that
    --proxies adds to or None, the proxies' names or None)``. A file in ``--out`` is replaced only with
    ``--overwrite`` (bon --proxies: only proxies it does not hold yet are added without it)."""
    from grpo_edu.common._checks import unwritable_folder
    if args.seed is None or args.seed < 0:
        parser.error("--seed: a sweep (bon or grpo) needs a seed, a whole number ≥ 0. Fix: pass --seed 0")
    if args.what == "grpo":
        if args.steps < 1:
            parser.error(f"--steps: must be a whole number ≥ 1, got {args.steps}. Fix: pass e.g. --steps 24")
        if not math.isfinite(args.beta) or args.beta < 0:
            parser.error(f"--beta: must be a finite number ≥ 0, got {args.beta}. Fix: pass e.g. --beta 0.04")
        if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
            parser.error(f"--lr: must be a finite number > 0, got {args.lr}. Fix: pass e.g. --lr 3e-4, or leave it out")
    elif args.lr is not None or args.beta != 0.0 or args.steps != 24:
        parser.error("--beta, --steps and --lr: only grpo sweeps take them. Fix: drop them for bon")
    if args.proxies and args.what != "bon":
        parser.error("--proxies: only bon sweeps take it. Fix: drop it")
    out = Path(args.out) if args.out is not None else RUNS
    blocked = unwritable_folder(out)
    if blocked is not None:
        parser.error(f"--out: {blocked} cannot be written into. Fix: pass a folder you can write to")
    name = sweep_file(args.what, args.seed, beta=args.beta, lr=args.lr)
    path, names, existing = out / name, None, None
    if args.proxies:
        names = [n.strip() for n in args.proxies.split(",")]
        for n in names:
            if n not in PROXIES:
                parser.error(f"--proxies: unknown proxy {n!r}. Fix: use some of {', '.join(PROXIES)}")
    if os.path.lexists(path) and names is not None:
        try:
            existing = json.loads(path.read_text(encoding="utf-8"))
            held = set(existing["proxies"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            parser.error(f"--proxies: {path} is not a stored best-of-n sweep to add to ({e}). Fix: move it away, "
                         "or pass another --out")
        clash = sorted(r for r in held for n in names if r == n or r.startswith(n + "_"))
        if clash and not args.overwrite:
            parser.error(f"--proxies: {path} already holds {', '.join(clash)}. Fix: pass --overwrite to replace "
                         "them, or another --out")
    elif os.path.lexists(path) and not args.overwrite:
        parser.error(f"--out: {path} already exists (a stored sweep). Fix: pass another --out, or --overwrite "
                     "to replace it")
    out.mkdir(parents=True, exist_ok=True)
    return out, name, existing, names


def sweep_file(kind, seed, *, beta=0.0, lr=None):
    """The file a sweep is stored in: ``bon-seed{seed}.json``, or ``grpo-beta{β}[-lr{lr}]-seed{seed}.json`` (lr only
    for a constant learning rate); ``seed="*"`` gives the pattern of every seed's file."""
    if kind == "bon":
        return f"bon-seed{seed}.json"
    return f"grpo-beta{beta:g}{f'-lr{lr:g}' if lr is not None else ''}-seed{seed}.json"


def stored(kind="bon", *, beta=0.0, lr=None, folder=None):
    """The stored sweeps of ``kind`` ("bon" or "grpo" at KL penalty ``beta`` and constant learning rate ``lr``, None:
    GRPO_SETTINGS'), one dict per seed found, by seed."""
    choice("kind", kind, ("bon", "grpo"))
    folder = Path(folder or STORED)
    pattern = sweep_file(kind, "*", beta=beta, lr=lr)
    runs = []
    for path in sorted(folder.glob(pattern)):
        try:
            runs.append(json.loads(path.read_text(encoding="utf-8")))
            runs[-1]["seed"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail("folder", f"{path} is not a readable stored sweep ({type(e).__name__}: {e})",
                 "move it away, or make it again with the command it was made by")
    if not runs:
        fail("kind", f"no stored {kind} sweep in {folder}", "make them with the command in this module's docstring")
    return sorted(runs, key=lambda r: r["seed"])


def gold_peak(points, *, fall=0.05):
    """Where the gold score peaks along ``points`` (dicts with "d" and "gold", in order of d) and whether it falls
    after: ``(d_peak, info)``; info ``gold_peak``, ``gold_start``, ``gold_end``, ``rises`` (peak above the start by
    more than ``fall``), ``falls`` (end below the peak by more than ``fall``), ``interior`` (both)."""
    golds = [p["gold"] for p in points]
    k = max(range(len(golds)), key=golds.__getitem__)
    rises, falls = golds[k] > golds[0] + fall, golds[-1] < golds[k] - fall
    return points[k]["d"], {"gold_peak": golds[k], "gold_start": golds[0], "gold_end": golds[-1], "index": k,
                            "rises": rises, "falls": falls, "interior": rises and falls}


D_BANDS = (0.0, 0.5, 1.0, 2.0, 5.0)
"""Bands of d = √KL(π‖π_init) a frontier is read in: GRPO runs with different β compared at the same KL."""


def frontier(runs, bands=D_BANDS):
    """The gold-against-d frontier of several runs (e.g. one β, all seeds): the mean gold of every measured point
    with 0 < d in each band [bands[i], bands[i+1]) (None where no point falls). Points at d = 0 are left out: every
    run's start (the same policy on every β) and a KL estimate ≤ 0 that d clamps to 0 say nothing about where a β
    leads. Returns ``(golds, info)``; info ``counts`` (points per band), ``se`` (each band's standard error from
    its points' scatter, None below 2 points; points of one run are not independent, so it is a floor),
    ``dropped`` (the points at d = 0), ``d_end`` (the mean d where the runs end)."""
    points = [p for run in runs for p in run["points"]]
    golds, counts, ses = [], [], []
    for lo, hi in zip(bands, bands[1:]):
        inside = [p["gold"] for p in points if lo <= p["d"] < hi and p["d"] > 0]
        mean = sum(inside) / len(inside) if inside else None
        golds.append(mean)
        counts.append(len(inside))
        ses.append(math.sqrt(sum((g - mean) ** 2 for g in inside) / (len(inside) - 1) / len(inside))
                   if len(inside) > 1 else None)
    return golds, {"counts": counts, "se": ses, "dropped": sum(p["d"] <= 0 for p in points),
                   "d_end": sum(run["points"][-1]["d"] for run in runs) / len(runs)}


def grpo_settings(folder=None):
    """The (β, constant lr or None) of every stored GRPO sweep in ``folder``, in order (read off the names
    :func:`sweep_file` gives)."""
    found = set()
    for path in Path(folder or STORED).glob("grpo-beta*-seed*.json"):
        m = re.fullmatch(r"grpo-beta([0-9.e-]+)(?:-lr([0-9.e-]+))?-seed\d+\.json", path.name)
        if m is None:                                  # not a name sweep_file gives: not a stored sweep
            continue
        found.add((float(m.group(1)), float(m.group(2)) if m.group(2) else None))
    return sorted(found, key=lambda s: (s[1] or 0, s[0]))


def draw(ax, points, fits=None, *, label="", color=None):
    """Gold (solid) and proxy (dashed) against d on ``ax``; each fitted Gao form of ``fits`` drawn dotted."""
    import numpy as np
    from grpo_edu.core.overoptimisation import gao_curve
    d = [p["d"] for p in points]
    line, = ax.plot(d, [p["gold"] for p in points], "o-", color=color, label=f"gold {label}")
    ax.plot(d, [p["proxy"] for p in points], "s--", color=line.get_color(), alpha=0.5, label=f"proxy {label}")
    grid = np.linspace(0, max(d), 50)
    for form, fit in (fits or {}).items():
        R, _ = gao_curve(grid, fit["alpha"], fit["beta"], form)
        ax.plot(grid, points[0]["gold"] + R, ":", color=line.get_color(), lw=2 if form == "rl" else 1)
    ax.set_xlabel("d = √KL(π ‖ π_init)")


PROXY_NAMES = {"small": "64 pairs", "large": "256 pairs", "centred": "centred (0.1)",
               "ensemble_mean": "ensemble of 3, mean", "ensemble_min": "ensemble of 3, min",
               "ensemble_zmin": "ensemble of 3, min of standardised"}


def _num(x):
    return f"{x:.2f}".replace("-", "−")


def _with_se(point):
    """A point's gold, with ± its standard error where the sweep stored one."""
    return _num(point["gold"]) + (f" ± {point['gold_se']:.2f}" if "gold_se" in point else "")


def report(folder=None):
    """The stored sweeps as the markdown tables of docs/learned-rewards.md: ``python -m
    grpo_edu.course.experiments.overoptimisation report [--out FOLDER]``. Returns the lines it prints."""
    lines = ["Best-of-n against each proxy (n = 1 … 256; d the bound √(log n − (n−1)/n), exact d where stored; "
             "± one standard error over the picks where stored):", "",
             "| seed | proxy | held-out pair accuracy | gold at n = 1 | gold peak (n, d, exact d) | gold at n = 256 | α "
             "| β | fitted d_peak | r² |", "|---|---|---|---|---|---|---|---|---|---|"]
    bon = stored("bon", folder=folder)
    for name, label in PROXY_NAMES.items():
        for run in bon:
            proxy = run["proxies"].get(name)
            if proxy is None:
                continue
            curve, fit = proxy["curve"], proxy["fit_bon"]
            d, info = gold_peak(curve)
            acc = sum(proxy["heldout_accuracy"]) / len(proxy["heldout_accuracy"])
            peak = curve[info["index"]]
            exact = f"{peak['d_exact']:.2f}" if "d_exact" in peak else "—"
            lines.append(f"| {run['seed']} | {label} | {acc:.2f} | {_with_se(curve[0])} | "
                         f"{_num(info['gold_peak'])} ({peak['n']}, {d:.2f}, {exact}) | {_with_se(curve[-1])} "
                         f"| {fit['alpha']:.2f} | {fit['beta']:.2f} | {fit['d_peak']:.2f} | {fit['r2']:.3f} |")
    lines += ["", "GRPO against the 64-pair proxy, Gao's RL form fitted to each run:", "",
              "| seed | β | learning rate | steps | gold at start | gold peak (d) | gold at end | d at end | RL fit α "
              "| β | d_peak |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for beta, lr in grpo_settings(folder):
        for run in stored("grpo", beta=beta, lr=lr, folder=folder):
            points, fit = run["points"], run["fits"].get("rl")        # no fit yet: a run stopped at its start
            d, info = gold_peak(points)
            rate = "1e-4, linear decay" if lr is None else f"{lr:g}, constant"
            fitted = " | ".join(f"{fit[k]:.2f}" if fit else "—" for k in ("alpha", "beta", "d_peak"))
            lines.append(f"| {run['seed']} | {beta:g} | {rate} | {points[-1]['step']} | {_num(points[0]['gold'])} | "
                         f"{_num(info['gold_peak'])} ({d:.2f}) | {_num(points[-1]['gold'])} | {points[-1]['d']:.2f} | "
                         f"{fitted} |")
    lines += ["", "GRPO at the constant 3e-4: the mean gold of all seeds' points in each band of d (the points at d = 0 "
              "left out) ± its standard error from the points' scatter, and where the runs end:", "",
              "| β | " + " | ".join(f"{lo:g} {'<' if lo == 0 else '≤'} d < {hi:g}" for lo, hi in zip(D_BANDS, D_BANDS[1:]))
              + " | d at end (mean of seeds) |", "|---" * (len(D_BANDS) + 1) + "|"]
    for beta, lr in grpo_settings(folder):
        if lr == 3e-4:
            golds, info = frontier(stored("grpo", beta=beta, lr=lr, folder=folder))
            lines.append(f"| {beta:g} | " + " | ".join("—" if g is None else _num(g) + ("" if se is None else f" ± {se:.2f}")
                                                         for g, se in zip(golds, info["se"]))
                         + f" | {info['d_end']:.2f} |")
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
