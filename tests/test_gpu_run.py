"""The GPU run that needs no network (``python -m grpo_edu.beyond.gpu_run``), proven on the CPU at its tiny size."""

import re

import pytest
import torch

from grpo_edu.beyond import gpu_run


def test_the_gpu_run_runs_the_whole_path_on_the_cpu_at_the_tiny_size(tmp_path, capsys):
    assert gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(tmp_path / "model"), "--cuda-graphs",
                         "--buckets", "8,16"]) == 0
    out = capsys.readouterr().out
    assert "device: CPU; size: tiny; nothing is downloaded" in out
    assert "decoding: static cache, buckets 8,16, finished rows masked in place; CUDA graphs asked for" in out
    assert re.search(r"1\. built .*model: [\d,]+ parameters, 20 warm-up steps in \d+ s; held-out sampled accuracy "
                     r"[\d.]+", out)
    assert re.search(r"2\. grpo_edu GRPO \(3 steps, 4 prompts × G=4, lr 0\.0003, sampler engine over the static cache "
                     r"in CUDA graphs\): held-out accuracy [\d.]+ → [\d.]+; \d+ s; [\d,]+ completion tokens/s; peak GPU "
                     r"memory n/a \(CPU\); GPU busy n/a \(CPU\)", out)
    assert re.search(r"sampling 16 rows, ≤ 42 new tokens, median tokens/s over 1 round\(s\): loop [\d,]+, engine "
                     r"[\d,]+, engine\+static [\d,]+, engine\+static\+graphs [\d,]+ \(the engine: "
                     r"grpo_edu.training.rollouts.engine, the trainer.s default.*; GPU busy n/a \(CPU\) over all", out)
    assert "3. TRL comparison skipped (--no-trl)" in out
    assert (tmp_path / "model" / "model.safetensors").stat().st_size > 0


def test_the_gpu_size_has_tens_of_millions_of_parameters_and_fits_the_task():
    from transformers import LlamaForCausalLM

    from grpo_edu.training.model.make_model import task_chars, tiny_llama_config
    from grpo_edu.training.task.tasks import get_task
    from grpo_edu.training.model.tokenizer import build_char_tokenizer

    build = gpu_run.SIZES["gpu"]["build"]
    tokenizer = build_char_tokenizer(task_chars([get_task("sums")]))
    with torch.device("meta"):                                  # count without allocating
        model = LlamaForCausalLM(tiny_llama_config(tokenizer, hidden_size=build["hidden_size"],
                                                   num_layers=build["num_layers"],
                                                   max_positions=gpu_run.WARM_UP["max_positions"]))
    assert 10e6 <= sum(p.numel() for p in model.parameters()) <= 99e6


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_for_without_cuda_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        gpu_run.main(["--device", "cuda"])
    assert "torch sees no CUDA device here; use --device cpu" in capsys.readouterr().err


class _NoWork(Exception):
    """Raised by a stand-in for the model build: reaching it means the checks let the run start."""


@pytest.fixture
def no_build(monkeypatch):
    """The build that starts every run, replaced by one that only records that it was reached."""
    from grpo_edu.training.model import make_model

    reached = []

    def build(model_dir, **kwargs):
        reached.append(model_dir)
        raise _NoWork(model_dir)
    monkeypatch.setattr(make_model, "build_tiny_model", build)
    return reached


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_folder_that_holds_a_model_is_refused_before_any_work_unless_overwrite(tmp_path, capsys, no_build, name):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / name).write_text("someone's model")
    with pytest.raises(SystemExit) as exit_:
        gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(folder)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and no_build == []
    assert f"--out: {folder} already holds a model ({name})" in err and "--overwrite" in err
    assert (folder / name).read_text() == "someone's model"
    with pytest.raises(_NoWork):                                  # asked for: the run starts
        gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(folder), "--overwrite"])
    assert no_build == [str(folder)]


def test_the_bundled_models_are_never_replaced_even_with_overwrite(capsys, no_build):
    from grpo_edu.training.model.models import ASSETS

    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit):
            gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(ASSETS / "tiny-sums"), *extra])
        err = capsys.readouterr().err
        assert "--out: " in err and "the course's bundled models" in err and "make_model" in err
    assert no_build == []


