"""grpo_edu.course.testing.kernel_start: a notebook kernel that dies while starting is started again.

The real race is reproduced: jupyter_client is handed, for the first kernel, a shell port that another
socket already holds, so that kernel exits at once ("Address already in use"), as it did in CI."""

import socket

import pytest

pytest.importorskip("nbval")
import nbval.kernel  # noqa: E402
from jupyter_client.connect import LocalPortCache  # noqa: E402

from grpo_edu.course.testing import kernel_start  # noqa: E402


@pytest.fixture
def taken_port():
    """A port held by a listening socket, as another worker's connection would hold it."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    yield holder.getsockname()[1]
    holder.close()


@pytest.fixture
def first_kernel_gets(monkeypatch):
    """Make the next kernel's first port ``port`` (every later one is found as usual)."""
    def give(port):
        real = LocalPortCache.find_available_port
        handed = []

        def find(self, ip):
            if not handed:
                handed.append(port)
                return port
            return real(self, ip)

        monkeypatch.setattr(LocalPortCache, "find_available_port", find)
    return give


def _unwrapped():
    start = nbval.kernel.start_new_kernel
    return getattr(start, "__wrapped__", start)


def _shut(kernel):
    km, kc = kernel
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def test_a_kernel_whose_port_is_taken_dies_without_the_retry(taken_port, first_kernel_gets):
    """The failure the plugin exists for, shown on nbval's own start: it raises what CI printed."""
    first_kernel_gets(taken_port)
    with pytest.raises(RuntimeError, match="Kernel died"):
        _unwrapped()(startup_timeout=30, kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME)


def test_the_retry_starts_a_second_kernel_and_shows_why_the_first_died(taken_port, first_kernel_gets):
    first_kernel_gets(taken_port)
    start = kernel_start.with_retries(_unwrapped(), attempts=2)
    with pytest.warns(kernel_start.KernelRestartWarning, match="Address already in use"):
        kernel = start(startup_timeout=30, kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME,
                       stderr=open("/dev/null", "w"))
    try:
        km, kc = kernel
        assert km.is_alive()
        reply = kc.execute_interactive("x = 6 * 7", timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        _shut(kernel)


def test_a_kernel_that_keeps_dying_ends_in_an_error_with_what_it_printed():
    calls = []

    def dies(**kwargs):
        calls.append(kwargs)
        kwargs["stderr"].write("zmq.error.ZMQError: Address already in use\n")
        kwargs["stderr"].flush()
        raise RuntimeError("Kernel died before replying to kernel_info")

    start = kernel_start.with_retries(dies, attempts=3)
    with pytest.warns(kernel_start.KernelRestartWarning) as warned, \
            pytest.raises(RuntimeError, match=r"(?s)3 kernels started.*Address already in use") as raised:
        start(kernel_name="python", stderr=open("/dev/null", "w"), cwd=".")
    assert len(calls) == 3 and len(warned) == 2
    assert all(c["cwd"] == "." and c["kernel_name"] == "python" for c in calls)     # passed on unchanged
    assert "Kernel died" in str(raised.value.__cause__)


def test_an_error_that_is_not_a_dead_kernel_is_not_retried():
    calls = []

    def broken(**kwargs):
        calls.append(1)
        raise KeyError("no such kernel")

    with pytest.raises(KeyError):
        kernel_start.with_retries(broken)(kernel_name="nope", stderr=None)
    assert calls == [1]


def test_bad_attempts_are_refused():
    with pytest.raises(ValueError, match="attempts=0"):
        kernel_start.with_retries(lambda **k: None, attempts=0)


def test_the_plugin_is_what_the_test_command_loads():
    """pyproject's addopts load it, and under --nbval nbval's start is the wrapped one."""
    assert kernel_start.install()
    assert nbval.kernel.start_new_kernel.grpo_edu_retries == kernel_start.ATTEMPTS
    assert kernel_start.install()                                   # twice: wrapped once only
    assert not hasattr(nbval.kernel.start_new_kernel.__wrapped__, "grpo_edu_retries")
