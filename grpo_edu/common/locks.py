"""One writer at a time: a lock file, created exclusively, that names the process holding it.

A run's output folder (``training.run_folder``) and a replay buffer file (``training.replay``)
each have one writer. The writer creates a lock file with ``O_CREAT | O_EXCL`` (so two
processes can never both create it) holding its pid, host, a token and the time. A second
writer is refused with a message naming the holder; a lock whose process is gone (same
host, pid not running) is taken over, and the caller is told. A process's locks are removed
when it exits normally; a killed process leaves a stale lock, which the next writer takes over.
"""

import atexit
import json
import os
import socket
import time
import uuid
from pathlib import Path

from grpo_edu.common import _checks

_HELD = {}   # absolute lock path -> token, for the locks this process holds


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


def _key(path):
    return os.path.abspath(path)


def holder(path):
    """The lock's contents; {} for an unreadable one; None if there is no lock."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def _is_stale(data, path):
    if not data:   # empty or garbage: stale unless it is being written right now
        try:
            return time.time() - Path(path).stat().st_mtime > 5
        except FileNotFoundError:
            return True
    if data.get("host") != socket.gethostname():
        return False                         # cannot check a pid on another machine
    if data.get("pid") == os.getpid():
        return _HELD.get(_key(path)) != data.get("token")   # ours but no longer held: left by an interrupt
    return not _pid_alive(data["pid"])


def describe_holder(data, in_process="another writer in this process"):
    """Who holds a lock, in words, from its contents; ``in_process`` names a holder in this very process."""
    if data.get("pid") == os.getpid() and data.get("host") == socket.gethostname():
        return in_process
    return f"process {data.get('pid')} on {data.get('host')} (since {data.get('since')})"


def acquire(path, *, arg, what, fix, error=ValueError, in_process="another writer in this process"):
    """Create the lock file ``path`` for this process, or refuse with the holder named.

    ``arg`` and ``what`` word the refusal: "{arg}: {what} is being written by process N on
    HOST (since …): its lock file PATH is held. Fix: {fix}; if no process is using it …".
    ``in_process`` names the holder when it is this very process (which object, and how to free it).
    Returns ``(token, info)``; ``info["took_over"]`` describes a stale lock that was replaced.
    """
    path = Path(path)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "token": uuid.uuid4().hex,
          "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    info = {"took_over": None}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            data = holder(path)
            if data is None:
                continue                    # released meanwhile: try again
            if not _is_stale(data, path):
                _checks.fail(arg, f"{what} is being written by {describe_holder(data, in_process)}: its lock file "
                             f"{path} is held",
                             f"{fix}; if no process is using it (e.g. a machine that crashed), delete {path}",
                             error=error)
            info["took_over"] = (f"took over the stale lock {path} of process {data.get('pid')} on "
                                 f"{data.get('host')}, which is no longer running")
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        _HELD[_key(path)] = me["token"]
        return me["token"], info
    _checks.fail(arg, f"could not take the lock {path}", f"try again, or delete {path} if no process uses it",
                 error=error)


def refuse_if_held(path, *, arg, what, fix, error=ValueError, in_process="another writer in this process"):
    """Refuse now, in :func:`acquire`'s words, when a live process holds the lock ``path``; a missing or stale
    lock passes (the writer that follows takes it over). For the checks made before any work: the lock itself
    is taken later, once the work starts, and checked again then."""
    path = Path(path)
    data = holder(path)
    if data is None or _is_stale(data, path):
        return
    _checks.fail(arg, f"{what} is being written by {describe_holder(data, in_process)}: its lock file {path} is held",
                 f"{fix}; if no process is using it (e.g. a machine that crashed), delete {path}", error=error)


def release(path, token):
    """Remove the lock file ``path`` if it is still the one ``token`` took."""
    path = Path(path)
    if _HELD.get(_key(path)) == token:
        del _HELD[_key(path)]
    data = holder(path)
    if data and data.get("token") == token:
        path.unlink(missing_ok=True)


@atexit.register
def _release_all():
    """Remove this process's locks when it exits normally (a killed one leaves a stale lock)."""
    for path, token in list(_HELD.items()):
        release(path, token)
