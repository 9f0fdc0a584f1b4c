"""grpo_edu.graduation: the course's step in TRL, on two processes with accelerate (CPU, gloo)."""

import pytest

from grpo_edu.config import GRPOConfig
from grpo_edu.graduation import launch_command, run_trl_processes


def test_two_processes_under_accelerate_take_the_same_step_and_are_scored_by_our_ruler():
    pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    from grpo_edu.trainer import GRPOTrainer

    config = GRPOConfig(total_training_steps=3, batch_size=4, num_generations=4, eval_size=40, device="cpu")
    history, info = run_trl_processes(config, num_processes=2, timeout=300)
    assert info["world_size"] == 2
    # each process takes half of every step's 4 × 4 = 16 completions; one generation per update
    assert info["per_device_train_batch_size"] == 8 and info["gradient_accumulation_steps"] == 1
    assert info["generation_batch_size"] == 16
    steps = [row for row in history if "reward" in row]
    assert [row["step"] for row in steps] == [1, 2, 3]
    assert all(0 <= row["reward"] <= 1 and row["kl"] >= 0 for row in steps)
    # held-out accuracy before training is the number grpo_edu's own trainer measures
    assert [e["step"] for e in info["evals"]] == [0, 3]
    assert info["evals"][0]["accuracy"] == GRPOTrainer(config).evaluate()["accuracy"]


def test_launch_commands_for_data_parallel_and_zero():
    plain = launch_command(num_processes=8, config="run.json", out="trl.json")
    assert plain[:4] == ["accelerate", "launch", "--num_processes", "8"] and "--multi_gpu" in plain
    assert plain[-6:] == ["-m", "grpo_edu.graduation", "--config", "run.json", "--out", "trl.json"]
    zero = " ".join(launch_command(num_processes=8, zero_stage=3))
    assert "--use_deepspeed --zero_stage 3" in zero and "--multi_gpu" not in zero
    with pytest.raises(ValueError, match="^zero_stage: is 4"):
        launch_command(zero_stage=4)
    with pytest.raises(ValueError, match="^num_processes: "):
        run_trl_processes(GRPOConfig(batch_size=3, num_generations=3), num_processes=2)
