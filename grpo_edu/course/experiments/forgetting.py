"""Catastrophic forgetting (灾难性遗忘), measured: train on task A, then on task B, and watch A.

Lesson 06's experiment in two phases. Phase A trains on task A and fills a replay buffer
file; phase B starts from phase A's policy, trains on task B, and may replay A's stored
answers at some ``replay_ratio``. Along the way held-out accuracy is probed on *both*
tasks: A's tells how much is kept (retention), B's how much is learned.

Everything here is the ordinary trainer (``GRPOTrainer``) with its ordinary config; this
module only runs it step by step and probes accuracy, so the experiment cannot drift from
what ``grpo-edu train --replay-ratio …`` does.
"""

import dataclasses
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from grpo_edu.common import _checks
from grpo_edu.training.model.models import ASSETS
from grpo_edu.training.rollouts.rollout import generate
from grpo_edu.training.task.tasks import get_task


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
    notebook_share: dict = field(default_factory=dict)
    """{task name: share of the replay buffer's samples that answer that task's prompts, at each of ``steps``}
    (empty without a buffer). Replayed rows are drawn uniformly from the buffer, so this is also the share
    of that task among the rows a step replays."""
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
                           max_new_tokens=max_new_tokens, temperature=1.0, generator=generator,
                           with_entropy=True)                      # the sampler's own π(·|q, o_<t): no second pass
        answers = [rows[i // num_samples]["answer"] for i in range(len(rollout.completions))]
        accuracy = sum(task.is_correct(c, a) for c, a in zip(rollout.completions, answers)) / len(answers)
        mask = rollout.completion_mask.bool()                                                  # (N, T)
        out[name] = (accuracy, float(rollout.entropy[mask].mean()))
    return out


def run_phase(trainer, probes, *, probe_every, probe_samples=2, progress=True, desc="phase"):
    """Train ``trainer`` through its schedule, probing accuracy every ``probe_every`` steps.

    ``probes``: {task name: held-out rows}. Returns a :class:`PhaseRecord`; the trainer keeps
    the trained policy and its buffer.
    """
    from grpo_edu.common.progress import progress_bar

    _checks.positive_int("probe_every", probe_every)
    if not probes:
        _checks.fail("probes", "is empty", "pass {task name: held-out rows} for at least one task")
    c = trainer.config
    record = PhaseRecord(replay_ratio=c.replay_ratio, accuracy={name: [] for name in probes},
                         entropy={name: [] for name in probes})
    prompts_of = {name: {r["prompt"] for r in get_task(name).split("train")} for name in probes}
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
        if trainer.replay_buffer is not None:                       # what a replayed row is likely to be
            questions = [sample.question for sample in trainer.replay_buffer.samples()]
            for name, prompts in prompts_of.items():
                share = sum(q in prompts for q in questions) / len(questions) if questions else 0.0
                record.notebook_share.setdefault(name, []).append(share)

    measure()
    total = trainer.schedule.total_steps
    # mininterval: a cell that runs several phases must stay under 1000 widget messages (see progress_bar)
    with progress_bar(total, desc=desc, disable=not progress, mininterval=1.0) as bar:
        while trainer.step_count < total:
            record.history.append(trainer.step())
            bar.update(1)
            if trainer.step_count % probe_every == 0 or trainer.step_count == total:
                measure()
                bar.set_postfix({name: f"{acc[-1]:.0%}" for name, acc in record.accuracy.items()}, refresh=False)
    record.seconds = time.perf_counter() - t0
    return record


# --- lesson 06's experiment ---------------------------------------------------------------------
TASK_A, TASK_B = "addition", "subtraction"
PHASE_A_STEPS, PHASE_B_STEPS = 60, 150
PROBE_ROWS, PROBE_SAMPLES = 200, 4
"""Each probe: 200 held-out prompts per task × 4 sampled answers (about ±1.5 points of noise)."""


def default_probes(n=None):
    """{task: its first ``n`` (default PROBE_ROWS) held-out rows} for both tasks of the experiment."""
    return {name: get_task(name).split("heldout", n or PROBE_ROWS) for name in (TASK_A, TASK_B)}


def phase_a(model, tokenizer, notebook_file, *, seed=0, probes=None, progress=True):
    """GRPO on task A for PHASE_A_STEPS default steps, filling a replay buffer file (no replay yet).

    Returns (trainer, PhaseRecord); the file is closed and ready for phase B to copy.
    """
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    trainer = GRPOTrainer(GRPOConfig(task=TASK_A, total_training_steps=PHASE_A_STEPS, eval_size=0, seed=seed,
                                     replay_path=str(notebook_file)), model=model, tokenizer=tokenizer)
    try:
        record = run_phase(trainer, probes or default_probes(), probe_every=20, probe_samples=PROBE_SAMPLES,
                           progress=progress, desc=f"phase A ({TASK_A})")
    finally:                                    # even when stopped: the file's one writer lets go of it
        trainer.replay_buffer.close()
    return trainer, record


FROZEN = 1e9
"""A ``replay_min_reward`` no answer reaches: the buffer admits nothing, so the notebook stays phase A's."""


def phase_b(start, notebook_file, *, replay_ratio, learning_rate, seed=0, probes=None, progress=True, frozen=False,
            probe_every=25, late=None, name=None, **overrides):
    """GRPO on task B for PHASE_B_STEPS steps from the policy of trainer ``start`` (phase A's),
    replaying a fresh copy of phase A's buffer file at ``replay_ratio``. Returns a PhaseRecord.

    Every run gets its own copy of the file, so each starts from the same notebook of A's answers.
    By default phase B keeps offering its own good answers to the notebook, as the article's does, so
    B's answers take a growing share of what is replayed (``PhaseRecord.notebook_share``);
    ``frozen=True`` admits nothing, so every replayed row is one of A's answers.

    ``late=(step, ratio)`` raises the replay ratio to ``ratio`` after ``step`` steps (the article's 6:4 late
    in training); ``overrides`` are further GRPOConfig fields (e.g. ``batch_size``, ``replay_refresh_every``);
    ``name`` tells this run's copy of the notebook from the others'.
    """
    import copy
    import shutil

    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    notebook_file = Path(notebook_file)
    notebook = notebook_file.with_name(f"{notebook_file.stem}_lr{learning_rate:g}_replay{replay_ratio:g}"
                                       f"{'_frozen' if frozen else ''}{'_' + name if name else ''}.sqlite")
    shutil.copy(notebook_file, notebook)
    trainer = GRPOTrainer(GRPOConfig(**{"task": TASK_B, "total_training_steps": PHASE_B_STEPS,
                                        "learning_rate": learning_rate, "eval_size": 0, "seed": seed,
                                        "replay_ratio": replay_ratio, "replay_path": str(notebook),
                                        "replay_min_reward": FROZEN if frozen else None, **overrides}),
                          model=copy.deepcopy(start.model), tokenizer=start.tokenizer)
    if late is not None:
        late_step, late_ratio = late

        def raise_ratio(metrics):                   # from the next step on, replay at the late ratio
            if metrics["step"] == late_step:
                trainer.config = dataclasses.replace(trainer.config, replay_ratio=late_ratio)
        trainer.callbacks.append(raise_ratio)
    try:
        record = run_phase(trainer, probes or default_probes(), probe_every=probe_every, probe_samples=PROBE_SAMPLES,
                           progress=progress, desc=f"phase B, lr {learning_rate:g}, replay {replay_ratio:.0%}")
    finally:
        trainer.replay_buffer.close()
    return record


STORED_RUNS = {
    "lr 3e-4, replay 0 %": dict(replay_ratio=0.0, learning_rate=3e-4),
    "lr 1e-3, replay 3 %": dict(replay_ratio=0.03, learning_rate=1e-3),
}
"""The phase-B runs lesson 06 reads from :data:`STORED_FOLDER` instead of training them (it trains phase A and the
runs at lr 1e-3 with and without 30 % replay live): {name: ``phase_b`` settings}. ``--store`` makes them."""
STORED_FOLDER = ASSETS / "forgetting"


def kernel_label():
    """The kernel set this process runs on, as stored runs are labelled: "default" under
    ``ATEN_CPU_CAPABILITY=default`` (the portable kernels), "native" otherwise."""
    return "default" if os.environ.get("ATEN_CPU_CAPABILITY", "") == "default" else "native"


def store(seeds, folder, *, label=None, out=sys.stdout):
    """Phase A, then every run of :data:`STORED_RUNS`, for each of ``seeds``; writes each seed's records
    (without the per-step metrics) and the command that made them to ``folder/<label>-seed<N>.json``."""
    import platform
    import tempfile
    import warnings

    from grpo_edu.training.model.models import load_model_and_tokenizer, two_task_model_dir

    label = label or kernel_label()
    if not (isinstance(label, str) and label.replace("-", "").replace("_", "").isalnum() and label.isascii()):
        _checks.fail("label", f"is {label!r}", 'pass a plain name for the files, e.g. "native" or "default"')
    for seed in seeds:                                         # all checked before any run
        _checks.positive_int("seeds", seed, minimum=0)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "")
    for seed in seeds:
        runs = {}
        with tempfile.TemporaryDirectory() as tmp:
            model, tokenizer = load_model_and_tokenizer(two_task_model_dir())
            start, _ = phase_a(model, tokenizer, Path(tmp) / "a.sqlite", seed=seed, progress=False)
            for name, settings in STORED_RUNS.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")              # 3 % warns (outside 10–50 %); asked for here
                    record = phase_b(start, Path(tmp) / "a.sqlite", seed=seed, progress=False, **settings)
                runs[name] = {**record.to_dict(), "history": []}
                print(f"seed {seed}, {name}: {TASK_A} {record.accuracy[TASK_A][0]:.3f} → "
                      f"{record.accuracy[TASK_A][-1]:.3f}, {record.seconds:.0f} s", file=out, flush=True)
        command = ((f"ATEN_CPU_CAPABILITY={capability} " if capability else "") + "OMP_NUM_THREADS=1 python -m "
                   f"grpo_edu.course.experiments.forgetting --seeds {seed} --store {folder} --label {label}")
        meta = {"command": command, "ATEN_CPU_CAPABILITY": capability, "torch": torch.__version__,
                "kernels": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(), "seed": seed}
        (folder / f"{label}-seed{seed}.json").write_text(json.dumps({**meta, "runs": runs}, ensure_ascii=False,
                                                                    indent=1), encoding="utf-8")


def stored_path(seed, folder=None):
    """The file that holds the stored runs of ``seed`` for this process's kernel set (:func:`kernel_label`)."""
    return (Path(folder) if folder else STORED_FOLDER) / f"{kernel_label()}-seed{seed}.json"


def stored_run(name, *, seed, folder=None):
    """Stored run ``name`` (a key of :data:`STORED_RUNS`) of ``seed``, made with this process's kernel set, as
    ``(PhaseRecord, meta)``: meta holds the command that made it, the kernels it ran on and the file's path."""
    if name not in STORED_RUNS:
        _checks.fail("name", f"is {name!r}, not a stored run", f"pass one of {list(STORED_RUNS)}")
    path = stored_path(seed, folder)
    if not path.is_file():
        _checks.fail("seed", f"is {seed!r}, and there is no {path}",
                     f"store it: python -m grpo_edu.course.experiments.forgetting --seeds {seed} --store {path.parent}")
    data = json.loads(path.read_text(encoding="utf-8"))
    meta = {key: value for key, value in data.items() if key != "runs"}
    return PhaseRecord(**data["runs"][name]), {**meta, "path": str(path)}


def stored_or_trained(name, start, notebook_file, *, seed, folder=None, progress=True):
    """Stored run ``name`` of ``seed`` where one is stored for this kernel set, else the same run trained now from
    trainer ``start`` (phase A's) on a copy of ``notebook_file``. Returns ``(PhaseRecord, where)``, ``where`` a
    line saying which: the command that made the stored file, or that it trained here."""
    if stored_path(seed, folder).is_file():
        record, meta = stored_run(name, seed=seed, folder=folder)
        return record, f"{name}: stored, made by `{meta['command']}` (kernels {meta.get('kernels', '?')})"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                        # the 3 % run warns (outside 10–50 %); asked for here
        record = phase_b(start, notebook_file, seed=seed, progress=progress, **STORED_RUNS[name])
    return record, f"{name}: trained here (seed {seed} is not stored for these kernels)"


def main(argv=None):
    """``python -m grpo_edu.course.experiments.forgetting``: lesson 06's experiment for several seeds, as a table."""
    import argparse
    import tempfile
    import warnings

    from grpo_edu.training.model.models import load_model_and_tokenizer, two_task_model_dir

    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.forgetting", description=main.__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.0, 0.1, 0.3, 0.5])
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="phase B's (default 1e-3)")
    parser.add_argument("--frozen", action="store_true",
                        help="phase B admits nothing to the notebook: every replayed row is one of A's answers")
    parser.add_argument("--store", metavar="FOLDER",
                        help="instead: run phase A and the runs lesson 06 reads (STORED_RUNS) and write them to FOLDER")
    parser.add_argument("--label", default=None, help="with --store: the files' kernel label (default: this process's)")
    args = parser.parse_args(argv)
    if args.store:
        store(args.seeds, args.store, label=args.label)
        return 0
    print(f"phase A: {PHASE_A_STEPS} steps of {TASK_A}; phase B: {PHASE_B_STEPS} steps of {TASK_B} at lr "
          f"{args.learning_rate:g}; held-out accuracy on {PROBE_ROWS} prompts × {PROBE_SAMPLES} samples per task")
    print(f"{'seed':>4} {'replay':>6} | {TASK_A + ' before':>16} {'lowest':>7} {'after':>6} | "
          f"{TASK_B + ' before':>19} {'after':>6} | {TASK_A + ' share at end':>20} | {'seconds':>7}")
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as folder:
            model, tokenizer = load_model_and_tokenizer(two_task_model_dir())
            start, _ = phase_a(model, tokenizer, Path(folder) / "a.sqlite", seed=seed, progress=False)
            for ratio in args.ratios:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")            # ratios outside 10–50 % warn; asked for here
                    r = phase_b(start, Path(folder) / "a.sqlite", replay_ratio=ratio,
                                learning_rate=args.learning_rate, seed=seed, progress=False, frozen=args.frozen)
                a, b = r.accuracy[TASK_A], r.accuracy[TASK_B]
                kept = r.notebook_share[TASK_A][-1] if ratio > 0 else float("nan")   # of the rows replayed
                print(f"{seed:>4} {ratio:>6.0%} | {a[0]:>16.3f} {min(a):>7.3f} {a[-1]:>6.3f} | "
                      f"{b[0]:>19.3f} {b[-1]:>6.3f} | {kept:>20.3f} | {r.seconds:>7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
