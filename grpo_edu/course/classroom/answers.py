"""A class's answers at a glance: read students' saved notebooks, never run them (``grpo-edu check-answers``).

Every exercise cell calls ``check("ID", …)`` and every prediction cell ``reveal("ID", …)``; both print
one line that starts with ✅ or ❌, or says the answer is still missing. This module reads those
printed lines from each notebook's stored outputs, so an instructor who collects thirty notebooks
sees, per student and per exercise, what passed, what failed and what was never run, and each
exercise's success rate: what to explain again. It opens the files as JSON and executes nothing.

Statuses, per exercise: ``passed`` (✅), ``failed`` (❌, or a guess that is not one of the choices),
``unanswered`` (the cell ran with ``None``), ``error`` (the cell raised), ``not run`` (no output
stored) and ``missing`` (the cell is not in the notebook: the student deleted or rewrote it).

The files come from students, so nothing in them may stop the class's report: a file that is not
a regular file (a FIFO, a device), is over ``MAX_BYTES``, is not JSON, nests too deep or has the
wrong JSON types gets a line "not counted" with the reason, and every other notebook is counted.
A folder is searched down to ``DEPTH`` levels of subfolders (``class/alice/07_….ipynb``), hidden
ones (``.ipynb_checkpoints``) and links to folders skipped, a link that loops or leads nowhere named and not
counted; a file named twice counts once. The
report (``--csv``) is checked before anything is read: never one of the notebooks, never a link,
never an existing file unless ``force``; its cells that a spreadsheet would take for a formula
start with ``'``.
"""

import csv
import io
import json
import os
import re
import stat
from pathlib import Path

from grpo_edu.common import _checks
from grpo_edu.common.safe_files import NotReadable, create_new, kind, read_regular, replace_atomically, shown

STATUSES = ("passed", "failed", "unanswered", "error", "not run", "missing")
SYMBOLS = {"passed": "✓", "failed": "✗", "unanswered": "–", "error": "!", "not run": "·", "missing": "?"}
"""One character per status, for the table."""

MAX_BYTES = 50_000_000
"""A notebook larger than this (50 MB) is not read: "not counted: too large"."""
DEPTH = 3
"""How many levels of subfolders below a folder given are searched (class/alice/… is one)."""

_CALL = re.compile(r"""\b(check|reveal)\(\s*["'](\d\d[a-z]?\.P?\d+)["']""")
_TITLE = re.compile(r"^#\s*Lesson\s+(\d\d[a-z]?)\b")


def _status(cell):
    """The status of one exercise or prediction cell, from its stored outputs."""
    outputs = cell.get("outputs") or []
    if any(o.get("output_type") == "error" for o in outputs):
        return "error"
    text = "".join("".join(o.get("text", "")) if isinstance(o.get("text", ""), list) else o.get("text", "")
                   for o in outputs if o.get("output_type") == "stream")
    if not outputs or not text:
        return "not run"
    if "✅" in text:
        return "passed"
    if "not answered yet" in text or "no guess yet" in text:
        return "unanswered"
    return "failed"                                   # ❌, or a guess that is not one of the choices


def lesson_file(lesson):
    """The course's own notebook of ``lesson`` ("07", "04b"), or None."""
    from grpo_edu.training.model.models import ASSETS

    found = sorted((ASSETS.parent / "lessons").glob(f"{lesson}_*.ipynb"))
    return found[0] if found else None


def ids_in(cells):
    """{exercise or prediction id: its cell}, in the order the cells come."""
    out = {}
    for cell in cells:
        if cell.get("cell_type") == "code":
            for _, exercise_id in _CALL.findall("".join(cell.get("source", ""))):
                out.setdefault(exercise_id, cell)
    return out


