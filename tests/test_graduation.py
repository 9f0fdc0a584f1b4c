"""grpo_edu.beyond.graduation: the course's step in TRL, on two processes with accelerate (CPU, gloo).

The two-process run itself is tested where it is taught, in lesson 10, which the README's test
command runs under nbval: there ``run_trl_processes`` trains 60 steps on 2 processes and claims
check the world size, the per-device batch, that the held-out accuracy before training is
exactly grpo_edu's own, and that the run learns as one process does. (It was also a test here;
the two duplicated 12 s of the suite's 12-minute budget.)
"""

import pytest

from grpo_edu.beyond.graduation import launch_command, run_trl_processes
from grpo_edu.training.trainers.config import GRPOConfig


def test_launch_commands_for_data_parallel_and_zero():
    plain = launch_command(num_processes=8, config="run.json", out="trl.json")
    assert plain[:4] == ["accelerate", "launch", "--num_processes", "8"] and "--multi_gpu" in plain
    assert plain[-6:] == ["-m", "grpo_edu.beyond.graduation", "--config", "run.json", "--out", "trl.json"]
    zero = " ".join(launch_command(num_processes=8, zero_stage=3))
    assert "--use_deepspeed --zero_stage 3" in zero and "--multi_gpu" not in zero
    with pytest.raises(ValueError, match="^zero_stage: is 4"):
        launch_command(zero_stage=4)
    with pytest.raises(ValueError, match="^num_processes: "):
        run_trl_processes(GRPOConfig(batch_size=3, num_generations=3), num_processes=2)


def test_trl_trains_the_configs_model(monkeypatch):
    """run_trl hands TRL the run's own model: the GPU run's comparison once trained the bundled adder on the sums task
    (held-out accuracy 0 → 0) while grpo_edu trained the model it had built."""
    import trl

    from grpo_edu.training.model.models import sums_model_dir

    handed = []

    class Stop(Exception):
        pass

    def stand_in(*, model, args, **kwargs):
        handed.append(model)
        handed.append(args.model_init_kwargs)
        raise Stop

    monkeypatch.setattr(trl, "GRPOTrainer", stand_in)
    from grpo_edu.beyond.graduation import run_trl

    with pytest.raises(Stop):
        run_trl(GRPOConfig.preset("sums", batch_size=2, num_generations=2, total_training_steps=1, device="cpu"))
    import transformers

    hub_kernels = hasattr(transformers.PreTrainedModel, "set_use_kernels")
    assert handed == [str(sums_model_dir()), {"use_kernels": False} if hub_kernels else {}]   # loaded as grpo_edu does
