"""The readers lessons 17 and 18 apply to their stored sweeps, on hand-made runs: bands of d, the stored GRPO
settings, accuracy after a wall-clock budget."""

import json

import pytest

from grpo_edu.course.experiments import asynchronous, overoptimisation


def test_frontier_averages_each_band_of_d_over_runs():
    runs = [{"points": [{"d": 0.0, "gold": 0.5}, {"d": 0.7, "gold": 0.9}, {"d": 2.5, "gold": 0.1}]},
            {"points": [{"d": 0.2, "gold": 0.3}, {"d": 0.6, "gold": 0.7}]}]
    golds, info = overoptimisation.frontier(runs, bands=(0.0, 0.5, 1.0, 2.0, 4.0))
    # the start at d = 0 is left out; band 2's SE: points 0.9 and 0.7, sd 0.141, over √2
    assert golds == pytest.approx([0.3, 0.8, None, 0.1]) and info["counts"] == [1, 2, 0, 1]
    assert info["se"][0] is None and info["se"][1] == pytest.approx(0.1) and info["dropped"] == 1
    assert info["d_end"] == pytest.approx((2.5 + 0.6) / 2)


def test_grpo_settings_reads_beta_and_learning_rate_from_the_file_names(tmp_path):
    for name in ("grpo-beta0-seed1.json", "grpo-beta0.04-lr0.0003-seed0.json", "grpo-beta0-lr0.0003-seed2.json",
                 "bon-seed0.json"):
        (tmp_path / name).write_text("{}")
    assert overoptimisation.grpo_settings(tmp_path) == [(0.0, None), (0.0, 3e-4), (0.04, 3e-4)]
    assert overoptimisation.sweep_file("grpo", 0, beta=0.04, lr=3e-4) == "grpo-beta0.04-lr0.0003-seed0.json"
    assert overoptimisation.sweep_file("grpo", "*") == "grpo-beta0-seed*.json"


def test_gold_peak_by_hand():
    points = [{"d": 0, "gold": 0.5}, {"d": 1, "gold": 0.9}, {"d": 2, "gold": 0.2}]
    d, info = overoptimisation.gold_peak(points)
    assert d == 1 and info["interior"] and info["gold_end"] == 0.2
    d, info = overoptimisation.gold_peak(points[:2])
    assert d == 1 and info["rises"] and not info["falls"]


def test_accuracy_at_seconds_reads_between_evaluations():
    evals = [{"step": 0, "accuracy": 0.4}, {"step": 5, "accuracy": 0.5}, {"step": 10, "accuracy": 0.7}]
    runs = [{"seed": 0, "evals": evals}, {"seed": 1, "evals": [dict(e, accuracy=e["accuracy"] + 0.1) for e in evals]}]
    one_second_a_step = [float(s) for s in range(1, 11)]
    acc, info = asynchronous.accuracy_at_seconds(runs, one_second_a_step, 7.5)
    assert info["steps"] == pytest.approx(7.5) and info["each"] == pytest.approx([0.6, 0.7])
    assert acc == pytest.approx(0.65)
    acc, info = asynchronous.accuracy_at_seconds(runs, one_second_a_step, 99.0)     # past the run's end: its last
    assert info["steps"] == 10 and acc == pytest.approx(0.75)
    slow_start = [4.0 + s for s in range(10)]                                       # 4 s to start, then 1 s a step
    _, info = asynchronous.accuracy_at_seconds(runs, slow_start, 2.0)
    assert info["steps"] == pytest.approx(0.5)


