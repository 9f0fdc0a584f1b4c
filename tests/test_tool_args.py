"""Every argument of train, variants, bench and lesson-times is checked before any work: absurd but finite
values, settings that contradict each other, and output paths that cannot be written (issue 35)."""

import os
import warnings

import pytest

from grpo_edu.cli import main
from grpo_edu.training.trainers.config import GRPOConfig


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)      # runs/<timestamp>/ lands here, not in the repository
    return tmp_path


@pytest.fixture
def no_training(monkeypatch):
    """GRPOTrainer replaced by a stand-in that fails loudly: a check that comes after it comes too late."""
    from grpo_edu.training.trainers import family, trainer

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")
    monkeypatch.setattr(trainer, "GRPOTrainer", refuse)
    monkeypatch.setattr(family, "make_trainer", refuse)          # grpo-edu train makes its trainer there


# --- train: the word none ------------------------------------------------------------------------
def test_scale_none_can_be_given_from_the_shell(capsys, no_training):
    from grpo_edu import cli

    args = cli.build_parser().parse_args(["train", "--scale", "none", "--loss-type", "dr_grpo"])
    assert cli._config_from(args).scale == "none"
    args = cli.build_parser().parse_args(["train", "--dataset", "none", "--epsilon-high", "None",
                                          "--total-training-steps", "none", "--total-epochs", "2"])
    config = cli._config_from(args)                      # fields that take None still get it
    assert config.dataset is None and config.epsilon_high is None and config.total_training_steps is None
    args = cli.build_parser().parse_args(["train", "--model", "none"])
    assert cli._config_from(args).model == "none"        # a str field keeps the word: a folder called none


# --- train: absurd but finite values ---------------------------------------------------------------
@pytest.mark.parametrize("kwargs, field", [
    (dict(entropy_coef=1e308), "entropy_coef"),
    (dict(loss_type="cispo", epsilon_high=1e308), "epsilon_high"),
    (dict(epsilon_high=1e308), "epsilon_high"),
    (dict(loss_type="sapo", sapo_temperature_pos=1e-300), "sapo_temperature_pos"),
    (dict(loss_type="sapo", sapo_temperature_neg=1e300), "sapo_temperature_neg"),
    (dict(temperature=1e-300), "temperature"),
    (dict(temperature=1e6), "temperature"),
    (dict(learning_rate=1.0), "learning_rate"),
    (dict(beta=1e308), "beta"),
    (dict(seed=10 ** 20), "seed"),
    (dict(sampling_dtype="bfloat16", importance_sampling_correction=True, importance_sampling_cap=1e308),
     "importance_sampling_cap"),
])
def test_absurd_finite_values_are_refused_up_front_naming_the_field_and_the_range(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}: must be .* got .*Fix: "):
        GRPOConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [
    dict(entropy_coef=1.0), dict(loss_type="cispo", epsilon_high=5.0), dict(temperature=0.3),
    dict(loss_type="sapo", sapo_temperature_neg=2.0), dict(learning_rate=1e-2), dict(beta=10.0),
])
def test_the_values_the_lessons_and_tests_use_stay_accepted(kwargs):
    GRPOConfig(**kwargs)


def test_an_absurd_value_from_the_shell_is_refused_before_the_model_loads(capsys, no_training):
    assert main(["train", "--entropy-coef", "1e308"]) == 2
    err = capsys.readouterr().err
    assert "entropy_coef: must be" in err and "Fix:" in err
    assert not os.path.exists("runs")


# --- train: contradictions ------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, field, says", [
    (dict(sampling_dtype="bfloat16", importance_sampling_correction=True, importance_sampling_cap=0.5),
     "importance_sampling_cap", "below 1"),
])
def test_a_setting_that_can_only_be_a_mistake_is_refused(kwargs, field, says):
    with pytest.raises(ValueError, match=rf"^{field}: .*{says}.*Fix: "):
        GRPOConfig(**kwargs)


@pytest.mark.parametrize("kwargs, names", [
    (dict(max_sampling_rounds=5), ("max_sampling_rounds", "dynamic_sampling")),
    (dict(importance_sampling_correction=True, device="cpu"), ("importance_sampling_correction", "sampling_dtype")),
    (dict(loss_type="sapo", epsilon_high=0.28), ("epsilon_high", "sapo")),
    (dict(importance_sampling_cap=2.0), ("importance_sampling_cap", "importance_sampling_correction")),
])
def test_a_harmless_contradiction_warns_once_naming_the_fields(kwargs, names):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        GRPOConfig(**kwargs)
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and all(name in said[0] for name in names), said


