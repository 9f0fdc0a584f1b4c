"""Lesson 14's experiments: where a step's time and memory go, one generation feeding several updates, LoRA.

Each function runs the real trainer (``GRPOTrainer``) and measures it with ``grpo_edu.beyond.step_cost``;
the lesson only calls them and draws what they return.

* :func:`step_costs_in_turns`: a few steps of several models, samplers or settings, taken in turns, each split
  into parts (time), with the FLOPs and the memory by part, and how many row-steps the sampler decoded (what
  the engine's dropped rows save); :func:`step_costs` for one of them.
* :func:`reuse_drift`: ``num_iterations`` = μ updates per sampled batch; after each update, how far the
  policy has moved off the sampler on that batch (the share of tokens whose ratio π_θ/π_θold left
  [1 − ε, 1 + ε], and the mean |log ratio|), and the seconds per optimizer update.
* :func:`lora_drift`: the same first-step drift for full fine-tuning and LoRA at several learning rates.
"""

import contextlib
import statistics
import time

import torch

from grpo_edu.beyond import roofline
from grpo_edu.beyond.step_cost import PARTS, flops_of_step, memory_parts, teacher_forced_flops, timed_step
from grpo_edu.training.rollouts import passes
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.rollouts.rollout import completion_logprobs
from grpo_edu.training.trainers.trainer import GRPOTrainer

WORKLOADS = {
    "adder": dict(model="bundled", task="addition", max_completion_length=8),
    "sums": dict(model="bundled-sums", task="sums", max_completion_length=42),
}
"""The two bundled models, as ``grpo-edu bench`` times them: the adder (answers ≤ 8 tokens) and lesson 11's
model that writes its working (≤ 42)."""

STEP = dict(batch_size=4, num_generations=8, beta=0.04, eval_size=0)
"""One step of the lesson's measurements: 4 prompts × G = 8 = 32 answers, β = 0.04 (a reference pass)."""


def _trainer(workload, seed, **settings):
    fields = {**WORKLOADS[workload], **STEP, "seed": seed, "total_training_steps": 100, **settings}
    return GRPOTrainer(GRPOConfig(**fields))


def step_costs(workload, sampler, *, steps=3, warmup=1, seed=0, learning_rate=1e-9, **settings):
    """``steps`` timed steps (after ``warmup``) of ``workload`` with ``sampler``: :func:`step_costs_in_turns`
    for one run."""
    run = dict(workload=workload, sampler=sampler, **settings)
    return step_costs_in_turns({"run": run}, steps=steps, warmup=warmup, seed=seed,
                               learning_rate=learning_rate)["run"]


