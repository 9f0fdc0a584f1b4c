"""A lesson's reading load, measured from its notebook: the learner-path audit's table, re-measurable by anyone.

``python -m grpo_edu.course.testing.reading_load lessons/01_*.ipynb …`` prints one row per lesson and a total
(``--no-why`` leaves out the bank's explanations: for notebooks from before the bank had them).
It reads the notebooks as JSON and runs nothing. What each column counts (the audit's rules, written down):

* **words**: whitespace tokens with a letter or a digit, in markdown cells, leaving out the ``中文摘要``
  paragraph and the ``中文小结`` cell (their Chinese is a second telling, not more to read).
* **core words**: the same, leaving out what a first pass may skip: sections tagged "deep dive" (the line under
  the heading reads ``*Deep dive (skip on a first pass).*``, or ``*Core.*`` for a core one; headings keep their
  text, so links to them hold), and folded ``<details>`` blocks (framework asides, full tables, long explanations).
* **why words**: the explanations ``reveal()`` prints after a guess (``Prediction.why``), read from the bank: the
  prose moved out of the markdown is still read. **core why words**: those of reveals on the core track.
* **read min**: (words + why words) ÷ :data:`WORDS_PER_MINUTE`; **core read min** the same for the core track.
* **exercises**: ``check("ID", …)`` cells split into worked examples (the cell says "Worked example"),
  code-writing items (the id is a ``CodeExercise``) and auto-checked answers; ``reveal("ID", …)`` cells
  are predictions.
* **longest cell**: the most words in one markdown cell, over the whole lesson and over the core track.
* **outcomes**: the bullets under "After this lesson you can" in the lesson's first cells (at most four wanted);
  **checks**: whether a "Check yourself" list closes the lesson.
* **core study min**: the core track's study time, core read min plus the audit's rates for each exercise on the
  core track (:data:`MINUTES_PER_ITEM`: 2 for an auto-checked answer or a prediction, 10 for a function to write;
  worked examples take none): the README's study-time column.
* **figures**: stored PNG outputs; **captioned**: figures whose code cell has, right before or right after it,
  a markdown line that starts with ``**Figure`` (the course's caption: a title and what to see).
"""

import json
import re
import sys
from pathlib import Path

WORDS_PER_MINUTE = 200
"""Reading speed of the audit: 200 words a minute."""

MINUTES_PER_ITEM = {"auto-checked": 2, "predict": 2, "code-writing": 10}
"""The audit's rough time for one exercise of each kind, in minutes."""

_WORD = re.compile(r"[^\W_]", re.UNICODE)
_DETAILS = re.compile(r"<details>.*?</details>", re.DOTALL | re.IGNORECASE)
_CALL = re.compile(r"""\b(check|reveal)\(\s*["'](\d\d[a-z]?\.P?\d+)["']""")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.MULTILINE)
_OUTCOMES = re.compile(r"after this lesson you can", re.IGNORECASE)
_TAG = re.compile(r"^[*_]*(core|deep dive)\b")
_CHECKS = re.compile(r"^#{1,6}.*check yourself", re.IGNORECASE | re.MULTILINE)


def words(text):
    """Whitespace tokens that hold a letter or a digit (Chinese runs count as one token each)."""
    return sum(1 for token in text.split() if _WORD.search(token))


def _english(cell_text):
    """A markdown cell without its Chinese summary paragraph; '' for the Chinese recap cell."""
    if cell_text.lstrip().startswith("## 中文小结"):
        return ""
    return "\n\n".join(p for p in re.split(r"\n\s*\n", cell_text) if "中文摘要" not in p)


def _source(cell):
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _has_png(cell):
    return any("image/png" in (o.get("data") or {}) for o in cell.get("outputs") or [])


def _is_caption(cell):
    return cell.get("cell_type") == "markdown" and any(
        line.lstrip().startswith("**Figure") for line in _source(cell).splitlines())


def _code_exercise_ids():
    from grpo_edu.course.aids.exercise_bank import EXERCISES, CodeExercise

    return {k for k, ex in EXERCISES.items() if isinstance(ex, CodeExercise)}


def _explanations():
    from grpo_edu.course.aids.prediction_bank import PREDICTIONS

    return {k: p.why for k, p in PREDICTIONS.items()}


