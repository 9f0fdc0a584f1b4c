"""The ``grpo-edu`` command: one module per group of subcommands, registered here.

``runs``        train, eval, export: run GRPO (the course's main job), score a model, carry a run to TRL or verl
``reading``     replay, diagnose: read what a run left behind
``classroom``   lessons, check-answers: the lessons copied into a student's folder, a class's answers read
``models``      models get: a real model fetched once from a package registry
``flags``       every GRPOConfig field as a flag, --preset, negative numbers as values
``method_flags`` train --method and the family's settings (FamilyConfig) as flags

A new subcommand is a function ``add_NAME(sub)`` in the module of its group (or a module's own
``main``, listed in ``PASS_THROUGH``), and one line in :func:`build_parser`.
"""

import os
import sys
import warnings

from grpo_edu.cli import classroom, models, reading, runs
from grpo_edu.common import command_line
from grpo_edu.cli.flags import (_apply_preset, _config_from, field_docs, first_sentence,  # noqa: F401 (the
                                join_negative_values)                                     # command's API)
from grpo_edu.cli.runs import MetricsFile, check_metrics_out, default_run_dir  # noqa: F401


def build_parser(command=None):
    """The whole parser; given the ``command`` a command line names, the other commands' parsers may leave out
    what only they need and is slow to import (train's --method flags import torch: seconds for
    ``grpo-edu check-answers``, which never trains)."""
    import argparse

    import grpo_edu

    parser = argparse.ArgumentParser(prog="grpo-edu", description="Learn GRPO on a laptop CPU.")
    parser.add_argument("--version", action="version", version=f"grpo-edu {grpo_edu.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = runs.add_train(sub, method_flags=command in (None, "train"))
    runs.add_eval(sub)
    reading.add_replay(sub)
    reading.add_diagnose(sub)
    export = runs.add_export(sub)
    classroom.add_lessons(sub)
    classroom.add_check_answers(sub)
    models.add_models(sub)

    # listed for --help; their own parsers take the flags (see PASS_THROUGH)
    sub.add_parser("make-model", help="rebuild a bundled tiny model, into a new folder or with --overwrite "
                                      "(grpo-edu make-model --help)")
    sub.add_parser("bench", help="time the trainer against the bare PyTorch floor and TRL (grpo-edu bench --help)")
    sub.add_parser("lesson-times", help="time every lesson here and scaled to the slowest laptop, against its "
                                        "budget (grpo-edu lesson-times --help)")
    sub.add_parser("doctor", help="check this machine before class: Python, PyTorch, widgets, a notebook kernel, "
                                  "the bundled models, and each lesson's expected time (grpo-edu doctor --help)")
    sub.add_parser("variants", help="race GRPO's variants on lesson 11's model and print lesson 12's table "
                                    "(grpo-edu variants --help)")
    sub.add_parser("family", help="run GRPO against PPO with a critic, REINFORCE, rejection sampling and DPO on "
                                  "one budget and print lesson 13's table (grpo-edu family --help)")
    sub.add_parser("site", help="build the course as a website that works offline: the lessons as stored, the docs, "
                                "search in English and Chinese (grpo-edu site --help)")
    parser.value_flags = {flag for sp in sub.choices.values() for action in sp._actions
                          if action.nargs != 0 for flag in action.option_strings}
    parser.preset_commands = {"train": train, "export": export}      # the subcommands that take --preset
    return parser


PASS_THROUGH = {"make-model": "grpo_edu.training.model.make_model", "bench": "grpo_edu.beyond.bench",
                "lesson-times": "grpo_edu.course.testing.lesson_times", "variants": "grpo_edu.course.experiments.variants",
                "doctor": "grpo_edu.course.classroom.doctor", "site": "grpo_edu.course.classroom.site",
                "family": "grpo_edu.course.experiments.family"}
"""Subcommands whose flags belong to their own module's parser."""


ARGUMENT_NAMES = {"train": {"source": "--dataset", "resume_from": "--resume"},
                  "export": {"source": "--dataset", "num_processes": "--processes", "n_gpus": "--processes"},
                  "eval": {"num_samples": "--samples", "max_new_tokens": "--max-new-tokens"}, "diagnose": {"history": "FILE"},
                  "lessons": {"target": "FOLDER"}}
"""A library error names the function's argument; where the flag a user typed has another name, the command's
error names the flag (a config field's error, e.g. ``batch_size:``, reads as its flag ``--batch-size`` does)."""


def _as_typed(command, message):
    for name, flag in ARGUMENT_NAMES.get(command, {}).items():
        if message.startswith(f"{name}: "):
            return f"{flag}: {message[len(name) + 2:]}"
    return message


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"grpo-edu: warning: {message}", file=sys.stderr)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in PASS_THROUGH:
        from importlib import import_module

        return import_module(PASS_THROUGH[argv[0]]).main(argv[1:]) or 0
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    _apply_preset(parser, argv)
    args = command_line.parse_args(parser, join_negative_values(argv, parser.value_flags))   # "" refused too
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning      # one plain line, not a source listing
        try:
            return args.func(args)
        except ValueError as err:      # the library's checked errors: show the message, not a traceback
            print(f"grpo-edu {args.command}: error: {_as_typed(args.command, str(err))}", file=sys.stderr)
            return 2
        except BrokenPipeError:        # `grpo-edu replay FILE | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
            return 0