def step_costs_in_turns(runs, *, steps=3, warmup=1, seed=0, learning_rate=1e-9):
    """For each run of ``runs`` ({key: {"workload": …, "sampler": …, other GRPOConfig fields}}): ``steps`` timed
    steps (after ``warmup``), at a learning rate so small the policy stays put (as the bench: every step does
    the same work). The runs take their steps in turns (a step of each, then the next step of each), so a change
    in the host's speed falls on all of them alike, and each part's time is its fastest over the steps (other load
    on the host only ever adds time, and a pause that falls on one part of one step then moves no ratio of parts).
    Returns {key: a dict}: ``seconds`` (each part's fastest seconds, :data:`~grpo_edu.beyond.step_cost.PARTS`),
    ``step_s`` (their sum: the step without the host's interruptions), ``flops`` (mean per part),
    ``bytes`` (mean per part, ``beyond.roofline.bytes_of_step``), ``trainable`` (weights the optimizer updates),
    ``memory`` (bytes by part, on the last step's rows), ``decoded_rows`` (row-steps the loop computes: every
    row until the batch's longest answer ends, summed over steps) and ``answer_tokens`` (row-steps that are
    real answer tokens, what the engine computes), the mean answer length, ``pass_flops``: one teacher-forced
    pass over the trained rows (mean per step) with each prompt read once (``"shared"``) and with every row
    reading its own prompt (``"unshared"``), ``pass_cost_tokens`` (one more pass's cost, in the model's tokens:
    ``training.passes.pass_cost_tokens``) and ``shared_steps``: the share of the timed steps whose passes
    read each prompt once (``training.passes.share_pays``)."""
    trainers = {}
    for key, run in runs.items():
        fields = dict(run)
        workload = fields.pop("workload")
        trainers[key] = _trainer(workload, seed, learning_rate=learning_rate, **fields)
    for _ in range(warmup):
        for trainer in trainers.values():
            trainer.step()
    record = {key: {"steps": [], "flops": [], "bytes": [], "decoded": 0, "answer": 0, "lengths": [], "shared_steps": 0,
                    "passes": {"shared": [], "unshared": []}} for key in runs}
    for _ in range(steps):
        for key, trainer in trainers.items():
            mine = record[key]
            metrics, seconds, tokens = timed_step(trainer)
            mine["steps"].append(seconds)
            mine["flops"].append(flops_of_step(trainer, tokens))
            mine["bytes"].append(roofline.bytes_of_step(trainer, tokens))
            for _, completions in tokens["sampled"]:
                mine["decoded"] += len(completions) * max(completions)
                mine["answer"] += sum(completions)
            mine["lengths"].append(metrics["completion_length"])
            prompts, completions, distinct = tokens["trained"]
            mine["shared_steps"] += passes.share_pays(prompts, completions, len(distinct),
                                                      passes.pass_cost_tokens(trainer.model))
            mine["passes"]["shared"].append(teacher_forced_flops(trainer.model.config, prompts, completions,
                                                                 distinct_prompt_lengths=distinct))
            mine["passes"]["unshared"].append(teacher_forced_flops(trainer.model.config, prompts, completions))
    results = {}
    for key, trainer in trainers.items():
        mine = record[key]
        fastest = {p: min(seconds[p] for seconds in mine["steps"]) for p in PARTS}
        rollout = trainer._sample([row["prompt"] for row in trainer.batch_for(trainer.step_count)])
        results[key] = {"seconds": {p: fastest[p] for p in PARTS}, "step_s": sum(fastest.values()),
                        "flops": {k: statistics.mean(f[k] for f in mine["flops"]) for k in mine["flops"][0]},
                        "bytes": {k: statistics.mean(b[k] for b in mine["bytes"]) for k in mine["bytes"][0]},
                        "trainable": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
                        "memory": memory_parts(trainer, rollout), "decoded_rows": mine["decoded"],
                        "answer_tokens": mine["answer"], "completion_length": statistics.mean(mine["lengths"]),
                        "pass_flops": {k: statistics.mean(v) for k, v in mine["passes"].items()},
                        "pass_cost_tokens": passes.pass_cost_tokens(trainer.model),
                        "shared_steps": mine["shared_steps"] / steps}
    return results


def roofline_table(cost, *, flops_per_s, bytes_per_s, number=4):
    """``beyond.roofline.roofline`` of one entry of :func:`step_costs_in_turns`: each part's FLOPs (AdamW's
    element-wise arithmetic added for the optimizer) and bytes beside its fastest measured time, at a machine's
    matmul rate and bandwidth. ``number``: bytes per number on that machine (4: fp32, as measured here; 2: bf16,
    as a GPU trains): the bytes scale by number / 4 and the measured times are left out, since they are this
    machine's. Returns ``(table, info)``."""
    flops = {**cost["flops"], "optimizer": roofline.optimizer_flops(cost["trainable"])}
    nbytes = {part: value * number / 4 for part, value in cost["bytes"].items()}
    return roofline.roofline(flops, nbytes, flops_per_s=flops_per_s, bytes_per_s=bytes_per_s,
                             seconds=cost["seconds"] if number == 4 else None)


@contextlib.contextmanager
def _drift_after_each_update(trainer, record, measuring=None):
    """While open: after every optimizer update, append to ``record`` how far the policy has moved off the
    sampler on the batch it is training on: {"outside_clip": share of answer tokens with π_θ/π_θold outside
    [1 − ε, 1 + ε], "abs_log_ratio": mean |log π_θ − log π_θold|} (π_θold: the sampler's log-probs).
    ``measuring``: a one-item list that adds up the seconds these measurements take."""
    seen = {}
    measuring = [0.0] if measuring is None else measuring
    sample, step = trainer._sample, trainer.optimizer.step
    eps = trainer.config.epsilon

    def sampled(*args, **kwargs):
        seen["rollout"] = sample(*args, **kwargs)
        return seen["rollout"]

    def stepped(*args, **kwargs):
        out = step(*args, **kwargs)
        start = time.perf_counter()
        r = seen["rollout"]
        with torch.no_grad():
            now, _ = completion_logprobs(trainer.model, r.input_ids, r.attention_mask, r.completion_ids.shape[1],
                                         temperature=trainer.config.temperature)
        real = r.completion_mask.bool()
        log_ratio = (now - r.logprobs)[real]                                           # log π_θ/π_θold per token
        ratio = log_ratio.exp()
        record.append({"outside_clip": float(((ratio < 1 - eps) | (ratio > 1 + eps)).float().mean()),
                       "abs_log_ratio": float(log_ratio.abs().mean())})
        measuring[0] += time.perf_counter() - start                                    # not the step's own time
        return out

    trainer._sample, trainer.optimizer.step = sampled, stepped
    try:
        yield
    finally:
        del trainer._sample, trainer.optimizer.step


