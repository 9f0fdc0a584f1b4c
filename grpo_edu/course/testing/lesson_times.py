"""How long each lesson takes, here and on the slowest laptop the course is built for; and a test
run that uses every core.

The course promises that each lesson runs in at most :data:`LESSON_BUDGET_S` seconds on the
slowest CPU seen, one whose bench step (``grpo-edu bench --step-ms``) is :data:`REFERENCE_STEP_MS` ms. A
machine whose bench step is ``s`` ms is taken to be ``REFERENCE_STEP_MS / s`` times faster, so
a lesson that takes ``t`` seconds here takes about ``t · REFERENCE_STEP_MS / s`` there. The bench step
times the bench's floor, the bare PyTorch passes of a step, not the course's trainer
(``grpo_edu.beyond.bench.step_ms``): the ruler measures the machine, so a faster library shows in
every scaled time.

This module is a pytest plugin, loaded by the project's pytest configuration
(``-p grpo_edu.course.testing.lesson_times`` in pyproject.toml). It does three things:

* **every core**: with pytest-xdist installed and no ``-n`` given, it runs one worker per CPU,
  each with one torch/OpenMP thread (a model this small is bound by dispatch, not arithmetic:
  a second thread buys little, and two workers with two threads each on two cores spin against
  each other). A notebook's cells stay together in one worker (one kernel), and so do a test
  file's tests; the files in :data:`SOLO` (the browser test, the lesson that trains on two
  processes) share one worker, so they never race each other. ``-n 0`` or ``-p no:xdist`` runs
  everything in one process, as before.
* **lesson times**: after the run it prints each notebook's time (the sum of its cells'), and one line on
  where the run's time went (:func:`time_spent`: notebooks against test files, the largest test files, and
  the clock).
* **budgets**: with ``GRPO_EDU_BENCH_MS`` set to this machine's bench step (``.ci/run`` measures
  it first), each time is also scaled to the reference machine; a lesson over its budget there
  gets a line, and one over twice its budget fails the run (a slow lesson is caught when it
  lands, not in class; a noisy machine alone cannot turn the run red), unless
  ``GRPO_EDU_BUDGET=report``.

``grpo-edu lesson-times`` measures the bench step, runs the lessons and prints the table.
"""

import os
import sys
import time
from pathlib import Path

import pytest

from grpo_edu.common.display import Table

LESSON_BUDGET_S = 180.0
"""Each lesson, top to bottom, on the reference machine (3 minutes)."""

REFERENCE_STEP_MS = 80.0
"""``grpo-edu bench --step-ms`` on the slowest 2-core CPU the course was tried on."""

FAIL_FACTOR = 2.0
"""A lesson fails the run only past this many times its budget (scaled): noise cannot do that."""

BENCH_ENV = "GRPO_EDU_BENCH_MS"
BUDGET_ENV = "GRPO_EDU_BUDGET"
"""``enforce`` (the default): a lesson past FAIL_FACTOR × its budget fails the run; ``report``: it only gets its line."""
SCALED = f"at {REFERENCE_STEP_MS:g} ms, s"
GROUPED = "grpo_edu_grouped"
_GROUPED = pytest.StashKey[bool]()

