"""Lesson 12's race (``python -m grpo_edu.course.experiments.variants``): every variant runs, and the table reads."""

import math

import pytest

from grpo_edu.course.experiments import variants


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
            {"command": "python -m grpo_edu.course.experiments.variants --seeds …", "cpu_capability": kernels, "torch": "x",
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
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--steps: is 0" in err and "give 1 or more" in err
    with pytest.raises(SystemExit):
        main(["variants", "--variants", "ppo"])
    assert "invalid choice: 'ppo'" in capsys.readouterr().err


def test_step_times_time_each_variant_against_grpo():
    rows = variants.step_times(("grpo", "dapo"), steps=1, warmup=0)
    assert rows["grpo"]["vs_grpo"] == 1.0 and rows["dapo"]["s_per_step"] > 0
    assert rows["grpo"]["completions_per_step"] == 64 and rows["dapo"]["completions_per_step"] % 64 == 0


# --- reading the race: paired by seed, the kernel sets as one run, how many seeds a gap needs -------------

def _race(after):
    """{variant: rows} from {variant: {(kernels, seed): after}}."""
    return {name: [{"seed": seed, "kernels": kernels, "after": value} for (kernels, seed), value in runs.items()]
            for name, runs in after.items()}


def test_differences_are_paired_by_seed_and_the_kernel_sets_count_as_one_run():
    race = _race({"grpo": {("AVX512", 0): 0.60, ("DEFAULT", 0): 0.60, ("AVX512", 1): 0.70, ("DEFAULT", 1): 0.70},
                  "x": {("AVX512", 0): 0.50, ("DEFAULT", 0): 0.52, ("AVX512", 1): 0.75, ("DEFAULT", 1): 0.75}})
    assert variants.per_seed(race)["x"] == pytest.approx({0: 0.51, 1: 0.75})
    diffs = variants.paired_differences(race)
    assert list(diffs) == ["x"] and diffs["x"] == pytest.approx({0: -0.09, 1: 0.05})   # seed 0 with seed 0
    agreement = variants.kernel_agreement(race)
    assert agreement["pairs"] == 4 and agreement["same"] == 3
    assert agreement["differing"][0][:2] == ("x", 0) and agreement["differing"][0][2] == pytest.approx(0.02)
    with pytest.raises(ValueError, match="^baseline: 'ppo' is not in the race"):
        variants.paired_differences(race, baseline="ppo")


def test_a_difference_is_called_only_when_every_seed_agrees_and_the_mean_is_large():
    assert variants.verdict([-0.12, -0.105, -0.125]) == "behind"
    assert variants.verdict({0: 0.11, 1: 0.2}) == "ahead"
    assert variants.verdict([-0.02, -0.145, -0.065]) == "unresolved"     # every seed behind, mean 7.7 points
    assert variants.verdict([-0.3, 0.01, -0.3]) == "unresolved"          # a large mean, one seed the other way
    with pytest.raises(ValueError, match="^differences: is empty"):
        variants.verdict([])


def test_the_spread_is_pooled_around_each_variants_own_mean():
    diffs = {"a": {0: 0.0, 1: 0.2}, "b": {0: -0.5, 1: -0.5, 2: -0.5}, "c": {0: 9.0}}
    # a: squares 0.01 + 0.01 over 1 df; b: 0 over 2 df; c (one seed) adds nothing → √(0.02 / 3)
    assert variants.pooled_spread(diffs) == pytest.approx((0.02 / 3) ** 0.5)
    with pytest.raises(ValueError, match="^differences: holds no variant with two or more seeds"):
        variants.pooled_spread({"c": {0: 0.1}})


def test_t_quantiles_match_the_tables():
    assert variants.t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert variants.t_quantile(0.975, 2) == pytest.approx(4.303, abs=1e-3)
    assert variants.t_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)
    assert variants.t_quantile(0.8, 5) == pytest.approx(0.920, abs=1e-3)
    assert variants.t_quantile(0.025, 4) == pytest.approx(-2.776, abs=1e-3)
    with pytest.raises(ValueError, match="^p: must lie strictly between 0 and 1"):
        variants.t_quantile(1.0, 3)


