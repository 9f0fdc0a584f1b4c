"""grpo-edu lessons DIR: a student's own copy of the lessons, never written over their changes."""

import json
import os
import subprocess
import sys

import pytest

from grpo_edu.cli import main
from grpo_edu.course.classroom.copy_lessons import copy_lessons, lessons_dir


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
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe")
        with pytest.raises(ValueError, match=r"^target: .*pipe is not a folder \(a FIFO\)"):
            copy_lessons(tmp_path / "pipe")


# A copied lesson running from a student's folder is .ci/run's wheel phase: it installs the wheel, copies the
# lessons out with `grpo-edu lessons class` and runs lessons 01 and 05 there under nbval. A test here would run
# lesson 01 a second time in the same command.


# --- nothing lost: every path grpo-edu lessons touches (issue 35) ---------------------------------

import time  # noqa: E402

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _edit(path, note):
    work = json.loads(path.read_text(encoding="utf-8"))
    work["cells"][0]["source"] = note
    path.write_text(json.dumps(work), encoding="utf-8")


def _notes_in(folder):
    """Every cell-0 note found in any file of ``folder``."""
    found = set()
    for path in folder.iterdir():
        try:
            source = json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"]
            found.add("".join(source) if isinstance(source, list) else source)
        except (ValueError, KeyError, IndexError, OSError):
            pass
    return found


def test_two_forced_updates_in_the_same_second_keep_both_versions(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda *a: "20260101-120000")     # the clock does not move
    copy_lessons(tmp_path)
    mine = tmp_path / "03_zero_sigma.ipynb"
    _edit(mine, "# Lesson 03 · monday's notes")
    first = copy_lessons(tmp_path, force=True)[1]["kept"][mine]
    _edit(mine, "# Lesson 03 · tuesday's notes")
    second = copy_lessons(tmp_path, force=True)[1]["kept"][mine]
    assert first != second
    assert {"# Lesson 03 · monday's notes", "# Lesson 03 · tuesday's notes"} <= _notes_in(tmp_path)


RACE = """
import sys, time
from grpo_edu.course.classroom.copy_lessons import copy_lessons
print("ready", flush=True)
start = float(sys.stdin.readline())     # the same moment for both runs, sent once both have started
while time.time() < start:
    pass
try:
    copy_lessons(sys.argv[1], force=True, source=sys.argv[2])
except ValueError as err:
    print(err)
"""


