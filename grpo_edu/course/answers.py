"""A class's answers at a glance: read students' saved notebooks, never run them (``grpo-edu check-answers``).

Every exercise cell calls ``check("ID", …)`` and every prediction cell ``reveal("ID", …)``; both print
one line that starts with ✅ or ❌, or says the answer is still missing. This module reads those
printed lines from each notebook's stored outputs, so an instructor who collects thirty notebooks
sees, per student and per exercise, what passed, what failed and what was never run, and each
exercise's success rate: what to explain again. It opens the files as JSON and executes nothing.

Statuses, per exercise: ``passed`` (✅), ``failed`` (❌, or a guess that is not one of the choices),
``unanswered`` (the cell ran with ``None``), ``error`` (the cell raised), ``not run`` (no output
stored) and ``missing`` (the cell is not in the notebook: the student deleted or rewrote it).
"""

import csv
import json
import re
from pathlib import Path

STATUSES = ("passed", "failed", "unanswered", "error", "not run", "missing")
SYMBOLS = {"passed": "✓", "failed": "✗", "unanswered": "–", "error": "!", "not run": "·", "missing": "?"}
"""One character per status, for the table."""

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
    from grpo_edu.training.models import ASSETS

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


def read_notebook(path):
    """One student's notebook: ``(answers, info)``.

    ``answers``: {exercise id: status}, every id the course expects for the lesson (``missing`` when
    its cell is gone). ``info``: ``lesson`` (from the title cell), ``problem`` (None, or why the file
    cannot be read as one of the course's executed notebooks: not a notebook, never executed,
    another version of the course), ``unknown`` (ids in the file that this version does not have).
    """
    path = Path(path)
    info = {"file": str(path), "student": path.stem, "lesson": None, "problem": None, "unknown": []}
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        if not isinstance(cells, list):
            raise TypeError("cells is not a list")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        info["problem"] = f"not a notebook ({type(err).__name__})"
        return {}, info
    first = "".join(cells[0].get("source", "")) if cells else ""
    match = _TITLE.match(first.lstrip()) if isinstance(first, str) else None
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


def read_class(paths):
    """Every notebook in ``paths`` (files, or folders whose files are all read): ``(rows, info)``.
    ``rows``: one (answers, info) per file, sorted by lesson then student."""
    files = []
    for p in map(Path, paths):
        files.extend(sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p])
    rows = [read_notebook(f) for f in files]
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
        width = max(len("success rate"), *(len(i["student"]) for _, i in readable))
        out.append(f"lesson {lesson}: {len(readable)} notebook(s)")
        out.append(" ".join(["student".ljust(width), *(i.rjust(6) for i in ids)]))
        for answers, info in readable:
            out.append(" ".join([info["student"].ljust(width), *(SYMBOLS[answers[i]].rjust(6) for i in ids)]))
        rates = [sum(a[i] == "passed" for a, _ in readable) / len(readable) for i in ids]
        out.append(" ".join(["success rate".ljust(width), *(f"{r:.0%}".rjust(6) for r in rates)]))
        weakest = [i for i, r in zip(ids, rates) if r == min(rates)]
        out.append(f"explain again first: {', '.join(weakest)} ({min(rates):.0%} passed)")
        out.append("")
    problems = [info for _, info in rows if info["problem"]]
    if problems:
        out.append("not counted:")
        out.extend(f"  {info['file']}: {info['problem']}" for info in problems)
    out.append("✓ passed   ✗ failed   – unanswered   ! error   · not run   ? cell missing")
    return "\n".join(out)


def write_csv(rows, path):
    """One line per student, exercise and status (and one per file that could not be read)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "file", "lesson", "exercise", "status"])
        for answers, info in rows:
            if info["problem"]:
                writer.writerow([info["student"], info["file"], info["lesson"] or "", "", info["problem"]])
                continue
            for exercise_id, status in answers.items():
                writer.writerow([info["student"], info["file"], info["lesson"], exercise_id, status])