def expected_ids(lesson):
    """The exercises and predictions this version of the course asks in ``lesson`` ("07", "04b"), read
    from the course's own notebook, in the order they come; empty for a lesson it does not have."""
    path = lesson_file(lesson)
    if path is None:
        return []
    return list(ids_in(json.loads(path.read_text(encoding="utf-8"))["cells"]))


def _is_text(value):
    """A notebook's text field: a string, or a list of strings."""
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _shape_problem(notebook):
    """None, or why ``notebook`` (parsed JSON) does not have the types this module reads."""
    if not isinstance(notebook, dict):
        return "not a JSON object"
    if "cells" not in notebook:
        return "no cells"
    cells = notebook["cells"]
    if not isinstance(cells, list):
        return "cells is not a list"
    for n, cell in enumerate(cells, 1):
        if not isinstance(cell, dict):
            return f"cell {n} is not an object"
        if not _is_text(cell.get("source", "")):
            return f"cell {n}'s source is not text"
        outputs = cell.get("outputs", [])
        if outputs is None:
            outputs = []
        if not isinstance(outputs, list):
            return f"cell {n}'s outputs is not a list"
        for output in outputs:
            if not isinstance(output, dict):
                return f"cell {n} has an output that is not an object"
            if not _is_text(output.get("text", "")):
                return f"cell {n} has an output whose text is not text"
    return None


def _load(path):
    """The notebook's cells, or raise ``NotReadable`` with the reason it is not counted."""
    if os.path.isdir(path):                                  # met in a search: one it could not enter
        try:
            os.listdir(path)
        except OSError as err:
            raise NotReadable(f"a folder that cannot be opened ({err.strerror})") from None
        raise NotReadable(f"a folder more than {DEPTH} levels of subfolders down: not searched (name it on its own)")
    if os.path.islink(path) and not os.path.exists(path):
        try:
            os.stat(path)
        except OSError as err:
            raise NotReadable(f"a link that leads nowhere or loops ({err.strerror})") from None
    data = read_regular(path, MAX_BYTES)
    try:
        notebook = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise NotReadable("not a notebook (not UTF-8 text)") from None
    except ValueError as err:
        raise NotReadable(f"not a notebook ({type(err).__name__})") from None
    except RecursionError:
        raise NotReadable("not a notebook (its JSON nests too deep to read)") from None
    problem = _shape_problem(notebook)
    if problem:
        raise NotReadable(f"not a notebook ({problem})")
    return notebook["cells"]


def read_notebook(path, student=None):
    """One student's notebook: ``(answers, info)``.

    ``answers``: {exercise id: status}, every id the course expects for the lesson (``missing`` when
    its cell is gone). ``info``: ``student`` (``student``, by default the file's name without
    ``.ipynb``), ``lesson`` (from the title cell), ``problem`` (None, or why the file cannot be
    read as one of the course's executed notebooks: not a regular file, too large, not a notebook,
    never executed, another version of the course), ``unknown`` (ids in the file that this version
    does not have).
    """
    path = Path(path)
    info = {"file": str(path), "student": student or path.stem, "lesson": None, "problem": None, "unknown": []}
    try:
        cells = _load(path)
    except NotReadable as err:
        info["problem"] = str(err)
        return {}, info
    first = "".join(cells[0].get("source", "")) if cells else ""
    match = _TITLE.match(first.lstrip())
    if match is None:
        info["problem"] = "not one of the course's lessons (no '# Lesson NN' title)"
        return {}, info
    info["lesson"] = match.group(1)
    found = {exercise_id: _status(cell) for exercise_id, cell in ids_in(cells).items()}
    expected = expected_ids(info["lesson"])
    if not expected:
        info["problem"] = f"lesson {info['lesson']} is not in this version of the course"
        return {}, info
    info["unknown"] = sorted(set(found) - set(expected))
    if info["unknown"]:
        info["problem"] = f"another version of the course (exercises {', '.join(info['unknown'])} are not in this one)"
    elif all(cell.get("execution_count") is None for cell in cells if cell.get("cell_type") == "code"):
        info["problem"] = "never executed (no cell has run)"
    answers = {i: found.get(i, "missing") for i in expected}
    return answers, info


