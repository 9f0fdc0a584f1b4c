"""Process rewards measured on the sums model, whose every step a program can check (lesson 17b).

``python -m grpo_edu.course.experiments.process_rewards compare --seeds 0 1 2 --json FILE``
    outcome GRPO against GRPO with process supervision (the exact step checker, DeepSeekMath §4.1.3), the same
    seed, prompts and budget: held-out accuracy and the share of right answers with wrong working (Uesato et
    al.'s "trace error") before and after.
``python -m grpo_edu.course.experiments.process_rewards verifiers --prompts 100 --json FILE``
    best-of-N (N = 1 … 256) with majority vote, an outcome reward model, PRMs trained on exact and on
    Monte-Carlo labels, and the exact checker (Lightman et al.'s curve at laptop scale), and each PRM's
    first-error localisation (ProcessBench's F1).
``python -m grpo_edu.course.experiments.process_rewards labels --completions 200 --json FILE``
    Monte-Carlo step labels (Math-Shepherd) against the exact ones: the confusion matrix of hard labels for
    N = 1, 2, 4, 8, 16, 32 endings, from the bundled model as the completer.

Each writes a JSON file with the command that made it, this CPU's kernel set and torch's version; an existing
file is kept unless ``--overwrite``, and the path is checked before any run.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from grpo_edu.common._checks import fail
from grpo_edu.training.model.models import ASSETS

STORED = ASSETS / "process-rewards"
"""The stored runs lesson 17b reads: ``compare.json``, ``labels.json``, ``verifiers.json`` (and ``portable/``)."""
KINDS = ("compare", "labels", "verifiers")

COMMON = dict(batch_size=8, num_generations=8, total_training_steps=40, eval_size=200)
"""Both runs' budget: the ``sums`` preset with 8 prompts × 8 answers for 40 steps, 200 held-out prompts."""
EVAL_SAMPLES = 4
"""Answers sampled per held-out prompt (τ = 1) for the accuracy and the trace-error share."""
ENDINGS = (1, 2, 4, 8, 16, 32)
"""The numbers of Monte-Carlo endings per step that ``labels`` compares."""


def scored(trainer, *, num_samples=EVAL_SAMPLES):
    """Held-out accuracy with its standard error, and the right-answer-wrong-working share (``trace_error``, with
    its counts ``right_wrong_working`` of ``right``): a dict."""
    from grpo_edu.training.task.sums_steps import right_answer_wrong_working

    samples = trainer.evaluate(num_samples=num_samples)["samples"]
    prompts, completions, answers, correct = zip(*samples)
    accuracy = sum(correct) / len(correct)
    # answers of one prompt are correlated: the standard error from the per-prompt means
    per_prompt = [sum(correct[i:i + num_samples]) / num_samples for i in range(0, len(correct), num_samples)]
    mean = sum(per_prompt) / len(per_prompt)
    se = math.sqrt(sum((p - mean) ** 2 for p in per_prompt) / (len(per_prompt) - 1) / len(per_prompt))
    rate, info = right_answer_wrong_working(list(prompts), list(completions), list(answers))
    return {"accuracy": accuracy, "accuracy_se": se, "trace_error": rate, **info}


def compare_seed(seed, *, steps=None, progress=False):
    """Outcome and process-supervised GRPO from the bundled sums model on ``seed``: {"before", "outcome", "process"}."""
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    settings = {**COMMON, "seed": seed, **({"total_training_steps": steps} if steps else {})}
    result = {}
    for name, extra in (("outcome", {}), ("process", {"process_supervision": "exact"})):
        trainer = GRPOTrainer(GRPOConfig.preset("sums", **settings, **extra))
        if not result:
            result["before"] = scored(trainer)
        start = time.perf_counter()
        trainer.train(progress=progress)
        result[name] = {**scored(trainer), "seconds": time.perf_counter() - start,
                        "reward_curve": [m["reward_mean"] for m in trainer.history]}
    return result


