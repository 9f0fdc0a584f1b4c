"""grpo-edu lessons DIR: a student's own copy of the lessons, never written over their changes."""

import json
import subprocess
import sys

import pytest

from grpo_edu.cli import main
from grpo_edu.course.copy_lessons import copy_lessons, lessons_dir


def test_the_lessons_are_copied_once_and_an_unchanged_copy_is_left_alone(tmp_path, capsys):
    course = sorted(p.name for p in lessons_dir().glob("*.ipynb"))
    assert main(["lessons", str(tmp_path / "mine")]) == 0
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == course
    assert f"{len(course)} lesson(s) written" in capsys.readouterr().out
    written, info = copy_lessons(tmp_path / "mine")
    assert written == [] and len(info["unchanged"]) == len(course)


def test_a_changed_copy_is_refused_by_name_and_kept_when_forced(tmp_path, capsys):
    copy_lessons(tmp_path)
    mine = tmp_path / "03_zero_sigma.ipynb"
    work = json.loads(mine.read_text(encoding="utf-8"))
    work["cells"][0]["source"] = "# Lesson 03 · my notes"
    mine.write_text(json.dumps(work), encoding="utf-8")
    assert main(["lessons", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "03_zero_sigma.ipynb" in err and "--force" in err
    assert json.loads(mine.read_text(encoding="utf-8"))["cells"][0]["source"] == "# Lesson 03 · my notes"
    written, info = copy_lessons(tmp_path, force=True)
    assert written == [mine] and mine.read_bytes() == (lessons_dir() / mine.name).read_bytes()
    backup = info["kept"][mine]
    assert backup.name.startswith("03_zero_sigma.before-")
    assert json.loads(backup.read_text(encoding="utf-8"))["cells"][0]["source"] == "# Lesson 03 · my notes"


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="^target: .* is a file"):
        copy_lessons(tmp_path / "f")


def test_a_copied_lesson_runs_from_the_students_folder(tmp_path):
    copy_lessons(tmp_path)
    lesson = tmp_path / "01_batch_step_epoch.ipynb"
    run = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                          "--output", str(tmp_path / "ran.ipynb"), str(lesson)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    outputs = [o for c in json.loads((tmp_path / "ran.ipynb").read_text())["cells"] for o in c.get("outputs", [])]
    assert outputs and not any(o["output_type"] == "error" for o in outputs)