def test_two_forced_updates_at_once_lose_no_students_edit(tmp_path):
    source = lessons_dir()
    for trial in range(12):
        folder = tmp_path / f"t{trial}"
        copy_lessons(folder)
        notes = set()
        for path in sorted(folder.glob("*.ipynb")):
            note = f"# {path.stem} · trial {trial}'s notes"
            _edit(path, note)
            notes.add(note)
        runs = [subprocess.Popen([sys.executable, "-c", RACE, str(folder), str(source)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        for run in runs:                                                 # both have imported the library
            assert run.stdout.readline() == b"ready\n", run.communicate(timeout=120)[1].decode()[-2000:]
        start = f"{time.time() + 0.05!r}\n".encode()                     # then both start at one moment
        for run in runs:
            run.stdin.write(start)
            run.stdin.flush()
        for run in runs:
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0 and not out, (out + err).decode()[-2000:]    # neither run was refused
        lost = notes - _notes_in(folder)
        assert not lost, f"trial {trial}: lost {sorted(lost)}"
        backups = sorted(folder.glob("*.before-*.ipynb"))                # the runs took turns: one backup each
        assert len(backups) == len(notes), f"trial {trial}: {len(backups)} backups of {len(notes)} edits"
        for nb in source.glob("[0-9][0-9]*_*.ipynb"):             # and the lessons are the course's, whole
            assert (folder / nb.name).read_bytes() == nb.read_bytes()


def test_a_lesson_that_is_a_link_is_never_written_through(tmp_path, capsys):
    copy_lessons(tmp_path / "mine")
    outside = tmp_path / "outside.ipynb"
    outside.write_text("someone else's file", encoding="utf-8")
    lesson = tmp_path / "mine" / "03_zero_sigma.ipynb"
    lesson.unlink()
    lesson.symlink_to(outside)
    gone = tmp_path / "mine" / "04_clipped_loss.ipynb"
    gone.unlink()
    gone.symlink_to(tmp_path / "nowhere.ipynb")                                  # a link to nothing
    for force in ([], ["--force"]):
        assert main(["lessons", str(tmp_path / "mine"), *force]) == 2
        err = capsys.readouterr().err
        assert "03_zero_sigma.ipynb" in err and "04_clipped_loss.ipynb" in err and "link" in err
        assert "Traceback" not in err
    assert outside.read_text(encoding="utf-8") == "someone else's file"
    assert not (tmp_path / "nowhere.ipynb").exists()


def test_a_link_to_the_courses_own_copy_is_left_alone(tmp_path):
    copy_lessons(tmp_path / "mine")
    lesson = tmp_path / "mine" / "03_zero_sigma.ipynb"
    lesson.unlink()
    lesson.symlink_to(lessons_dir() / lesson.name)
    written, info = copy_lessons(tmp_path / "mine", force=True)
    assert written == [] and lesson.is_symlink()


def test_a_lesson_name_taken_by_a_folder_or_a_fifo_is_refused_by_name(tmp_path, capsys):
    copy_lessons(tmp_path / "mine")
    (tmp_path / "mine" / "03_zero_sigma.ipynb").unlink()
    (tmp_path / "mine" / "03_zero_sigma.ipynb").mkdir()
    if hasattr(os, "mkfifo"):
        (tmp_path / "mine" / "04_clipped_loss.ipynb").unlink()
        os.mkfifo(tmp_path / "mine" / "04_clipped_loss.ipynb")
    code = "import sys; from grpo_edu.cli import main; sys.exit(main(sys.argv[1:]))"
    for force in ([], ["--force"]):
        try:
            run = subprocess.run([sys.executable, "-c", code, "lessons", str(tmp_path / "mine"), *force],
                                 capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("grpo-edu lessons hung on a FIFO")
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
        assert "03_zero_sigma.ipynb" in run.stderr and "folder" in run.stderr
        if hasattr(os, "mkfifo"):
            assert "04_clipped_loss.ipynb" in run.stderr


def test_a_target_that_is_a_link_to_nothing_is_refused(tmp_path, capsys):
    (tmp_path / "mine").symlink_to(tmp_path / "nowhere")
    assert main(["lessons", str(tmp_path / "mine")]) == 2
    err = capsys.readouterr().err
    assert "link" in err and "Fix:" in err and not (tmp_path / "nowhere").exists()


def test_a_read_only_folder_is_refused_before_anything_is_written(tmp_path):
    import shutil

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine").chmod(0o555)
    code = "import sys; from grpo_edu.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "lessons", str(tmp_path / "mine")]
    if ROOT:            # root writes anywhere: drop every capability (setpriv), or there is nothing to refuse
        if not shutil.which("setpriv"):
            pytest.skip("running as root with no way to drop the right to write read-only folders")
        argv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--", *argv]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if ROOT and "setpriv:" in run.stderr:
            pytest.skip(f"setpriv could not drop root's rights here: {run.stderr.strip()}")
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
        assert "cannot write" in run.stderr and "Fix:" in run.stderr
    finally:
        (tmp_path / "mine").chmod(0o755)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE makes a write fail part-way on Linux")
def test_a_write_that_fails_part_way_leaves_no_truncated_lesson(tmp_path):
    import resource
    import signal

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)                     # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    code = "import sys; from grpo_edu.cli import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", code, "lessons", str(tmp_path / "mine")], capture_output=True,
                         text=True, timeout=120, preexec_fn=small_disk)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "Fix:" in run.stderr, run.stderr[-2000:]
    for path in (tmp_path / "mine").iterdir():                # no half lesson, no temporary file left behind
        assert path.read_bytes() == (lessons_dir() / path.name).read_bytes()
    assert main(["lessons", str(tmp_path / "mine")]) == 0    # and the next run is not refused


def test_names_with_control_characters_are_shown_escaped(tmp_path, capsys):
    folder = tmp_path / "\x1b[31mred"
    assert main(["lessons", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31mred" in out


def test_a_lock_left_by_a_killed_run_does_not_stop_the_next(tmp_path):
    from grpo_edu.course.classroom.copy_lessons import LOCK

    copy_lessons(tmp_path / "mine")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                                              # a pid that is no longer running
    (tmp_path / "mine" / LOCK).write_text(json.dumps({"pid": dead.pid, "host": __import__("socket").gethostname(),
                                                      "token": "x", "since": "earlier"}), encoding="utf-8")
    _edit(tmp_path / "mine" / "03_zero_sigma.ipynb", "# Lesson 03 · mine")
    written, info = copy_lessons(tmp_path / "mine", force=True, wait=2)
    assert [p.name for p in written] == ["03_zero_sigma.ipynb"] and not (tmp_path / "mine" / LOCK).exists()


def test_a_run_that_holds_the_folder_makes_the_next_wait_then_refuse_by_name(tmp_path):
    from grpo_edu.common import locks
    from grpo_edu.course.classroom.copy_lessons import LOCK

    (tmp_path / "mine").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "mine" / LOCK).write_text(json.dumps({"pid": holder.pid, "host": __import__("socket").gethostname(),
                                                          "token": "x", "since": "now"}), encoding="utf-8")
        start = time.monotonic()
        with pytest.raises(ValueError, match=r"^target: the folder .* is being written by process"):
            copy_lessons(tmp_path / "mine", wait=0.5)
        assert time.monotonic() - start >= 0.5 and not list((tmp_path / "mine").glob("*.ipynb"))
    finally:
        holder.kill()
        holder.wait()
    assert locks.holder(tmp_path / "mine" / LOCK)["pid"] == holder.pid       # another's lock is not removed
