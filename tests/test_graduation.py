"""grpo_edu.graduation: the course's step in TRL, on two processes with accelerate (CPU, gloo)."""

import json
import shutil
import subprocess
import sys

import pytest


def test_two_processes_under_accelerate_take_the_same_step(tmp_path):
    pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    accelerate = shutil.which("accelerate", path=str(__import__("pathlib").Path(sys.executable).parent))
    if accelerate is None:
        pytest.skip("accelerate's launcher is not installed (it comes with trl)")
    out = tmp_path / "two.json"
    # --multi_gpu on a machine without CUDA: accelerate starts torch.distributed (gloo) processes on the CPU
    proc = subprocess.run([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
                           "-m", "grpo_edu.graduation", "--steps", "3", "--batch-size", "4", "--num-generations", "4",
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["world_size"] == 2
    # each process takes half of every step's 4 × 4 = 16 completions; one generation per update
    assert record["per_device_train_batch_size"] == 8 and record["gradient_accumulation_steps"] == 1
    assert record["generation_batch_size"] == 16
    steps = [row for row in record["log_history"] if "reward" in row]
    assert [row["step"] for row in steps] == [1, 2, 3]
    assert all(0 <= row["reward"] <= 1 and row["kl"] >= 0 for row in steps)