@pytest.mark.parametrize("case", ["file", "missing parent", "read-only parent"])
def test_an_out_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch, capsys, no_build, case):
    import os

    if case == "file":
        out = tmp_path / "afile"
        out.write_text("x")
        says = "is a file"
    elif case == "missing parent":
        out = tmp_path / "no" / "such" / "model"
        with pytest.raises(_NoWork):                              # created when missing, as train's folder is
            gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(out)])
        assert no_build == [str(out)]
        return
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        real = os.access                                          # root writes anywhere (CI runs as root): tell
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: (   # os.access what a user would be told
            False if mode & os.W_OK and str(path).startswith(str(locked)) else real(path, mode, **kw)))
        out = locked / "model"
        says = "cannot create or write"
    with pytest.raises(SystemExit):
        gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(out)])
    assert f"--out: {out} {says}" in capsys.readouterr().err and no_build == []


def test_the_gpu_size_on_the_cpu_is_said_once_with_the_options(capsys, no_build):
    with pytest.raises(_NoWork):
        gpu_run.main(["--size", "gpu", "--device", "cpu", "--no-trl"])
    err = capsys.readouterr().err
    assert err.count("warning: --size gpu on the CPU") == 1
    assert "--size tiny" in err and "--device cuda" in err


def test_two_runs_into_one_out_folder_at_once_are_refused(tmp_path, capsys, no_build, live_writer):
    folder = tmp_path / "model"
    code = f"""
        from grpo_edu.beyond import gpu_run
        gpu_run.lock_out({str(folder)!r})
    """
    with live_writer(code) as pid:
        with pytest.raises(SystemExit):
            gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(folder)])
        err = capsys.readouterr().err
        assert f"--out: {folder} is being written by process {pid}" in err and no_build == []
    with pytest.raises(_NoWork):                                  # its process is gone: the stale lock is taken over
        gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(folder)])


@pytest.mark.parametrize("argv, says", [
    ([], "decoding: the engine's exact-fit cache (no --static-cache)"),
    (["--static-cache"], "decoding: static cache, buckets 8,16,32,64,128,256,512, finished rows masked in place; "
                         "CUDA graphs off"),
    (["--cuda-graphs", "--buckets", "4,16", "--finished", "drop"],
     "decoding: static cache, buckets 4,16, finished rows dropped to a smaller bucket; CUDA graphs asked for, but "
     "there is no CUDA: the same step runs eagerly"),
])
def test_the_decoding_switches_are_read_and_a_dry_run_builds_nothing(capsys, no_build, argv, says):
    assert gpu_run.main(["--device", "cpu", "--dry-run", *argv]) == 0
    out = capsys.readouterr().out
    assert says in out and "dry run: nothing built or trained" in out and no_build == []


@pytest.mark.parametrize("argv, says", [
    (["--static-cache", "--buckets", "16,8"], "--buckets: '16,8' is not a comma-separated list of increasing"),
    (["--static-cache", "--buckets", "8,x"], "--buckets: '8,x' is not"),
    (["--static-cache", "--buckets", "0,8"], "--buckets: '0,8' is not"),
    (["--buckets", "8,16"], "--buckets and --finished shape the static cache, which is off. Fix: add --static-cache"),
    (["--finished", "drop"], "--buckets and --finished shape the static cache, which is off"),
    (["--static-cache", "--finished", "keep"], "argument --finished: invalid choice"),
])
def test_bad_decoding_switches_are_refused_before_any_work(capsys, no_build, argv, says):
    with pytest.raises(SystemExit) as exit_:
        gpu_run.main(["--device", "cpu", "--dry-run", *argv])
    assert exit_.value.code == 2 and says in capsys.readouterr().err and no_build == []


def test_the_samplers_timed_follow_the_switches():
    from grpo_edu.training.rollouts import static_cache

    assert list(gpu_run.samplers_for(None)) == ["loop", "engine"]
    assert list(gpu_run.samplers_for(static_cache.DecodeSettings(static_cache=True))) == ["loop", "engine",
                                                                                         "engine+static"]
    both = gpu_run.samplers_for(static_cache.DecodeSettings(static_cache=True, cuda_graphs=True, buckets=(8, 64)))
    assert list(both) == ["loop", "engine", "engine+static", "engine+static+graphs"]
    assert both["engine+static"].keywords["decoding"].cuda_graphs is False
    assert both["engine+static+graphs"].keywords["decoding"].buckets == (8, 64)


def test_gpu_utilisation_is_none_without_cuda_and_the_probe_says_why(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_run.gpu_utilisation() is None
    with gpu_run.UtilisationProbe("cpu") as busy:
        pass
    assert busy.text() == "GPU busy n/a (CPU)"
    probe = gpu_run.UtilisationProbe("cuda")
    assert "no reading" in probe.text()
    probe.readings = [10.0, 30.0]
    assert probe.text() == "GPU busy 20 % mean, 30 % max (2 readings)"
