"""Package-level promises: cheap import, lazy exports, exercises, README ↔ CI."""

import math
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


# Expected answers worked out by hand (in the comments), independently of the library, so a bug
# in an exercise's solution *or* in the library function it calls turns this test red.
HAND_COMPUTED = {
    "00.1": 7,                                     # one 1 among seven 0s: μ = 1/8, every 0 is below it
    "17b.2": -1.2244,                              # R = {1,0,1,1,1,1}: μ 5/6, σ √(1/6); (2·(1/6) − 5/6)/(σ + 1e-4)
    "18.1": 6,                                     # step 10 trains on version 9's batch; 3 versions older
    "18.2": -2.4,                                  # −min(1.5, 1.2)·Â · (π_prox/μ = 2) = −1.2 · 2
    "18.3": [2.2255, 0.0],                         # exp(40 · 0.02) = e^0.8; e^1.6 = 4.95 > C = 3 → masked
    "01.1": 250,                                   # 3000 // 12
    "01.2": 600,                                   # min(600, 5 × 250)
    "01.3": 3,                                     # 6 × 8 = 48 completions / 16 per pass
    "01.4": 40,                                    # 1000 % 64
    "01.5": 1800,                                  # 600 steps × 3 updates each; processes split, not add
    "02.1": 0.75 / (0.5 + 1e-4),                   # μ = 0.25, unbiased σ = √(0.75/3) = 0.5
    "02.2": [-0.2, -0.2, -0.2, -0.2, 0.8],         # μ = 0.5; R − μ
    "01.6": [600, 600 * 12 * 16],                  # G leaves the 600 steps; each step makes B·G = 192
    "02.3": 1.5,
    "02.5": [0.6 / (0.3 ** 0.5 + 1e-4)] * 2 + [-0.4 / (0.3 ** 0.5 + 1e-4)] * 3,   # μ = 0.4, σ² = (2·0.36 + 3·0.16)/4
    "02.6": 16,                                    # √(0.25/G) = 0.125 → G = 16                                   # 2 − μ, μ = 0.5
    "03.1": 0.9 ** 4 + 0.1 ** 4,
    "03.2": 1 - (1 - (0.95 ** 16 + 0.05 ** 16)) ** 4,
    "03.3": (0.5 ** 2 + 0.5 ** 2) ** 4,
    "03.5": 14,                                    # 0.95¹³ + 0.05¹³ = 0.513, 0.95¹⁴ + … = 0.488
    "03.6": 0.2474,                                # p = softmax(2·logits)[1] = 0.1602; p⁸ + (1 − p)⁸
    "04.1": 1.2,                                   # min(1.5·1, 1.2·1)
    "04.2": 2.56,                                  # min(1.35·2, 1.28·2)
    "04.3": 0.5 - math.log(0.5) - 1,               # ρ = π_ref/π_θ = 0.5
    "04.4": 1 / (2 * 8),
    "04.7": 0.75,                                  # (1.5·1 + 0.8·0 + 0.8·0 + 1.5·1)/4
    "04b.1": "grpo",                               # 1/(N·|o_i|): a token of the 8-token answer weighs 1/4 as much
    "04b.2": "down",                               # ∂k3/∂log π_θ = 1 − e^(−0.5) > 0: descent lowers log π_θ                           # 1/(N·|o_i|)
    "05.1": 1.0,
    "05.2": (2 / 3) / (math.sqrt(4 / 15) + 1e-4),  # μ = 1/3, unbiased σ² = (2·4/9 + 4·1/9)/5 = 4/15
    "05.3": 0.97 ** 8 + 0.03 ** 8,
    "05.4": 0.8 ** 4 + 0.2 ** 4,
    "05.5": -(0.75 / (0.5 + 1e-4)) / 8,
    "05.7": "temperature",                         # exercise_bank.MYSTERY_RUNS["05.7"] changes the temperature             # −Â/(N·|o|), N = 8 with the dead group
    "06.1": 30,                                    # k/(70 + k) = 0.3 → k = 0.3·70/0.7
    "06.2": 0.2308,                                # 30/130
    "06.3": [0.5, 1],                              # lowest Â (0.5), then the older round (1)
    "06.4": 181.8,                                 # 10,000/55
    "07.1": 0.9,                                   # 0.6·1 + 0.2·(1 − 2/4) + 0.2·1
    "07.2": [0.0, 0.0, 0.0, 0.0],
    "07.3": 7.5 / (5 + 1e-4),                      # μ = 2.5, unbiased σ = √((7.5² + 3·2.5²)/3) = 5
    "07.4": [0.8, 0.6],                            # 0.2·0 + 0.8·1; 0.2·1 + 0.8·0.5
    "08.5": [9 / 40, 3 / 5],                       # 9 right samples of 40; prompts 1, 3 and 5 have one
    "09.1": 0.505,                                 # 0.45² + 0.55² = 0.2025 + 0.3025
    "09.2": 0.0101,                                # 0.45⁸ + 0.55⁸ = 0.00168 + 0.00837
    "09.3": 0.15,                                  # 0 + 0.25 · (0.6 − 0)
    "10.1": [16, 2],                               # 16·8 = 128 completions / 4 processes = 32 = 2 × 16
    "10.2": [16, 32],                              # 16 prompts; 128 completions / 4 GPUs
    "10.3": 10.64,                                 # 12 · 7,615,616,512 / 8 / 1024³ = 10.638
    "11.1": 8.0,                                   # Â/(N·5) over Â/(N·40)
    "11.2": 1.0,                                   # Â/(N·T_max) for both
    "11.3": -0.6,                                  # (32 − 38)/10
    "12.5": [0.0, 1.5, 1.41],                      # clipped at 1.2: no gradient; min(1.5, 5); 4σ(0.5)σ(−0.5)·1.5
}


