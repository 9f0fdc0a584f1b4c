"""Catastrophic forgetting (灾难性遗忘), measured: train on task A, then on task B, and watch A.

Lesson 06's experiment in two phases. Phase A trains on task A and fills a replay buffer
file; phase B starts from phase A's policy, trains on task B, and may replay A's stored
answers at some ``replay_ratio``. Along the way held-out accuracy is probed on *both*
tasks: A's tells how much is kept (retention), B's how much is learned.

Everything here is the ordinary trainer (``GRPOTrainer``) with its ordinary config; this
module only runs it step by step and probes accuracy, so the experiment cannot drift from
what ``grpo-edu train --replay-ratio …`` does.
"""

import time
from dataclasses import asdict, dataclass, field

import torch

from grpo_edu import _checks
from grpo_edu.rollout import completion_logprobs, generate
from grpo_edu.tasks import get_task


@dataclass
class PhaseRecord:
    """What one phase measured: probe accuracies by step, and the trainer's per-step metrics."""

    replay_ratio: float
    steps: list = field(default_factory=list)
    """Steps at which the probes ran (0 = before the phase's first update)."""
    accuracy: dict = field(default_factory=dict)
    """{task name: held-out accuracy at each of ``steps``}."""
    entropy: dict = field(default_factory=dict)
    """{task name: mean token entropy of the policy's answers to that task, at each of ``steps``}."""
    history: list = field(default_factory=list)
    """The trainer's metrics dict of every step."""
    seconds: float = 0.0

    def to_dict(self):
        return asdict(self)


@torch.no_grad()
def probe(model, tokenizer, probes, *, num_samples, seed, max_new_tokens):
    """{task name: (accuracy, entropy)} of ``model`` on each task's held-out rows.

    ``num_samples`` answers per prompt, sampled at temperature 1 from a generator seeded with
    ``seed`` (the trainer's own is untouched). The entropy is the mean, over the answers'
    tokens, of H(π(·|q, o_<t)): how unsure the policy is while it answers that task.
    """
    out = {}
    for name, rows in probes.items():
        task = get_task(name)
        generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
        rollout = generate(model, tokenizer, [r["prompt"] for r in rows], num_generations=num_samples,
                           max_new_tokens=max_new_tokens, temperature=1.0, generator=generator)
        answers = [rows[i // num_samples]["answer"] for i in range(len(rollout.completions))]
        accuracy = sum(task.is_correct(c, a) for c, a in zip(rollout.completions, answers)) / len(answers)
        _, entropy = completion_logprobs(model, rollout.input_ids, rollout.attention_mask,
                                         rollout.completion_ids.shape[1], with_entropy=True)   # (N, T)
        mask = rollout.completion_mask.bool()
        out[name] = (accuracy, float(entropy[mask].mean()))
    return out


def run_phase(trainer, probes, *, probe_every, probe_samples=2, progress=True, desc="phase"):
    """Train ``trainer`` through its schedule, probing accuracy every ``probe_every`` steps.

    ``probes``: {task name: held-out rows}. Returns a :class:`PhaseRecord`; the trainer keeps
    the trained policy and its buffer.
    """
    from tqdm.auto import tqdm

    _checks.positive_int("probe_every", probe_every)
    if not probes:
        _checks.fail("probes", "is empty", "pass {task name: held-out rows} for at least one task")
    c = trainer.config
    record = PhaseRecord(replay_ratio=c.replay_ratio, accuracy={name: [] for name in probes},
                         entropy={name: [] for name in probes})
    t0 = time.perf_counter()

    def measure():
        was_training = trainer.model.training
        trainer.model.eval()
        scores = probe(trainer.model, trainer.tokenizer, probes, num_samples=probe_samples, seed=c.seed,
                       max_new_tokens=c.max_completion_length)
        trainer.model.train(was_training)
        record.steps.append(trainer.step_count)
        for name, (accuracy, entropy) in scores.items():
            record.accuracy[name].append(accuracy)
            record.entropy[name].append(entropy)

    measure()
    total = trainer.schedule.total_steps
    with tqdm(total=total, desc=desc, unit="step", disable=not progress, dynamic_ncols=True) as bar:
        while trainer.step_count < total:
            record.history.append(trainer.step())
            bar.update(1)
            if trainer.step_count % probe_every == 0 or trainer.step_count == total:
                measure()
                bar.set_postfix({name: f"{acc[-1]:.0%}" for name, acc in record.accuracy.items()}, refresh=False)
    record.seconds = time.perf_counter() - t0
    return record
