"""The site's build folder: checked before the build, claimed by one build at a time, never left with a build running.

``grpo-edu site`` (``site.build``) writes a few dozen pages over a minute, through a sphinx-build child. What can go
wrong around that, and what this module does about it:

* ``--out`` cannot be written (a file in its path, a link that loops, /proc, a read-only folder): refused before
  anything is staged, by :func:`check_out`, which *tries* the folder (``_checks.unwritable_folder``): root passes
  every permission check;
* two builds into one folder: each claims the folder with a locked file, :data:`BUILDING` (:func:`claim`); the
  second finds it locked and is refused;
* a build killed (kill -9, a closed laptop): its sphinx-build runs in a process group of its own that dies with
  it (:func:`run_tied`), so nothing goes on writing; the folder keeps :data:`BUILDING`, unlocked, and the next
  build names it as a half-built site; its staging folder is removed by the next build (:func:`sweep_staging`).

The locks are ``flock`` locks (POSIX): the kernel drops them when their process dies, however it dies.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from grpo_edu.common import _checks

try:
    import fcntl                                   # POSIX: the lock on the build's folder and on its staging
except ImportError:                                # Windows: the folder is claimed, but no lock tells a live build
    fcntl = None

BUILDING = ".grpo-edu-site-building"
"""The file a build keeps in its ``--out`` folder while it writes there, locked (``flock``) by the build and
holding its pid: a second build finds it locked and is refused; a build that was killed or failed leaves it
unlocked, and the folder is then named as a half-built site. Removed when the build succeeds."""

STAGING_PREFIX = "grpo-edu-site-"
"""The name of each build's staging folder in the temporary folder (sources, doctrees), removed when it ends;
one a killed build left (its lock free) is removed by the next build."""


def check_out(out):
    """Refuse an ``--out`` the build could not write, with the reason and the fix, before any work: a file, a link
    that loops or leads nowhere, a file in its path, a folder that cannot be written (tried, not asked: root passes
    every permission check, and no folder can be made in /proc), a folder that holds files, or a half-built site."""
    out = Path(out)
    fix = "name a new folder, e.g. site/"
    if os.path.islink(out) and not os.path.exists(out):
        try:
            os.stat(out)
        except OSError as err:
            raise ValueError(f"--out: {out} is a link that loops or leads nowhere ({err.strerror}). Fix: {fix}") from None
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} is a file. Fix: {fix}")
    blocked = _checks.unwritable_folder(out)
    if blocked is not None:
        made = "" if blocked == out else f", so {out} cannot be made"
        if blocked.exists() and not blocked.is_dir():
            raise ValueError(f"--out: {blocked} is a file{made}. Fix: {fix}")
        raise ValueError(f"--out: {blocked} cannot be written{made}. Fix: name a folder you can write to, "
                         "e.g. site/ in your home folder")
    if out.exists() and any(out.iterdir()):
        if (out / BUILDING).exists():
            raise ValueError(_claimed(out))
        raise ValueError(f"--out: {out} is not an empty folder. Fix: {fix}, or empty this one")


def _claimed(out):
    """Why ``out``, which holds :data:`BUILDING`, cannot be built into: a build is writing there now, or one left it
    half-built."""
    marker = Path(out) / BUILDING
    try:
        pid = marker.read_text(encoding="utf-8").strip() or "?"
    except OSError:
        pid = "?"
    if _locked(marker):
        return (f"--out: another grpo-edu site (pid {pid}) is building into {out} right now. Fix: wait for it to "
                "finish, or name another folder")
    return (f"--out: {out} holds a half-built site (a build, pid {pid}, was stopped or failed before it finished). "
            f"Fix: remove it (rm -r {out}) and build again, or name a new folder")


def _locked(path):
    """True when another process holds ``path``'s lock (False without one, or without fcntl)."""
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _locked_file_in(folder, prefix):
    """A new file in ``folder``, locked by this process (held until its fd is closed): (fd, path)."""
    fd, path = tempfile.mkstemp(prefix=prefix, dir=folder)
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)             # a file no one else has opened yet
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd, Path(path)


