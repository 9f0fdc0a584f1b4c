"""A notebook's kernel that dies while it starts is started again (a race between test workers, not a
lesson's fault), and what it printed is shown.

nbval starts one Jupyter kernel per notebook. jupyter_client picks the kernel's five TCP ports a moment
before the kernel binds them, by asking the OS for free ones; it remembers them so that *its own* process
never hands one out twice, but another process can take such a port in between (jupyter_client's issue
487). Under pytest-xdist two workers start kernels, and open connections, at the same moment, so now and
then a new kernel finds a port taken and exits at once: "Kernel died before replying to kernel_info", and
every cell of that notebook errors. CI saw it once, on lesson 10 under the portable kernels. nbval sends
the kernel's stderr to /dev/null, so the reason is lost, and it does not try again.

This pytest plugin (``-p grpo_edu.course.testing.kernel_start`` in pyproject.toml) wraps nbval's
``start_new_kernel``: the kernel's stderr goes to a temporary file, and a kernel that dies before it is
ready is reported (a :class:`KernelRestartWarning` with the end of what it printed) and replaced by a
fresh one, with fresh ports, up to :data:`ATTEMPTS` times. It can hide no lesson's error: nothing of the
notebook has run when its kernel starts.
"""

import functools
import tempfile
import warnings

ATTEMPTS = 3
"""Kernels started for one notebook before its cells error."""

SHOWN_CHARS = 1500
"""How much of a dead kernel's stderr (its end) a warning or the final error shows."""


class KernelRestartWarning(UserWarning):
    """A notebook's kernel died while starting and was started again."""


def _tail(log):
    log.seek(0)
    text = log.read().strip()
    return text[-SHOWN_CHARS:] if text else "(nothing)"


def with_retries(start, attempts=ATTEMPTS):
    """``start`` (nbval's ``start_new_kernel(startup_timeout, kernel_name, **popen_kwargs)``), tried up to
    ``attempts`` times while it raises RuntimeError, each try with its stderr in a file of its own."""
    if attempts < 1:
        raise ValueError(f"attempts={attempts!r}: give at least 1 (1 = no retry)")

    @functools.wraps(start)
    def start_new_kernel(*args, **kwargs):
        given = kwargs.pop("stderr", None)
        if given is not None and hasattr(given, "close"):
            given.close()                              # nbval's /dev/null handle: never used now
        for attempt in range(1, attempts + 1):
            log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
            try:
                kernel = start(*args, stderr=log, **kwargs)
            except RuntimeError as error:
                said = _tail(log)
                log.close()
                if attempt == attempts:
                    raise RuntimeError(f"{error} ({attempts} kernels started, each died); "
                                       f"the last one printed:\n{said}") from error
                warnings.warn(f"a notebook's kernel died while starting ({error}); starting another "
                              f"({attempt + 1} of {attempts}). It printed:\n{said}",
                              KernelRestartWarning, stacklevel=2)
            else:
                log.close()          # the kernel keeps its own copy of the file; its cells' output comes by messages
                return kernel

    start_new_kernel.grpo_edu_retries = attempts
    return start_new_kernel


def install():
    """Wrap nbval's kernel start (once); False where nbval is not installed."""
    try:
        import nbval.kernel
    except ImportError:
        return False
    if not hasattr(nbval.kernel.start_new_kernel, "grpo_edu_retries"):
        nbval.kernel.start_new_kernel = with_retries(nbval.kernel.start_new_kernel)
    return True


def pytest_configure(config):
    if config.getoption("nbval", False) or config.getoption("nbval_lax", False):
        install()
