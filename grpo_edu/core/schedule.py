"""The training-schedule arithmetic: batch_size, G, step, epoch, total_training_steps.

The word-memorisation analogy (lesson 01): 1000 words to learn, 10 looked at each day,
15 passes planned. Dataset size 1000, batch_size 10 → 100 steps per epoch; 15 epochs →
1500 steps. A step is one full "sample a batch → generate G answers per prompt → rewards
→ advantages → backward → update".

Conventions, chosen to match TRL's GRPOTrainer and verl:

* steps are counted from 1; ``epoch_of(500)`` is 1 when an epoch has 500 steps.
* an incomplete last batch is dropped (``drop_last``), so an epoch has
  ``dataset_size // batch_size`` steps and ``dataset_size % batch_size`` prompts are
  left out of each epoch (a different few each epoch, since the order is reshuffled).
* ``micro_batch_size`` counts *completions* (sequences), as TRL's
  ``per_device_train_batch_size`` and verl's ``ppo_micro_batch_size_per_gpu`` do. One step
  holds ``batch_size × G`` completions, processed in
  ``gradient_accumulation_steps = batch_size × G / micro_batch_size`` forward/backward
  passes before the single optimizer update.
"""

from dataclasses import dataclass

from grpo_edu.common import _checks


def micro_batch_sizes(completions_per_step):
    """The micro_batch_size values that split a step of ``completions_per_step`` evenly: its divisors."""
    return [d for d in range(1, completions_per_step + 1) if completions_per_step % d == 0]


