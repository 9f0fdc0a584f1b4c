"""Lesson 12's race (``python -m grpo_edu.course.variants``): every variant runs, and the table reads."""

import math

import pytest

from grpo_edu.course import variants


def test_a_variant_runs_on_lesson_11s_model_and_reports_every_metric():
    row = variants.run_variant("dapo", 0, steps=1, eval_size=8)
    assert set(row) == set(variants.METRICS)
    assert all(0 <= row[m] <= 1 for m in ("before", "after", "pass@8", "truncated", "dead"))
    assert row["generated"] >= 8 * 8 and row["generated"] % 64 == 0        # dynamic sampling may draw more groups
    assert math.isfinite(row["entropy"]) and row["seconds"] > 0


def test_the_table_gives_median_and_range_over_seeds():
    rows = [dict.fromkeys(variants.METRICS, v) for v in (0.1, 0.3, 0.2)]
    text = variants.format_table({"grpo": rows})
    assert text.splitlines()[1].startswith("grpo") and "0.2 [0.1, 0.3]" in text


def test_an_unknown_variant_is_named():
    with pytest.raises(ValueError, match=r"^name: unknown variant 'ppo'"):
        variants.run_variant("ppo")
