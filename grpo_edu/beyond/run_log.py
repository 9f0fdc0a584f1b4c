"""A run's logged metrics, read from any form the course meets, in grpo_edu's names.

``load_run(source)`` gives ``(history, evals, config)`` from:

* a list of the trainer's metrics dicts (``trainer.history``);
* the JSONL that ``grpo-edu train --metrics-out FILE`` writes (one step per line; it holds
  no held-out evaluations);
* a checkpoint's ``trainer_state.json`` (``runs/<time>/checkpoint-*/``): its history, its
  held-out evaluations and its config;
* TRL's ``trainer_state.json``, or its ``log_history`` list: its names are translated
  through :data:`TRL_NAMES`.

Every row is checked before anything reads it (a step number, a finite reward, numbers or None
for the other metrics, shares within [0, 1], no negative length, norm, spread, entropy or KL); a
NaN or ±∞ metric, or one past ±10¹² (the reward aside), is kept as a fact of the run (the row's
:data:`NON_FINITE` or :data:`BLOWN_UP` list: it diverged there), never read as "not measured".
``grpo_edu.beyond.diagnose`` reads the result.
"""

import json
import math
from pathlib import Path

from grpo_edu.common import _checks

MIN_STEPS = 6
"""Fewest logged steps a diagnosis needs: a start and an end window of 3 steps each."""

TRL_NAMES = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "dead_group_fraction",
    "kl": "kl",
    "entropy": "entropy",
    "clip_ratio/region_mean": "clip_fraction",
    "completions/mean_length": "completion_length",
    "completions/min_length": "completion_length_min",
    "completions/max_length": "completion_length_max",
    "completions/mean_terminated_length": "completion_length_terminated",
    "completions/clipped_ratio": "truncated_fraction",
    "grad_norm": "grad_norm",
    "loss": "loss",
    "learning_rate": "learning_rate",
    "step": "step",
    "epoch": "epoch",
}
"""TRL's GRPOTrainer log name → ours (``rewards/<name>/mean`` → ``reward/<name>`` too). Where the meaning differs:

* ``step``: TRL counts optimizer updates (``global_step``); ours counts sampled batches, each
  making ``num_iterations`` updates. A TRL row also averages ``logging_steps`` updates.
* ``epoch``: a fraction in TRL, a whole number here.
* ``clip_ratio/region_mean``: the same quantity as our ``clip_fraction`` (tokens where
  r < 1 − ε with Â < 0, or r > 1 + ε_high with Â > 0).
* ``completions/clipped_ratio``: the share of completions cut at ``max_completion_length``
  without <eos>, our ``truncated_fraction`` (``rollout.length_stats`` computes it the same way).
* ``kl`` is absent when β = 0 in both; TRL logs no ``accuracy``.
"""

METRICS = ("loss", "reward_mean", "reward_std", "accuracy", "dead_group_fraction", "clip_fraction", "kl",
           "ratio_mean", "entropy", "completion_length", "grad_norm", "truncated_fraction")
"""The metrics the rules read; each value must be a number or None (not measured)."""

FRACTIONS = ("accuracy", "dead_group_fraction", "clip_fraction", "truncated_fraction")
"""Metrics that are shares, so a value outside [0, 1] is refused."""

NONNEGATIVE = ("reward_std", "kl", "entropy", "completion_length", "grad_norm")
"""Metrics that cannot be negative (a spread, k3's KL estimate, an entropy, a length, a norm), so a value
below zero (beyond rounding) is refused."""

HUGE = 1e12
"""A metric at or beyond ±HUGE (the reward aside, whose scale is the user's) is read as a blown-up step."""

NON_FINITE = "non_finite"
"""A checked row's list of the metrics logged as NaN or ±∞ (a diverged step), when there are any."""
BLOWN_UP = "blown_up"
"""A checked row's list of the metrics logged finite but at or beyond ±:data:`HUGE`, when there are any."""


def load_run(source, *, arg="history"):
    """(history, evals, config) from any form ``diagnose`` accepts; a clear error before any work.

    ``history`` in our names, at least :data:`MIN_STEPS` steps with increasing step numbers;
    ``evals`` and ``config`` (a dict) are None unless the source holds them (a checkpoint's
    ``trainer_state.json`` does).
    """
    where = ""                                      # "m.jsonl " when it came from a file: errors name it
    if isinstance(source, (str, Path)):
        where = f"{source} "
        source = _read_json_or_jsonl(source, arg)
    evals = config = None
    if isinstance(source, dict) and isinstance(source.get("log_history"), list):       # TRL's trainer_state.json
        source = source["log_history"]
    elif isinstance(source, dict) and isinstance(source.get("metrics"), dict) and "history" in source["metrics"]:
        evals, config = source["metrics"].get("evals") or None, source.get("config")    # our checkpoint's
        source = source["metrics"]["history"]
    elif isinstance(source, dict) and "step" in source:                                # a one-line JSONL
        source = [source]
    if not isinstance(source, list) or not all(isinstance(row, dict) for row in source):
        _checks.fail(arg, f"{where}is neither grpo_edu metrics nor TRL's trainer_state.json",
                     "pass the JSONL of grpo-edu train --metrics-out, a checkpoint's trainer_state.json, "
                     "or TRL's trainer_state.json (its log_history)")
    if not source:
        _checks.fail(arg, f"{where}holds no steps", "diagnose a run that has logged some steps")
    if any("reward" in row for row in source) and not any("reward_mean" in row for row in source):
        source = [_from_trl(row) for row in source if "reward" in row]    # drops eval and summary rows
    return _checked_history(source, where, arg), evals, config


