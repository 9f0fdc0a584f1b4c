"""grpo-edu check-answers: a class's saved notebooks read (never run), student × exercise."""

import copy
import csv
import json

import pytest

from grpo_edu.course import answers
from grpo_edu.course.answers import lesson_file, read_class, read_notebook


def _lesson(lesson="07"):
    return json.loads(lesson_file(lesson).read_text(encoding="utf-8"))


def _cell_of(nb, exercise_id):
    return answers.ids_in(nb["cells"])[exercise_id]


def _printed(nb, exercise_id, text):
    cell = _cell_of(nb, exercise_id)
    cell["execution_count"] = 7
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [text + "\n"]}]


@pytest.fixture
def classroom(tmp_path):
    """Six files a teacher might collect: right, wrong, unrun, edited, corrupt, and one from lesson 12."""
    base = _lesson()
    right, wrong, unrun, edited = (copy.deepcopy(base) for _ in range(4))
    _printed(right, "07.5", "✅ Exercise 07.5: your function matches the library on 20 random inputs.")
    _printed(right, "07.P1", "Prediction 07.P1: you guessed 0.1; the experiment gives 0.12. ✅ Close enough.")
    _printed(wrong, "07.5", "❌ Exercise 07.5: not quite. For the input (…) the library gives …")
    wrong_cell = _cell_of(wrong, "07.2")
    wrong_cell["outputs"] = [{"output_type": "error", "ename": "NameError", "evalue": "x", "traceback": []}]
    for cell in unrun["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    edited["cells"].remove(_cell_of(edited, "07.3"))
    files = {"ana": right, "bo": wrong, "chen": unrun, "dee": edited, "eve": _lesson("12")}
    for name, nb in files.items():
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (tmp_path / "fay.ipynb").write_text("{ this is not json", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("my notes", encoding="utf-8")
    return tmp_path


def test_each_students_exercises_get_their_status(classroom):
    got = {info["student"]: (a, info) for a, info in read_class([classroom])[0]}
    ana, bo, chen, dee = (got[name][0] for name in ("ana", "bo", "chen", "dee"))
    assert ana["07.5"] == "passed" and ana["07.P1"] == "passed"
    assert bo["07.5"] == "failed" and bo["07.2"] == "error"
    assert set(chen.values()) == {"not run"} and got["chen"][1]["problem"] == "never executed (no cell has run)"
    assert dee["07.3"] == "missing" and got["dee"][1]["problem"] is None
    assert got["eve"][1]["lesson"] == "12" and not got["eve"][1]["problem"]
    assert got["fay"][1]["problem"].startswith("not a notebook") and got["notes"][1]["problem"].startswith("not a")
    stored = read_notebook(lesson_file("07"))[0]             # the course's own stored run: every id, none missing
    assert "missing" not in stored.values() and list(stored) == answers.expected_ids("07")


def test_the_table_gives_the_success_rate_per_exercise_and_lists_what_it_could_not_read(classroom, capsys):
    from grpo_edu.cli import main

    assert main(["check-answers", str(classroom), "--csv", str(classroom / "class.csv")]) == 0
    out = capsys.readouterr().out
    lesson07 = out.split("lesson 07: ")[1].split("\n\n")[0].splitlines()
    assert lesson07[0] == "3 notebook(s)"                    # ana, bo, dee; chen never ran a cell
    header = lesson07[1].split()
    rate = dict(zip(header[1:], lesson07[-2].split()[2:]))
    assert rate["07.5"] == "33%" and rate["07.3"] != "100%"
    assert "lesson 12: 1 notebook(s)" in out
    assert "chen.ipynb: never executed" in out and "fay.ipynb: not a notebook" in out
    rows = list(csv.DictReader(open(classroom / "class.csv", encoding="utf-8")))
    assert {"student": "bo", "exercise": "07.2", "status": "error"}.items() <= next(
        r for r in rows if r["student"] == "bo" and r["exercise"] == "07.2").items()


def test_a_notebook_from_another_version_is_named_not_counted(tmp_path):
    nb = _lesson()
    nb["cells"].append({"cell_type": "code", "execution_count": 3, "metadata": {}, "source": 'ok = check("07.9", 1)',
                        "outputs": [{"output_type": "stream", "name": "stdout", "text": "✅ Exercise 07.9: correct.\n"}]})
    (tmp_path / "old.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    _, info = read_notebook(tmp_path / "old.ipynb")
    assert info["problem"].startswith("another version of the course") and info["unknown"] == ["07.9"]
    nb["cells"][0]["source"] = "# Lesson 99 · Something else"
    (tmp_path / "other.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    assert read_notebook(tmp_path / "other.ipynb")[1]["problem"] == "lesson 99 is not in this version of the course"


def test_nothing_in_a_students_notebook_is_executed(tmp_path):
    nb = _lesson()
    marker = tmp_path / "ran"
    _cell_of(nb, "07.5")["source"] = f'open("{marker}", "w").write("x"); ok = check("07.5", my_gated_brevity)'
    (tmp_path / "sly.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    read_class([tmp_path])
    assert not marker.exists()
