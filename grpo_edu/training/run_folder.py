"""One run per output folder: a lock while writing, and no mixing with another run's files.

Two processes writing one folder used to both succeed, the last writer silently replacing
the other's checkpoints; a new run in an old run's folder used to have its own checkpoints
deleted by the old run's clean-up. So:

* while a run writes into its folder it holds ``.grpo_edu.lock`` there, created with
  ``O_CREAT | O_EXCL`` and holding its pid and host; a second writer is refused, and a lock
  whose process is gone (same host, pid not running) is taken over, with a message;
* a folder that holds another run's checkpoints is refused unless the caller resumes that
  run or asks to overwrite it; overwriting removes only that run's ``checkpoint-NNNNNN``
  folders and ``latest.json``, never anything else in the folder;
* half-written temporary folders left by a killed run are removed when a run starts.
"""

import atexit
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from grpo_edu.common import _checks
from grpo_edu.training.checkpoint import LATEST, TEMPORARY, CheckpointError, checkpoint_folders, run_id_of

LOCK = ".grpo_edu.lock"
_HELD = {}   # absolute lock path -> token, for the locks this process holds


def check_output_dir(output_dir):
    """Refuse an output_dir that is a file or cannot be written, before any work is done."""
    path = Path(output_dir)
    if path.exists() and not path.is_dir():
        _checks.fail("output_dir", f"{path} is a file, not a folder",
                     "pass a folder path (it is created if missing), or move the file away", error=CheckpointError)
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        _checks.fail("output_dir", f"cannot create or write {path} ({existing} is not a writable folder)",
                     "pass a folder you can write to", error=CheckpointError)


def _pid_alive(pid):
    if os.name == "nt":   # os.kill(pid, 0) would terminate the process on Windows
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x100000, False, pid)   # SYNCHRONIZE
        if not handle:
            return False
        alive = ctypes.windll.kernel32.WaitForSingleObject(handle, 0) == 0x102   # WAIT_TIMEOUT
        ctypes.windll.kernel32.CloseHandle(handle)
        return alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def acquire_lock(output_dir):
    """Create ``output_dir/.grpo_edu.lock`` (O_CREAT | O_EXCL) holding this pid and host.

    A lock whose process is gone (same host, pid not running) is taken over. Returns
    ``(token, info)``; ``info["took_over"]`` describes a stale lock that was replaced.
    Pass the token to :func:`release_lock`.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    me = {"pid": os.getpid(), "host": socket.gethostname(), "token": uuid.uuid4().hex,
          "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    info = {"took_over": None}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _lock_holder(path)
            if holder is None:
                continue                    # released meanwhile: try again
            if not _is_stale(holder, path):
                who = ("another GRPOTrainer in this process" if holder.get("pid") == os.getpid()
                       else f"process {holder.get('pid')} on {holder.get('host')} (since {holder.get('since')})")
                _checks.fail("output_dir", f"{folder} is being written by {who}: its lock file {path} is held",
                             "wait for that run to finish, or pass another output_dir; if no run is using the "
                             f"folder (e.g. a machine that crashed), delete {path}", error=CheckpointError)
            info["took_over"] = (f"took over the stale lock {path} of process {holder.get('pid')} on "
                                 f"{holder.get('host')}, which is no longer running")
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        _HELD[_key(path)] = me["token"]
        return me["token"], info
    _checks.fail("output_dir", f"could not take the lock {path}", f"try again, or delete {path} if no run uses it",
                 error=CheckpointError)


def _key(path):
    return os.path.abspath(path)


@atexit.register
def _release_all():
    """Remove this process's locks when it exits normally (a killed one leaves a stale lock)."""
    for path, token in list(_HELD.items()):
        release_lock(Path(path).parent, token)


def _lock_holder(path):
    """The lock's contents; {} for an unreadable one; None if it is gone."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def _is_stale(holder, path):
    if not holder:   # empty or garbage: stale unless it is being written right now
        try:
            return time.time() - Path(path).stat().st_mtime > 5
        except FileNotFoundError:
            return True
    if holder.get("host") != socket.gethostname():
        return False                         # cannot check a pid on another machine
    if holder.get("pid") == os.getpid():
        return _HELD.get(_key(path)) != holder.get("token")   # ours but no longer held: left by an interrupt
    return not _pid_alive(holder["pid"])


def release_lock(output_dir, token):
    """Remove the lock if it is still the one ``token`` took."""
    path = Path(output_dir) / LOCK
    if _HELD.get(_key(path)) == token:
        del _HELD[_key(path)]
    holder = _lock_holder(path)
    if holder and holder.get("token") == token:
        path.unlink(missing_ok=True)


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
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            info["cleaned"].append(path)
    if resuming:
        return info
    if not overwrite:
        refuse_another_run(folder, run_id)
    for path in other_runs_files(folder, run_id):
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        info["removed"].append(path)
    return info
