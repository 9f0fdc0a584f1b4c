"""Make ``assets/trl-runs/``: real TRL GRPO runs on this course's task, for ``diagnose`` to read.

Lesson 09 brings a TRL run to ``grpo_edu.diagnose``. Its logs must come from TRL itself, so this
script trains ``trl.GRPOTrainer`` on the bundled model and the addition task and keeps the
``trainer_state.json`` TRL writes (its ``log_history``: one dict of TRL's metric names per step).
TRL is not a dependency of the course; this script needs it (``pip install trl``), the lesson
and the tests only read the files it wrote. On CPU: about 20 s per run.

    python -m grpo_edu.trl_example            # writes assets/trl-runs/<name>/trainer_state.json
"""

import json
import sys
import tempfile
from pathlib import Path

from grpo_edu.models import ASSETS, bundled_model_dir
from grpo_edu.tasks import get_task

OUT = ASSETS / "trl-runs"
RUNS = {
    "healthy": dict(learning_rate=3e-4),
    "lr-too-high": dict(learning_rate=3e-3),
}
"""Run name → the TRL settings that differ; everything else is the course's default step."""


def run(name, steps=80, seed=0):
    """Train TRL's GRPOTrainer for ``steps`` steps; return the path of the trainer_state.json kept."""
    import datasets
    import trl
    from trl import GRPOConfig as TRLConfig, GRPOTrainer as TRLTrainer

    task = get_task("addition")

    def reward_addition(prompts, completions, answer, **kwargs):
        return task.reward(prompts, completions, answer)

    settings = dict(per_device_train_batch_size=16 * 8, num_generations=8, max_completion_length=4, beta=0.04,
                    num_iterations=1, loss_type="grpo", lr_scheduler_type="constant", temperature=1.0, top_k=0,
                    bf16=False, use_cpu=True, max_steps=steps, logging_steps=1, report_to=[], save_strategy="no",
                    seed=seed, disable_tqdm=True, dataloader_num_workers=0, **RUNS[name])
    with tempfile.TemporaryDirectory() as tmp:
        args = TRLConfig(output_dir=tmp, **settings)
        trainer = TRLTrainer(model=str(bundled_model_dir()), reward_funcs=[reward_addition], args=args,
                             train_dataset=datasets.Dataset.from_list(task.split("train")))
        trainer.train()
        trainer.state.save_to_json(f"{tmp}/state.json")
        state = json.loads(Path(f"{tmp}/state.json").read_text(encoding="utf-8"))
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    record = {"log_history": state["log_history"], "global_step": state["global_step"],
              "made_by": f"python -m grpo_edu.trl_example (trl {trl.__version__}, seed {seed})",
              "trl_settings": {k: v for k, v in settings.items() if isinstance(v, (int, float, str))}}
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv=None):
    names = (argv if argv is not None else sys.argv[1:]) or list(RUNS)
    for name in names:
        if name not in RUNS:
            print(f"error: unknown run {name!r}; choose from {', '.join(RUNS)}", file=sys.stderr)
            return 2
        print(run(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
