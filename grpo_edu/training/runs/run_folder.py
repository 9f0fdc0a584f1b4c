"""One run per output folder: a lock while writing, and no mixing with another run's files.

Two processes writing one folder used to both succeed, the last writer silently replacing
the other's checkpoints; a new run in an old run's folder used to have its own checkpoints
deleted by the old run's clean-up. So:

* while a run writes into its folder it holds ``.grpo_edu.lock`` there (``common.locks``:
  created with ``O_CREAT | O_EXCL``, holding its pid and host); a second writer is refused,
  and a lock whose process is gone (same host, pid not running) is taken over, with a message;
* a folder that holds another run's checkpoints is refused unless the caller resumes that
  run or asks to overwrite it; overwriting removes only that run's ``checkpoint-NNNNNN``
  folders and ``latest.json``, never anything else in the folder;
* half-written temporary folders left by a killed run are removed when a run starts;
* a folder the run created and left empty (it failed before saving anything) is removed.
"""

import json
from pathlib import Path

from grpo_edu.common import _checks, locks
from grpo_edu.training.runs.checkpoint import (LATEST, TEMPORARY, CheckpointError, checkpoint_folders, remove_path,
                                          run_id_of)

LOCK = ".grpo_edu.lock"


def check_output_dir(output_dir):
    """Refuse an output_dir that is a file or cannot be written, before any work is done."""
    path = Path(output_dir)
    if path.exists() and not path.is_dir():
        _checks.fail("output_dir", f"{path} is a file, not a folder",
                     "pass a folder path (it is created if missing), or move the file away", error=CheckpointError)
    existing = _checks.unwritable_folder(path)
    if existing is not None:
        _checks.fail("output_dir", f"cannot create or write {path} ({existing} is not a writable folder)",
                     "pass a folder you can write to", error=CheckpointError)


def acquire_lock(output_dir):
    """Create ``output_dir/.grpo_edu.lock`` (O_CREAT | O_EXCL) holding this pid and host.

    A lock whose process is gone (same host, pid not running) is taken over
    (``grpo_edu.common.locks``). Returns ``(token, info)``; ``info["took_over"]`` describes a
    stale lock that was replaced. Pass the token to :func:`release_lock`.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return locks.acquire(folder / LOCK, arg="output_dir", what=str(folder),
                         fix="wait for that run to finish, or pass another output_dir", error=CheckpointError,
                         in_process="another GRPOTrainer in this Python process, which is training or saving into "
                                    "it right now (from a callback or a thread)")


def refuse_if_locked(output_dir):
    """Refuse, before any work, a folder another live run is writing into (its lock is held)."""
    folder = Path(output_dir)
    locks.refuse_if_held(folder / LOCK, arg="output_dir", what=str(folder),
                         fix="wait for that run to finish, or pass another output_dir", error=CheckpointError,
                         in_process="another GRPOTrainer in this Python process")


def release_lock(output_dir, token):
    """Remove the lock if it is still the one ``token`` took."""
    locks.release(Path(output_dir) / LOCK, token)


def remove_if_empty(output_dir):
    """Remove ``output_dir`` if nothing is in it (a run that made it and failed before saving)."""
    try:
        Path(output_dir).rmdir()                       # only ever succeeds on an empty folder
    except OSError:
        pass


def other_runs_files(output_dir, run_id=None):
    """The files of runs other than ``run_id`` in ``output_dir``: its checkpoint folders, and
    ``latest.json`` if it names another run (or cannot be read)."""
    folder = Path(output_dir)
    found = [p for _, p in checkpoint_folders(folder) if run_id_of(p) != run_id]
    latest = folder / LATEST
    if latest.exists():
        try:
            other = json.loads(latest.read_text(encoding="utf-8")).get("run_id") != run_id
        except (OSError, ValueError, AttributeError):
            other = True
        if other:
            found.append(latest)
    return found


def refuse_another_run(output_dir, run_id=None):
    """Raise :class:`CheckpointError` if ``output_dir`` holds another run's files."""
    found = other_runs_files(output_dir, run_id)
    if found:
        folder = Path(output_dir)
        names = ", ".join([p.name for p in found if p.name != LATEST][-3:]) or LATEST
        _checks.fail("output_dir", f"{folder} already holds another run ({names})",
                     f"continue it with --resume {folder} (train(resume_from=...)), replace it with --overwrite "
                     "(train(overwrite=True)), or choose another output_dir", error=CheckpointError)


def claim_output_dir(output_dir, run_id, *, overwrite=False, resuming=False):
    """Make ``output_dir`` this run's (call with the lock held); refuse another run's folder.

    The folder holds another run when its ``latest.json`` or a ``checkpoint-*`` folder carries
    another run id. That is refused unless ``resuming`` (the caller resumed that very
    folder) or ``overwrite``: then only that run's own files go (its ``checkpoint-NNNNNN``
    folders and ``latest.json``), never anything else. Half-written temporary folders left
    by a killed run are removed either way. Returns ``info`` with ``removed`` and ``cleaned``.
    """
    folder = Path(output_dir)
    info = {"removed": [], "cleaned": []}
    for path in folder.iterdir():
        if TEMPORARY.match(path.name):
            remove_path(path, ignore_errors=True)
            info["cleaned"].append(path)
    if resuming:
        return info
    if not overwrite:
        refuse_another_run(folder, run_id)
    for path in other_runs_files(folder, run_id):
        remove_path(path)
        info["removed"].append(path)
    return info
