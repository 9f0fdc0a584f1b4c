"""Rewards: turn N completions into a (B, G) table of numbers, checked on the way.

A reward function follows TRL's signature: ``fn(prompts, completions, **columns)`` gets
lists of length N (one entry per completion; each prompt repeated G times; every other
dataset column, e.g. ``answer``, passed by name) and returns N numbers. Several functions
are summed with weights, as TRL's ``reward_weights`` do. Every function's output is
checked: the wrong count or a NaN raises an error naming the function.
"""

import math

import torch

from grpo_edu import _checks


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
    columns = {key: [row[key] for row in rows for _ in range(G)] for key in rows[0] if key != "prompt"}
    prompts = [row["prompt"] for row in rows for _ in range(G)]
    total = torch.zeros(N)
    info = {}
    for fn, w in zip(reward_funcs, weights):
        try:
            values = fn(prompts=prompts, completions=list(completions), **columns)
        except TypeError as err:      # usually a column the function needs and the data lacks
            _checks.fail(f"reward function {_name(fn)}",
                         f"could not be called with the columns {['prompts', 'completions', *columns]} ({err})",
                         "give every dataset row the columns the function asks for (e.g. 'answer'), "
                         "or let it take **kwargs")
        values = check_reward_output(fn, values, N)
        total += w * values
        info[f"reward/{_name(fn)}"] = float(values.mean())
    return total.view(B, G), info                      # (B, G)


def check_reward_output(fn, values, n):
    """Raise a clear error unless ``values`` is n finite numbers; return them as a tensor."""
    name = _name(fn)
    try:
        values = [float(v) for v in values]
    except (TypeError, ValueError):
        _checks.fail(f"reward function {name}", "returned something that is not a list of numbers",
                     "return one float per completion")
    if len(values) != n:
        _checks.fail(f"reward function {name}", f"returned {len(values)} rewards for {n} completions",
                     "return exactly one reward per completion, in order")
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        _checks.fail(f"reward function {name}", f"returned NaN or infinity (first at completion {bad[0]})",
                     "return a finite number for every completion (e.g. 0.0 when unparseable)")
    return torch.tensor(values, dtype=torch.float32)
