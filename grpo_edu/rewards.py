"""Rewards: turn N completions into a (B, G) table of numbers, checked on the way.

A reward function follows TRL's signature: ``fn(prompts, completions, **columns)`` gets
lists of length N (one entry per completion; each prompt repeated G times; every other
dataset column, e.g. ``answer``, passed by name) and returns N numbers. Several functions
are summed with weights, as TRL's ``reward_weights`` do. Every function's output is
checked: the wrong count, a NaN or a non-number (text such as ``"1"``) raises an error
naming the function; an error inside the function is reported with its own message.
"""

import inspect
import math
import numbers
import traceback

import torch

from grpo_edu import _checks


class RewardFunctionError(ValueError):
    """A reward function failed in its own code; the original exception is its ``__cause__``."""


def _name(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def compute_rewards(reward_funcs, rows, completions, num_generations, *, weights=None):
    """Sum of weighted reward functions → (B, G) float32 tensor, plus per-function means.

    ``rows`` are the B dataset rows ({"prompt": …, other columns}); ``completions`` the
    N = B·G completion strings, grouped by prompt. Returns ``(rewards, info)`` with
    ``info[f"reward/{name}"]`` the mean of each function.
    """
    B, G = len(rows), num_generations
    N = B * G
    if len(completions) != N:
        _checks.fail("completions", f"has {len(completions)} entries, expected B·G = {B}·{G} = {N}",
                     "pass every completion of every prompt, grouped by prompt")
    weights = [1.0] * len(reward_funcs) if weights is None else list(weights)
    if len(weights) != len(reward_funcs):
        _checks.fail("weights", f"has {len(weights)} entries for {len(reward_funcs)} reward functions",
                     "give one weight per reward function")
    for w in weights:
        if not _is_number(w) or isinstance(w, bool) or not math.isfinite(float(w)):
            _checks.fail("weights", f"holds {w!r}, not a finite number", "give each reward function a number weight")
    for i, row in enumerate(rows):
        if set(row) != set(rows[0]):
            _checks.fail("rows", f"row {i} has the columns {sorted(row)} but row 0 has {sorted(rows[0])}",
                         "give every row the same columns (load_prompts checks a whole dataset up front)")
    columns = {key: [row[key] for row in rows for _ in range(G)] for key in rows[0] if key != "prompt"}
    prompts = [row["prompt"] for row in rows for _ in range(G)]
    total = torch.zeros(N)
    info = {}
    for fn, w in zip(reward_funcs, weights):
        values = _call(fn, prompts, list(completions), columns)
        values = check_reward_output(fn, values, N)
        total += w * values
        info[f"reward/{_name(fn)}"] = float(values.mean())
    return total.view(B, G), info                      # (B, G)


def _call(fn, prompts, completions, columns):
    """``fn(prompts=…, completions=…, **columns)``; errors say whether the call or the function failed."""
    kwargs = dict(prompts=prompts, completions=completions, **columns)
    try:
        inspect.signature(fn).bind(**kwargs)
    except TypeError as err:          # the signature does not fit: usually a column the data lacks
        _checks.fail(f"reward function {_name(fn)}",
                     f"could not be called with the columns {list(kwargs)} ({err})",
                     "give every dataset row the columns the function asks for (e.g. 'answer'), "
                     "or let it take **kwargs")
    except ValueError:                # no signature to inspect (some builtins): just call it
        pass
    try:
        return fn(**kwargs)
    except Exception as err:          # its own bug: show its own error, and where it happened
        frame = traceback.extract_tb(err.__traceback__)[-1]
        raise RewardFunctionError(
            f"reward function {_name(fn)}: raised {err.__class__.__name__}: {err} "
            f"(at {frame.filename}, line {frame.lineno}). Fix: correct the function; it is called with "
            f"the columns {list(kwargs)}, one list entry per completion.") from err


def _is_number(v):
    if isinstance(v, numbers.Real):
        return True
    return _checks.is_torch(v) and v.ndim == 0 and not v.is_complex()   # a 0-d tensor


def check_reward_output(fn, values, n):
    """Raise a clear error unless ``values`` is n finite numbers; return them as a tensor.

    Numbers only: bools, ints, floats, numpy scalars, 0-d tensors, or a 1-d tensor/array.
    Text such as ``"1"`` is refused rather than converted, as ``"yes"`` would be.
    """
    name = _name(fn)
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):   # a tensor or numpy array
        values = values.tolist()
    if isinstance(values, (str, bytes, numbers.Number)) or not hasattr(values, "__iter__"):
        _checks.fail(f"reward function {name}", f"returned a {type(values).__name__}, not a list of numbers",
                     "return one float per completion")
    values = list(values)
    bad = next((i for i, v in enumerate(values) if not _is_number(v)), None)
    if bad is not None:
        _checks.fail(f"reward function {name}",
                     f"returned {values[bad]!r} (a {type(values[bad]).__name__}) for completion {bad}, not a number",
                     "return numbers (e.g. 1.0 and 0.0), not text or None")
    values = [float(v) for v in values]
    if len(values) != n:
        _checks.fail(f"reward function {name}", f"returned {len(values)} rewards for {n} completions",
                     "return exactly one reward per completion, in order")
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        _checks.fail(f"reward function {name}", f"returned NaN or infinity (first at completion {bad[0]})",
                     "return a finite number for every completion (e.g. 0.0 when unparseable)")
    return torch.tensor(values, dtype=torch.float32)
