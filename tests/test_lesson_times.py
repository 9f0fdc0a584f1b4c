"""grpo_edu.course.testing.lesson_times: the arithmetic of the budgets, and the pytest plugin on a real run of
two small notebooks and a test file (as the README's test command uses it)."""

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from grpo_edu.course.testing.lesson_times import (BENCH_ENV, BUDGET_ENV, FAIL_FACTOR, LESSON_BUDGET_S, REFERENCE_STEP_MS,
                                          SCALED, SOLO, THREAD_VARIABLES, LessonClock, bench_step_from_env,
                                          lesson_rows, over_budget, scaled, time_spent)


def test_a_machine_twice_as_fast_doubles_the_time_on_the_reference():
    assert scaled(60.0, 40.0) == pytest.approx(120.0)          # 60 s × 80 / 40
    assert scaled(60.0, REFERENCE_STEP_MS) == pytest.approx(60.0)


def test_rows_say_ok_over_and_fail_at_the_right_budgets():
    step = 40.0                                                 # ×2 to the reference machine
    times = {"a": 89.0, "b": 91.0, "c": 180.0, "d": 181.0}      # 178, 182, 360, 362 s there
    rows = {r["lesson"]: r for r in lesson_rows(times, step)}
    assert [rows[k]["budget"] for k in "abcd"] == ["ok", "OVER", "OVER", f"FAIL (> {FAIL_FACTOR:g}×)"]
    assert rows["b"][SCALED] == 182.0 and rows["b"]["here, s"] == 91.0
    assert over_budget(times, step) == ["b", "c", "d"]
    assert over_budget(times, step, FAIL_FACTOR) == ["d"]
    assert over_budget(times, None) == []                       # without a bench step nothing is judged
    assert "budget" not in lesson_rows(times)[0]


def test_a_notebook_or_a_test_file_is_one_piece_of_work_and_the_solo_files_are_one():
    from grpo_edu.course.testing.lesson_times import _scope

    assert _scope("lessons/05_toy_grpo.ipynb::Cell 7") == _scope("lessons/05_toy_grpo.ipynb::Cell 40")
    assert _scope("tests/test_kl.py::test_a[1]") == _scope("tests/test_kl.py::TestK3::test_b") == "tests/test_kl.py"
    assert _scope("tests/test_browser.py::test_a_student[01]") == _scope("lessons/10_graduation.ipynb::Cell 3") == "solo"
    assert _scope("lessons/01_batch_step_epoch.ipynb::Cell 0") != _scope("lessons/02_group_advantage.ipynb::Cell 0")


@pytest.mark.parametrize("value", ["fast", "0", "-3"])
def test_a_bad_bench_step_is_named_with_its_fix(monkeypatch, value):
    monkeypatch.setenv(BENCH_ENV, value)
    with pytest.raises(ValueError, match=f"{BENCH_ENV}: is '{re.escape(value)}'.*Fix: set it"):
        bench_step_from_env()


def _notebook(path, cells):
    """A notebook whose code cells are (source, stored stdout) pairs."""
    nb = {"cells": [{"cell_type": "code", "execution_count": i + 1, "id": f"c{i}", "metadata": {},
                     "outputs": [{"name": "stdout", "output_type": "stream", "text": [out]}] if out else [],
                     "source": [src]} for i, (src, out) in enumerate(cells)],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb), encoding="utf-8")


def _run(tmp_path, *args, bench_ms=None, mode=None):
    env = {k: v for k, v in os.environ.items()          # as a user's shell: no thread limit, not inside xdist
           if k not in (*THREAD_VARIABLES, BENCH_ENV, BUDGET_ENV) and not k.startswith("PYTEST_")}
    if bench_ms is not None:
        env[BENCH_ENV] = str(bench_ms)
    if mode is not None:
        env[BUDGET_ENV] = mode
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "grpo_edu.course.testing.lesson_times", "-p",
                           "no:cacheprovider", "-v", "--nbval", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def course(tmp_path):
    """Two notebooks whose stored outputs say one thread (as a parallel run must give) and a test file."""
    threads = ("import os, torch\nprint(os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())", "1 1\n")
    _notebook(tmp_path / "01_a.ipynb", [threads, ("import os\nprint(os.getpid() > 0)", "True\n"),
                                        ("import time\ntime.sleep(0.5)", None)])
    _notebook(tmp_path / "02_b.ipynb", [threads, ("print(2 + 2)", "4\n")])
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n\ndef test_two():\n    assert True\n")
    solo_notebook, solo_test = sorted(SOLO, key=lambda name: name.endswith(".py"))   # stand-ins, named as they are
    (tmp_path / solo_test).write_text("def test_alone():\n    assert True\n")
    _notebook(tmp_path / solo_notebook, [("print('alone')", "alone\n")])
    return tmp_path