def _identity(path):
    """What makes two names the same file: device and inode (links and hard links followed)."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return os.path.abspath(path)


def _walk(folder, depth):
    """(file, path relative to ``folder``) for every file in ``folder`` and its subfolders down to
    ``depth`` levels, in name order; hidden entries and links to folders are skipped."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        yield Path(folder), Path(".")                           # named, not counted: "cannot be opened"
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            link_to_folder = entry.is_symlink() and entry.is_dir()
        except OSError:                                      # a link that loops (ELOOP) or cannot be followed
            yield Path(entry.path), Path(entry.name)         # named, not counted: "a link that loops"
            continue
        if link_to_folder:
            continue                                         # a link to a folder could loop: not followed
        if entry.is_dir(follow_symlinks=False) and depth > 0:
            yield from ((f, Path(entry.name) / rel) for f, rel in _walk(entry.path, depth - 1))
            continue
        yield Path(entry.path), Path(entry.name)             # a folder past DEPTH: named, not counted


def find_notebooks(paths):
    """Every file to read in ``paths`` (files, or folders searched ``DEPTH`` levels down), once each:
    ``[(file, student)]``. ``student`` names the row: the file's path below the folder given,
    without ``.ipynb`` (``alice/07_reward_design``), or the file's name for a file given; the path
    as given where two rows would share a name. The same file reached twice (named again, through
    a folder, a link or a hard link) is listed once, where it is first met."""
    found, seen = [], set()
    for p in map(Path, paths):
        pairs = _walk(p, DEPTH) if p.is_dir() else [(p, Path(p.name))]
        for path, rel in pairs:
            key = _identity(path)
            if key not in seen:
                seen.add(key)
                found.append((path, p.name if rel == Path(".") else rel.with_suffix("").as_posix()))
    names = [student for _, student in found]
    return [(path, str(path.with_suffix("")) if names.count(student) > 1 else student) for path, student in found]


def check_report(report, notebooks, *, force=False):
    """Refuse a ``--csv`` report that would destroy something, before any notebook is read: one of
    ``notebooks`` (by any path, link or hard link), a link, a folder, a FIFO or device, an existing
    file without ``force``, a read-only file, or a folder that is missing or cannot be written (tried with a
    probe file, ``_checks.can_create_file_in``: root passes every permission check, and /proc takes no file)."""
    name = shown(report)
    if os.path.exists(report):
        st = os.stat(report)
        read = next((p for p in notebooks if _identity(p) == (st.st_dev, st.st_ino)), None)
        if read is not None:
            _checks.fail("--csv", f"{name} is one of the notebooks read ({shown(read)})",
                         "name a new file for the report, outside the folders read, e.g. --csv class_answers.csv")
        if stat.S_ISDIR(st.st_mode):
            _checks.fail("--csv", f"{name} is a folder",
                         f"name a file in it, e.g. --csv {shown(Path(report) / 'answers.csv')}")
        if not stat.S_ISREG(st.st_mode):
            _checks.fail("--csv", f"{name} is not a regular file ({kind(st.st_mode)})",
                         "name a plain file for the report")
    if os.path.islink(report):
        _checks.fail("--csv", f"{name} is a symbolic link (to {shown(os.readlink(report))})",
                     "name the report's own file: it is never written through a link")
    if os.path.lexists(report) and not force:
        _checks.fail("--csv", f"{name} exists", "pass --force to replace it, or name another file")
    if os.path.exists(report) and not os.access(report, os.W_OK):
        _checks.fail("--csv", f"{name} is read-only", "make it writable, or name another file")
    folder = os.path.dirname(os.path.abspath(report))
    if not os.path.isdir(folder):
        _checks.fail("--csv", f"the folder {shown(folder)} does not exist", "create it first, or name a file in a "
                     "folder that exists")
    if not os.access(folder, os.W_OK | os.X_OK) or not _checks.can_create_file_in(folder):   # tried: root passes
        _checks.fail("--csv", f"cannot write into the folder {shown(folder)}", "name a file in a folder you can write")