def test_report_prints_every_stored_sweep_as_markdown(tmp_path, capsys):
    curve = [{"n": n, "d": d, "gold": g, "proxy": p} for n, d, g, p in ((1, 0, 0.5, 0.1), (4, 0.8, 0.9, 0.5),
                                                                       (16, 1.4, 0.2, 0.9))]
    curve[1]["d_exact"], curve[2]["gold_se"] = 0.66, 0.04
    bon = {"seed": 0, "proxies": {"small": {"heldout_accuracy": [0.7], "curve": curve,
                                            "fit_bon": {"alpha": 1.0, "beta": 0.5, "d_peak": 1.0, "r2": 0.9}}}}
    (tmp_path / "bon-seed0.json").write_text(json.dumps(bon))
    points = [{"step": 0, "d": 0.0, "gold": 0.5}, {"step": 2, "d": 0.6, "gold": 0.8}, {"step": 4, "d": 2.2, "gold": 0.1}]
    grpo = {"seed": 0, "points": points, "fits": {"rl": {"alpha": 0.1, "beta": 0.2, "d_peak": 0.5}}}
    (tmp_path / "grpo-beta0.1-lr0.0003-seed0.json").write_text(json.dumps(grpo))
    lines = overoptimisation.report(tmp_path)
    assert "| 0 | 64 pairs | 0.70 | 0.50 | 0.90 (4, 0.80, 0.66) | 0.20 ± 0.04 | 1.00 | 0.50 | 1.00 | 0.900 |" in lines
    assert "| 0 | 0.1 | 0.0003, constant | 4 | 0.50 | 0.80 (0.60) | 0.10 | 2.20 | 0.10 | 0.20 | 0.50 |" in lines
    assert "| 0.1 | — | 0.80 | — | 0.10 | 2.20 |" in lines


def _no_work(*args, **kwargs):
    raise AssertionError("the sweep started before its arguments were checked")


def _fake_sweep(seed, save=lambda result: None, **kwargs):
    result = {"seed": seed, "points": [], "proxies": {name: {} for name in kwargs.get("proxies") or ["small"]}}
    save(result)
    return result


@pytest.mark.parametrize("what", ["grpo", "bon"])
def test_a_stored_sweep_is_never_replaced_without_overwrite(tmp_path, monkeypatch, capsys, what):
    """Issue 66: `overoptimisation grpo --out <folder holding a complete sweep>` replaced it with a 1-step run.
    Now it is refused, before any work, and the stored file is left as it was; --overwrite replaces it."""
    name = overoptimisation.sweep_file(what, 0)
    stored = tmp_path / name
    stored.write_text('{"seed": 0, "complete": true}')
    monkeypatch.setattr(overoptimisation, "grpo_sweep", _no_work)
    monkeypatch.setattr(overoptimisation, "bon_sweep", _no_work)
    with pytest.raises(SystemExit):
        overoptimisation.main([what, "--seed", "0", "--out", str(tmp_path)])
    assert "--overwrite" in capsys.readouterr().err and stored.read_text() == '{"seed": 0, "complete": true}'
    monkeypatch.setattr(overoptimisation, f"{what}_sweep", _fake_sweep)
    overoptimisation.main([what, "--seed", "0", "--out", str(tmp_path), "--overwrite"])
    assert json.loads(stored.read_text())["complete"] and "command" in json.loads(stored.read_text())


def test_a_sweep_is_written_into_the_working_directory_not_the_package(tmp_path, monkeypatch):
    """The default --out was the package's own assets/overoptimisation, which lesson 17 reads."""
    package = tmp_path / "package-assets"
    package.mkdir()
    monkeypatch.setattr(overoptimisation, "STORED", package)
    monkeypatch.setattr(overoptimisation, "grpo_sweep", _fake_sweep)
    monkeypatch.chdir(tmp_path)
    overoptimisation.main(["grpo", "--seed", "1", "--steps", "1"])
    assert list(package.iterdir()) == []
    assert (tmp_path / "runs" / "overoptimisation" / "grpo-beta0-seed1.json").is_file()


