"""The ``grpo-edu`` command: train, eval, make-model, bench.

``grpo-edu train`` is the course's main job: a full GRPO run on the bundled tiny model,
with a progress bar and held-out accuracy before and after. Every GRPOConfig field is a
flag (``--batch-size 16``, ``--beta 0``, …); ``grpo-edu train --help`` lists them.
"""

import argparse
import dataclasses
import json
import sys
import time
import typing

from grpo_edu.config import GRPOConfig


def _field_type(field):
    """The plain type of a config field (int, float, str or bool), unwrapping ``X | None``."""
    hint = typing.get_type_hints(GRPOConfig)[field.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _none_or(kind):
    def parse(text):
        return None if text.lower() == "none" else kind(text)
    parse.__name__ = kind.__name__
    return parse


def _add_config_flags(parser):
    group = parser.add_argument_group("GRPOConfig fields (see grpo_edu/config.py for each one's meaning)")
    for field in dataclasses.fields(GRPOConfig):
        kind = _field_type(field)
        flag = "--" + field.name.replace("_", "-")
        doc = (field.default if field.default is not dataclasses.MISSING else None)
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default,
                               help=f"default: {doc}")
        else:
            group.add_argument(flag, type=_none_or(kind), default=field.default, metavar=kind.__name__.upper(),
                               help=f"default: {doc}")


def _config_from(args):
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    return GRPOConfig(**{k: v for k, v in vars(args).items() if k in names})


def cmd_train(args):
    from grpo_edu.trainer import GRPOTrainer

    t_start = time.perf_counter()
    config = _config_from(args)                    # every field checked before any model loads
    out = open(args.metrics_out, "w", encoding="utf-8") if args.metrics_out else None

    def log(metrics):
        if out:
            out.write(json.dumps(metrics) + "\n")
            out.flush()

    trainer = GRPOTrainer(config, callbacks=[log])
    sched = trainer.schedule
    print(f"GRPO on {config.model} · task {config.task} · {len(trainer.train_rows)} prompts · "
          f"B={config.batch_size} G={config.num_generations} → {sched.total_steps} steps "
          f"(stops by {sched.stop_reason}) · device {trainer.device}", flush=True)
    history = trainer.train(resume_from=args.resume, progress=not args.no_progress)
    if out:
        out.close()
    if trainer.evals:
        first, last = trainer.evals[0], trainer.evals[-1]
        print(f"held-out accuracy (sampling at temperature 1, {len(trainer.eval_rows)} prompts): "
              f"step {first['step']}: {first['accuracy']:.1%} → step {last['step']}: {last['accuracy']:.1%}")
    if history:
        last = history[-1]
        kl = "not measured (beta 0)" if last["kl"] is None else f"{last['kl']:.4f}"
        print(f"last step: reward {last['reward_mean']:.3f}, kl to the start {kl}")
    if config.output_dir:
        print(f"checkpoints in {config.output_dir}")
    print(f"wall time {time.perf_counter() - t_start:.1f} s")
    return 0


def cmd_eval(args):
    from grpo_edu.evaluation import evaluate
    from grpo_edu.models import load_model_and_tokenizer
    from grpo_edu.tasks import get_task

    task = get_task(args.task)
    model, tok = load_model_and_tokenizer(args.model, trust_remote_code=args.trust_remote_code)
    rows = task.split(args.split, args.n)
    res = evaluate(model, tok, rows, task, temperature=args.temperature, num_samples=args.samples,
                   seed=args.seed, max_new_tokens=args.max_new_tokens)
    print(f"{args.model} on {args.task}/{args.split} ({len(rows)} prompts × {args.samples} samples, "
          f"temperature {args.temperature}): accuracy {res['accuracy']:.1%}")
    for prompt, text, answer, ok in res["samples"][:args.show]:
        print(f"  {prompt}{text!s:<6} {'✓' if ok else '✗ expected ' + answer}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="grpo-edu", description="Learn GRPO on a laptop CPU.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="run GRPO (default: the bundled tiny model on two-digit addition)")
    _add_config_flags(train)
    train.add_argument("--metrics-out", metavar="FILE", help="write each step's metrics as a JSON line")
    train.add_argument("--resume", metavar="DIR", help="continue from an output_dir or checkpoint folder")
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="held-out accuracy of a model directory on a task")
    ev.add_argument("--model", default="bundled", help="model directory or 'bundled' (default)")
    ev.add_argument("--task", default="addition")
    ev.add_argument("--split", default="heldout", choices=["heldout", "train"])
    ev.add_argument("--n", type=int, default=500, help="number of prompts (default 500)")
    ev.add_argument("--samples", type=int, default=1, help="samples per prompt (default 1)")
    ev.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1)")
    ev.add_argument("--max-new-tokens", type=int, default=8)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--show", type=int, default=5, help="print this many sample answers")
    ev.add_argument("--trust-remote-code", action="store_true")
    ev.set_defaults(func=cmd_eval)

    # listed for --help; their own parsers take the flags (see PASS_THROUGH)
    sub.add_parser("make-model", help="rebuild the bundled tiny model (grpo-edu make-model --help)")
    sub.add_parser("bench", help="time the trainer against the bare PyTorch floor and TRL (grpo-edu bench --help)")
    return parser


PASS_THROUGH = {"make-model": "grpo_edu.make_model", "bench": "grpo_edu.bench"}
"""Subcommands whose flags belong to their own module's parser."""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in PASS_THROUGH:
        from importlib import import_module

        return import_module(PASS_THROUGH[argv[0]]).main(argv[1:]) or 0
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:          # the library's checked errors: show the message, not a traceback
        print(f"grpo-edu {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
