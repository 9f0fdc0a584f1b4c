"""The course's run in TRL: ``trl.GRPOTrainer`` with the settings ``grpo_edu.beyond.export.to_trl`` gives.

``run_trl(config)`` trains TRL's GRPOTrainer on the bundled model and the course's task with
``to_trl(config)`` and returns TRL's ``log_history`` (one dict per optimizer update, TRL's metric
names). It runs in one process, or in several under ``accelerate launch`` (each process takes its
share of every step: ``to_trl(config, num_processes=…)``):

    python -m grpo_edu.beyond.graduation --steps 20 --out trl.json
    accelerate launch --multi_gpu --num_processes 2 -m grpo_edu.beyond.graduation --steps 20 --out trl2.json

``run_trl_processes(config, num_processes=2)`` does the second from Python (the config travels as
JSON) and ``launch_command`` writes the command line, also for DeepSpeed ZeRO on several GPUs.

TRL is an optional extra (``pip install -e ".[trl]"``); nothing else in the course needs it.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from grpo_edu.beyond.export import to_trl
from grpo_edu.common import _checks
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.model.models import no_hub_kernels, pick_device, resolve_model
from grpo_edu.training.task.tasks import get_task


def heldout_evaluator(config, model, tokenizer):
    """A function of no arguments giving the held-out accuracy of ``model`` exactly as grpo_edu's
    trainer measures it (``evaluation.evaluate_run`` on the task's first ``eval_size`` held-out
    prompts), so both engines are scored by the same ruler on the same prompts."""
    from grpo_edu.training.task.evaluation import evaluate_run

    task = get_task(config.task)
    rows = task.split("heldout", config.eval_size)

    def score():
        was_training = model.training
        model.eval()
        try:
            return evaluate_run(model, tokenizer, rows, task, config)["accuracy"]
        finally:
            model.train(was_training)
    return score


def run_trl(config=None, *, num_processes=None):
    """Train TRL's GRPOTrainer with ``to_trl(config)``. Returns ``(log_history, info)``: TRL's
    per-update metrics, and ``info`` with the batch TRL actually used (per process, accumulation,
    completions per generation), the number of processes, and ``evals``: held-out accuracy
    ``[{"step", "accuracy"}]`` before training, every ``config.eval_every`` updates and at the end,
    measured as grpo_edu measures it (``heldout_evaluator``; none when ``config.eval_size`` is 0)."""
    import datasets
    import transformers
    import trl

    c = config or GRPOConfig()
    processes = num_processes or int(os.environ.get("WORLD_SIZE", "1"))
    task = get_task(c.task)

    def reward(prompts, completions, answer, **kwargs):        # the task's own 0/1 exact-match reward
        return task.reward(prompts, completions, answer)
    reward.__name__ = f"{c.task}_reward"

    evals = []

    class HeldOut(transformers.TrainerCallback):               # before training, every eval_every, at the end
        def __init__(self, score):
            self.score = score

        def on_train_begin(self, args, state, control, **kwargs):
            evals.append({"step": 0, "accuracy": self.score()})

        def on_step_end(self, args, state, control, **kwargs):
            if (c.eval_every and state.global_step % c.eval_every == 0) or state.global_step == state.max_steps:
                evals.append({"step": state.global_step, "accuracy": self.score()})

    kwargs, _ = to_trl(c, num_processes=processes)
    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        # transformers 5 renamed TRL's gradient_checkpointing flag and warns about it at every use
        warnings.filterwarnings("ignore", r".*gradient_checkpointing.* is deprecated", FutureWarning)
        args = trl.GRPOConfig(output_dir=out, report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True,
                              dataloader_num_workers=0, model_init_kwargs=no_hub_kernels(),  # as grpo_edu loads it
                              **{**kwargs, "use_cpu": pick_device(c.device).type == "cpu"})
        trainer = trl.GRPOTrainer(model=resolve_model(c.model), reward_funcs=[reward], args=args,
                                  train_dataset=datasets.Dataset.from_list(task.split("train")))
        trainer.remove_callback(transformers.PrinterCallback)   # TRL's per-step dicts stay in log_history
        if c.eval_size:                                         # the unwrapped model: its weights are trained
            trainer.add_callback(HeldOut(heldout_evaluator(c, trainer.model, trainer.processing_class)))
        trainer.train()
        info = {"world_size": trainer.accelerator.num_processes,
                "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
                "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
                "generation_batch_size": trainer.args.generation_batch_size,
                "evals": evals}
        return trainer.state.log_history, info


def launch_command(*, num_processes=2, config="run.json", out="trl.json", zero_stage=None, accelerate="accelerate"):
    """The ``accelerate launch`` command (a list of strings) that trains ``config`` (a GRPOConfig JSON
    file) with TRL on ``num_processes`` processes, one per GPU. ``zero_stage`` 1–3 shards with
    DeepSpeed ZeRO (``pip install deepspeed``); None is plain data parallel (``--multi_gpu``, which on a
    machine without CUDA starts CPU processes talking over gloo). Precision stays float32, as exported."""
    _checks.positive_int("num_processes", num_processes)
    if zero_stage not in (None, 1, 2, 3):
        _checks.fail("zero_stage", f"is {zero_stage!r}", "use None (plain data parallel), 1, 2 or 3")
    command = [accelerate, "launch", "--num_processes", str(num_processes), "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no"]
    command += ["--use_deepspeed", "--zero_stage", str(zero_stage)] if zero_stage else ["--multi_gpu"]
    return command + ["-m", "grpo_edu.beyond.graduation", "--config", str(config), "--out", str(out)]


def run_trl_processes(config, *, num_processes=2, timeout=900):
    """``run_trl(config)`` on ``num_processes`` processes under ``accelerate launch`` (a subprocess).
    Returns ``(log_history, info)`` as ``run_trl`` does, from process 0. With ``device="cpu"`` the
    processes run on the CPU (CUDA hidden) and talk over gloo."""
    _checks.positive_int("num_processes", num_processes)
    to_trl(config, num_processes=num_processes)          # a batch the processes cannot share fails now
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        _checks.fail("num_processes", "needs accelerate's launcher, which is not installed",
                     'pip install -e ".[trl]" (accelerate comes with TRL)')
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if config.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    with tempfile.TemporaryDirectory() as folder:
        config_path, out = Path(folder) / "run.json", Path(folder) / "trl.json"
        config_path.write_text(json.dumps(config.to_dict()), encoding="utf-8")
        command = launch_command(num_processes=num_processes, config=config_path, out=out, accelerate=accelerate)
        command[2:2] = ["--main_process_port", "0"]     # any free port: two runs at once do not collide
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"accelerate launch failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        record = json.loads(out.read_text(encoding="utf-8"))
    return record.pop("log_history"), record


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.beyond.graduation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="grpo_edu steps (TRL updates × num_iterations)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-size", type=int, default=0, help="held-out prompts to score (0 = none)")
    parser.add_argument("--eval-every", type=int, default=0, help="also score them every this many updates")
    parser.add_argument("--config", help="a GRPOConfig as JSON (GRPOConfig.to_dict()); replaces the flags above")
    parser.add_argument("--out", help="write TRL's log_history here (JSON); only process 0 writes")
    args = parser.parse_args(argv)
    config = GRPOConfig(total_training_steps=args.steps, batch_size=args.batch_size,
                        num_generations=args.num_generations, seed=args.seed, eval_size=args.eval_size,
                        eval_every=args.eval_every, device="cpu")
    if args.config:
        config = GRPOConfig.from_dict(json.loads(Path(args.config).read_text(encoding="utf-8")))
    history, info = run_trl(config)
    if args.out and int(os.environ.get("RANK", "0")) == 0:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({**info, "log_history": history}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
