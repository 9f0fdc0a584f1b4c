"""``grpo-edu train --method``: every method of lesson 13 from the command line, with its own settings as flags.

``--method grpo|reinforce|ppo|rft|dpo|dpo_offline`` (``training.family.METHODS``) picks the trainer, and each
field of ``training.family.FamilyConfig`` is a flag (its --help read from its docstring): ``--gamma``,
``--lam``, ``--whiten-advantages``, ``--cliprange-value`` and ``--critic-learning-rate`` for PPO,
``--threshold`` and ``--max-per-prompt`` for rejection sampling, ``--dpo-beta`` for DPO (``--beta`` is
GRPO's KL weight β, which DPO has none of: its anchor is its own β). A setting given to a method that does
not use it is refused, naming the method that does.

A resumed run continues with the method (and settings) its checkpoint records: ``--method`` may be left out,
and a different one is refused by the trainer, naming both.
"""

import argparse
import dataclasses
import typing

FLAG_NAMES = {"beta": "dpo_beta"}
"""FamilyConfig fields whose flag has another name (GRPOConfig already has a ``--beta``)."""
USED_BY = {"gamma": ("ppo",), "lam": ("ppo",), "whiten_advantages": ("ppo",), "cliprange_value": ("ppo",),
           "critic_learning_rate": ("ppo",), "beta": ("dpo", "dpo_offline"), "threshold": ("rft",),
           "max_per_prompt": ("rft",)}
"""The methods each FamilyConfig field acts in; a field not listed acts in every method but GRPO's own two."""
NO_KL = ("rft", "dpo", "dpo_offline")
"""Methods without GRPO's KL term (``METHODS`` sets their β to 0)."""
_GRADIENT = ("grpo", "reinforce", "reinforce_dr_grpo")
_SURROGATE = (*_GRADIENT, "ppo")
CONFIG_USED_BY = {
    "advantage_estimator": ("grpo",), "scale": ("grpo",),
    "loss_type": ("grpo", "reinforce", "ppo"),
    **dict.fromkeys(("epsilon", "epsilon_high", "importance_sampling_level", "sapo_temperature_pos",
                     "sapo_temperature_neg", "entropy_coef", "mask_truncated_completions"), _SURROGATE),
    **dict.fromkeys(("dynamic_sampling", "max_sampling_rounds", "replay_ratio", "replay_capacity", "replay_path",
                     "replay_top_fraction", "replay_min_advantage", "replay_min_reward", "replay_refresh_every",
                     "replay_max_age", "replay_refresh_keep_advantage"), _GRADIENT),
}
"""GRPOConfig fields that only some methods read → those methods. The advantage (Â and its σ scale) is GRPO's
own (reinforce and the controls set their estimator and loss type themselves; PPO's Â is GAE's); the clipped
surrogate's settings act in the methods that take its step (rft's step is supervised, DPO's its own loss);
replay and dynamic sampling live in GRPOTrainer's step, which ppo, rft and dpo replace. Any other field
acts in every method."""


def flag_of(field):
    return "--" + FLAG_NAMES.get(field, field).replace("_", "-")


def _used_by(field):
    from grpo_edu.training.trainers.family import METHODS

    return USED_BY.get(field, tuple(m for m in METHODS if m not in ("grpo", "reinforce")))


def add_method_flags(parser):
    """``--method`` and one flag per FamilyConfig field (default None: "not given", so a resume keeps its own)."""
    from grpo_edu.cli.flags import class_field_docs, first_sentence
    from grpo_edu.training.trainers.family import METHODS, FamilyConfig

    group = parser.add_argument_group("the method (lesson 13; training/trainers/family.py has each setting's docstring)")
    group.add_argument("--method", choices=tuple(METHODS), default=None,
                       help="Which algorithm trains: grpo, reinforce (no baseline), ppo (a critic and GAE), rft "
                            "(rejection sampling), dpo (online pairs) or dpo_offline (pairs from the start model). "
                            "(default: grpo; a resumed run: its own)")
    docs = class_field_docs(FamilyConfig)
    hints = typing.get_type_hints(FamilyConfig)
    for field in dataclasses.fields(FamilyConfig):
        kinds = [a for a in typing.get_args(hints[field.name]) if a is not type(None)] or [hints[field.name]]
        kind = kinds[0]
        text = (f"{first_sentence(docs.get(field.name, ''))} Method: {', '.join(_used_by(field.name))}. "
                f"(default: {field.default})").replace("``", "").replace("%", "%%")
        if kind is bool:
            group.add_argument(flag_of(field.name), dest=f"family_{field.name}", default=None,
                               action=argparse.BooleanOptionalAction, help=text)
        else:
            def parse(value, kind=kind, none=type(None) in typing.get_args(hints[field.name])):
                return None if none and value.lower() == "none" else kind(value)
            parse.__name__ = kind.__name__
            group.add_argument(flag_of(field.name), dest=f"family_{field.name}", type=parse, default=None,
                               metavar=kind.__name__.upper(), help=text)