def test_every_core_one_thread_each_a_notebook_in_one_kernel_and_a_lesson_past_twice_its_budget_fails(course):
    # one real run does both (each run of pytest costs seconds): 01_a sleeps 0.5 s, which at a bench step
    # of 0.05 ms is over 800 s on the reference machine, so the run fails with every test passed
    run = _run(course, "-n", "2", bench_ms=0.05)
    assert run.returncode == 1, run.stdout[-3000:]
    summary = [line for line in run.stdout.splitlines() if " passed" in line][-1]
    assert "FAIL" in run.stdout and "failed" not in summary, summary          # every test passed: the budget failed it
    assert re.search(r"lesson 01_a is over its share: [\d.]+ s at 80 ms against 180 s; more than 2×", run.stdout)
    workers = {}
    for worker, nodeid in re.findall(r"\[(gw\d)\] .*?PASSED (\S+)", run.stdout):
        workers.setdefault(nodeid.replace("::ipynb", ".ipynb").split("::")[0], set()).add(worker)
    assert set(workers) == {"01_a.ipynb", "02_b.ipynb", "test_plain.py", *SOLO}
    assert all(len(w) == 1 for w in workers.values()), workers        # each notebook in one worker
    assert workers[SOLO[0]] == workers[SOLO[1]]                        # the solo files one after the other
    assert "lesson times" in run.stdout and "2 workers, one thread each" in run.stdout
    assert re.search(r"01_a\s+\d", run.stdout) and re.search(r"02_b\s+\d", run.stdout)
    # 01_a sleeps 0.5 s in a notebook; the test files take next to nothing; the clock is scaled by 80 / 0.05
    spent = re.search(r"where the time went: [\d.]+ s of work, ([\d.]+) s in notebooks and ([\d.]+) s in test files "
                      r"\(the largest: .*\); ([\d.]+) s on the clock, ([\d.]+) min at 80 ms", run.stdout)
    assert spent and float(spent[1]) >= 1 and float(spent[2]) < float(spent[1]), run.stdout[-2000:]
    assert float(spent[4]) >= float(spent[3]) * 1600 / 60 * 0.9


def test_the_time_spent_line_sums_notebooks_and_test_files_apart_and_names_the_largest():
    files = {"lessons/05_toy_grpo.ipynb": 30.0, "lessons/11_long_answers.ipynb": 20.0, "tests/test_site.py": 12.0,
             "tests/test_browser.py": 40.0, "tests/test_cli.py": 5.0, "tests/test_engine.py": 2.0}
    line = time_spent(files, wall_s=60.0, step_ms=20.0, largest=2)
    assert line == ("where the time went: 109 s of work, 50 s in notebooks and 59 s in test files (the largest: "
                    "test_browser.py 40 s, test_site.py 12 s); 60 s on the clock, 4.0 min at 80 ms")
    assert time_spent({"a.ipynb": 3.0}, wall_s=4.0) == ("where the time went: 3 s of work, 3 s in notebooks and "
                                                        "0 s in test files; 4 s on the clock")


def _env_notebook(folder):
    """A notebook that says what its kernel's thread variables are, stored as a parallel run must give (one
    thread each), without importing torch: a kernel learns its threads only from these variables, so they say
    it all, and a torch import in a fresh kernel costs seconds (the parallel run above shows torch's count)."""
    _notebook(folder / "03_env.ipynb", [("import os\nprint([os.environ.get(v) for v in "
                                         f"{list(THREAD_VARIABLES)!r}])", f"{['1'] * len(THREAD_VARIABLES)!r}\n")])
    return "03_env.ipynb"


@pytest.mark.parametrize("serial", [["-n", "0"], ["-p", "no:xdist"]], ids=["n0", "no-xdist"])
def test_one_process_keeps_the_users_threads(course, serial):
    run = _run(course, *serial, _env_notebook(course))
    assert run.returncode == 1, run.stdout[-3000:]                       # the stored ['1', '1', '1'] is not this run's
    assert "1 failed" in run.stdout, run.stdout[-3000:]                  # ... and its cell is what failed
    assert "one process" in run.stdout and "[gw0]" not in run.stdout and "workers" not in run.stdout


def _clock_verdict(seconds, step_ms, mode="enforce"):
    """The plugin's report and exit status at the end of a run whose one lesson took ``seconds``."""
    clock = LessonClock(step_ms, mode)
    clock.times = {"lessons/01_a.ipynb": seconds}
    lines = []
    reporter = SimpleNamespace(write_line=lines.append, section=lambda *args, **kwargs: None)
    clock.pytest_terminal_summary(reporter, 0, SimpleNamespace(option=SimpleNamespace(numprocesses=2)))
    session = SimpleNamespace(exitstatus=0)
    clock.pytest_sessionfinish(session, 0)
    return "\n".join(lines), session.exitstatus


