"""Process rewards measured on the sums model, whose every step a program can check (lesson 17b).

``python -m grpo_edu.course.experiments.process_rewards compare --seeds 0 1 2 --json FILE``
    outcome GRPO against GRPO with process supervision (the exact step checker, DeepSeekMath §4.1.3), the same
    seed, prompts and budget: held-out accuracy and the share of right answers with wrong working (Uesato et
    al.'s "trace error") before and after.
``python -m grpo_edu.course.experiments.process_rewards labels --completions 200 --json FILE``
    Monte-Carlo step labels (Math-Shepherd) against the exact ones: the confusion matrix of hard labels for
    N = 1, 2, 4, 8, 16, 32 endings, from the bundled model as the completer.

Each writes a JSON file with the command that made it, this CPU's kernel set and torch's version; an existing
file is kept unless ``--overwrite``, and the path is checked before any run.
"""

from __future__ import annotations

import argparse
import math
import time

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


def label_confusions(num_completions=200, *, endings=ENDINGS, seed=0):
    """Monte-Carlo labels against the exact ones on ``num_completions`` well-formed sampled answers of the bundled
    model (which also completes): {N: {"matrix", "precision", "recall", "false_positive_rate", "steps"}} and
    the share of wrong steps among all."""
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
    return out


def main(argv=None):
    import sys

    from grpo_edu.course.experiments.variants import check_json_target, write_stored

    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.process_rewards",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    compare = sub.add_parser("compare", help="outcome GRPO against GRPO+PS with the exact checker")
    compare.add_argument("--seeds", type=int, nargs="+", default=[0])
    compare.add_argument("--steps", type=int, default=None, help=f"steps per run (default {COMMON['total_training_steps']})")
    labels = sub.add_parser("labels", help="Monte-Carlo step labels against the exact ones")
    labels.add_argument("--completions", type=int, default=200)
    for p in (compare, labels):
        p.add_argument("--json", help="store the result here (refused if it exists, unless --overwrite)")
        p.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
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
    else:
        if args.completions < 1:
            parser.error("--completions: must be ≥ 1. Fix: pass how many sampled answers to label, e.g. 200")
        result = label_confusions(args.completions)
        for n, r in result["by_endings"].items():
            print(f"N = {n:>2}: {r['matrix']}  precision {r['precision']:.3f} recall {r['recall']:.3f} "
                  f"false-positive rate {r['false_positive_rate']:.3f}")
        fields = {"endings": list(ENDINGS), **result}
    if args.json:
        write_stored(args, argv, program, fields)
    return fields


if __name__ == "__main__":
    main()
