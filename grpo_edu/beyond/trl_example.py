"""Make ``assets/trl-runs/``: real TRL GRPO runs on this course's task, for ``diagnose`` to read.

Lesson 09b brings a TRL run to ``grpo_edu.beyond.diagnose``. Its logs must come from TRL itself, so this
script trains ``trl.GRPOTrainer`` on the bundled model and the addition task and keeps the
``trainer_state.json`` TRL writes (its ``log_history``: one dict of TRL's metric names per step).
TRL is not a dependency of the course; this script needs it (``pip install trl``), the lesson
and the tests only read the files it wrote. On CPU: about 20 s per run.

    python -m grpo_edu.beyond.trl_example            # writes assets/trl-runs/<name>/trainer_state.json
"""

import json
import sys

from grpo_edu.beyond.export import to_trl
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.model.models import ASSETS

OUT = ASSETS / "trl-runs"
RUNS = {
    "healthy": dict(learning_rate=3e-4),
    "lr-too-high": dict(learning_rate=3e-3),
}
"""Run name → the settings that differ; everything else is the course's default step (``to_trl``)."""


def run(name, steps=80, seed=0):
    """Train TRL's GRPOTrainer for ``steps`` steps; return the path of the trainer_state.json kept.

    The TRL settings are ``grpo_edu.beyond.export.to_trl`` of the course's default step with the run's
    learning rate, held constant (``grpo_edu.beyond.graduation.run_trl`` does the training).
    """
    import trl

    from grpo_edu.beyond.graduation import run_trl

    config = GRPOConfig(total_training_steps=steps, seed=seed, lr_scheduler_type="constant", eval_size=0,
                        device="cpu", **RUNS[name])
    history, _ = run_trl(config)
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    settings, _ = to_trl(config)
    record = {"log_history": history, "global_step": max(row.get("step", 0) for row in history),
              "made_by": f"python -m grpo_edu.beyond.trl_example (trl {trl.__version__}, seed {seed})",
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