def read_class(paths, *, report=None, force=False):
    """Every notebook in ``paths`` (see ``find_notebooks``): ``(rows, info)``. ``rows``: one
    (answers, info) per file, sorted by lesson then student. With ``report`` (the ``--csv`` file),
    ``check_report`` refuses it first, before anything is read."""
    files = find_notebooks(paths)
    if report is not None:
        check_report(report, [f for f, _ in files], force=force)
    rows = [read_notebook(f, student) for f, student in files]
    rows.sort(key=lambda r: (r[1]["lesson"] or "~", r[1]["student"]))
    return rows, {"files": len(files)}


def format_table(rows):
    """The class at a glance: per lesson, student × exercise (✓ ✗ – ! · ?) and each exercise's success
    rate among the students whose notebook could be read; then one line per file that could not."""
    out = []
    lessons = sorted({info["lesson"] for _, info in rows if info["lesson"] and not info["problem"]})
    for lesson in lessons:
        readable = [(a, i) for a, i in rows if i["lesson"] == lesson and not i["problem"]]
        ids = expected_ids(lesson)
        width = max(len("success rate"), *(len(shown(i["student"])) for _, i in readable))
        out.append(f"lesson {lesson}: {len(readable)} notebook(s)")
        out.append(" ".join(["student".ljust(width), *(i.rjust(6) for i in ids)]))
        for answers, info in readable:
            out.append(" ".join([shown(info["student"]).ljust(width), *(SYMBOLS[answers[i]].rjust(6) for i in ids)]))
        rates = [sum(a[i] == "passed" for a, _ in readable) / len(readable) for i in ids]
        out.append(" ".join(["success rate".ljust(width), *(f"{r:.0%}".rjust(6) for r in rates)]))
        weakest = [i for i, r in zip(ids, rates) if r == min(rates)]
        out.append(f"explain again first: {', '.join(weakest)} ({min(rates):.0%} passed)")
        out.append("")
    problems = [info for _, info in rows if info["problem"]]
    if problems:
        out.append("not counted:")
        out.extend(f"  {shown(info['file'])}: {info['problem']}" for info in problems)
    out.append("✓ passed   ✗ failed   – unanswered   ! error   · not run   ? cell missing")
    return "\n".join(out)


_FORMULA = ("=", "+", "-", "@", "\t", "\r")
"""How a spreadsheet recognises a formula (OWASP, CSV injection): such a cell gets a leading '."""


def _cell(value):
    value = str(value)
    return "'" + value if value.startswith(_FORMULA) else value


def write_csv(rows, path, *, force=False):
    """One line per student, exercise and status (and one per file that could not be read), into a
    new file ``path`` (replaced in one step with ``force``, never written through a link). A name
    that is not UTF-8 is written with its odd bytes escaped (``\\udce9``)."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["student", "file", "lesson", "exercise", "status"])
    for answers, info in rows:
        if info["problem"]:
            writer.writerow(map(_cell, [info["student"], info["file"], info["lesson"] or "", "", info["problem"]]))
            continue
        for exercise_id, status in answers.items():
            writer.writerow(map(_cell, [info["student"], info["file"], info["lesson"], exercise_id, status]))
    data = text.getvalue().encode("utf-8", errors="backslashreplace")
    try:
        (replace_atomically if force else create_new)(path, data)
    except FileExistsError:
        _checks.fail("--csv", f"{shown(path)} was created by someone else while the notebooks were read",
                     "pass --force to replace it, or name another file")
    except OSError as err:
        _checks.fail("--csv", f"cannot write {shown(path)} ({err.strerror})", "name a file in a folder you can write")
