"""Package-level promises: cheap import, lazy exports, exercises, README ↔ CI."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_does_not_load_heavy_libraries():
    code = ("import sys, grpo_edu; heavy = [m for m in ('torch', 'transformers', 'matplotlib') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_exports_resolve():
    import grpo_edu

    for name in grpo_edu.__all__:
        assert getattr(grpo_edu, name) is not None
    with pytest.raises(AttributeError):
        grpo_edu.no_such_thing


def test_exercises_check_against_library():
    from grpo_edu.exercises import EXERCISES, check

    for ex_id, ex in EXERCISES.items():
        expected = ex.solution()
        assert check(ex_id, expected) is True, ex_id
        wrong = [x + 1 for x in expected] if isinstance(expected, list) else expected + 1
        assert check(ex_id, wrong) is False, ex_id
    assert check("01.1", None) is False
    with pytest.raises(ValueError, match="^exercise_id: unknown exercise"):
        check("99.9", 1)


def _readme_command(label):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"<!-- {label} -->\s*```(?:bash|sh)\n(.+?)\n```", text, re.S)
    assert m, f"README has no '{label}' command block"
    return m.group(1).strip()


def test_ci_runs_exactly_the_readme_test_command():
    command = _readme_command("test-command")
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines


def test_readme_lists_exactly_the_lessons():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \d\d \| `(\d\d_\w+)` \|", text, re.M))
    present = {nb.stem for nb in (ROOT / "lessons").glob("*.ipynb")}
    assert listed == present