@pytest.mark.parametrize("ex_id", sorted(HAND_COMPUTED))
def test_exercise_solutions_match_hand_computed_answers(ex_id):
    from grpo_edu.course.aids.exercise_bank import EXERCISES
    from grpo_edu.course.aids.exercises import check

    expected = HAND_COMPUTED[ex_id]
    got = EXERCISES[ex_id].solution()
    if isinstance(expected, (list, str)):
        assert got == (expected if isinstance(expected, str) else pytest.approx(expected, abs=1e-9))
    else:
        assert got == pytest.approx(expected, abs=1e-4)
    assert check(ex_id, expected) is True
    wrong = ([x + 1 for x in expected] if isinstance(expected, list) else expected + "?" if isinstance(expected, str)
             else expected + 0.5)
    assert check(ex_id, wrong) is False


def test_default_run_exercises_follow_the_config():
    from grpo_edu.course.aids.exercise_bank import EXERCISES
    from grpo_edu.training.trainers.config import GRPOConfig

    c = GRPOConfig()
    assert EXERCISES["08.1"].solution() == c.batch_size * c.num_generations          # TRL counts completions
    assert EXERCISES["08.2"].solution() == pytest.approx(2000 / (7600 // 24), abs=1e-3)


def test_every_exercise_is_covered_and_unanswered_or_unknown_is_handled():
    from grpo_edu.course.aids.exercise_bank import EXERCISES
    from grpo_edu.course.aids.exercises import check

    assert set(EXERCISES) - set(HAND_COMPUTED) == {"00.2", "08.1", "08.2", "08.3", "08.4",
                                                   "02.4", "03.4", "04.5", "04.6", "05.6", "06.5",
                                                   "11.4", "12.1", "12.2", "12.3", "12.4", "13.1", "07.5", "10.4", "09.4", "09.5",
                                                   "14.1", "15.1", "16.1", "17b.1", "18.4"}   # code exercises: test_exercises.py; 00.2: test_diagrams.py; 18.4 reads a stored run
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
    listed = set(re.findall(r"^\| \d\d[a-z]? \| `(\d\d[a-z]?_\w+)` \|", text, re.M))
    present = {nb.stem for nb in (ROOT / "lessons").glob("*.ipynb")}
    assert listed == present


@pytest.mark.parametrize("lesson", sorted(p.stem for p in (ROOT / "lessons").glob("*.ipynb")))
def test_every_lesson_opens_with_its_chinese_summary_and_key_terms(lesson):
    import json

    cells = json.loads((ROOT / "lessons" / f"{lesson}.ipynb").read_text(encoding="utf-8"))["cells"]
    opening = "".join(cells[0]["source"])
    assert opening.startswith("# Lesson"), lesson
    first_paragraph = opening.split("\n\n")[1]                       # right under the title
    assert first_paragraph.startswith("**中文摘要**"), f"{lesson}: the 中文摘要 must come first, under the title"
    assert "关键术语" in first_paragraph, f"{lesson}: its 关键术语 line belongs in the summary"
    assert len(re.findall(r"[\u4e00-\u9fff]", first_paragraph)) >= 60, lesson
    assert "群体相对" not in opening, "GRPO is 组相对策略优化"


@pytest.mark.parametrize("lesson", sorted(p.stem for p in (ROOT / "lessons").glob("*.ipynb")))
def test_every_lesson_closes_with_a_chinese_summary_and_is_saved_as_jupyterlab_saves_it(lesson):
    import json

    nb = json.loads((ROOT / "lessons" / f"{lesson}.ipynb").read_text(encoding="utf-8"))
    markdown = ["".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "markdown"]
    closing = next((text for text in reversed(markdown) if "中文小结" in text), None)
    assert closing is not None and markdown.index(closing) >= len(markdown) - 2, \
        f"{lesson}: its last markdown cells need a 中文小结"
    assert len(re.findall(r"[\u4e00-\u9fff]", closing)) >= 60, f"{lesson}: the 中文小结 is a few sentences"
    # JupyterLab writes this display name on save: a lesson stored with another one changes when opened
    assert nb["metadata"]["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python",
                                            "name": "python3"}, lesson


def test_every_faq_link_points_at_a_lesson_heading_that_exists():
    import json

    text = (ROOT / "docs" / "FAQ.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(\.\./lessons/([\w]+\.ipynb)#([^)\s]+)\)", text)
    assert len(re.findall(r"^### ", text, re.M)) >= 15 and len(links) >= 25
    for notebook, anchor in links:
        path = ROOT / "lessons" / notebook
        assert path.exists(), notebook
        # JupyterLab's anchor: the heading as rendered (no backticks), spaces → hyphens
        headings = {line.lstrip("#").strip().replace("`", "").replace(" ", "-")
                    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "markdown"
                    for line in "".join(cell["source"]).splitlines() if re.match(r"#{1,4} ", line)}
        assert anchor in headings, f"docs/FAQ.md links {notebook}#{anchor}, which is no heading there"


def test_the_instructors_guide_covers_every_lesson_and_its_polls_exist():
    from grpo_edu.course.aids.exercise_bank import PREDICTIONS

    text = (ROOT / "docs" / "INSTRUCTORS.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| (\d\d[a-z]?) ", text, re.M)
    lessons = sorted(p.stem.split("_")[0] for p in (ROOT / "lessons").glob("*.ipynb"))
    assert listed == lessons, "docs/INSTRUCTORS.md's lesson table must list every lesson once, in order"
    polls = re.findall(r"^\| (\d\d\.P\d+) ", text, re.M)
    assert polls and set(polls) <= set(PREDICTIONS)


# --- the front page and the docs pages ---------------------------------------------------------------
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))