@dataclass(frozen=True)
class TrainingSchedule:
    """How many steps a GRPO run takes, and what each step holds.

    Give at least one stop condition; when both are given, the one reached first wins.
    """

    dataset_size: int
    """Number of prompts in the training set (the 1000 words)."""
    batch_size: int
    """Prompts per step (words looked at per day). Seed advice: at least 2–4, 8+ on a GPU."""
    num_generations: int
    """G: completions sampled per prompt, the group size. Seed advice: 4–8 (≥ 8 for instruct models)."""
    total_epochs: int | None = None
    """Planned passes over the dataset (the 15 passes): the back-stop limit."""
    total_training_steps: int | None = None
    """Hard limit on optimizer steps; usually reached first."""
    micro_batch_size: int | None = None
    """Completions per forward/backward pass; None means the whole step at once."""

    def __post_init__(self):
        _checks.positive_int("dataset_size", self.dataset_size, fix="pass the number of prompts, at least 1")
        _checks.positive_int("batch_size", self.batch_size, fix="take at least 1 prompt per step")
        if self.batch_size > self.dataset_size:
            _checks.fail("batch_size", f"{self.batch_size} is larger than dataset_size={self.dataset_size}, "
                         "so not one full batch fits in an epoch",
                         f"use batch_size ≤ {self.dataset_size}, or add prompts")
        _checks.positive_int("num_generations", self.num_generations, minimum=2,
                             fix="sample at least 2 completions per prompt (G ≥ 2): "
                                 "a group of one has no mean to compare against; 4–8 is usual")
        if self.total_epochs is None and self.total_training_steps is None:
            _checks.fail("total_epochs/total_training_steps", "neither stop condition is given",
                         "pass total_training_steps=… (a hard limit), total_epochs=…, or both")
        if self.total_epochs is not None:
            _checks.positive_int("total_epochs", self.total_epochs)
        if self.total_training_steps is not None:
            _checks.positive_int("total_training_steps", self.total_training_steps)
        if self.micro_batch_size is not None:
            _checks.positive_int("micro_batch_size", self.micro_batch_size)
            if self.completions_per_step % self.micro_batch_size:
                divisors = micro_batch_sizes(self.completions_per_step)
                _checks.fail("micro_batch_size",
                             f"batch_size × G = {self.batch_size} × {self.num_generations} = "
                             f"{self.completions_per_step} completions do not split into micro-batches "
                             f"of {self.micro_batch_size}",
                             f"use a divisor of {self.completions_per_step}: {divisors}")

    # --- per step ---------------------------------------------------------------------
    @property
    def completions_per_step(self) -> int:
        """batch_size × G: sequences generated, scored and trained on in one step."""
        return self.batch_size * self.num_generations

    @property
    def gradient_accumulation_steps(self) -> int:
        """Forward/backward passes per optimizer step: batch_size × G / micro_batch_size."""
        if self.micro_batch_size is None:
            return 1
        return self.completions_per_step // self.micro_batch_size

    # --- per epoch --------------------------------------------------------------------
    @property
    def steps_per_epoch(self) -> int:
        """dataset_size // batch_size: the incomplete last batch is dropped."""
        return self.dataset_size // self.batch_size

    @property
    def dropped_per_epoch(self) -> int:
        """Prompts left out of each epoch because they do not fill a whole batch."""
        return self.dataset_size % self.batch_size

    # --- whole run --------------------------------------------------------------------
    @property
    def total_steps(self) -> int:
        """Steps actually run: the smaller of the two limits that are given."""
        return min(self._limits().values())

    @property
    def stop_reason(self) -> str:
        """Which limit ends the run: "total_training_steps" or "total_epochs".

        On a tie the hard limit, "total_training_steps", is named.
        """
        limits = self._limits()
        return min(limits, key=lambda k: (limits[k], k != "total_training_steps"))

    @property
    def epochs_completed(self) -> float:
        """total_steps / steps_per_epoch, e.g. 1000 / 500 = 2.0 (may be fractional)."""
        return self.total_steps / self.steps_per_epoch

    @property
    def total_completions(self) -> int:
        """Completions generated over the whole run."""
        return self.total_steps * self.completions_per_step

    def epoch_of(self, step: int) -> int:
        """The epoch (counted from 1) that step ``step`` (counted from 1) belongs to."""
        _checks.positive_int("step", step, fix="count steps from 1")
        if step > self.total_steps:
            _checks.fail("step", f"{step} is past the last step ({self.total_steps})",
                         f"pass a step between 1 and {self.total_steps}")
        return (step - 1) // self.steps_per_epoch + 1

    def summary(self) -> dict:
        """Every derived number, for a table in a lesson or a log line."""
        return {
            "dataset_size": self.dataset_size,
            "batch_size": self.batch_size,
            "num_generations (G)": self.num_generations,
            "completions_per_step": self.completions_per_step,
            "micro_batch_size": self.micro_batch_size or self.completions_per_step,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "steps_per_epoch": self.steps_per_epoch,
            "dropped_per_epoch": self.dropped_per_epoch,
            "total_steps": self.total_steps,
            "stop_reason": self.stop_reason,
            "epochs_completed": round(self.epochs_completed, 4),
        }

    @property
    def limits(self) -> dict:
        """The stop conditions that are given, in steps: {"total_training_steps": …, "total_epochs": …}."""
        return self._limits()

    def _limits(self) -> dict:
        limits = {}
        if self.total_training_steps is not None:
            limits["total_training_steps"] = self.total_training_steps
        if self.total_epochs is not None:
            limits["total_epochs"] = self.total_epochs * self.steps_per_epoch
        return limits


LR_SCHEDULES = ("linear", "constant")
"""Learning-rate schedules: "linear" decays to 0 over the run (TRL's default), "constant" keeps it."""


def learning_rate_at(step: int, total_steps: int, learning_rate: float, schedule: str = "linear") -> float:
    """The learning rate used by ``step`` (counted from 1) of a run of ``total_steps`` steps.

    "linear": lr · (1 − (step − 1)/total_steps), so step 1 uses the full rate and the last step
    lr/total_steps, as the linear schedule of TRL (transformers' Trainer) does when each step is
    one optimizer update. "constant": lr at every step. A pure function of the step, so a resumed
    run continues with exactly the rate it would have had.
    """
    _checks.choice("schedule", schedule, LR_SCHEDULES)
    _checks.positive_int("total_steps", total_steps)
    _checks.positive_int("step", step)
    if step > total_steps:
        _checks.fail("step", f"is {step}, past the run's {total_steps} steps", "pass 1 ≤ step ≤ total_steps")
    if schedule == "constant":
        return learning_rate
    return learning_rate * (1 - (step - 1) / total_steps)