def test_the_defaults_and_the_shipped_variants_warn_of_nothing():
    from grpo_edu.course.experiments.variants import COMMON, VARIANTS
    from grpo_edu.training.trainers.config import PRESETS

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GRPOConfig()
        for name in PRESETS:
            GRPOConfig.preset(name)
        for name, settings in VARIANTS.items():
            if name != "gspo":                         # GSPO's tiny ε is said on purpose (a test of its own)
                GRPOConfig.preset("sums", **{**COMMON, **settings})
        GRPOConfig(sampling_dtype="bfloat16", importance_sampling_correction=True)
        GRPOConfig(dynamic_sampling=True, max_sampling_rounds=4)


# --- train: paths --------------------------------------------------------------------------------
def test_a_second_train_into_a_folder_a_live_run_is_writing_is_refused_before_the_model_loads(
        tmp_path, capsys, no_training, live_writer):
    folder = tmp_path / "run"
    code = f"""
        from grpo_edu.training.runs import run_folder
        run_folder.acquire_lock({str(folder)!r})
    """
    with live_writer(code) as pid:
        for extra in ([], ["--overwrite"]):
            assert main(["train", "--output-dir", str(folder), "--no-progress", *extra]) == 2
            err = capsys.readouterr().err
            assert f"output_dir: {folder} is being written by process {pid}" in err and "Fix:" in err


@pytest.mark.parametrize("case", ["device", "folder"])
def test_a_dataset_that_is_not_a_regular_file_is_refused_before_the_model_loads(tmp_path, capsys, no_training,
                                                                                case):
    path = {"device": tmp_path / "zero.jsonl", "folder": tmp_path}[case]
    if case == "device":
        os.symlink("/dev/zero", path)                       # a loader that opened it would read forever
    says = {"device": f"dataset: {path} is not a regular file", "folder": f"dataset: {path} is a folder"}[case]
    for command in ("train", "export"):                     # what train refuses, export refuses in the same words
        assert main([command, *(["trl"] if command == "export" else []), "--dataset", str(path)]) == 2
        err = capsys.readouterr().err
        assert says in err and "Fix:" in err


def test_metrics_out_may_not_be_the_replay_file_or_the_dataset(tmp_path, capsys, no_training):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "1+1=", "answer": "2"}\n' * 20)
    assert main(["train", "--dataset", str(prompts), "--metrics-out", str(prompts), "--overwrite"]) == 2
    assert "--metrics-out: " in capsys.readouterr().err
    assert main(["train", "--replay-path", "buf.jsonl", "--metrics-out", "buf.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "--metrics-out: " in err and "replay_path" in err
    assert prompts.read_text().count("\n") == 20


# --- output files of variants and bench: checked before the race / the run --------------------------
def read_only(monkeypatch, folder):
    """``folder`` made read-only, as every user sees it: root writes anywhere (and CI runs as root), so
    ``os.access`` is told the truth a user would get."""
    folder.mkdir()
    folder.chmod(0o555)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
        False if mode & os.W_OK and str(path).startswith(str(folder)) else real(path, mode, **kw)))
    return folder


def _unwritable_cases(tmp_path, monkeypatch):
    """{case: (path, what the refusal says)}."""
    missing = tmp_path / "no" / "such" / "race.json"
    locked = read_only(monkeypatch, tmp_path / "locked")
    return {"missing folder": (missing, f"--json: the folder of {missing} does not exist"),
            "a folder": (tmp_path, f"--json: {tmp_path} is a folder"),
            "read-only folder": (locked / "race.json", f"--json: {locked / 'race.json'} cannot be written")}


@pytest.fixture
def no_race(monkeypatch):
    from grpo_edu.course.experiments import variants

    def refuse(*args, **kwargs):
        raise AssertionError("the race started before the arguments were checked")
    monkeypatch.setattr(variants, "race", refuse)
    monkeypatch.setattr(variants, "step_times", refuse)


@pytest.fixture
def no_bench(monkeypatch):
    from grpo_edu.beyond import bench

    def refuse(*args, **kwargs):
        raise AssertionError("a benchmark started before the arguments were checked")
    monkeypatch.setattr(bench, "_run_child", refuse)