def test_bon_proxies_add_to_a_sweep_but_replace_none_without_overwrite(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bon-seed0.json"
    path.write_text(json.dumps({"seed": 0, "command": "first", "seconds": 5,
                                "proxies": {"small": {"kept": 1}, "ensemble_mean": {}, "ensemble_min": {}}}))
    monkeypatch.setattr(overoptimisation, "bon_sweep", _no_work)
    for proxies in ("small", "large,ensemble"):
        with pytest.raises(SystemExit):
            overoptimisation.main(["bon", "--seed", "0", "--out", str(tmp_path), "--proxies", proxies])
        assert "already holds" in capsys.readouterr().err
    added = []

    def add(seed, save, proxies, result):
        result["proxies"].update({p: {"new": 1} for p in proxies})
        added.append(proxies)
        save(result)
        return result

    monkeypatch.setattr(overoptimisation, "bon_sweep", add)
    overoptimisation.main(["bon", "--seed", "0", "--out", str(tmp_path), "--proxies", "large"])
    stored = json.loads(path.read_text())
    assert added == [["large"]] and stored["proxies"]["small"] == {"kept": 1} and "large" in stored["proxies"]
    assert stored["command"].startswith("first && ")


@pytest.mark.parametrize("argv", [["grpo", "--seed", "0", "--steps", "0"], ["grpo", "--seed", "0", "--beta", "nan"],
                                  ["grpo", "--seed", "-1"], ["grpo", "--seed", "0", "--lr", "-1"],
                                  ["bon", "--seed", "0", "--proxies", "bogus"], ["bon", "--seed", "0", "--steps", "3"],
                                  ["grpo"]])
def test_bad_sweep_arguments_are_refused_before_any_work(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.setattr(overoptimisation, "grpo_sweep", _no_work)
    monkeypatch.setattr(overoptimisation, "bon_sweep", _no_work)
    with pytest.raises(SystemExit):
        overoptimisation.main(argv + ["--out", str(tmp_path / "out")])
    assert "Fix:" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_standardised_min_compares_members_like_with_like():
    """A member scoring every answer 10× higher plus 5 is the same ordering: standardised, the min of the two is
    that ordering (a raw min would follow the lower-offset member only). Two members that disagree: the min of z."""
    answers = ["a", "bb", "ccc", "dddd"]
    base = {"a": 0.0, "bb": 1.0, "ccc": 2.0, "dddd": 3.0}
    first = lambda prompts, completions: [base[c] for c in completions]                    # noqa: E731
    scaled = lambda prompts, completions: [10 * base[c] + 5 for c in completions]          # noqa: E731
    reversed_ = lambda prompts, completions: [-base[c] for c in completions]               # noqa: E731
    reference = (["p"] * 4, answers)
    z = [(x - 1.5) / (1.25 ** 0.5) for x in base.values()]                                  # mean 1.5, SD √1.25
    same = overoptimisation.StandardisedMin([first, scaled], reference)
    assert same(["p"] * 4, answers) == pytest.approx(z)
    opposed = overoptimisation.StandardisedMin([first, reversed_], reference)
    assert opposed(["p"] * 4, answers) == pytest.approx([min(a, -a) for a in z])


def test_report_names_a_damaged_or_empty_folder_and_skips_stray_names(tmp_path, capsys):
    """Issue 66 G01–G03: an empty folder, a stray file name and a file cut in half gave bare tracebacks."""
    with pytest.raises(SystemExit):
        overoptimisation.main(["report", "--out", str(tmp_path)])
    assert "no stored bon sweep" in capsys.readouterr().err
    (tmp_path / "grpo-beta0.1-lrfast-seed0.json").write_text("{}")
    assert overoptimisation.grpo_settings(tmp_path) == []
    (tmp_path / "bon-seed0.json").write_text('{"seed": 0, "proxies": {"small": {"cur')
    with pytest.raises(SystemExit):
        overoptimisation.main(["report", "--out", str(tmp_path)])
    assert "bon-seed0.json is not a readable stored sweep" in capsys.readouterr().err