def given_settings(args):
    """{FamilyConfig field: value} of the method flags given on the command line."""
    return {k[len("family_"):]: v for k, v in vars(args).items() if k.startswith("family_") and v is not None}


def stored_method(resume):
    """(method, its settings) recorded in the checkpoint ``resume`` names (``checkpoint.method_of``)."""
    import json

    from grpo_edu.training.runs import checkpoint as ckpt

    folder, _ = ckpt.find_checkpoint(resume)
    state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    settings = state["method"].get("settings", {}) if isinstance(state.get("method"), dict) else {}
    return ckpt.method_of(state), settings


def method_and_settings(args, default_beta):
    """(method, FamilyConfig or None) from ``--method`` and the method flags; refused with the flag named.

    A resumed run without ``--method`` takes its checkpoint's method, and its settings where no flag is given."""
    from grpo_edu.common import _checks
    from grpo_edu.training.trainers.family import METHODS, FamilyConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    given = given_settings(args)
    method, stored = args.method, {}
    if args.resume:                                    # the checkpoint's method, and its settings as the base
        recorded, settings = stored_method(args.resume)
        method = method or recorded
        stored = settings if method == recorded else {}   # another method: the trainer refuses, naming both
    method = method or "grpo"
    _refuse_unused_config(args, method)
    for field in given:
        if method not in _used_by(field):
            _checks.fail(flag_of(field), f"sets {', '.join(_used_by(field))}'s "
                         f"{field.replace('_', ' ')}, but --method is {method}",
                         f"pass --method {_used_by(field)[0]}, or leave {flag_of(field)} out")
    if method in NO_KL and args.beta not in (0.0, default_beta):
        _checks.fail("--beta", f"is GRPO's KL weight β, and --method {method} has no KL term (its β is set to 0)",
                     "leave --beta out" + ("; DPO's own β is --dpo-beta" if method.startswith("dpo") else ""))
    if METHODS[method][0] is GRPOTrainer:            # grpo, reinforce and the controls: GRPOConfig's settings only
        return method, None
    known = {f.name for f in dataclasses.fields(FamilyConfig)}
    try:
        return method, FamilyConfig(**{**{k: v for k, v in stored.items() if k in known}, **given})
    except ValueError as err:                          # FamilyConfig names its field; the user typed the flag
        field, _, rest = str(err).partition(": ")
        raise ValueError(f"{flag_of(field)}: {rest}" if field in known else str(err)) from None


def _refuse_unused_config(args, method):
    """Refuse a GRPOConfig flag ``method`` would ignore (:data:`CONFIG_USED_BY`): given means other than its
    default (the preset's, where one applies), since a flag passed with its default value changes nothing."""
    from grpo_edu.common import _checks
    from grpo_edu.training.trainers.config import PRESETS, TASK_PRESETS, GRPOConfig

    preset = PRESETS.get(args.preset or TASK_PRESETS.get(args.task), {})
    defaults = {f.name: preset.get(f.name, f.default) for f in dataclasses.fields(GRPOConfig)}
    for field, used_by in CONFIG_USED_BY.items():
        if method not in used_by and getattr(args, field, defaults[field]) != defaults[field]:
            flag = "--" + field.replace("_", "-")
            _checks.fail(flag, f"acts in {', '.join(used_by)} only, and --method {method} would ignore it",
                         f"leave {flag} out, or pass --method {used_by[0]}")
