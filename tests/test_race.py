"""Lesson 12's race (``python -m grpo_edu.course.variants``): every variant runs, and the table reads."""

import math

import pytest

from grpo_edu.course import variants


def test_a_variant_runs_on_lesson_11s_model_and_reports_every_metric():
    row, info = variants.run_variant("dapo", 0, steps=2, eval_size=8)
    assert set(row) == {*variants.METRICS, "curve"}
    assert len(row["curve"]) == 2 == len(info["trainer"].history)
    assert all(0 <= row[m] <= 1 for m in ("before", "after", "pass@8", "truncated", "dead", "clip"))
    assert row["generated"] >= 8 * 8 and row["generated"] % 64 == 0        # dynamic sampling may draw more groups
    assert math.isfinite(row["entropy"]) and row["seconds"] > 0


def test_the_table_gives_median_and_range_over_seeds():
    rows = [dict.fromkeys(variants.METRICS, v) for v in (0.1, 0.3, 0.2)]
    text = variants.format_table({"grpo": rows})
    assert text.splitlines()[1].startswith("grpo") and "0.2 [0.1, 0.3]" in text


def test_an_unknown_variant_is_named():
    with pytest.raises(ValueError, match=r"^name: unknown variant 'ppo'"):
        variants.run_variant("ppo")


def test_stored_races_merge_with_their_kernels(tmp_path):
    import json

    row = dict.fromkeys(variants.METRICS, 0.5)
    for kernels, seeds in (("AVX512", (0, 1)), ("DEFAULT", (0,))):
        (tmp_path / f"{kernels}.json").write_text(json.dumps(
            {"command": "python -m grpo_edu.course.variants --seeds …", "cpu_capability": kernels, "torch": "x",
             "results": {"grpo": [{**row, "seed": s} for s in seeds]}}))
    merged, info = variants.stored_race(tmp_path)
    assert [(r["kernels"], r["seed"]) for r in merged["grpo"]] == [("AVX512", 0), ("AVX512", 1), ("DEFAULT", 0)]
    assert [f["seeds"] for f in info["files"]] == [[0, 1], [0]]
    with pytest.raises(ValueError, match="^folder: holds no race file"):
        variants.stored_race(tmp_path / "empty")


def test_the_shipped_race_covers_every_variant_over_three_seeds_and_two_kernel_sets():
    merged, _ = variants.stored_race()
    assert set(merged) == set(variants.VARIANTS)
    for name, rows in merged.items():
        assert sorted((r["kernels"], r["seed"]) for r in rows) == sorted(
            (k, s) for k in {r["kernels"] for r in rows} for s in (0, 1, 2)), name
        assert {r["kernels"] for r in rows} >= {"DEFAULT"} and len({r["kernels"] for r in rows}) == 2, name
        assert all(len(r["curve"]) == variants.COMMON["total_training_steps"] for r in rows)


def test_grpo_edu_variants_passes_its_flags_to_the_race(capsys):
    from grpo_edu.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["variants", "--steps", "0"])
    assert exit_.value.code == 2 and "--steps must be ≥ 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["variants", "--variants", "ppo"])
    assert "invalid choice: 'ppo'" in capsys.readouterr().err


def test_step_times_time_each_variant_against_grpo():
    rows = variants.step_times(("grpo", "dapo"), steps=1, warmup=0)
    assert rows["grpo"]["vs_grpo"] == 1.0 and rows["dapo"]["s_per_step"] > 0
    assert rows["grpo"]["completions_per_step"] == 64 and rows["dapo"]["completions_per_step"] % 64 == 0