@contextlib.contextmanager
def claim(out):
    """Hold ``out`` for this build alone: :data:`BUILDING` is put there whole and locked (made under another name,
    locked, then linked to its name, which fails if the name is taken), and the folder is checked to hold
    nothing else. On success it is removed; a build that fails leaves it (unlocked) in a folder it wrote into."""
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    fd, claim = _locked_file_in(out, ".grpo-edu-site-claim-")
    marker = out / BUILDING
    try:
        try:
            os.link(claim, marker)
        except FileExistsError:
            raise ValueError(_claimed(out)) from None
        finally:
            claim.unlink()
        others = [p.name for p in out.iterdir() if p.name != BUILDING and not p.name.startswith(".grpo-edu-site-claim-")]
        if others:                                     # another build wrote and finished between the check and here
            marker.unlink()
            raise ValueError(f"--out: {out} is not an empty folder. Fix: name a new folder, e.g. site/, or empty "
                             "this one")
        try:
            yield
        except BaseException:
            if [p.name for p in out.iterdir()] == [BUILDING]:   # nothing written: as it was
                marker.unlink()
                if made:
                    out.rmdir()
            raise
        marker.unlink()
    finally:
        os.close(fd)


def sweep_staging():
    """Remove the staging folders that killed builds left in the temporary folder: each one this code made (it
    holds an ``owner`` file) whose lock no build holds. Run by every build, refused or not, before anything else."""
    if fcntl is None:
        return
    for folder in Path(tempfile.gettempdir()).glob(STAGING_PREFIX + "*"):
        owner = folder / "owner"
        if not folder.is_symlink() and folder.is_dir() and owner.is_file() and not owner.is_symlink() \
                and not _locked(owner):
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def staging():
    """A staging folder of this build's own in the temporary folder, locked while the build runs and removed after
    it; first, those that killed builds left are removed (:func:`sweep_staging`)."""
    sweep_staging()
    work = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX))
    fd, path = _locked_file_in(work, ".owner-")
    os.rename(path, work / "owner")                    # locked before it has the name the sweep looks for
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.close(fd)


def run_tied(module, args):
    """``python -m module args`` as ``subprocess.run`` does (its output captured), in a process group of its own
    that dies with this process: killed if this process is killed, even by kill -9 (the child's watch), or if
    it is interrupted (Ctrl-C). A killed build then leaves no sphinx-build writing into its folder."""
    command = [sys.executable, "-c", "from grpo_edu.course.classroom.site_folder import _tied_child; _tied_child()",
               module, *args]
    env = dict(os.environ, GRPO_EDU_TIED_TO=str(os.getpid()))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=hasattr(os, "killpg"))
    try:
        stdout, stderr = proc.communicate()
    except BaseException:
        _kill_group(proc.pid)
        proc.wait()
        raise
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def _kill_group(pid):
    with contextlib.suppress(OSError):
        if hasattr(os, "killpg"):
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _tied_child():
    """In the child of :func:`run_tied`: die, with every process of this group, when the parent dies; then run
    the module. Linux tells at once (``PR_SET_DEATHSIG``: SIGTERM, whose handler kills the group); elsewhere a
    thread sees the parent change within 0.2 s."""
    import runpy

    parent = int(os.environ.pop("GRPO_EDU_TIED_TO"))

    def end_group(*_):
        _kill_group(os.getpgrp() if hasattr(os, "getpgrp") else os.getpid())
        os._exit(1)

    if sys.platform.startswith("linux"):
        import ctypes

        signal.signal(signal.SIGTERM, end_group)
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)        # PR_SET_DEATHSIG
    if os.getppid() != parent:                         # it died before the watch began
        end_group()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        end_group()

    threading.Thread(target=watch, daemon=True).start()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