def test_seeds_to_resolve_a_gap_grow_with_the_square_of_spread_over_gap():
    # a gap equal to the spread: n ≥ (t_{.975, n−1} + t_{.8, n−1})²; n = 9 gives (2.306 + 0.889)² = 10.2 > 9,
    # n = 10 gives (2.262 + 0.883)² = 9.9 ≤ 10
    assert variants.seeds_to_resolve(0.05, 0.05) == 10
    assert variants.seeds_to_resolve(0.05, 0.10) == 5                     # (2.776 + 0.941)² / 4 = 3.5 ≤ 5
    assert variants.seeds_to_resolve(0.10, 0.05) > 4 * variants.seeds_to_resolve(0.05, 0.10)
    assert variants.seeds_to_resolve(0.05, 0.05, power=0.9) > 10
    for kwargs, match in ((dict(spread=0.0, gap=0.05), "^spread: must be a positive number"),
                          (dict(spread=0.05, gap=-1), "^gap: must be a positive number"),
                          (dict(spread=0.05, gap=0.05, alpha=0), "^alpha: must lie strictly between 0 and 1")):
        with pytest.raises(ValueError, match=match):
            variants.seeds_to_resolve(**kwargs)


def test_the_race_metrics_average_steps_13_to_16_at_a_quarter_of_the_peak_rate_or_less():
    window = variants.tail_window()
    assert (window["first"], window["last"]) == (13, 16)
    assert window["lr_share_first"] == pytest.approx(0.25) and window["lr_share_last"] == pytest.approx(1 / 16)


def test_the_difference_table_and_plot_show_every_seed():
    from grpo_edu.course.aids import viz

    race = _race({"grpo": {("A", 0): 0.6, ("A", 1): 0.7, ("A", 2): 0.65},
                  "x": {("A", 0): 0.5, ("A", 1): 0.6, ("A", 2): 0.5}})
    (row,) = variants.difference_rows(race)
    assert row["variant"] == "x" and row["after − grpo, per seed 0, 1, 2 (points)"] == "-10.0, -10.0, -15.0"
    assert row["mean (points)"] == "-11.7" and row["verdict"] == "behind"
    fig = viz.paired_differences(variants.paired_differences(race))
    dots = [line for line in fig.axes[0].lines if line.get_linestyle() == "None"]
    assert sorted(float(line.get_xdata()[0]) for line in dots) == pytest.approx([-15.0, -10.0, -10.0])


def test_race_curves_draw_every_setting_of_the_race_and_refuse_more_than_their_colours():
    from grpo_edu.course.aids import viz

    rows = lambda v: [{"curve": [v, v + 0.1]}, {"curve": [v, v + 0.2]}]        # noqa: E731
    fig = viz.race_curves({name: rows(i / 10) for i, name in enumerate(variants.VARIANTS)})
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels == list(variants.VARIANTS) and len(labels) == 9                # one line each, none dropped by zip
    with pytest.raises(ValueError, match="^results: 11 variants"):
        viz.race_curves({f"v{i}": rows(0.1) for i in range(11)})


def test_the_race_and_pass_at_k_figures_carry_a_title():
    """Lessons 11-13 caption these figures; each also names what it shows in its own title (the learner-path
    audit found the three untitled)."""
    from grpo_edu.course.aids import viz

    rows = [{"curve": [0.1, 0.2]}, {"curve": [0.1, 0.3]}]
    figures = {"race_curves": viz.race_curves({"grpo": rows, "dapo": rows}),
               "paired_differences": viz.paired_differences({"dapo": {0: -0.1, 1: 0.05}}),
               "pass_at_k_curves": viz.pass_at_k_curves({"before RL": {1: 0.3, 2: 0.5}, "after": {1: 0.6, 2: 0.7}})}
    for name, fig in figures.items():
        assert fig.axes[0].get_title().strip(), f"{name} draws no title"
    assert viz.paired_differences({"dapo": {0: 0.1}}).axes[0].get_title().startswith("held-out accuracy: ")
    assert viz.race_curves({"grpo": rows}, title="the adder").axes[0].get_title() == "the adder"
