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


def number_range(low, high, *, fix_low="pass the smallest number, 0 or more"):
    """Check a generated task's number range: whole numbers with ``0 ≤ low ≤ high`` (bools refused)."""
    positive_int("low", low, minimum=0, fix=fix_low)
    positive_int("high", high, minimum=low, fix=f"pass the largest number, at least low ({low})")


def split_sizes(heldout_size, train_size, distinct, *, what, more):
    """Check a generated task's split sizes before anything is drawn: whole numbers ≥ 1 (``train_size``
    None: every prompt not held out), and together at most the ``distinct`` prompts that exist, since
    the splits are drawn without repeats and a draw for more than exist would never end. ``what`` names
    the prompts ("questions"); ``more`` says how to get more of them (e.g. "widen [low, high]")."""
    positive_int("heldout_size", heldout_size, fix="pass how many prompts to hold out, 1 or more")
    if train_size is not None:
        positive_int("train_size", train_size, fix="pass how many train prompts to draw, 1 or more")
    wanted = heldout_size + (1 if train_size is None else train_size)
    if wanted > distinct:
        asked = (f"{heldout_size:,} held out and at least one to train on" if train_size is None else
                 f"{heldout_size:,} held out and {train_size:,} to train on, {wanted:,} in all")
        fail("train_size" if train_size is not None else "heldout_size",
             f"asks for {asked}, but only {distinct:,} distinct {what} exist, so the draw without repeats "
             "would never end", f"ask for at most {distinct:,} in all, or {more}")


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
    created later), when it is not a writable folder. It is tried, not asked: a folder is made
    in it and removed, because permission bits do not tell (root passes every ``os.access``, and
    no folder can be made under /proc)."""
    import tempfile

    folder = Path(folder)
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return folder
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".grpo-edu-probe-", dir=folder))
    except OSError:
        return folder
    return None


def can_create_file_in(folder):
    """Whether a new file can be made in the existing folder ``folder``: tried, not asked, as
    :func:`unwritable_folder` tries folders. A probe file with a name of its own is created there with
    ``O_EXCL`` and removed at once, so no file that is there is opened or touched; root passes every
    ``os.access``, and no file can be made in /proc or a read-only mount."""
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(prefix=".grpo-edu-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return True


def output_file_problem(path, *, overwrite=False, flag="--overwrite", make_folder=False):
    """What stops a command from writing its result to the file ``path`` once its work is done, as
    ``(problem, fix)``, or None: checked before the work, so an hour's run never ends on a path it
    cannot write. Whether the folder takes a new file is tried (:func:`can_create_file_in`: the result is
    written beside its name, then moved onto it), never read from permission bits. An existing file is
    replaced only with ``overwrite``. With ``make_folder`` a missing folder is fine when it can be created
    (the command makes it when it writes), not when a file stands in its way."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder", f"name a file inside it, e.g. {path / 'results.json'}"
    if make_folder and not path.parent.exists():
        blocked = unwritable_folder(path.parent)
        if blocked is not None:
            return (f"the folder of {path} cannot be created: {blocked} is not a folder you can write in",
                    "write the file elsewhere")
        return None
    if not path.parent.is_dir():
        return (f"the folder of {path} does not exist",
                f"create it first (mkdir -p {path.parent}), or write the file elsewhere")
    if (not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK))
            or not can_create_file_in(path.parent)):
        return f"{path} cannot be written", "pass a file in a folder you can write to"
    if path.exists() and not overwrite:
        return (f"{path} already exists (an earlier run's results?)",
                f"pass another file name, or {flag} to replace it")
    return None


def output_folder_problem(folder, names, *, overwrite=False, flag="--overwrite"):
    """:func:`output_file_problem` for the files ``names`` a command will write in ``folder`` (made if missing),
    as ``(problem, fix)`` or None: a stored run is replaced only with ``overwrite``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder", "name a folder for the results"
    for name in names:
        problem = output_file_problem(folder / name, overwrite=overwrite, flag=flag, make_folder=True)
        if problem:
            return problem
    return None


def write_result_file(path, text, *, overwrite=False):
    """Write ``text`` to ``path`` and return the path written. With ``overwrite`` the old file is replaced whole
    or not at all (``safe_files.replace_atomically``). Without it a file that appeared meanwhile (another run,
    checked before the work and finished first) is never replaced: the text goes beside it, as NAME-2.EXT, ..."""
    from grpo_edu.common.safe_files import create_new, replace_atomically

    path, data = Path(path), text.encode("utf-8")
    if overwrite:
        replace_atomically(path, data)
        return path
    target, n = path, 1
    while True:
        try:
            create_new(target, data)                       # O_EXCL: fails if the name is taken, replaces nothing
            return target
        except FileExistsError:
            n += 1
            target = path.with_name(f"{path.stem}-{n}{path.suffix}")