PAST_WORK = re.compile(
    r"this session|previous session|until this|since this|for the record|earlier (reading|run|session)s?\b"
    r"|(measured|re-?measured) (again|anew)|\bused to\b|\bno longer\b|\bis new\b|\bnow (trains|takes|runs)\b",
    re.IGNORECASE)
"""Phrases that narrate how a number moved over time: that belongs in commit messages, not on a page."""


def test_the_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "README.md is a front page: move measurements to a docs/ page"
    for heading in ("## Two commands", "## The lessons", "## For instructors", "## Where to go next"):
        assert heading in text, heading
    for page in DOC_PAGES:                                    # every docs page is reachable from the front page
        assert f"(docs/{page.name})" in text, f"README.md does not link docs/{page.name}"


@pytest.mark.parametrize("page", ["README.md"] + [f"docs/{p.name}" for p in DOC_PAGES])
def test_no_page_narrates_past_work(page):
    for number, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1):
        match = PAST_WORK.search(line)
        assert not match, f"{page}:{number} narrates past work ({match.group(0)!r}): state what holds now"


def _anchors(markdown):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in markdown.splitlines() if re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("page", ["README.md"] + [f"docs/{p.name}" for p in DOC_PAGES])
def test_every_relative_link_resolves(page):
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    for link in links:
        if re.match(r"[a-z]+:", link):                        # http(s), mailto: not followed offline
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{page} links {link}, which does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file.read_text(encoding="utf-8")), f"{page} links {link}: no such heading"