def measure(notebook, code_ids=None, explanations=None):
    """The reading load of one notebook (a dict, as ``json.load`` gives). Returns ``(row, info)``.

    ``row``: the table's columns; ``info``: per markdown cell, its index, words and whether it is on the core track.
    ``code_ids``: the ids of code-writing exercises (default: the course's ``CodeExercise`` ids);
    ``explanations``: {prediction id: the text ``reveal`` prints after a guess} (default: the course's bank).
    """
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise ValueError("notebook: expected a notebook's JSON (a dict with a 'cells' list). "
                         "Fix: pass json.load(open(path)) of an .ipynb file.")
    code_ids = _code_exercise_ids() if code_ids is None else set(code_ids)
    explanations = _explanations() if explanations is None else dict(explanations)
    cells = notebook["cells"]
    row = {"words": 0, "core words": 0, "why words": 0, "core why words": 0, "auto-checked": 0, "code-writing": 0, "predict": 0, "worked": 0,
           "longest cell": 0, "longest core cell": 0, "core item min": 0, "outcomes": 0, "checks": False, "figures": 0,
           "captioned": 0}
    per_cell, deep = [], False
    for i, cell in enumerate(cells):
        text = _source(cell)
        if cell.get("cell_type") == "markdown":
            english = _english(text)
            for m in _HEADING.finditer(english):
                level, title = m.group(1), m.group(2).lower()
                tag = english[m.end():].lstrip().split("\n", 1)[0].lower()   # the line under the heading
                if _TAG.match(tag):
                    deep = "deep dive" in tag
                elif len(level) <= 2 or "deep dive" in title:     # an untagged section heading sets the track
                    deep = "deep dive" in title
            n = words(english)
            core = 0 if deep else words(_DETAILS.sub("", english))
            row["words"] += n
            row["core words"] += core
            row["longest cell"] = max(row["longest cell"], n)
            row["longest core cell"] = max(row["longest core cell"], core)
            per_cell.append({"cell": i, "words": n, "core words": core})
            if i < 3 and _OUTCOMES.search(english):
                after = _OUTCOMES.split(english, maxsplit=1)[1]
                block = re.split(r"\n\s*\n(?![-*] )", after.lstrip("*: \n"), maxsplit=1)[0]
                row["outcomes"] = sum(1 for line in block.splitlines() if re.match(r"\s*[-*] ", line))
            if _CHECKS.search(text):
                row["checks"] = True
        elif cell.get("cell_type") == "code":
            for kind, ex_id in _CALL.findall(text):
                item = ("predict" if kind == "reveal" else None if "worked example" in text.lower()
                        else "code-writing" if ex_id in code_ids else "auto-checked")
                if item and not deep:
                    row["core item min"] += MINUTES_PER_ITEM[item]
                if kind == "reveal":
                    row["predict"] += 1
                    n = words(explanations.get(ex_id, ""))
                    row["why words"] += n
                    row["core why words"] += 0 if deep else n
                elif "worked example" in text.lower():
                    row["worked"] += 1
                elif ex_id in code_ids:
                    row["code-writing"] += 1
                else:
                    row["auto-checked"] += 1
            if _has_png(cell):
                row["figures"] += 1
                around = [cells[j] for j in (i - 1, i + 1) if 0 <= j < len(cells)]
                row["captioned"] += any(_is_caption(c) for c in around)
    row["read min"] = round((row["words"] + row["why words"]) / WORDS_PER_MINUTE, 1)
    row["core read min"] = round((row["core words"] + row["core why words"]) / WORDS_PER_MINUTE, 1)
    row["core study min"] = round(row["core read min"] + row.pop("core item min"))
    return row, {"cells": per_cell}


COLUMNS = ("lesson", "words", "why words", "read min", "core words", "core why words", "core read min", "core study min",
           "longest cell", "longest core cell",
           "auto-checked", "code-writing", "predict", "worked", "outcomes", "checks", "figures", "captioned")


def table(paths, explanations=None):
    """One row per notebook path and a total row, as a list of dicts in :data:`COLUMNS` order.

    ``explanations``: as for :func:`measure`; pass ``{}`` to measure notebooks from before the bank explained
    their predictions (their explanations were markdown)."""
    rows = []
    for path in paths:
        path = Path(path)
        if path.suffix != ".ipynb" or not path.is_file():
            raise ValueError(f"paths: {str(path)!r} is not a notebook file. Fix: pass lessons/NN_*.ipynb files.")
        row, _ = measure(json.loads(path.read_text(encoding="utf-8")), explanations=explanations)
        rows.append({"lesson": path.name.split("_")[0], **row})
    if rows:
        total = {"lesson": "total"}
        for col in COLUMNS[1:]:
            values = [r[col] for r in rows]
            total[col] = (max(values) if col.startswith("longest") else sum(values) if col != "checks"
                          else f"{sum(values)}/{len(values)}")
        total["read min"] = round((total["words"] + total["why words"]) / WORDS_PER_MINUTE, 1)
        total["core read min"] = round((total["core words"] + total["core why words"]) / WORDS_PER_MINUTE, 1)
        rows.append(total)
    return [{c: r[c] for c in COLUMNS} for r in rows]


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    unexplained = "--no-why" in args                 # notebooks whose predictions the bank did not yet explain
    paths = [a for a in args if a != "--no-why"]
    if not paths:
        print("usage: python -m grpo_edu.course.testing.reading_load [--no-why] lessons/01_*.ipynb …", file=sys.stderr)
        return 2
    rows = table(paths, explanations={} if unexplained else None)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in COLUMNS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
