"""``grpo-edu family``: its --json file keeps each finished run at once and a comparison resumes from it; its
arguments are refused before any run, as one line, never a traceback."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_edu.cli import main
from grpo_edu.course import family as course_family

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--methods", "grpo", "rft", "--steps", "1", "--resamples", "2"]


def _command(*argv):
    return [sys.executable, "-c", "from grpo_edu.cli import main; raise SystemExit(main())", "family", *argv]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def test_a_kill_after_the_first_method_keeps_its_row_and_the_comparison_resumes_from_the_file(tmp_path):
    """kill -9 once GRPO's row is in the file; --resume keeps that row as it is and runs only what is left."""
    target = tmp_path / "killed.json"
    run = subprocess.Popen(_command(*TINY, "--json", str(target)), env=_env(), cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    try:
        while time.time() < deadline and not target.exists():
            assert run.poll() is None, "the comparison ended before its first run was written"
            time.sleep(0.2)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    kept = json.loads(target.read_text())                          # whole: written atomically
    assert list(kept["results"]) == ["grpo"] and [r["seed"] for r in kept["results"]["grpo"]] == [0]
    assert not list(tmp_path.glob(".*.tmp"))                       # no temporary file left beside it
    done = subprocess.run(_command(*TINY, "--json", str(target), "--resume"), env=_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 finished runs kept" in done.stdout
    final = json.loads(target.read_text())
    assert final["results"]["grpo"] == kept["results"]["grpo"]     # kept as it was, not run again
    assert [r["seed"] for r in final["results"]["rft"]] == [0]
    assert set(final["gradient_noise"]["0"]) == {"grpo", "rft"}
    assert "--resume" not in final["command"] and final["settings"]["budget"]["total_training_steps"] == 1


@pytest.fixture
def no_runs(monkeypatch):
    monkeypatch.setattr(course_family, "comparison", lambda *a, **k: pytest.fail("ran before checking its arguments"))


def _refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["family", *argv])
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "99999999999999999999"], "--seeds: must be ≤ 4294967295"),            # FC18
    (["--resamples", "1000000000"], "--resamples: is 1000000000. Fix: give 2 or more"),  # FC25
    (["--resume"], "--resume: continues the comparison in a --json file"),
])
def test_bad_arguments_are_refused_before_any_run_as_one_line(argv, message, capsys, no_runs):
    err = _refused(argv, capsys)
    assert message in err and "Traceback" not in err


def test_resuming_a_file_made_with_other_settings_is_refused_naming_them(tmp_path, capsys, no_runs):
    target = tmp_path / "runs.json"
    settings = {"model": "adder", "budget": {**course_family.budget("adder"), "total_training_steps": 2},
                "resamples": 2, "cpu_capability": "SOMEWHERE", "torch": "0.0"}
    target.write_text(json.dumps({"command": "grpo-edu family --steps 2", "settings": settings, "results": {}}))
    err = _refused([*TINY, "--json", str(target), "--resume"], capsys)
    assert "other settings" in err and "total_training_steps 2 there, 1 here" in err and "cpu_capability" in err
    target.write_text("not json")
    assert "cannot be resumed" in _refused([*TINY, "--json", str(target), "--resume"], capsys)


def test_an_existing_file_is_refused_naming_resume_and_overwrite(tmp_path, capsys, no_runs):
    target = tmp_path / "runs.json"
    target.write_text("{}")
    err = _refused([*TINY, "--json", str(target)], capsys)
    assert "--resume" in err and "--overwrite" in err and target.read_text() == "{}"


def test_a_nan_in_a_row_is_stored_as_null_so_the_file_stays_json():
    assert course_family._finite({"a": [1.0, float("nan")], "b": float("inf"), "c": "x"}) == {
        "a": [1.0, None], "b": None, "c": "x"}


def test_the_gradient_noise_scores_its_own_group_size():
    """num_generations=4 on the adder's budget (G = 8): the rewards are scored in groups of 4, not 8."""
    noise = course_family.gradient_noise(["grpo"], resamples=2, batch_size=2, num_generations=4)
    assert noise["grpo"]["used"] == 2
