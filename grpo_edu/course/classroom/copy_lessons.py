"""Copy the course's lessons into a folder of the student's choosing (``grpo-edu lessons DIR``).

A student works in their own copy, outside the installed course, so that the course can be
updated without touching their work. The rule that protects that work: a copy the student has
changed (its bytes differ from the course's) is never overwritten unless they ask with
``force``, and then it is first kept beside the new one as ``NAME.before-YYYYmmdd-HHMMSS.ipynb``
(``…-2.ipynb``, ``-3`` … when that name is taken: a backup is created exclusively and never
replaces anything). An unchanged copy is left as it is; a missing one is written. The lessons
find the bundled models through the installed package, so they run from any folder.

Nothing is lost however it is run: one run at a time per folder (a lock file,
``.grpo-edu-lessons.lock``, that a second run waits for), each lesson written whole or not at all
(a temporary file, then one rename), and a lesson that is a link, a folder, a FIFO or a device is
refused by name before anything is written: nothing is ever written through a link.
"""

import os
import stat
import time
from pathlib import Path

from grpo_edu.common import _checks, locks
from grpo_edu.common.safe_files import NotReadable, create_new, kind, read_regular, replace_atomically, shown

LOCK = ".grpo-edu-lessons.lock"
"""The lock file a run holds in the student's folder while it writes there."""
MAX_BYTES = 200_000_000
"""A student's copy larger than this is not read to compare it: it is refused, by name."""


def lessons_dir():
    """The course's own lesson notebooks (``lessons/`` beside the package)."""
    from grpo_edu.training.model.models import ASSETS

    return ASSETS.parent / "lessons"


def copy_lessons(target, *, force=False, source=None, wait=30.0):
    """Copy every numbered lesson notebook into ``target``: ``(written, info)``.

    ``written``: the files written or replaced. ``info``: ``unchanged`` (already the course's copy),
    ``kept`` ({replaced file: where the student's version was kept}, with ``force`` only).
    Refused before anything is written, naming each: a lesson that is a link (unless it reads as
    the course's copy), a folder, a FIFO or a device; without ``force``, changed copies. A second
    run on the same folder waits up to ``wait`` seconds for the first to finish.
    """
    source = Path(source) if source is not None else lessons_dir()
    notebooks = sorted(source.glob("[0-9][0-9]*_*.ipynb"))
    if not notebooks:
        _checks.fail("source", f"holds no lesson notebooks at {shown(source)}", "reinstall the course (README)")
    target = Path(target)
    try:
        target.exists()
    except OSError as err:                     # e.g. a name longer than the file system allows
        _checks.fail("target", f"{shown(target)} cannot be a folder here ({err.strerror})", "pass a shorter name")
    if os.path.islink(target) and not target.exists():
        _checks.fail("target", f"{shown(target)} is a symbolic link to nothing ({shown(os.readlink(target))})",
                     "point the link at a folder, or pass another folder")
    if target.exists() and not target.is_dir():
        what = "a file" if target.is_file() else f"not a folder ({kind(target.stat().st_mode)})"
        _checks.fail("target", f"{shown(target)} is {what}", "pass a folder (it is created if missing)")
    blocked = _checks.unwritable_folder(target)
    if blocked is not None:
        _checks.fail("target", f"cannot write into {shown(blocked)}",
                     "pass a folder you can write, e.g. one in your home folder")
    target.mkdir(parents=True, exist_ok=True)
    token = _lock(target, wait)
    try:
        return _update(target, notebooks, force)
    finally:
        locks.release(target / LOCK, token)


def _lock(target, wait):
    """Take the folder's lock, waiting up to ``wait`` seconds for another run to let it go."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return locks.acquire(target / LOCK, arg="target", what=f"the folder {shown(target)}",
                                 fix="wait for the other `grpo-edu lessons` to finish, then run again")[0]
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _survey(target, notebooks):
    """Each lesson's state in ``target``: ``(plan, unchanged, refused)``. ``plan``: (course file, its
    bytes, destination, the student's bytes or None if missing) for each lesson that differs or is
    missing; ``unchanged``: the copies that read as the course's; ``refused``: why each lesson that
    must not be touched (a link, a folder, a FIFO, a file that cannot be read) is refused."""
    plan, unchanged, refused = [], [], []
    for nb in notebooks:
        dest, course = target / nb.name, nb.read_bytes()
        try:
            mode = os.lstat(dest).st_mode
        except FileNotFoundError:
            plan.append((nb, course, dest, None))
            continue
        try:
            mine = read_regular(dest, MAX_BYTES)              # a link is followed: only to compare
        except NotReadable as err:
            mine, why = None, str(err)
        if mine == course:
            unchanged.append(dest)
        elif stat.S_ISLNK(mode):
            refused.append(f"{shown(nb.name)} is a symbolic link (to {shown(os.readlink(dest))}) and lessons are never "
                           "written through a link")
        elif not stat.S_ISREG(mode):
            refused.append(f"{shown(nb.name)} is {kind(mode)}, not a lesson")
        elif mine is None:
            refused.append(f"{shown(nb.name)} {why}")
        else:
            plan.append((nb, course, dest, mine))
    return plan, unchanged, refused


def _keep(dest, mine):
    """Save the student's version ``mine`` of ``dest`` under a backup name no other file has."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        backup = dest.with_name(f"{dest.stem}.before-{stamp}{'' if n == 1 else f'-{n}'}.ipynb")
        try:
            create_new(backup, mine)
            return backup
        except FileExistsError:
            continue
    _checks.fail("target", f"{shown(dest.parent)} holds 999 backups of {shown(dest.name)} made at {stamp}",
                 "move some away, then run again")


def _update(target, notebooks, force):
    plan, unchanged, refused = _survey(target, notebooks)
    if refused:
        _checks.fail("target", f"in {shown(target)}, " + "; ".join(refused),
                     "move or rename those (nothing was written), then run again")
    changed = [shown(nb.name) for nb, _, _, mine in plan if mine is not None]
    if changed and not force:
        _checks.fail("target", f"{shown(target)} holds your changed copies of {', '.join(changed)}",
                     "copy into another folder, or pass --force to update them (your versions are kept beside "
                     "them as NAME.before-<time>.ipynb)")
    written, kept = [], {}
    for nb, course, dest, mine in plan:
        try:
            if mine is not None:                                # force: keep the student's version first
                kept[dest] = _keep(dest, mine)
                if read_regular(dest, MAX_BYTES) != mine:       # saved again meanwhile (an editor): keep that too
                    _checks.fail("target", f"{shown(dest)} changed while it was being updated (still open in "
                                 "Jupyter?)", "close it, then run again: nothing of yours was replaced")
            replace_atomically(dest, course)
        except (OSError, NotReadable) as err:
            done = f"{len(written)} lesson(s) were updated before it" if written else "no lesson was updated"
            _checks.fail("target", f"could not write {shown(dest)} ({getattr(err, 'strerror', None) or err}); "
                         f"{done}, every other file is as it was",
                         "free some disk space or fix the folder's permissions, then run again")
        written.append(dest)
    return written, {"unchanged": unchanged, "kept": kept}