def reuse_drift(workload="sums", mus=(1, 2, 4), *, steps=2, seed=0, learning_rate=3e-4):
    """For each μ in ``mus``: ``steps`` steps of ``num_iterations`` = μ (one sampled batch, μ optimizer updates),
    at a learning rate that learns. Returns {μ: {"drift": [for each step, one {"outside_clip", "abs_log_ratio"}
    per update], "clip_fraction": the trainer's mean over the updates of every step, "seconds_per_update": the
    fastest step's seconds / μ, "sampling_share": the median share of a step spent sampling}}.

    The μ's take their steps in turns (a step of each, then the next step of each), so a change in the host's
    speed falls on all of them alike; and a step's time is the fastest of its ``steps`` (other load on the
    host only ever adds time). Each trainer samples from its own seeded generator, so the turns change no
    number but the seconds."""
    trainers = {mu: _trainer(workload, seed, sampler="engine", num_iterations=mu, learning_rate=learning_rate)
                for mu in mus}
    record = {mu: {"drift": [], "measuring": [0.0], "steps_s": [], "shares": [], "clip": []} for mu in mus}
    with contextlib.ExitStack() as open_:
        for mu, trainer in trainers.items():
            open_.enter_context(_drift_after_each_update(trainer, record[mu]["drift"], record[mu]["measuring"]))
        for _ in range(steps):
            for mu, trainer in trainers.items():
                mine = record[mu]
                mine["measuring"][0] = 0.0
                metrics, seconds, _ = timed_step(trainer)
                step_s = sum(seconds.values()) - mine["measuring"][0]                  # the drift passes left out
                mine["steps_s"].append(step_s)
                mine["shares"].append(seconds["sampling"] / step_s)
                mine["clip"].append(metrics["clip_fraction"])
    results = {}
    for mu, mine in record.items():
        per_step = [mine["drift"][i * mu:(i + 1) * mu] for i in range(steps)]          # μ updates per step
        results[mu] = {"drift": per_step, "clip_fraction": statistics.mean(mine["clip"]),
                       "seconds_per_update": min(mine["steps_s"]) / mu,
                       "sampling_share": statistics.median(mine["shares"])}
    return results


def lora_drift(runs, *, workload="sums", seed=0, updates=2):
    """How far ``updates`` optimizer updates (one sampled batch, num_iterations = updates) move the policy off
    the sampler, for each run of ``runs``: {name: {"learning_rate": …, "lora_rank": None or r, …}}. Returns
    {name: mean |log π_θ/π_θold| over the batch's answer tokens after the last update}."""
    moved = {}
    for name, settings in runs.items():
        trainer = _trainer(workload, seed, sampler="engine", num_iterations=updates, **settings)
        drift = []
        with _drift_after_each_update(trainer, drift):
            trainer.step()
        moved[name] = drift[-1]["abs_log_ratio"]
    return moved


def engine_table():
    """The table in ``training/rollouts/engine.py``'s docstring (text): what our engine does beside what vLLM does."""
    from grpo_edu.training.rollouts import engine

    lines = engine.__doc__.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("====")]
    if len(rules) < 2:                                       # the docstring lost its table: show all of it
        return engine.__doc__
    return "\n".join(lines[rules[0]:rules[-1] + 1])


def stacked_bars(rows, parts, *, scale=1.0, unit="", title=""):
    """One horizontal stacked bar per row of ``rows`` ({label: {part: value}}), a segment per part."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.2))
    labels = list(rows)
    left = [0.0] * len(labels)
    for part in parts:
        widths = [rows[label].get(part, 0.0) * scale for label in labels]
        ax.barh(labels, widths, left=left, label=part)
        left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def model_config(workload):
    """The ``transformers`` config of a workload's model (its shape, for the FLOP count)."""
    from transformers import AutoConfig

    from grpo_edu.training.model.models import locate_model

    return AutoConfig.from_pretrained(str(locate_model(WORKLOADS[workload]["model"])[0]))