SOLO = ("test_browser.py", "10_graduation.ipynb")
"""Files that need the machine to themselves (a browser; training on several processes): in a parallel
run they share one worker, one after the other, and never race each other."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def available_cpus():
    """CPUs this process may run on (a container's limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                            # macOS, Windows
        return os.cpu_count() or 1


def scaled(seconds, step_ms, reference_ms=REFERENCE_STEP_MS):
    """``seconds`` measured on a machine whose bench step is ``step_ms``, on the reference machine."""
    return seconds * reference_ms / step_ms


def lesson_rows(times, step_ms=None, budget=LESSON_BUDGET_S):
    """One row per lesson: its time here and, given the bench step, on the reference machine and
    against its budget. ``times``: {lesson name: seconds}."""
    rows = []
    for name, seconds in sorted(times.items()):
        row = {"lesson": name, "here, s": round(seconds, 1)}
        if step_ms:
            there = scaled(seconds, step_ms)
            row[SCALED] = round(there, 1)
            row["budget"] = ("ok" if there <= budget else "OVER" if there <= FAIL_FACTOR * budget
                             else f"FAIL (> {FAIL_FACTOR:g}×)")
        rows.append(row)
    return rows


def time_spent(files, wall_s, step_ms=None, largest=3):
    """One line on where a run's time went. ``files``: {file: seconds its tests took (setup, call and
    teardown), summed over workers}; ``wall_s``: the run's time on the clock. With the bench step, the
    clock is also scaled to the reference machine (the README's test command has a budget there)."""
    notebooks = sum(s for f, s in files.items() if f.endswith(".ipynb"))
    tests = sorted(((s, Path(f).name) for f, s in files.items() if not f.endswith(".ipynb")), reverse=True)
    in_tests = sum(s for s, _ in tests)
    line = (f"where the time went: {notebooks + in_tests:.0f} s of work, {notebooks:.0f} s in notebooks and "
            f"{in_tests:.0f} s in test files")
    if tests:
        line += " (the largest: " + ", ".join(f"{name} {s:.0f} s" for s, name in tests[:largest]) + ")"
    line += f"; {wall_s:.0f} s on the clock"
    if step_ms:
        line += f", {scaled(wall_s, step_ms) / 60:.1f} min at {REFERENCE_STEP_MS:g} ms"
    return line


def bench_step_from_env():
    """The bench step in ms from ``GRPO_EDU_BENCH_MS``, or None; a clear error for a bad value."""
    value = os.environ.get(BENCH_ENV)
    if not value:
        return None
    try:
        step = float(value)
    except ValueError:
        step = -1.0
    if not 0 < step < 1e5:
        raise ValueError(f"{BENCH_ENV}: is {value!r}, not a step time in ms. Fix: set it to the grpo_edu "
                         "s/step of `grpo-edu bench` in milliseconds (e.g. 80), or unset it.")
    return step


def budget_mode_from_env():
    """``enforce`` or ``report`` from ``GRPO_EDU_BUDGET`` (default ``enforce``); a clear error otherwise."""
    mode = os.environ.get(BUDGET_ENV) or "enforce"
    if mode not in ("enforce", "report"):
        raise ValueError(f"{BUDGET_ENV}: is {mode!r}. Fix: set it to 'enforce' (a lesson past {FAIL_FACTOR:g}× its "
                         "budget fails the run) or 'report' (it only gets its line), or unset it.")
    return mode


# --- the pytest plugin ----------------------------------------------------------------------
def _distributing(config):
    return bool(getattr(config.option, "numprocesses", 0)) or hasattr(config, "workerinput")


def _given(args, *flags):
    """Whether the command line (addopts included) has one of ``flags``, alone, with "=" or glued on."""
    return any(str(a) == f or str(a).startswith(f + "=") or (len(f) == 2 and str(a).startswith(f) and len(str(a)) > 2)
               for a in args for f in flags)


def pytest_load_initial_conftests(early_config, parser, args):
    """With pytest-xdist: as if the command said ``-n <CPUs> --dist loadscope`` (before any option is read,
    so xdist takes them as the user's own), with the pieces of work of :func:`pytest_xdist_make_scheduler`.
    A user's own -n keeps its number and gets the same pieces (xdist's default for a bare -n would split a
    notebook's cells between workers); a user's own --dist is left alone."""
    ns = early_config.known_args_namespace
    if (not early_config.pluginmanager.hasplugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER")
            or _given(args, "--dist", "-d", "--tx") or ns.collectonly or ns.usepdb):
        return
    if not _given(args, "-n", "--numprocesses"):
        cpus = available_cpus()
        if cpus < 2:
            return
        args[:0] = ["-n", str(cpus)]
    args[:0] = ["--dist", "loadscope", "--no-loadscope-reorder"]
    early_config.stash[_GROUPED] = True


def pytest_configure(config):
    if _distributing(config):
        for name in THREAD_VARIABLES:               # workers and their notebook kernels inherit these
            os.environ[name] = "1"
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)
    if not hasattr(config, "workerinput"):            # the process that reports: the only one, or xdist's controller
        try:
            clock = LessonClock(bench_step_from_env(), budget_mode_from_env())
        except ValueError as err:                      # before any test runs, as a usage error (no traceback)
            raise pytest.UsageError(str(err)) from None
        config.pluginmanager.register(clock, "grpo_edu_lesson_clock")