def _read_json_or_jsonl(path, arg):
    path = Path(path)
    if not path.is_file():
        what = ("is a folder" if path.is_dir() else "is not a regular file (a device or a pipe)" if path.exists()
                else "does not exist")
        _checks.fail(arg, f"{path} {what}",
                     "pass a metrics file (.jsonl) or a trainer_state.json")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        _checks.fail(arg, f"{path} is not a text file", "pass a metrics file (.jsonl) or a trainer_state.json")
    if not text.strip():
        _checks.fail(arg, f"{path} is empty", "pass the file of a run that has logged at least one step")
    try:
        return json.loads(text)                     # a .json file (or a JSONL of one line)
    except json.JSONDecodeError:
        pass
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            _checks.fail(arg, f"{path} line {number} is not JSON ({err.msg})",
                         "repair or delete that line (a run killed while writing can leave half a line at the end)")
        if not isinstance(row, dict):
            _checks.fail(arg, f"{path} line {number} is not a JSON object", "give one metrics object per line")
        rows.append(row)
    return rows


def _from_trl(row):
    out = {ours: row[trl] for trl, ours in TRL_NAMES.items() if trl in row}
    for key, value in row.items():
        if key.startswith("rewards/") and key.endswith("/mean"):
            out["reward/" + key[len("rewards/"):-len("/mean")]] = value
    return out


def _checked_history(rows, where, arg):
    if len(rows) < MIN_STEPS:
        _checks.fail(arg, f"{where}has {len(rows)} logged steps; a diagnosis needs at least {MIN_STEPS}",
                     "let the run log more steps (TRL: a smaller logging_steps)")
    clean, last = [], None
    for i, row in enumerate(rows):
        if _checks.is_finite_number(row.get("step")) and isinstance(row.get("reward_mean"), float) \
                and not math.isfinite(row["reward_mean"]):
            _checks.fail(arg, f"{where}step {row['step']}: reward_mean is {row['reward_mean']!r}: the run diverged "
                         "there, or its log is damaged",
                         f"diagnose the steps before it (the rows up to step {last}), and see lesson 09 for a "
                         "diverged run (learning rate too high, β or max_grad_norm too loose)")
        missing = [k for k in ("step", "reward_mean") if not _checks.is_finite_number(row.get(k))]
        if missing:
            _checks.fail(arg, f"{where}row {i + 1} has no {' or '.join(missing)} (its keys: {sorted(row)[:8]})",
                         "pass per-step training metrics: grpo_edu's trainer.history or TRL's log_history")
        if last is not None and row["step"] <= last:
            _checks.fail(arg, f"{where}row {i + 1} has step {row['step']} after step {last}",
                         "pass one run's metrics, in order (the file may hold two runs)")
        last = row["step"]
        row = dict(row)
        for key in METRICS:
            value = row.get(key)
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None                      # no number to read; the non_finite rule reports it
                row.setdefault(NON_FINITE, []).append(key)
            elif value is not None and not _checks.is_finite_number(value):
                _checks.fail(arg, f"{where}step {row['step']}: {key} is {value!r}, not a number",
                             "log numbers (or null when a metric was not measured)")
            elif value is not None and key != "reward_mean" and abs(value) >= HUGE:
                row[key] = None                      # overflowing, not a measurement; the non_finite rule reports it
                row.setdefault(BLOWN_UP, []).append(key)
            elif value is not None and key in NONNEGATIVE and value < -1e-6:
                _checks.fail(arg, f"{where}step {row['step']}: {key} is {value!r}, but it cannot be negative",
                             "pass the run's own log; a negative value there means the file is damaged or its "
                             "columns are mislabelled")
            elif value is not None and key in FRACTIONS and not 0 <= value <= 1:
                _checks.fail(arg, f"{where}step {row['step']}: {key} is {value!r}, but it is a fraction (0 to 1)",
                             "pass the run's own log; a fraction outside [0, 1] means the file is damaged or "
                             "its columns are mislabelled")
        clean.append(row)
    return clean


def checked_evals(evals):
    """A list of {"step", "accuracy"}, from a list or a file (JSON, JSONL, or a checkpoint's trainer_state.json)."""
    where = ""
    if isinstance(evals, (str, Path)):
        where = f"{evals} "
        evals = _read_json_or_jsonl(evals, "evals")
        if isinstance(evals, dict) and isinstance(evals.get("metrics"), dict):
            evals = evals["metrics"].get("evals")
        elif isinstance(evals, dict):
            evals = [evals]
    ok = isinstance(evals, list) and all(
        isinstance(e, dict) and _checks.is_finite_number(e.get("step")) and _checks.is_finite_number(e.get("accuracy"))
        and 0 <= e["accuracy"] <= 1 for e in evals)
    if not ok or any("reward_mean" in e for e in evals):              # a metrics file given by mistake
        _checks.fail("evals", f"{where}is not a list of {{'step', 'accuracy'}} records of held-out evaluations",
                     "pass trainer.evals, or a JSON/JSONL file of them, or a checkpoint's trainer_state.json")
    return sorted(evals, key=lambda e: e["step"])


def checked_config(config):
    if config is None or isinstance(config, dict):
        return dict(config or {})
    if hasattr(config, "to_dict"):
        return config.to_dict()
    _checks.fail("config", f"is a {type(config).__name__}", "pass the run's GRPOConfig (or its to_dict()), or None")
