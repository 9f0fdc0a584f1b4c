"""Copy the course's lessons into a folder of the student's choosing (``grpo-edu lessons DIR``).

A student works in their own copy, outside the installed course, so that the course can be
updated without touching their work. The rule that protects that work: a copy the student has
changed (its bytes differ from the course's) is never overwritten unless they ask with
``force``, and then it is first kept beside the new one as ``NAME.before-YYYYmmdd-HHMMSS.ipynb``.
An unchanged copy is left as it is; a missing one is written. The lessons find the bundled
models through the installed package, so they run from any folder.
"""

import shutil
import time
from pathlib import Path

from grpo_edu.common import _checks


def lessons_dir():
    """The course's own lesson notebooks (``lessons/`` beside the package)."""
    from grpo_edu.training.models import ASSETS

    return ASSETS.parent / "lessons"


def copy_lessons(target, *, force=False, source=None):
    """Copy every numbered lesson notebook into ``target``: ``(written, info)``.

    ``written``: the files written or replaced. ``info``: ``unchanged`` (already the course's copy),
    ``kept`` ({replaced file: where the student's version was kept}, with ``force`` only).
    Without ``force``, a folder that holds changed copies is refused before anything is written,
    naming them.
    """
    source = Path(source) if source is not None else lessons_dir()
    notebooks = sorted(source.glob("[0-9][0-9]*_*.ipynb"))
    if not notebooks:
        _checks.fail("source", f"holds no lesson notebooks at {source}", "reinstall the course (README)")
    target = Path(target)
    if target.exists() and not target.is_dir():
        _checks.fail("target", f"{target} is a file", "pass a folder (it is created if missing)")
    changed = [nb.name for nb in notebooks
               if (target / nb.name).exists() and (target / nb.name).read_bytes() != nb.read_bytes()]
    if changed and not force:
        _checks.fail("target", f"{target} holds your changed copies of {', '.join(changed)}",
                     "copy into another folder, or pass --force to update them (your versions are kept beside "
                     "them as NAME.before-<time>.ipynb)")
    target.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    written, unchanged, kept = [], [], {}
    for nb in notebooks:
        dest = target / nb.name
        if dest.exists() and dest.read_bytes() == nb.read_bytes():
            unchanged.append(dest)
            continue
        if dest.exists():                                   # force: keep the student's version first
            backup = dest.with_name(f"{dest.stem}.before-{stamp}.ipynb")
            shutil.copy2(dest, backup)
            kept[dest] = backup
        shutil.copyfile(nb, dest)
        written.append(dest)
    return written, {"unchanged": unchanged, "kept": kept}