def _scope(nodeid):
    """The piece of work a test belongs to: a notebook (one kernel, its cells in order), a test file
    (its module fixtures built once), or the solo group."""
    path = nodeid.split("::", 1)[0]
    return "solo" if Path(path).name in SOLO else path


@pytest.hookimpl(optionalhook=True)                 # xdist's hooks: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    if not config.stash.get(_GROUPED, False):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class CourseScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _scope(nodeid)

    return CourseScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Tell each worker that this run is grouped, so that it orders its collection (below)."""
    node.workerinput[GROUPED] = node.config.stash.get(_GROUPED, False)


def _trains(item):
    """An nbval cell tagged "parameters": the notebook trains (grpo_edu.course.aids.claims reads the same tag)."""
    cell = getattr(item, "cell", None) or {}
    return "parameters" in cell.get("metadata", {}).get("tags", ())


def pytest_collection_modifyitems(session, config, items):
    """In a grouped run, long pieces first, so that the short ones fill the last minutes of every worker
    (longest-first scheduling): the notebooks that train (by their number of cells), then the solo group
    (a browser, then the lesson that trains on two processes), then the test files, largest first.

    The lessons go first so that each runs beside another lesson, one process on each core: beside the
    browser and the two-process lesson, which take more than their core, lesson 05 took 53 s where it took
    35 s beside a lesson (one run each). The solo group comes before
    the test files: had it come last, one worker would run it alone while the others sat idle. Every worker
    collects, and orders, the same way; the scheduler hands out the pieces in this order."""
    if not getattr(config, "workerinput", {}).get(GROUPED):
        return
    groups = {}
    for item in items:
        groups.setdefault(_scope(item.nodeid), []).append(item)

    def weight(group):
        members = groups[group]
        return (1 if group == "solo" else 0 if any(_trains(i) for i in members) else 2, -len(members))

    items[:] = [item for group in sorted(groups, key=weight) for item in groups[group]]


class LessonClock:
    """Sums each notebook's cell times from the test reports; reports them, and the budgets."""

    def __init__(self, step_ms, mode="enforce"):
        self.step_ms = step_ms
        self.mode = mode
        self.times = {}                               # notebook: its cells' seconds
        self.files = {}                               # every file, notebooks and test files: its tests' seconds
        self.started = time.perf_counter()

    def pytest_runtest_logreport(self, report):
        path = report.nodeid.split("::", 1)[0]
        self.files[path] = self.files.get(path, 0.0) + report.duration
        if path.endswith(".ipynb"):
            self.times[path] = self.times.get(path, 0.0) + report.duration

    def lessons(self):
        return {Path(path).stem: seconds for path, seconds in self.times.items()}

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if not self.times:
            return
        write = terminalreporter.write_line
        how = (f"{config.option.numprocesses} workers, one thread each" if _distributing(config)
               else "one process")
        terminalreporter.section("lesson times")
        if self.step_ms:
            write(f"each lesson's cells, summed ({how}); bench step here {self.step_ms:g} ms, so ×"
                  f"{REFERENCE_STEP_MS / self.step_ms:.2f} on the {REFERENCE_STEP_MS:g} ms machine "
                  f"the budget of {LESSON_BUDGET_S:g} s per lesson is set for")
        else:
            write(f"each lesson's cells, summed ({how}); set {BENCH_ENV} to this machine's `grpo-edu bench` "
                  "step in ms to see them scaled to the budget's machine")
        rows = lesson_rows(self.lessons(), self.step_ms)
        for line in repr(Table(rows)).splitlines():
            write("  " + line)
        write(time_spent(self.files or self.times, time.perf_counter() - self.started, self.step_ms))
        for row in rows:
            if row.get("budget", "ok") != "ok":
                write(f"lesson {row['lesson']} is over its share: {row[SCALED]:g} s at {REFERENCE_STEP_MS:g} ms "
                      f"against {LESSON_BUDGET_S:g} s"
                      + (f" ({BUDGET_ENV}=report: reported, never failed)" if self.mode == "report"
                         and row["budget"] == "OVER"
                         else f" (the run fails past {FAIL_FACTOR:g}×)" if row["budget"] == "OVER"
                         else f"; more than {FAIL_FACTOR:g}×, so the run fails" if self.mode == "enforce"
                         else f"; more than {FAIL_FACTOR:g}× ({BUDGET_ENV}=report: the run does not fail)"))

    def pytest_sessionfinish(self, session, exitstatus):
        if self.mode == "enforce" and over_budget(self.lessons(), self.step_ms, FAIL_FACTOR) and exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def over_budget(times, step_ms, factor=1.0):
    """Lessons over ``factor`` × their budget on the reference machine (none without a bench step)."""
    return [name for name, seconds in sorted(times.items())
            if step_ms and scaled(seconds, step_ms) > factor * LESSON_BUDGET_S]


