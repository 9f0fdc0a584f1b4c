"""grpo-edu check-answers: a class's saved notebooks read (never run), student × exercise."""

import copy
import csv
import json

import pytest

from grpo_edu.course.classroom import answers
from grpo_edu.course.classroom.answers import lesson_file, read_class, read_notebook


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


# --- nothing lost, nothing hangs: every path check-answers is handed (issue 35) -------------------

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from grpo_edu.cli import main  # noqa: E402

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _run_cli(*args, cwd, timeout=60, limit_memory=False):
    """``grpo-edu check-answers ARGS`` in a child process (a hang or a crash must not take pytest with it)."""
    def limits():
        if limit_memory:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))   # 1 GiB: /dev/zero must not eat the machine
    code = "import sys; from grpo_edu.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "check-answers", *map(str, args)], cwd=cwd, timeout=timeout,
                          capture_output=True, preexec_fn=limits if os.name == "posix" else None)


def _answered(tmp_path, name="ana.ipynb"):
    nb = _lesson()
    _printed(nb, "07.5", "✅ Exercise 07.5: your function matches the library on 20 random inputs.")
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


@pytest.mark.parametrize("how", ["same path", "another path", "a link to it", "a hard link", "inside the folder read"])
def test_the_csv_is_never_a_notebook_that_was_read(tmp_path, capsys, how):
    work = _answered(tmp_path / "class")
    before = work.read_bytes()
    csv_path = {"same path": work, "another path": tmp_path / "class" / ".." / "class" / "ana.ipynb",
                "a link to it": tmp_path / "link.ipynb", "a hard link": tmp_path / "hard.csv",
                "inside the folder read": work}[how]
    if how == "a link to it":
        csv_path.symlink_to(work)
    if how == "a hard link":
        os.link(work, csv_path)
    given = [tmp_path / "class"] if how == "inside the folder read" else [work]
    for force in ([], ["--force"]):                        # not even when asked to replace the file
        assert main(["check-answers", *map(str, given), "--csv", str(csv_path), *force]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "--csv" in err and "is one of the notebooks read" in err and "Fix:" in err
        assert work.read_bytes() == before


def test_an_existing_csv_is_replaced_only_when_asked(tmp_path, capsys):
    work = _answered(tmp_path)
    report = tmp_path / "report.csv"
    report.write_text("last week's report", encoding="utf-8")
    assert main(["check-answers", str(work), "--csv", str(report)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--csv" in err and "--force" in err
    assert report.read_text(encoding="utf-8") == "last week's report"
    assert main(["check-answers", str(work), "--csv", str(report), "--force"]) == 0
    assert report.read_text(encoding="utf-8").startswith("student,file,lesson,exercise,status")


@pytest.mark.parametrize("how", ["missing folder", "a folder", "a FIFO", "a link"])
def test_a_csv_that_cannot_be_written_is_refused_before_the_table(tmp_path, capsys, how):
    work = _answered(tmp_path)
    target = {"missing folder": tmp_path / "nowhere" / "r.csv", "a folder": tmp_path / "dir", "a FIFO": tmp_path / "f",
              "a link": tmp_path / "l.csv"}[how]
    if how == "a folder":
        target.mkdir()
    if how == "a FIFO":
        os.mkfifo(target)
    if how == "a link":
        (tmp_path / "elsewhere.csv").write_text("someone else's", encoding="utf-8")
        target.symlink_to(tmp_path / "elsewhere.csv")
    for force in ([], ["--force"]):
        if how == "a FIFO":                                  # a FIFO would block the writer: in a child process
            try:
                run = _run_cli(work, "--csv", target, *force, cwd=tmp_path)
            except subprocess.TimeoutExpired:
                pytest.fail("check-answers hung writing its report")
            code, out, err = run.returncode, run.stdout.decode(), run.stderr.decode()
        else:
            code = main(["check-answers", str(work), "--csv", str(target), *force])
            out, err = capsys.readouterr()
        assert code == 2 and out == "" and "--csv" in err and "Fix:" in err and "Traceback" not in err, err
    if how == "a link":
        assert (tmp_path / "elsewhere.csv").read_text(encoding="utf-8") == "someone else's"


def _without_privileges(*args, cwd):
    """``grpo-edu ARGS`` in a child process that cannot write read-only files: as this user, or
    (as root) with every capability dropped by ``setpriv``; None where that cannot be done."""
    import shutil

    code = "import sys; from grpo_edu.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, *map(str, args)]
    if ROOT:
        if not shutil.which("setpriv"):
            return None
        argv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--", *argv]
    run = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    return None if ROOT and "setpriv:" in run.stderr else run


@pytest.mark.parametrize("how", ["a read-only file", "a read-only folder"])
def test_a_read_only_csv_is_refused_before_the_table(tmp_path, how):
    work = _answered(tmp_path)
    (tmp_path / "ro").mkdir()
    report = tmp_path / "r.csv" if how == "a read-only file" else tmp_path / "ro" / "r.csv"
    if how == "a read-only file":
        report.write_text("x", encoding="utf-8")
        report.chmod(0o444)
    (tmp_path / "ro").chmod(0o555)
    try:
        run = _without_privileges("check-answers", work, "--csv", report, "--force", cwd=tmp_path)
        if run is None:
            pytest.skip("running as root with no way to drop the right to write read-only files")
        assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr, run.stderr[-2000:]
        assert "--csv" in run.stderr and ("read-only" in run.stderr or "cannot write into" in run.stderr)
    finally:
        (tmp_path / "ro").chmod(0o755)


def test_names_that_a_spreadsheet_would_run_are_written_as_text(tmp_path):
    for name in ("=HYPERLINK(1)", "+1", "-2", "@SUM(A1)"):
        _answered(tmp_path / "class", f"{name}.ipynb")
    assert main(["check-answers", str(tmp_path / "class"), "--csv", str(tmp_path / "r.csv")]) == 0
    rows = list(csv.reader(open(tmp_path / "r.csv", encoding="utf-8")))[1:]
    students = {r[0] for r in rows}
    assert students == {"'=HYPERLINK(1)", "'+1", "'-2", "'@SUM(A1)"}
    assert not any(cell[:1] in "=+-@" and cell for r in rows for cell in r)


def test_control_characters_in_a_name_are_shown_escaped(tmp_path, capfd):
    _answered(tmp_path / "class", "\x1b[31mred\x1b[0m.ipynb")
    (tmp_path / "class" / "bad\x1b]0;owned\x07.ipynb").write_text("not json", encoding="utf-8")
    assert main(["check-answers", str(tmp_path / "class"), "--csv", str(tmp_path / "r.csv")]) == 0
    out = capfd.readouterr().out                            # the bytes that reach the terminal (file descriptor 1)
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[31mred\\x1b[0m" in out and "bad\\x1b]0;owned\\x07.ipynb: not a notebook" in out


@pytest.mark.skipif(sys.platform != "linux", reason="a file name that is not UTF-8 needs a POSIX file system")
def test_a_file_name_that_is_not_utf8_is_shown_not_a_crash(tmp_path, capfd):
    folder = tmp_path / "class"
    _answered(folder)
    os.rename(folder / "ana.ipynb", os.fsencode(folder) + b"/caf\xe9.ipynb")
    assert main(["check-answers", str(folder), "--csv", str(tmp_path / "r.csv")]) == 0   # a UTF-8 stdout, strict
    assert "caf\\udce9" in capfd.readouterr().out and "caf\\udce9" in (tmp_path / "r.csv").read_text(encoding="utf-8")


BAD = {"cells of numbers": {"cells": [1, 2]},
       "a source that is a number": {"cells": [{"cell_type": "markdown", "source": 5}]},
       "outputs that are a dict": {"cells": [{"cell_type": "markdown", "source": "# Lesson 07 · x"},
                                             {"cell_type": "code", "source": 'check("07.5", 1)', "outputs": {},
                                              "execution_count": 1}]},
       "an output text that is a number": {"cells": [{"cell_type": "markdown", "source": "# Lesson 07 · x"},
                                                     {"cell_type": "code", "source": ['check("07.5", 1)'],
                                                      "execution_count": 1,
                                                      "outputs": [{"output_type": "stream", "text": 3}]}]},
       "outputs that are strings": {"cells": [{"cell_type": "markdown", "source": "# Lesson 07 · x"},
                                              {"cell_type": "code", "source": 'check("07.5", 1)', "outputs": ["x"],
                                               "execution_count": 1}]},
       "a source list of numbers": {"cells": [{"cell_type": "markdown", "source": [1, 2]}]},
       "a top level list": [1, 2, 3]}


@pytest.mark.parametrize("shape", [*BAD, "nested 5000 deep"])
def test_a_notebook_of_the_wrong_shape_is_not_counted_and_the_class_is_still_shown(tmp_path, capsys, shape):
    _answered(tmp_path / "class")
    bad = tmp_path / "class" / "odd.ipynb"
    bad.write_text("[" * 5000 + "]" * 5000 if shape == "nested 5000 deep" else json.dumps(BAD[shape]),
                   encoding="utf-8")
    assert main(["check-answers", str(tmp_path / "class")]) == 0
    out = capsys.readouterr().out
    assert "lesson 07: 1 notebook(s)" in out
    line = next(line for line in out.splitlines() if "odd.ipynb" in line)
    assert "not a notebook" in line and "(" in line


def test_a_class_in_one_folder_per_student_is_found_and_told_apart(tmp_path, capsys):
    for student in ("alice", "bo"):
        _answered(tmp_path / "class" / student, "07_reward_design.ipynb")
    _answered(tmp_path / "class" / "alice" / ".ipynb_checkpoints", "07_reward_design-checkpoint.ipynb")
    rows, _ = read_class([tmp_path / "class"])
    assert sorted(info["student"] for _, info in rows) == ["alice/07_reward_design", "bo/07_reward_design"]
    assert main(["check-answers", str(tmp_path / "class")]) == 0
    out = capsys.readouterr().out
    assert "lesson 07: 2 notebook(s)" in out and "alice/07_reward_design" in out and "bo/07_reward_design" in out


def test_two_files_of_one_name_given_by_hand_are_told_apart(tmp_path):
    a, b = _answered(tmp_path / "a"), _answered(tmp_path / "b")
    names = [info["student"] for _, info in read_class([a, b])[0]]
    assert len(set(names)) == 2


def test_the_same_notebook_named_twice_counts_once(tmp_path):
    work = _answered(tmp_path / "class")
    (tmp_path / "link.ipynb").symlink_to(work)
    rows, info = read_class([work, tmp_path / "class", tmp_path / "class" / ".." / "class" / "ana.ipynb",
                             tmp_path / "link.ipynb"])
    assert len(rows) == 1 and info["files"] == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_device_is_not_counted_and_nothing_hangs(tmp_path):
    _answered(tmp_path / "class")
    os.mkfifo(tmp_path / "class" / "pipe.ipynb")
    (tmp_path / "to_pipe.ipynb").symlink_to(tmp_path / "class" / "pipe.ipynb")
    args = [tmp_path / "class", tmp_path / "to_pipe.ipynb"] + (["/dev/zero"] if os.path.exists("/dev/zero") else [])
    try:
        run = _run_cli(*args, cwd=tmp_path, timeout=60, limit_memory=True)
    except subprocess.TimeoutExpired:
        pytest.fail("check-answers hung on a FIFO")
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    out = run.stdout.decode()
    assert "lesson 07: 1 notebook(s)" in out
    assert "pipe.ipynb: not a regular file (a FIFO)" in out
    if os.path.exists("/dev/zero"):
        assert "/dev/zero: not a regular file (a device)" in out


def test_a_file_over_the_size_cap_is_not_counted(tmp_path, monkeypatch, capsys):
    work = _answered(tmp_path / "class")
    monkeypatch.setattr(answers, "MAX_BYTES", work.stat().st_size + 1000, raising=False)
    big = tmp_path / "class" / "big.ipynb"
    big.write_text(work.read_text(encoding="utf-8") + " " * 60_000, encoding="utf-8")
    assert main(["check-answers", str(tmp_path / "class")]) == 0
    out = capsys.readouterr().out
    assert "big.ipynb: too large" in out and "lesson 07: 1 notebook(s)" in out


def test_a_folder_too_deep_to_search_is_named_not_silently_skipped(tmp_path, capsys):
    _answered(tmp_path / "class" / "alice")
    _answered(tmp_path / "class" / "a" / "b" / "c" / "d")                  # four levels of subfolders down
    assert main(["check-answers", str(tmp_path / "class")]) == 0
    out = capsys.readouterr().out
    assert "lesson 07: 1 notebook(s)" in out and "alice/ana" in out
    line = next(line for line in out.splitlines() if line.strip().startswith(str(tmp_path / "class" / "a")))
    assert line.endswith("a folder more than 3 levels of subfolders down: not searched (name it on its own)")
    assert main(["check-answers", str(tmp_path / "class" / "a")]) == 0       # named on its own, it is read
    assert "lesson 07: 1 notebook(s)" in capsys.readouterr().out


def test_a_folder_that_cannot_be_opened_is_named(tmp_path):
    _answered(tmp_path / "class" / "alice")
    _answered(tmp_path / "class" / "bo")
    (tmp_path / "class" / "bo").chmod(0o000)
    try:
        run = _without_privileges("check-answers", tmp_path / "class", cwd=tmp_path)
        if run is None:
            pytest.skip("running as root with no way to drop the right to open any folder")
        assert run.returncode == 0, run.stderr[-2000:]
        assert "lesson 07: 1 notebook(s)" in run.stdout
        assert f"{tmp_path / 'class' / 'bo'}: a folder that cannot be opened (Permission denied)" in run.stdout
    finally:
        (tmp_path / "class" / "bo").chmod(0o755)


def test_a_link_that_loops_in_the_class_folder_is_named_and_the_rest_counted(tmp_path, capsys):
    """CA15: one symlink loop (loopdir → loopdir2 → loopdir) stopped the whole report with an OSError."""
    _answered(tmp_path / "class" / "alice")
    (tmp_path / "class" / "loopdir").symlink_to(tmp_path / "class" / "loopdir2")
    (tmp_path / "class" / "loopdir2").symlink_to(tmp_path / "class" / "loopdir")
    (tmp_path / "class" / "gone.ipynb").symlink_to(tmp_path / "nowhere.ipynb")
    assert main(["check-answers", str(tmp_path / "class")]) == 0
    out = capsys.readouterr().out
    assert "lesson 07: 1 notebook(s)" in out and "alice/ana" in out
    for name in ("loopdir", "loopdir2"):
        assert f"{tmp_path / 'class' / name}: a link that leads nowhere or loops (Too many levels of symbolic links)" in out
    assert f"{tmp_path / 'class' / 'gone.ipynb'}: a link that leads nowhere or loops (No such file or directory)" in out
