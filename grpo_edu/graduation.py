"""The course's run in TRL: ``trl.GRPOTrainer`` with the settings ``grpo_edu.export.to_trl`` gives.

``run_trl(config)`` trains TRL's GRPOTrainer on the bundled model and the course's task with
``to_trl(config)`` and returns TRL's ``log_history`` (one dict per optimizer update, TRL's metric
names). It runs in one process, or in several under ``accelerate launch`` (each process takes its
share of every step: ``to_trl(config, num_processes=…)``):

    python -m grpo_edu.graduation --steps 20 --out trl.json
    accelerate launch --num_processes 2 --cpu -m grpo_edu.graduation --steps 20 --out trl2.json

TRL is an optional extra (``pip install -e ".[trl]"``); nothing else in the course needs it.
"""

import argparse
import json
import os
import sys
import tempfile

from grpo_edu.config import GRPOConfig
from grpo_edu.export import to_trl
from grpo_edu.models import bundled_model_dir
from grpo_edu.tasks import get_task


def run_trl(config=None, *, num_processes=None):
    """Train TRL's GRPOTrainer with ``to_trl(config)``. Returns ``(log_history, info)``: TRL's
    per-update metrics, and ``info`` with the batch TRL actually used (per process, accumulation,
    completions per generation) and the number of processes."""
    import datasets
    import trl

    c = config or GRPOConfig()
    processes = num_processes or int(os.environ.get("WORLD_SIZE", "1"))
    task = get_task(c.task)

    def reward(prompts, completions, answer, **kwargs):        # the task's own 0/1 exact-match reward
        return task.reward(prompts, completions, answer)
    reward.__name__ = f"{c.task}_reward"

    kwargs, _ = to_trl(c, num_processes=processes)
    with tempfile.TemporaryDirectory() as out:
        args = trl.GRPOConfig(output_dir=out, report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
                              dataloader_num_workers=0, **{**kwargs, "use_cpu": c.device != "cuda"})
        trainer = trl.GRPOTrainer(model=str(bundled_model_dir()), reward_funcs=[reward], args=args,
                                  train_dataset=datasets.Dataset.from_list(task.split("train")))
        trainer.train()
        info = {"world_size": trainer.accelerator.num_processes,
                "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
                "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
                "generation_batch_size": trainer.args.generation_batch_size}
        return trainer.state.log_history, info


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.graduation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="grpo_edu steps (TRL updates × num_iterations)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write TRL's log_history here (JSON); only process 0 writes")
    args = parser.parse_args(argv)
    config = GRPOConfig(total_training_steps=args.steps, batch_size=args.batch_size,
                        num_generations=args.num_generations, seed=args.seed, device="cpu")
    history, info = run_trl(config)
    if args.out and int(os.environ.get("RANK", "0")) == 0:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({**info, "log_history": history}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
