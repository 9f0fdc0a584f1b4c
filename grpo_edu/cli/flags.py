"""Every GRPOConfig field as a ``grpo-edu`` flag, with its --help read from config.py's docstrings;
``--preset``; negative numbers given as a flag's value (``--learning-rate -1e-4``)."""

import argparse
import ast
import dataclasses
import inspect
import re
import typing

from grpo_edu.training.trainers.config import CHOICES, GRPOConfig

NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)
"""A negative number given as a flag's value, e.g. ``--learning-rate -1e-4``."""

# --- --help text from config.py's field docstrings ------------------------------------------
def field_docs():
    """{field: docstring} of GRPOConfig, read from its source with ``ast``.

    Dataclass field docstrings are plain string statements, which Python does not keep at
    run time, so the source is the only place to read them.
    """
    from grpo_edu.training.trainers import config

    try:
        tree = ast.parse(inspect.getsource(config))
    except (OSError, TypeError, SyntaxError):   # no source (a frozen install): help shows defaults only
        return {}
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "GRPOConfig")
    docs = {}
    for field, doc in zip(cls.body, cls.body[1:]):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            docs[field.target.id] = inspect.cleandoc(doc.value.value)
    return docs


def first_sentence(text):
    """The text up to the first full stop outside parentheses that ends a sentence."""
    text = " ".join(text.replace("``", "").split())   # reST literals read as plain text in --help
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch in "([") - (ch in ")]")
        if ch == "." and depth <= 0 and (i + 1 == len(text) or text[i + 1] == " "):
            word = text[:i].rsplit(" ", 1)[-1]
            if word.lower() not in ("e.g", "i.e", "vs", "dr", "cf", "etc"):
                return text[:i + 1]
    return text


def _field_type(field):
    """The plain type of a config field (int, float, str or bool), unwrapping ``X | None``."""
    hint = typing.get_type_hints(GRPOConfig)[field.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _takes_none(field):
    """True when a config field's type is ``X | None``: only then does the word ``none`` mean None."""
    return type(None) in typing.get_args(typing.get_type_hints(GRPOConfig)[field.name])


def _none_or(kind):
    def parse(text):
        return None if text.lower() == "none" else kind(text)
    parse.__name__ = kind.__name__
    return parse


def _choices(name):
    if name == "task":
        from grpo_edu.training.task.tasks import TASKS

        return tuple(TASKS)
    return CHOICES.get(name)


def _add_config_flags(parser):
    group = parser.add_argument_group("GRPOConfig fields (grpo_edu/training/trainers/config.py has each one's full docstring)")
    docs = field_docs()
    for field in dataclasses.fields(GRPOConfig):
        kind = _field_type(field)
        flag = "--" + field.name.replace("_", "-")
        choices = _choices(field.name)
        meaning = first_sentence(docs.get(field.name, ""))
        if choices:
            meaning += f" Choices: {', '.join(choices)}."
        text = f"{meaning} (default: {field.default})".strip().replace("%", "%%")
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default, help=text)
        else:
            metavar = "{" + ",".join(choices) + "}" if choices else kind.__name__.upper()
            parse = _none_or(kind) if _takes_none(field) else kind     # --scale none keeps the word
            group.add_argument(flag, type=parse, default=field.default, metavar=metavar, help=text)


def _add_preset_flag(parser):
    from grpo_edu.training.trainers.config import PRESETS

    parser.add_argument("--preset", choices=sorted(PRESETS), help="start from a named config (flags given with it "
                        "still win): sums = lesson 11's long answers on assets/tiny-sums; calc = lesson 15's "
                        "calculator task on assets/tiny-calc; words = lesson 16's word problems on assets/tiny-words, "
                        "through its chat template (--task sums, calc or words alone starts from these too)")


def _apply_preset(parser, argv):
    """``--preset NAME``: the preset's fields become the subcommand's defaults, so any flag given beside it wins.

    Without ``--preset``, a ``--task`` that needs its own model (``config.TASK_PRESETS``: sums, calc) starts
    from that task's preset: ``--task calc`` trains ``assets/tiny-calc``, not the adder, which cannot write
    a calculator call."""
    from grpo_edu.training.trainers.config import PRESETS, TASK_PRESETS

    command = parser.preset_commands.get(argv[0]) if argv else None
    if command is None:
        return
    finder = argparse.ArgumentParser(add_help=False)
    finder.add_argument("--preset")
    finder.add_argument("--task")
    found = finder.parse_known_args(argv[1:])[0]
    name = found.preset if found.preset is not None else TASK_PRESETS.get(found.task)
    if name in PRESETS:                                # an unknown name is left for the real parser to refuse
        command.set_defaults(**PRESETS[name])


def class_field_docs(cls):
    """{field: docstring} of a dataclass, read from its source as :func:`field_docs` reads GRPOConfig's."""
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body
    return {field.target.id: inspect.cleandoc(doc.value.value) for field, doc in zip(body, body[1:])
            if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)}


def _config_from(args):
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    return GRPOConfig(**{k: v for k, v in vars(args).items() if k in names})


def join_negative_values(argv, value_flags):
    """``--flag -1e-4`` → ``--flag=-1e-4``: argparse would take ``-1e-4`` for a flag of its own."""
    out = []
    for token in argv:
        if out and out[-1] in value_flags and NEGATIVE_NUMBER.match(token):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out

