"""Input checks shared by the public functions.

Every public function checks its arguments *before* doing any work and raises a
``ValueError`` that names the argument and says how to fix it.
"""

import math
import os
from pathlib import Path


def fail(arg, problem, fix, *, error=ValueError):
    """Raise the course's standard error: which argument, what is wrong, how to fix it.

    ``error`` picks a ``ValueError`` subclass when callers should be able to tell the
    failure apart (e.g. ``checkpoint.CheckpointError``); the message reads the same.
    """
    raise error(f"{arg}: {problem}. Fix: {fix}.")


def positive_int(arg, value, *, minimum=1, fix=None):
    """Check that ``value`` is an int ≥ ``minimum`` (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        fail(arg, f"must be an integer ≥ {minimum}, got {value!r}",
             fix or f"pass a whole number ≥ {minimum}")
    return value


def is_finite_number(value):
    """True for a finite int or float (bools are refused)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finite_float(arg, value, *, fix=None):
    """Check that ``value`` is a finite real number, of either sign; return it as a float."""
    if not is_finite_number(value):
        fail(arg, f"must be a finite number, got {value!r}", fix or "pass a finite number")
    return float(value)


def positive_float(arg, value, *, allow_zero=False, fix=None):
    """Check that ``value`` is a finite real number > 0 (or ≥ 0 with ``allow_zero``)."""
    ok = is_finite_number(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = "≥ 0" if allow_zero else "> 0"
        fail(arg, f"must be a finite number {bound}, got {value!r}", fix or f"pass a number {bound}")
    return float(value)


def choice(arg, value, choices):
    """Check that ``value`` is one of ``choices``."""
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        fail(arg, f"unknown value {value!r}", f"use one of {options}")
    return value


def is_torch(x):
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.startswith("torch")


def unwritable_folder(folder):
    """What stops ``folder`` from being created or written into, or None when nothing does: the
    nearest of ``folder`` and the folders above it that exists (missing ones below it are
    created later), when it is not a writable folder."""
    folder = Path(folder)
    while not folder.exists():
        folder = folder.parent
    return None if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK) else folder