def label_confusions(num_completions=200, *, endings=ENDINGS, seed=0, strong_steps=40):
    """Monte-Carlo labels against the exact ones on ``num_completions`` well-formed sampled answers of the bundled
    model, which also completes them: {N: {"matrix", "precision", "recall", "false_positive_rate", "steps"}} and
    the share of wrong steps among all; then (``strong_steps`` > 0) the same with a stronger completer, the bundled
    model after that many steps of outcome GRPO (:data:`COMMON`'s settings)."""
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.reward_models.monte_carlo_labels import confusion, monte_carlo_labels
    from grpo_edu.training.task.evaluation import sample_completions
    from grpo_edu.training.task.sums import FORMAT
    from grpo_edu.training.task.sums_steps import step_labels
    from grpo_edu.training.task.tasks import get_task

    task = get_task("sums")
    model, tokenizer = load_model_and_tokenizer("bundled-sums")
    rows = task.split("heldout")
    texts, _ = sample_completions(model, tokenizer, [r["prompt"] for r in rows], num_samples=2, seed=seed,
                                  max_new_tokens=42)
    picked = [(rows[i // 2], t.strip()) for i, t in enumerate(texts) if FORMAT.match(t.strip())][:num_completions]
    prompts = [r["prompt"] for r, _ in picked]
    completions = [t for _, t in picked]
    answers = [r["answer"] for r, _ in picked]
    exact = [step_labels(p, c) for p, c in zip(prompts, completions)]
    out = {"solutions": len(picked), "steps": sum(map(len, exact)),
           "wrong_steps": sum(row.count(0) for row in exact), "by_endings": {}}
    for n in endings:
        hard, info = monte_carlo_labels(model, tokenizer, prompts, completions, answers, num_completions=n, seed=seed)
        matrix, stats = confusion(exact, hard)
        out["by_endings"][str(n)] = {"matrix": matrix, **stats}
    if strong_steps:                       # the same solutions and exact labels, a stronger completer
        from grpo_edu.training.trainers.config import GRPOConfig
        from grpo_edu.training.trainers.trainer import GRPOTrainer

        trainer = GRPOTrainer(GRPOConfig.preset("sums", **{**COMMON, "total_training_steps": strong_steps,
                                                           "seed": seed}))
        trainer.train()
        out["strong_completer"] = {"grpo_steps": strong_steps, "accuracy": trainer.evals[-1]["accuracy"],
                                   "weak_accuracy": trainer.evals[0]["accuracy"], "by_endings": {}}
        for n in endings:
            hard, _ = monte_carlo_labels(trainer.model, tokenizer, prompts, completions, answers, num_completions=n,
                                         seed=seed)
            matrix, stats = confusion(exact, hard)
            out["strong_completer"]["by_endings"][str(n)] = {"matrix": matrix, **stats}
    return out


def stored(kind, folder=STORED):
    """One stored result (``kind`` of :data:`KINDS`), with the command that made it."""
    if kind not in KINDS:
        fail("kind", f"unknown stored result {kind!r}", f"use one of {', '.join(KINDS)}")
    path = folder / f"{kind}.json"
    if not path.is_file():
        fail("folder", f"{folder} holds no {kind}.json", f"make it with python -m grpo_edu.course.experiments."
             f"process_rewards {kind} --json {path}")
    return json.loads(path.read_text(encoding="utf-8"))


def paired(result, key="accuracy", a="process", b="outcome"):
    """Per seed, ``a``'s ``key`` minus ``b``'s, with the standard error of each difference (the two evaluations'
    errors combined, as independent samples): a list of (difference, se)."""
    out = []
    for seed in result["seeds"].values():
        se = math.hypot(seed[a][f"{key}_se"], seed[b][f"{key}_se"]) if f"{key}_se" in seed[a] else float("nan")
        out.append((seed[a][key] - seed[b][key], se))
    return out


BEST_OF = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The N of the best-of-N curve."""


def _well_formed_samples(model, tokenizer, rows, per_prompt, seed):
    """Sampled answers of ``rows`` (prompt-major), stripped; returns (prompts, completions, answers)."""
    from grpo_edu.training.task.evaluation import sample_completions

    texts, _ = sample_completions(model, tokenizer, [r["prompt"] for r in rows], num_samples=per_prompt, seed=seed,
                                  max_new_tokens=42)
    return ([rows[i // per_prompt]["prompt"] for i in range(len(texts))], [t.strip() for t in texts],
            [rows[i // per_prompt]["answer"] for i in range(len(texts))])


def process_bench_f1(probabilities, exact):
    """ProcessBench's F1: the harmonic mean of the share of flawed solutions whose *first* wrong step is found
    (the first step with p < ½) and the share of flawless ones called flawless; returns ``(f1, info)``."""
    from grpo_edu.training.task.sums_steps import first_error

    flawed = [(first_error([int(p >= 0.5) for p in probs]) == first_error(labels))
              for probs, labels in zip(probabilities, exact) if 0 in labels]
    flawless = [all(p >= 0.5 for p in probs) for probs, labels in zip(probabilities, exact) if 0 not in labels]
    a = sum(flawed) / max(1, len(flawed))
    b = sum(flawless) / max(1, len(flawless))
    return (2 * a * b / (a + b) if a + b else 0.0), {"flawed_found": a, "flawless_kept": b,
                                                      "flawed": len(flawed), "flawless": len(flawless)}


def verifiers(num_prompts=100, *, train_prompts=600, endings=8, prm_steps=300, seed=0, best_of=BEST_OF):
    """Best-of-N with five ways to choose, and the PRMs' first-error F1 (module doc): a dict of the curves."""
    import collections

    from grpo_edu.training.model.models import load_model_and_tokenizer, sums_model_dir
    from grpo_edu.training.reward_models import process_reward_model as prm
    from grpo_edu.training.reward_models.monte_carlo_labels import monte_carlo_labels
    from grpo_edu.training.task.sums import FORMAT, final_answer
    from grpo_edu.training.task.sums_steps import step_labels
    from grpo_edu.training.task.tasks import get_task

    task = get_task("sums")
    policy, tokenizer = load_model_and_tokenizer("bundled-sums")
    # training data: answers to train prompts, labelled exactly, by Monte-Carlo endings, and by their outcome
    prompts, completions, answers = _well_formed_samples(policy, tokenizer, task.split("train", train_prompts), 4, seed)
    keep = [i for i, c in enumerate(completions) if FORMAT.match(c)]
    prompts, completions, answers = ([x[i] for i in keep] for x in (prompts, completions, answers))
    exact = [step_labels(p, c) for p, c in zip(prompts, completions)]
    mc, _ = monte_carlo_labels(policy, tokenizer, prompts, completions, answers, num_completions=endings, seed=seed)
    outcome = prm.outcome_labels(completions, [final_answer(c) == a for c, a in zip(completions, answers)])
    models = {}
    for name, labels in (("orm", outcome), ("prm_exact", exact), ("prm_mc", mc)):
        model, tok = prm.make_process_reward_model(sums_model_dir(), seed=seed)
        models[name], _ = prm.train_process_reward_model(model, tok, prompts, completions, labels, steps=prm_steps,
                                                          seed=seed)
    # the test: 256 answers to each held-out prompt, scored every way once
    rows = task.split("heldout", num_prompts)
    per = max(best_of)
    h_prompts, h_completions, h_answers = _well_formed_samples(policy, tokenizer, rows, per, seed + 1)
    formed = [bool(FORMAT.match(c)) for c in h_completions]
    right = [final_answer(c) == a for c, a in zip(h_completions, h_answers)]
    scores = {}
    idx = [i for i, f in enumerate(formed) if f]
    for name, how in (("orm", "last"), ("prm_exact", "prod"), ("prm_mc", "prod")):
        probs = prm.step_probabilities(models[name], tokenizer, [h_prompts[i] for i in idx],
                                       [h_completions[i] for i in idx])
        values = [-1.0] * len(h_completions)                      # a malformed answer is chosen last
        for i, v in zip(idx, prm.solution_scores(probs, how)):
            values[i] = v
        scores[name] = values
        if name.startswith("prm"):
            held_exact = [step_labels(h_prompts[i], h_completions[i]) for i in idx]
            scores[name + "_f1"] = process_bench_f1(probs, held_exact)
    checker = [float(f and 0 not in step_labels(p, c)) for p, c, f in zip(h_prompts, h_completions, formed)]
    scores["exact_checker"] = checker
    curves = {name: [] for name in ("majority", "orm", "prm_exact", "prm_mc", "exact_checker")}
    for n in best_of:
        picks = collections.defaultdict(list)
        for b in range(num_prompts):
            for block in range(per // n):                      # disjoint blocks of n answers: every answer used once
                ids = list(range(b * per + block * n, b * per + (block + 1) * n))
                votes = collections.Counter(final_answer(h_completions[i]) for i in ids if final_answer(h_completions[i]))
                top = votes.most_common(1)[0][0] if votes else None
                picks["majority"].append(top == h_answers[ids[0]])
                for name in ("orm", "prm_exact", "prm_mc", "exact_checker"):
                    picks[name].append(right[max(ids, key=lambda i: scores[name][i])])
        for name, chosen in picks.items():
            mean = sum(chosen) / len(chosen)
            curves[name].append(mean)
    return {"best_of": list(best_of), "curves": curves, "prompts": num_prompts, "train_solutions": len(prompts),
            "pass_at_1": sum(right) / len(right), "well_formed": sum(formed) / len(formed),
            "first_error_f1": {k[:-3]: v for k, v in scores.items() if k.endswith("_f1")},
            "settings": {"train_prompts": train_prompts, "endings": endings, "prm_steps": prm_steps, "seed": seed}}


def report(folder=STORED):
    """The stored results as markdown tables (docs/process-rewards.md holds this text)."""
    lines = []
    compare = stored("compare", folder)
    lines += [f"**Outcome against process supervision** (`{compare['command']}`; " + ", ".join(f"{k} {v}" for k, v in compare['settings'].items()) + f", "
              f"{compare['eval_samples']} answers per held-out prompt; ± the standard error from per-prompt means):", "",
              "| seed | before | outcome | process | process − outcome | right answers with a wrong step: before → "
              "outcome, process |", "|---|---|---|---|---|---|"]
    for (seed, r), (d, se) in zip(compare["seeds"].items(), paired(compare)):
        cell = lambda k: f"{r[k]['accuracy']:.3f} ± {r[k]['accuracy_se']:.3f}"
        trace = lambda k: f"{r[k]['right_wrong_working']}/{r[k]['right']}"
        lines.append(f"| {seed} | {cell('before')} | {cell('outcome')} | {cell('process')} | {d:+.3f} ± {se:.3f} | "
                     f"{trace('before')} → {trace('outcome')}, {trace('process')} |")
    labels = stored("labels", folder)
    lines += ["", f"**Monte-Carlo step labels against the exact ones** (`{labels['command']}`; {labels['solutions']} "
              f"solutions, {labels['steps']} steps, {labels['wrong_steps']} wrong; the trained completer is the bundled "
              f"model after {labels['strong_completer']['grpo_steps']} steps of outcome GRPO, held-out accuracy "
              f"{labels['strong_completer']['weak_accuracy']:.3f} → {labels['strong_completer']['accuracy']:.3f}):", "",
              "| completer | N | tp | fp | fn | tn | recall | false-positive rate |", "|---|---|---|---|---|---|---|---|"]
    for who, part in (("bundled", labels), ("trained", labels["strong_completer"])):
        for n, r in part["by_endings"].items():
            m = r["matrix"]
            lines.append(f"| {who} | {n} | {m['tp']} | {m['fp']} | {m['fn']} | {m['tn']} | {r['recall']:.3f} | "
                         f"{r['false_positive_rate']:.3f} |")
    ver = stored("verifiers", folder)
    lines += ["", f"**Best-of-N with five verifiers** (`{ver['command']}`; {ver['prompts']} held-out prompts × "
              f"{max(ver['best_of'])} answers, verifiers trained on {ver['train_solutions']} solutions; share of "
              "picks that are right):", "", "| verifier | " + " | ".join(f"N = {n}" for n in ver["best_of"]) + " |",
              "|---|" + "---|" * len(ver["best_of"])]
    for name, curve in ver["curves"].items():
        lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in curve) + " |")
    lines += ["", "First-error localisation (ProcessBench's F1): " + ", ".join(
        f"{k} {v[0]:.3f} (flawed found {v[1]['flawed_found']:.3f}, flawless kept {v[1]['flawless_kept']:.3f})"
        for k, v in ver["first_error_f1"].items()) + "."]
    return "\n".join(lines)


def main(argv=None):
    import sys

    from grpo_edu.course.experiments.variants import check_json_target, write_stored

    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.process_rewards",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("report", help="the stored results as markdown tables")
    compare = sub.add_parser("compare", help="outcome GRPO against GRPO+PS with the exact checker")
    compare.add_argument("--seeds", type=int, nargs="+", default=[0])
    compare.add_argument("--steps", type=int, default=None, help=f"steps per run (default {COMMON['total_training_steps']})")
    labels = sub.add_parser("labels", help="Monte-Carlo step labels against the exact ones")
    labels.add_argument("--completions", type=int, default=200)
    chooser = sub.add_parser("verifiers", help="best-of-N with majority vote, an ORM, two PRMs and the exact checker")
    chooser.add_argument("--prompts", type=int, default=100)
    for p in (compare, labels, chooser):
        p.add_argument("--json", help="store the result here (refused if it exists, unless --overwrite)")
        p.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report())
        return None
    check_json_target(parser, args)
    program = "python -m grpo_edu.course.experiments.process_rewards"
    if args.command == "compare":
        if args.steps is not None and args.steps < 1:
            parser.error("--steps: must be ≥ 1. Fix: pass a number of steps, e.g. 40")
        result = {str(s): compare_seed(s, steps=args.steps, progress=sys.stderr.isatty()) for s in args.seeds}
        for seed, r in result.items():
            print(f"seed {seed}: " + "; ".join(
                f"{k} acc {r[k]['accuracy']:.3f} ± {r[k]['accuracy_se']:.3f}, right-answer-wrong-working "
                f"{r[k]['trace_error']:.3f} ({r[k]['right_wrong_working']} of {r[k]['right']})"
                for k in ("before", "outcome", "process")))
        fields = {"settings": COMMON | ({"total_training_steps": args.steps} if args.steps else {}),
                  "eval_samples": EVAL_SAMPLES, "seeds": result}
    elif args.command == "verifiers":
        if args.prompts < 1:
            parser.error("--prompts: must be ≥ 1. Fix: pass how many held-out prompts to answer 256 times, e.g. 100")
        fields = verifiers(args.prompts)
        print("N: " + " ".join(f"{n:>5}" for n in fields["best_of"]))
        for name, curve in fields["curves"].items():
            print(f"{name}: " + " ".join(f"{v:.3f}" for v in curve))
        print("first-error F1:", {k: round(v[0], 3) for k, v in fields["first_error_f1"].items()})
    else:
        if args.completions < 1:
            parser.error("--completions: must be ≥ 1. Fix: pass how many sampled answers to label, e.g. 200")
        result = label_confusions(args.completions)
        for who, part in (("bundled completer", result), ("trained completer", result.get("strong_completer"))):
            for n, r in (part or {}).get("by_endings", {}).items():
                print(f"{who}, N = {n:>2}: {r['matrix']}  precision {r['precision']:.3f} recall {r['recall']:.3f} "
                      f"false-positive rate {r['false_positive_rate']:.3f}")
        fields = {"endings": list(ENDINGS), **result}
    if args.json:
        write_stored(args, argv, program, fields)
    return fields


if __name__ == "__main__":
    main()
