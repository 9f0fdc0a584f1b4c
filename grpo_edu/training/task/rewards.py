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

from grpo_edu.common import _checks


class RewardFunctionError(ValueError):
    """A reward function failed in its own code; the original exception is its ``__cause__``."""


def _name(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def compute_rewards(reward_funcs, rows, completions, num_generations, *, weights=None, completion_ids=None):
    """Sum of weighted reward functions → (B, G) float32 tensor, plus per-function means.

    ``rows`` are the B dataset rows ({"prompt": …, other columns}); ``completions`` the
    N = B·G completion strings, grouped by prompt. ``completion_ids``: the N completions' token
    ids (``<eos>`` included where it was sampled), passed to each function that takes a
    ``completion_ids`` argument or ``**kwargs``, as TRL does (:func:`soft_overlong_punishment`
    counts them). Returns ``(rewards, info)`` with ``info[f"reward/{name}"]`` the mean of each function.
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
    if completion_ids is not None and len(completion_ids) != N:
        _checks.fail("completion_ids", f"has {len(completion_ids)} entries, expected B·G = {N}",
                     "pass the token ids of every completion, in the order of completions")
    for fn, w in zip(reward_funcs, weights):
        extra = {"completion_ids": completion_ids} if completion_ids is not None and _takes(fn, "completion_ids") else {}
        values = _call(fn, prompts, list(completions), {**columns, **extra})
        values = check_reward_output(fn, values, N)
        total += w * values
        info[f"reward/{_name(fn)}"] = float(values.mean())
    return total.view(B, G), info                      # (B, G)


def _takes(fn, name):
    """Whether ``fn`` accepts the keyword ``name`` (by name, or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


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


# --- building blocks for composite rewards (lesson 07) -------------------------------------------
# Each is a reward function with TRL's signature; pass several to the trainer with weights
# (``combine`` does both), and each one's mean appears in the step's metrics as reward/<name>.

def _named(fn, name):
    fn.__name__ = fn.__qualname__ = name
    return fn


def correctness(prompts, completions, answer, **kwargs):
    """1.0 for an answer equal to the reference (surrounding spaces ignored), else 0.0."""
    return [1.0 if c.strip() == str(a).strip() else 0.0 for c, a in zip(completions, answer)]


def format_reward(max_digits=3):
    """A reward of 1.0 for an answer that is a well-formed number, 1 to ``max_digits`` digits (an
    optional leading "-"), else 0.0. It says nothing about whether the number is right."""
    _checks.positive_int("max_digits", max_digits)

    def reward(prompts, completions, **kwargs):
        out = []
        for c in completions:
            digits = c.strip()[1:] if c.strip().startswith("-") else c.strip()
            out.append(1.0 if digits.isdigit() and len(digits) <= max_digits else 0.0)
        return out
    return _named(reward, f"format(max_digits={max_digits})")


def brevity_reward(max_length):
    """1 − len(answer)/max_length, floored at 0: shorter answers score higher (the seed's "brevity")."""
    _checks.positive_int("max_length", max_length)

    def reward(prompts, completions, **kwargs):
        return [max(0.0, 1.0 - len(c.strip()) / max_length) for c in completions]
    return _named(reward, f"brevity(max_length={max_length})")


def soft_overlong_punishment(max_completion_length, cache_length):
    """DAPO's soft overlong punishment (arXiv:2503.14476, eq. 13) as a reward block; TRL's
    ``get_soft_overlong_punishment``. With L_max = ``max_completion_length`` and L_cache = ``cache_length``,
    a completion of |o| tokens (``<eos>`` included) scores

        0                                  if |o| ≤ L_max − L_cache
        ((L_max − L_cache) − |o|) / L_cache   if L_max − L_cache < |o| ≤ L_max   (a ramp from 0 to −1)
        −1                                 if |o| > L_max

    so an answer is warned as it nears the cap instead of falling off a cliff there. Add it to
    the task's reward (weight 1); a cut answer (|o| = L_max) gets −1 on top of its 0 for being wrong.
    """
    _checks.positive_int("max_completion_length", max_completion_length)
    _checks.positive_int("cache_length", cache_length)
    if cache_length >= max_completion_length:
        _checks.fail("cache_length", f"is {cache_length}, not below max_completion_length {max_completion_length}",
                     "pass a soft zone shorter than the cap, e.g. a quarter of it (DAPO: 4096 of 20480)")
    start = max_completion_length - cache_length                      # L_max − L_cache

    def reward(completion_ids, **kwargs):
        out = []
        for ids in completion_ids:
            n = len(ids)                                              # |o|
            out.append(0.0 if n <= start else (start - n) / cache_length if n <= max_completion_length else -1.0)
        return out
    return _named(reward, f"overlong(max={max_completion_length},cache={cache_length})")


def term_count_reward(terms, per_term=0.1, cap=None):
    """The guide's terminology reward: ``per_term`` for each occurrence of any of ``terms`` in the answer
    (the guide's ``count_domain_terms(c) * 0.1``). Without ``cap`` it has **no upper bound**: an answer
    that repeats a term twenty times earns twenty times the credit, so a long enough padded answer outscores
    a right one (lesson 07). ``cap``: count at most this many occurrences, so the reward stays in
    [0, cap · per_term]."""
    if isinstance(terms, str) or not terms or not all(isinstance(t, str) and t for t in terms):
        _checks.fail("terms", f"must be a list of non-empty strings, got {terms!r}",
                     'pass e.g. ["gradient", "policy"], or list("0123456789") to count digits')
    per_term = _checks.finite_float("per_term", per_term, fix="pass e.g. 0.1 (the guide's)")
    if cap is not None:
        _checks.positive_int("cap", cap)
    terms = tuple(terms)

    def reward(prompts, completions, **kwargs):
        out = []
        for c in completions:
            count = sum(c.count(t) for t in terms)                    # occurrences, overlapping terms each counted
            out.append(per_term * (count if cap is None else min(count, cap)))
        return out
    return _named(reward, f"term_count(per_term={per_term:g}" + ("" if cap is None else f", cap={cap}") + ")")


def digit_credit(prompts, completions, answer, **kwargs):
    """Partial credit: the share of the reference's digits that the answer has in the same place,
    counted from the right (units with units, tens with tens); answers of another length lose the
    missing places. "46" for 46 → 1.0; "47" → 0.5; "146" → 2/3. It pays for wrong numbers, which
    is what makes it hackable (lesson 07)."""
    out = []
    for c, a in zip(completions, answer):
        c, a = c.strip(), str(a).strip()
        width = max(len(c), len(a))
        same = sum(x == y for x, y in zip(c.rjust(width), a.rjust(width)) if y != " ")
        out.append(same / width if width else 0.0)
    return out


class CompositeReward:
    """A weighted sum of named reward functions: R = Σ_k w_k · R_k (the seed's 0.6/0.2/0.2 recipe).

    ``combine(relevance=(f, 0.6), brevity=(g, 0.2))`` builds one. Pass ``.reward_funcs`` and
    ``.reward_weights`` to ``GRPOTrainer`` (as TRL takes ``reward_funcs`` and ``reward_weights``);
    ``components(prompts, completions, **columns)`` gives each function's values, for a table.
    """

    def __init__(self, components):
        if not components:
            _checks.fail("components", "is empty", "pass at least one name=(function, weight)")
        self.names, self.reward_funcs, self.reward_weights = [], [], []
        for name, spec in components.items():
            if not (isinstance(spec, tuple) and len(spec) == 2 and callable(spec[0])):
                _checks.fail(name, f"must be a (function, weight) pair, got {spec!r}",
                             f"pass {name}=(reward_function, 0.5)")
            fn, weight = spec
            if isinstance(weight, bool) or not _checks.is_finite_number(weight):
                _checks.fail(name, f"has the weight {weight!r}, not a finite number", "give each component a number")
            self.names.append(name)
            self.reward_funcs.append(_renamed(fn, name))
            self.reward_weights.append(float(weight))

    def components(self, prompts, completions, **columns):
        """{name: list of that component's rewards}, each checked like the trainer checks it."""
        return {name: check_reward_output(fn, _call(fn, prompts, list(completions), columns), len(completions)).tolist()
                for name, fn in zip(self.names, self.reward_funcs)}

    def __call__(self, prompts, completions, **columns):
        parts = self.components(prompts, completions, **columns)
        return [sum(w * parts[n][i] for n, w in zip(self.names, self.reward_weights)) for i in range(len(completions))]


def _renamed(fn, name):
    """``fn`` under ``name`` (so the metrics say reward/<name>), without changing the original."""
    def reward(*args, **kwargs):
        return fn(*args, **kwargs)
    try:
        reward.__signature__ = inspect.signature(fn)
    except (TypeError, ValueError):
        pass
    return _named(reward, name)


def combine(**components):
    """``combine(correct=(correctness, 0.6), short=(brevity_reward(4), 0.2))`` → :class:`CompositeReward`."""
    return CompositeReward(components)
