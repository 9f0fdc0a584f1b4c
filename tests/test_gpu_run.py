"""The GPU run that needs no network (``python -m grpo_edu.beyond.gpu_run``), proven on the CPU at its tiny size."""

import re

import pytest
import torch

from grpo_edu.beyond import gpu_run


def test_the_gpu_run_runs_the_whole_path_on_the_cpu_at_the_tiny_size(tmp_path, capsys):
    assert gpu_run.main(["--device", "cpu", "--no-trl", "--out", str(tmp_path / "model")]) == 0
    out = capsys.readouterr().out
    assert "device: CPU; size: tiny; nothing is downloaded" in out
    assert re.search(r"1\. built .*model: [\d,]+ parameters, 20 warm-up steps in \d+ s; held-out sampled accuracy "
                     r"[\d.]+", out)
    assert re.search(r"2\. grpo_edu GRPO \(3 steps, 4 prompts × G=4, lr 0\.0003\): held-out accuracy [\d.]+ → "
                     r"[\d.]+; \d+ s; [\d,]+ completion tokens/s; peak GPU memory n/a \(CPU\)", out)
    assert re.search(r"sampling 16 rows, ≤ 42 new tokens, median tokens/s over 1 round\(s\): loop [\d,]+, engine "
                     r"[\d,]+ \(the engine", out)
    assert "3. TRL comparison skipped (--no-trl)" in out
    assert (tmp_path / "model" / "model.safetensors").stat().st_size > 0


def test_the_gpu_size_has_tens_of_millions_of_parameters_and_fits_the_task():
    from transformers import LlamaForCausalLM

    from grpo_edu.training.make_model import task_chars, tiny_llama_config
    from grpo_edu.training.tasks import get_task
    from grpo_edu.training.tokenizer import build_char_tokenizer

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