@pytest.mark.parametrize("command", ["variants", "bench"])
def test_a_json_file_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch, capsys, no_race, no_bench,
                                                                      command):
    for case, (path, says) in _unwritable_cases(tmp_path, monkeypatch).items():
        with pytest.raises(SystemExit) as exit_:
            main([command, "--json", str(path)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and says in err and "Fix:" in err, (case, err)


@pytest.mark.parametrize("command", ["variants", "bench"])
def test_a_json_file_that_exists_is_replaced_only_with_overwrite(tmp_path, capsys, no_race, no_bench, command):
    earlier = tmp_path / "earlier.json"
    earlier.write_text('{"an hour of measurements": 1}')
    with pytest.raises(SystemExit):
        main([command, "--json", str(earlier)])
    err = capsys.readouterr().err
    assert f"--json: {earlier} already exists" in err and "--overwrite" in err
    assert earlier.read_text() == '{"an hour of measurements": 1}'
    with pytest.raises(AssertionError, match="before the arguments were checked"):   # asked for: the work starts
        main([command, "--json", str(earlier), "--overwrite"])


@pytest.mark.parametrize("argv, says", [
    (["--seeds", "-1"], "--seeds: -1 is negative"),
    (["--seeds", "0", "0"], "--seeds: 0 is given twice"),
    (["--variants", "grpo", "grpo"], "--variants: grpo is given twice"),
    (["--steps", "0"], "--steps: is 0"),
    (["--time", "--json", "x.json"], "--json: --time writes no file"),
    (["--time", "--seeds", "1"], "--seeds: --time times seed 0 only"),
])
def test_variants_names_a_bad_argument_before_the_race(capsys, no_race, argv, says):
    with pytest.raises(SystemExit) as exit_:
        main(["variants", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and "Fix:" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, says", [
    (["--replay", "--json", "x.json"], "--json: --replay writes no file"),
    (["--step-ms", "--json", "x.json"], "--json: --step-ms writes no file"),
    (["--sampler", "--json", "x.json"], "--json: --sampler writes no file"),
    (["--replay", "--step-ms"], "--step-ms: cannot be combined with --replay"),
    (["--steps", "0"], "--steps"),
])
def test_bench_names_a_bad_argument_before_the_run(capsys, no_bench, argv, says):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err


# --- lesson-times: workers -------------------------------------------------------------------------
def test_lesson_times_caps_its_workers_at_this_machines_cpus(monkeypatch, capsys):
    import subprocess

    from grpo_edu.course.testing import lesson_times

    ran = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: ran.append(command) or subprocess.CompletedProcess(
        command, 0))
    cpus = lesson_times.available_cpus()
    assert lesson_times.main(["--step-ms", "80", "--workers", "100000"]) == 0
    assert ran[0][ran[0].index("-n") + 1] == str(cpus)
    err = capsys.readouterr().err
    assert f"--workers: 100000 is more than the {cpus} CPU" in err and f"runs {cpus}" in err
    assert lesson_times.main(["--step-ms", "80", "--workers", str(cpus)]) == 0
    assert ran[1][ran[1].index("-n") + 1] == str(cpus) and "--workers" not in capsys.readouterr().err


def test_a_replay_path_that_is_a_device_is_refused_before_the_model_loads(tmp_path, capsys, no_training):
    path = tmp_path / "buffer.jsonl"
    os.symlink("/dev/zero", path)
    assert main(["train", "--replay-path", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"replay_path: {path} is not a regular file" in err and "Fix:" in err


def test_a_metrics_file_another_run_created_after_the_checks_is_kept(tmp_path, capsys):
    from grpo_edu import cli

    class Trainer:
        history = [{"step": 1}]
    target = tmp_path / "m.jsonl"
    metrics = cli.MetricsFile(str(target), Trainer())
    target.write_text("the other run's metrics\n")              # it started after our checks and wrote first
    metrics({"step": 1})
    metrics.close()
    assert target.read_text() == "the other run's metrics\n"
    assert (tmp_path / "m-2.jsonl").read_text() == '{"step": 1}\n'
    assert "kept it; this run's metrics go to" in capsys.readouterr().err


def test_a_result_file_is_replaced_only_with_overwrite_and_never_half_written(tmp_path):
    from grpo_edu.common import _checks

    path = tmp_path / "race.json"
    assert _checks.write_result_file(path, "first") == path and path.read_text() == "first"
    assert _checks.write_result_file(path, "second") == tmp_path / "race-2.json"      # the first run's file is kept
    assert path.read_text() == "first" and (tmp_path / "race-2.json").read_text() == "second"
    assert _checks.write_result_file(path, "third", overwrite=True) == path and path.read_text() == "third"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["race-2.json", "race.json"]  # no temporary file left
