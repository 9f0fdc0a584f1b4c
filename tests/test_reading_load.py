"""grpo_edu.course.testing.reading_load: the audit's columns, on a small notebook built here word by word."""

import json

import pytest

from grpo_edu.course.testing.reading_load import measure, table, words


def _md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text, png=False):
    outputs = [{"output_type": "display_data", "data": {"image/png": "AAAA", "text/plain": "<Figure>"},
                "metadata": {}}] if png else []
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": outputs, "execution_count": 1}


NOTEBOOK = {"cells": [
    _md("# Lesson 99 · A title\n\n**中文摘要** 这是 摘要\n\n**After this lesson you can**\n\n- count one\n- count two\n\n"
        "Run the cells."),                                                     # 4 + 5 + 2 + 2 + 3 = 16 words
    _md("## 1. Core part\n\n*Core.*\n\nfour words right here\n\n<details><summary>aside</summary>five words "
        "hidden in it</details>"),                                             # all: 4+2+... see below
    _code('guess = None'),
    _code('reveal("99.P1", guess, 3)'),
    _code('plot()', png=True),
    _md("**Figure · a plot.** What to see: the line."),
    _code('# Worked example\nok = check("01.1", 250)'),
    _code('ok = check("01.2", None)'),
    _code('ok = check("02.4", None)'),
    _md("## 2. Details\n\n*Deep dive (skip on a first pass).*\n\nsix words that a first pass skips"),
    _md("### 2.1 More of it\n\nstill off the core track"),
    _md("## Check yourself\n\n- one"),
    _md("## 中文小结\n\n很多 中文 字"),
]}


def test_words_count_tokens_with_a_letter_or_digit():
    assert words("a, b — 3 → ✓ `x`") == 4


def test_the_columns_follow_the_audits_rules():
    row, info = measure(NOTEBOOK, code_ids={"02.4"}, explanations={"99.P1": "three more words"})
    cell_words = {c["cell"]: (c["words"], c["core words"]) for c in info["cells"]}
    assert cell_words[0] == (16, 16)                        # the 中文摘要 paragraph left out
    heading1 = words("## 1. Core part\n\n*Core.*\n\nfour words right here\n\n<details><summary>aside</summary>"
                     "five words hidden in it</details>")
    assert cell_words[1] == (heading1, words("## 1. Core part\n\n*Core.*\n\nfour words right here"))
    assert cell_words[9][1] == 0 and cell_words[9][0] > 0    # a deep dive is off the core track
    assert cell_words[10][1] == 0 and cell_words[10][0] > 0  # and so is its subsection
    assert cell_words[12] == (0, 0)                          # the Chinese recap
    assert row["outcomes"] == 2 and row["checks"] is True
    assert (row["predict"], row["worked"], row["auto-checked"], row["code-writing"]) == (1, 1, 1, 1)
    assert (row["figures"], row["captioned"]) == (1, 1)
    assert row["words"] == sum(w for w, _ in cell_words.values())
    assert (row["why words"], row["core why words"]) == (3, 3)          # the reveal sits in a core section
    assert row["read min"] == round((row["words"] + 3) / 200, 1)
    assert row["longest cell"] == max(w for w, _ in cell_words.values())
    # the core track's study time: its reading, a prediction and an answer at 2 min, a function to write at 10
    assert row["core study min"] == round(row["core read min"] + 2 + 2 + 10)


def test_an_exercise_in_a_deep_dive_adds_no_core_study_time():
    moved = NOTEBOOK["cells"][:8] + NOTEBOOK["cells"][9:10] + [NOTEBOOK["cells"][8]] + NOTEBOOK["cells"][10:]
    row, _ = measure({"cells": moved}, code_ids={"02.4"}, explanations={"99.P1": "three more words"})
    assert row["core study min"] == round(row["core read min"] + 2 + 2)


def test_a_figure_without_a_caption_beside_it_is_not_captioned():
    cells = [c for c in NOTEBOOK["cells"] if "Figure ·" not in str(c["source"])]
    row, _ = measure({"cells": cells}, code_ids=set(), explanations={})
    assert (row["figures"], row["captioned"], row["checks"]) == (1, 0, True)


def test_the_table_totals_and_refuses_what_is_not_a_notebook(tmp_path):
    for name in ("98_a.ipynb", "99_b.ipynb"):
        (tmp_path / name).write_text(json.dumps(NOTEBOOK), encoding="utf-8")
    rows = table(sorted(tmp_path.glob("*.ipynb")), explanations={"99.P1": "one"})
    assert [r["lesson"] for r in rows] == ["98", "99", "total"]
    assert rows[-1]["why words"] == 2 and table(sorted(tmp_path.glob("*.ipynb")), explanations={})[-1]["why words"] == 0
    assert rows[-1]["words"] == 2 * rows[0]["words"] and rows[-1]["checks"] == "2/2"
    with pytest.raises(ValueError, match="paths: .*not a notebook"):
        table([tmp_path / "missing.ipynb"])
    with pytest.raises(ValueError, match="notebook: expected"):
        measure({"cells": "no"})