@pytest.mark.parametrize("factor, mode, fails, says", [
    (0.9, "enforce", False, None),                                       # within its share: no line
    (1.5, "enforce", False, "the run fails past 2×"),                    # over: a line, the run passes
    (1.5, "report", False, f"({BUDGET_ENV}=report: reported, never failed)"),
    (2.5, "enforce", True, "more than 2×, so the run fails"),
    (2.5, "report", False, f"({BUDGET_ENV}=report: the run does not fail)"),
])
def test_a_lesson_over_its_share_gets_a_line_and_fails_only_past_twice(factor, mode, fails, says):
    seconds = 30.0
    step = seconds * REFERENCE_STEP_MS / (factor * LESSON_BUDGET_S)       # a machine where 30 s is factor × budget
    text, status = _clock_verdict(seconds, step, mode)
    assert (status != 0) == fails
    assert re.search(r"01_a\s+30(\.0)?\s+[\d.]+\s+(ok|OVER|FAIL)", text), text
    if says is None:
        assert "over its share" not in text
    else:
        assert f"lesson 01_a is over its share: {factor * LESSON_BUDGET_S:g} s at 80 ms" in text and says in text
    # without a bench step nothing is judged, however long the lesson
    assert _clock_verdict(1e6, None, mode)[1] == 0


def test_lesson_times_command_times_the_given_lessons(course, capfd):
    from grpo_edu.cli import main

    marker = course / "conftest-ran"                   # a conftest.py beside the lessons is never run
    (course / "conftest.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    _notebook(course / "02_b.ipynb", [("print(2 + 2)", "4\n")])     # no torch import: the command times any lesson
    assert main(["lesson-times", str(course / "02_b.ipynb"), "--step-ms", "40", "--workers", "0"]) == 0
    out = capfd.readouterr().out
    assert "bench step here 40 ms, so ×2.00" in out
    assert re.search(r"02_b\s+[\d.]+\s+[\d.]+\s+ok", out)             # here, at 80 ms (twice), within budget
    assert not marker.exists()


@pytest.mark.parametrize("argv, message", [
    (["--step-ms", "-5"], "--step-ms: is -5. Fix: give grpo-edu bench's step in ms"),
    (["--workers", "-1"], "--workers: is -1. Fix: give 0"),
    (["no/such/lesson.ipynb"], "lessons: no/such/lesson.ipynb not found. Fix: name notebooks"),
])
def test_lesson_times_command_names_a_bad_argument_before_any_work(argv, message, capsys):
    from grpo_edu.course.testing.lesson_times import main

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--step-ms", "80"] if "--step-ms" not in argv else argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_lesson_times_runs_notebooks_only(course, capsys):
    """A .py file, or a folder with no notebook, is refused by name: the command runs lessons, never other code."""
    from grpo_edu.course.testing.lesson_times import main

    (course / "empty").mkdir()
    for given, problem in ((course / "test_plain.py", "is not a notebook"), (course / "empty", "holds no .ipynb notebook"),
                           ("", "is empty")):
        with pytest.raises(SystemExit) as exit_:
            main([str(given), "--step-ms", "80"])
        assert exit_.value.code == 2 and problem in capsys.readouterr().err, given


def test_a_bad_bench_step_stops_the_run_before_any_test(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    run = _run(tmp_path, "-n", "0", bench_ms="fast")
    assert run.returncode == 4                                           # pytest's usage error
    assert f"{BENCH_ENV}: is 'fast'" in run.stderr and "passed" not in run.stdout


def test_the_lessons_that_train_go_first_then_the_solo_group_and_a_pieces_tests_stay_together():
    from grpo_edu.course.testing.lesson_times import GROUPED, pytest_collection_modifyitems

    def item(nodeid, trains=False):
        return SimpleNamespace(nodeid=nodeid, cell={"metadata": {"tags": ["parameters"] if trains else []}})

    items = [item("tests/test_kl.py::a"), item("lessons/01_a.ipynb::Cell 0"), item("tests/test_browser.py::b"),
             item("lessons/05_b.ipynb::Cell 0"), item("lessons/05_b.ipynb::Cell 1", trains=True),
             item("lessons/05_b.ipynb::Cell 2"), item("lessons/08_c.ipynb::Cell 0", trains=True),
             item("lessons/10_graduation.ipynb::Cell 0"), item("tests/test_big.py::x"), item("tests/test_big.py::y")]
    config = SimpleNamespace(workerinput={GROUPED: True})
    pytest_collection_modifyitems(None, config, items)
    assert [i.nodeid for i in items] == [
        "lessons/05_b.ipynb::Cell 0", "lessons/05_b.ipynb::Cell 1", "lessons/05_b.ipynb::Cell 2",   # trains, 3 cells
        "lessons/08_c.ipynb::Cell 0",                                                # trains, 1 cell
        "tests/test_browser.py::b", "lessons/10_graduation.ipynb::Cell 0",          # then the solo group
        "tests/test_big.py::x", "tests/test_big.py::y",                              # then the rest, largest first
        "tests/test_kl.py::a", "lessons/01_a.ipynb::Cell 0"]
    # outside a grouped run the collection keeps its order
    untouched = list(reversed(items))
    pytest_collection_modifyitems(None, SimpleNamespace(workerinput={}), untouched)
    assert untouched[0].nodeid == "lessons/01_a.ipynb::Cell 0"