# --- grpo-edu lesson-times ------------------------------------------------------------------
def main(argv=None):
    """``grpo-edu lesson-times``: this machine's bench step, then every lesson run and timed."""
    import argparse
    import subprocess

    from grpo_edu.common import command_line
    from grpo_edu.course.testing.browser import LESSONS

    parser = argparse.ArgumentParser(
        prog="grpo-edu lesson-times",
        description="Run the lessons and print how long each takes here and on the slowest laptop the course "
                    f"is built for (bench step {REFERENCE_STEP_MS:g} ms), against the {LESSON_BUDGET_S:g} s budget.")
    parser.add_argument("lessons", nargs="*", default=[str(LESSONS)],
                        help="notebooks or folders of them (default: the course's lessons/)")
    parser.add_argument("--step-ms", type=float, metavar="MS",
                        help="this machine's bench step, if already measured (default: measure it, about 40 s)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help=f"lessons run side by side (default: one per CPU, here {available_cpus()})")
    args = command_line.parse_args(parser, argv)
    missing = [p for p in args.lessons if not Path(p).exists()]
    if missing:
        parser.error(f"lessons: {', '.join(missing)} not found. Fix: name notebooks or a folder of them")
    notebooks = []                                 # only notebooks run: never a .py file or a conftest.py beside them
    for given in map(Path, args.lessons):
        found = sorted(given.glob("*.ipynb")) if given.is_dir() else [given] if given.suffix == ".ipynb" else None
        if not found:
            parser.error(f"lessons: {given} " + ("holds no .ipynb notebook" if given.is_dir() else "is not a notebook")
                         + ". Fix: name .ipynb notebooks or a folder of them")
        notebooks += [str(p) for p in found]
    if args.step_ms is not None and not 0 < args.step_ms < 1e5:
        parser.error(f"--step-ms: is {args.step_ms:g}. Fix: give grpo-edu bench's step in ms, e.g. 80")
    if args.workers is not None and args.workers < 0:
        parser.error(f"--workers: is {args.workers}. Fix: give 0 (one process) or more")
    cpus = available_cpus()
    if args.workers is not None and args.workers > cpus:      # each worker is a process: 100000 would never start
        print(f"grpo-edu lesson-times: --workers: {args.workers} is more than the {cpus} CPU(s) this process may use, "
              f"and lessons sharing a core would time each other; runs {cpus} side by side", file=sys.stderr)
        args.workers = cpus
    step = args.step_ms
    if step is None:
        from grpo_edu.beyond.bench import step_ms

        print("measuring this machine's bench step (grpo-edu bench --step-ms: 5 rounds of 20 steps on one thread)…", flush=True)
        step = step_ms()
        print(f"bench step: {step:.1f} ms", flush=True)
    command = [sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider", "--noconftest",
               "-p", "grpo_edu.course.testing.lesson_times", *notebooks]
    if args.workers is not None:
        command += ["-n", str(args.workers)]
    env = dict(os.environ, **{BENCH_ENV: f"{step:.1f}", BUDGET_ENV: "report"})   # a measurement, not a gate
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
