"""``grpo-edu bench``: how fast is one GRPO step, against the bare floor and against TRL?

Three measurements, each in its own fresh Python process (so start-up time and peak memory
are honest), on the bundled model at the course's default step: 4 prompts × G = 8, up to
8 new tokens, β = 0.04, one iteration, sampling at temperature 1.

* ``grpo_edu``: ``GRPOTrainer.step()``, the real trainer.
* ``floor``: the bare PyTorch passes no GRPO step can avoid, with nothing else: sampling
  the completions with the KV cache, the reference model's forward, the policy's forward
  and backward, and the optimizer step. The trainer's time as a multiple of it is its
  overhead.
* ``trl``: ``trl.GRPOTrainer`` on the same model directory, prompts, reward and settings
  (bf16 off, constant learning rate, same loss_type), when trl is installed.

Each prints the median seconds per step, generated tokens per second, the seconds from
process start to the end of the first step, and the peak resident memory (RSS).

Fairness. All three use a learning rate so small (1e-9) that the weights, and so the length of
what the model samples, stay those of the bundled model: a contender that learned during the
benchmark would sample shorter answers and do less work per step (an earlier version let the
trainer learn at 2e-4 while the floor stood still, and the trainer then "beat" the floor). The
arithmetic of every update is still done in full.

``--sampler`` times the two samplers instead: tokens per second of the loop (``rollout.generate``) and the
engine (``training/rollouts/engine.py``) on one thread, on lesson 11's model and on the adder, then the ``sums``
preset's whole training step with ``sampler="loop"`` and ``sampler="engine"``. ``--sampler --static-cache`` adds
the engine over a static KV cache (``training/rollouts/static_cache.py``) to the tokens per second, and skips the step.

``--step-ms`` prints the ruler of the course's time budgets (:func:`step_ms`): the floor, not the trainer, so
that the ruler measures the machine and a faster trainer shows in every scaled time.

Noise. A 2-core laptop's timings move by ±20 % from one run to the next. So the contenders run
in rounds, interleaved (grpo_edu, floor, trl, then again in a rotated order), and each ratio is
reported as the median over the rounds with its range: one noisy round cannot decide a claim.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from grpo_edu.beyond.bench_samplers import ratio_line as _ratio_line, sampler_main

SETTINGS = dict(batch_size=4, num_generations=8, max_completion_length=8, beta=0.04, num_iterations=1,
                learning_rate=1e-9, loss_type="grpo", temperature=1.0, seed=0)
"""One step of every contender; the tiny learning rate keeps the work per step constant (see above)."""

WORKLOADS = {
    "adder": {"model": "bundled", "task": "addition", "settings": SETTINGS},
    "sums": {"model": "bundled-sums", "task": "sums", "settings": dict(SETTINGS, max_completion_length=42)},
}
"""``--workload``: the adder (answers of ≤ 4 tokens) or lesson 11's model that writes its working
(answers of 3–42 tokens, median about 24), where generation is most of a step."""


def _workload():
    """The workload this process times (its name is passed to each child in $GRPO_EDU_BENCH_WORKLOAD)."""
    name = os.environ.get("GRPO_EDU_BENCH_WORKLOAD", "adder")
    return WORKLOADS[name]


def _model_dir(workload):
    from grpo_edu.training.model.models import locate_model

    return str(locate_model(workload["model"])[0])


def _peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _report(name, t0, step_times, tokens, first_step_end, parts=None, flops=None):
    """One contender's numbers; ``parts``: {part: [seconds per timed step]} (``step_cost.PARTS``), and
    ``flops``: [FLOPs per timed step] (``step_cost.step_flops``), where the contender can say them."""
    report = {"name": name, "median_step_s": statistics.median(step_times), "steps": len(step_times),
              "tokens_per_s": tokens / sum(step_times), "first_step_s": first_step_end - t0,
              "peak_rss_mib": _peak_rss_mib()}
    if parts:
        report["parts_s"] = {part: statistics.median(values) for part, values in parts.items()}
    if flops:
        report["flops"] = statistics.median(flops)
    return report


def _matmul_limit(report, config, rows, tokens):
    """Add this core's matmul throughput (FLOP/s, on the training pass's shape) and the arithmetic limit of the
    median step (its FLOPs at that throughput, in seconds) to ``report``."""
    from grpo_edu.beyond.step_cost import matmul_flops_per_s, training_matmul_shape

    report["matmul_flops_per_s"] = matmul_flops_per_s(*training_matmul_shape(config, rows, tokens))
    report["limit_s"] = report["flops"] / report["matmul_flops_per_s"]
    return report


def child_grpo_edu(t0, steps, warmup, settings=None, name="grpo_edu"):
    """``GRPOTrainer.step()``, each step split into its parts (``step_cost.timed_step``) and its FLOPs counted."""
    from grpo_edu.beyond import roofline
    from grpo_edu.beyond.step_cost import PARTS, flops_of_step, timed_step
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    workload = _workload()
    settings = settings or workload["settings"]
    total = steps + warmup
    trainer = GRPOTrainer(GRPOConfig(**settings, model=workload["model"], task=workload["task"],
                                     total_training_steps=total, eval_size=0))
    times, tokens, first_end = [], 0, None
    parts, flops, lengths = {part: [] for part in PARTS}, [], []
    by_part = {"flops": [], "bytes": []}                  # the roofline's numbers, one dict a timed step
    for i in range(total):
        start = time.perf_counter()
        m, seconds, step_tokens = timed_step(trainer)
        end = time.perf_counter()
        if first_end is None:
            first_end = time.time()
        if i >= warmup:
            times.append(end - start)
            tokens += m["completion_length"] * settings["batch_size"] * settings["num_generations"]
            for part, value in seconds.items():
                parts[part].append(value)
            step_flops = flops_of_step(trainer, step_tokens)
            flops.append(step_flops["total"])
            trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
            by_part["flops"].append({**step_flops, "optimizer": trainer.config.num_iterations
                                     * roofline.optimizer_flops(trainable)})
            by_part["bytes"].append(roofline.bytes_of_step(trainer, step_tokens))
            lengths.append(max(p + c for p, c in zip(*step_tokens["trained"][:2])))
    report = _report(name, t0, times, tokens, first_end, parts, flops)
    rows = settings["batch_size"] * settings["num_generations"]
    report = _matmul_limit(report, trainer.model.config, rows, int(statistics.median(lengths)))
    # the roofline: each part's FLOPs and bytes (medians over the timed steps), and this core's copy bandwidth
    # on a buffer the size of the weights a decode step reads
    report["roofline"] = {kind: {part: statistics.median(step[part] for step in steps_)
                                 for part in roofline.PARTS} for kind, steps_ in by_part.items()}
    report["roofline"]["bytes_per_s"] = roofline.memory_bandwidth(4 * roofline.weight_count(trainer.model.config))
    return report


# --- replay (grpo-edu bench --replay) ---------------------------------------------------------
REPLAY_SETTINGS = dict(batch_size=16, num_generations=8, max_completion_length=4, learning_rate=1e-9, seed=0)
"""The course's default step (16 prompts × G = 8, ≤ 4 new tokens), with the constant-work learning rate."""


def _replay_settings(**changes):
    """REPLAY_SETTINGS for this process's workload (lesson 11's model: answers of up to 42 tokens), changed."""
    extra = {"max_completion_length": 42} if os.environ.get("GRPO_EDU_BENCH_WORKLOAD") == "sums" else {}
    return {**REPLAY_SETTINGS, **extra, **changes}
FULL_BUFFER = 10_000
"""Samples in the buffer when it is timed: the source's cap, so every add also evicts."""


def _full_buffer(path, seed=0, task="addition"):
    """A buffer of FULL_BUFFER right answers of ``task`` with random positive advantages (for ``sums``, the
    worked solution the model was warmed up on, as long as the answers it writes)."""
    import random

    from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample
    from grpo_edu.training.task.sums import terms_of, worked_solution
    from grpo_edu.training.task.tasks import get_task

    rows, rng = get_task(task).split("train"), random.Random(seed)

    def answer(row):
        return worked_solution(terms_of(row["prompt"])) if task == "sums" else row["answer"]
    buffer = ReplayBuffer(FULL_BUFFER, path=path, top_fraction=1.0, seed=seed)
    for start in range(0, FULL_BUFFER, 1000):
        buffer.add([ReplaySample(r["prompt"], answer(r), rng.uniform(0.1, 2.0), 1.0)
                    for r in rows[start % len(rows):][:1000]], round=start // 1000)
    return buffer


def child_replay_step(t0, steps, warmup):
    """The trainer at replay_ratio 0.3, replaying from a full SQLite buffer (evictions on every add)."""
    path = os.path.join(tempfile.mkdtemp(prefix="grpo_edu_bench_"), "buffer.sqlite")
    _full_buffer(path, task=_workload()["task"]).close()
    settings = _replay_settings(replay_ratio=0.3, replay_path=path, replay_capacity=FULL_BUFFER)
    return child_grpo_edu(t0, steps, warmup, settings, name="replay 0.3")


def child_replay_in_place(t0, steps, warmup):
    """Replay 0.3 *in place of* fresh rows: 11 prompts × G = 8 = 88 fresh + 38 replayed = 126 rows, about the
    default step's 128, so the ratio to the plain step is what replacing fresh rows saves (source 000:
    "replayed samples need no new generation and scoring")."""
    path = os.path.join(tempfile.mkdtemp(prefix="grpo_edu_bench_"), "buffer.sqlite")
    _full_buffer(path, task=_workload()["task"]).close()
    settings = _replay_settings(batch_size=11, replay_ratio=0.3, replay_path=path, replay_capacity=FULL_BUFFER)
    return child_grpo_edu(t0, steps, warmup, settings, name="replay 0.3 in place")


def child_plain_step(t0, steps, warmup):
    return child_grpo_edu(t0, steps, warmup, _replay_settings(), name="no replay")


def child_plain_same_rows(t0, steps, warmup):
    """No replay, but 23 prompts × G = 8 = 184 rows: about as many as 128 fresh + 55 replayed, so the
    ratio to this step is the replay machinery's own cost (the rest is training on more rows)."""
    return child_grpo_edu(t0, steps, warmup, _replay_settings(batch_size=23), name="no replay, 184 rows")


def buffer_timings(repeats=20, seed=0):
    """Milliseconds (median over ``repeats``) of one step's ``add`` (128 completions offered, top half
    with Â > 0 admitted, each evicting) and of ``sample(64)``, on a full buffer per storage."""
    import random

    from grpo_edu.training.trainers.replay import ReplaySample

    rng = random.Random(seed)
    rows = [f"{a}+{b}=" for a in range(10, 100) for b in range(10, 100)]
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for storage in ("memory", "sqlite", "jsonl"):
            path = None if storage == "memory" else os.path.join(folder, f"buffer.{storage}")
            buffer = _full_buffer(path, seed)
            adds, samples = [], []
            for r in range(repeats):
                offered = [ReplaySample(q, "99", rng.gauss(0, 1), 1.0) for q in rng.sample(rows, 128)]
                start = time.perf_counter()
                buffer.add(offered, round=100 + r)
                adds.append(time.perf_counter() - start)
                start = time.perf_counter()
                buffer.sample(64)
                samples.append(time.perf_counter() - start)
            buffer.close()
            results[storage] = {"add_ms": 1000 * statistics.median(adds), "sample64_ms": 1000 * statistics.median(samples),
                                "stored": len(buffer)}
    return results


def replay_main(args):
    print(f"replay buffer at {FULL_BUFFER} samples: one step's add (128 offered) and sample(64), "
          "median of 20 (milliseconds)")
    for storage, r in buffer_timings().items():
        print(f"  {storage:7} add {r['add_ms']:8.2f} ms   sample(64) {r['sample64_ms']:6.2f} ms   ({r['stored']} stored)")
    print(f"\nstep time at replay_ratio 0.3 (full SQLite buffer) against no replay: workload {args.workload} "
          f"({WORKLOADS[args.workload]['model']}), {REPLAY_SETTINGS['batch_size']} prompts × "
          f"G={REPLAY_SETTINGS['num_generations']}; {args.steps} timed "
          f"steps after {args.warmup} warm-up, {args.rounds} interleaved rounds")
    rounds, names = [], list(REPLAY_CHILDREN)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]          # rotate who goes first
        rounds.append({n: _run_child(REPLAY_CHILDREN[n], args.steps, args.warmup, workload=args.workload)
                       for n in order})
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {rounds[-1][n]['median_step_s'] * 1000:.1f} ms/step" for n in names), flush=True)

    def ratios(a, b):
        return [rnd[a]["median_step_s"] / rnd[b]["median_step_s"] for rnd in rounds]
    print(_ratio_line("replay 0.3 / no replay", ratios("replay 0.3", "no replay"), "goal ≤ 1.1×"))
    print(_ratio_line("replay 0.3 / 184-row step", ratios("replay 0.3", "no replay, 184 rows"),
                      "the buffer's own cost; the rest is 43 % more rows to train on"))
    print(_ratio_line("replay 0.3 in place / no replay", ratios("replay 0.3 in place", "no replay"),
                      "11 prompts: 88 fresh + 38 replayed rows against 128 fresh, 31 % fewer completions generated"))
    return 0


def child_floor(t0, steps, warmup):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_edu.training.model.models import load_kwargs
    from grpo_edu.training.rollouts.rollout import _cache_name
    from grpo_edu.training.task.tasks import get_task

    workload = _workload()
    settings = workload["settings"]
    path = _model_dir(workload)
    tok = AutoTokenizer.from_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, **load_kwargs())      # PyTorch's own layers, as the
    ref = AutoModelForCausalLM.from_pretrained(path, **load_kwargs()).eval().requires_grad_(False)  # trainer's
    # the same tiny learning rate as the others: a full update's arithmetic, constant work per step
    opt = torch.optim.AdamW(policy.parameters(), lr=settings["learning_rate"], betas=(0.9, 0.99), foreach=True)
    rows = get_task(workload["task"]).split("train")
    # the trainer's prompts, in the trainer's order (GRPOTrainer.batch_for, seed 0, epoch 1), and the
    # trainer's way of sampling below: the same model then samples (nearly) the same answers, so
    # both do the same work per step
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(settings["seed"] * 100_003 + 1)).tolist()
    rows = [rows[i] for i in order]
    G, B, max_new = settings["num_generations"], settings["batch_size"], settings["max_completion_length"]
    gen = torch.Generator().manual_seed(settings["seed"])
    cache_kw = _cache_name(policy)      # "cache" (transformers ≥ 5.2x) or "past_key_values"
    times, tokens, first_end = [], 0, None
    parts = {"sampling": [], "reference": [], "policy": [], "optimizer": []}
    for i in range(steps + warmup):
        start = time.perf_counter()
        marks = [start]                                         # the end of each part, in PARTS order
        batch = [r["prompt"] for r in rows[i * B:(i + 1) * B]]
        ids = tok(batch, return_tensors="pt", padding=True, padding_side="left")["input_ids"].repeat_interleave(G, 0)
        with torch.no_grad():                                   # sampling with the KV cache
            out = policy(input_ids=ids, use_cache=True, logits_to_keep=1)
            new, done = [], torch.zeros(ids.shape[0], dtype=torch.bool)
            for _ in range(max_new):
                t = torch.multinomial(torch.log_softmax(out.logits[:, -1].float(), -1).exp(), 1, generator=gen)
                new.append(t)
                done |= t.squeeze(1) == tok.eos_token_id
                if done.all():
                    break
                out = policy(input_ids=t, use_cache=True, **{cache_kw: getattr(out, cache_kw)})
        seq = torch.cat([ids] + new, 1)
        T = len(new)
        completion = seq[:, -T:]
        real = ((completion == tok.eos_token_id).cumsum(1) - (completion == tok.eos_token_id).long()) == 0
        marks.append(time.perf_counter())
        with torch.no_grad():                                   # reference forward
            ref(input_ids=seq, logits_to_keep=T + 1)
        marks.append(time.perf_counter())
        logits = policy(input_ids=seq, logits_to_keep=T + 1).logits[:, :-1]    # policy forward
        lp = torch.log_softmax(logits.float(), -1).gather(-1, seq[:, -T:, None])
        lp.mean().backward()                                    # backward
        marks.append(time.perf_counter())
        opt.step()                                              # optimizer step
        opt.zero_grad(set_to_none=True)
        end = time.perf_counter()
        marks.append(end)
        if first_end is None:
            first_end = time.time()
        if i >= warmup:
            times.append(end - start)
            tokens += int(real.sum())
            for part, begin, finish in zip(parts, marks, marks[1:]):
                parts[part].append(finish - begin)
    return _report("floor", t0, times, tokens, first_end, parts)


def child_trl(t0, steps, warmup):
    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig, GRPOTrainer as TRLTrainer

    from grpo_edu.training.model.models import no_hub_kernels
    from grpo_edu.training.task.tasks import get_task

    workload = _workload()
    settings = workload["settings"]
    task = get_task(workload["task"])
    times, marks = [], {"start": None, "first_end": None, "tokens": 0.0}
    spent, parts = {}, {part: [] for part in ("sampling", "reference", "policy", "optimizer", "other")}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            spent.clear()
            marks["start"] = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kw):
            marks["optimizer"] = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kw):
            spent["optimizer"] = spent.get("optimizer", 0.0) + time.perf_counter() - marks["optimizer"]

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - marks["start"])
            if marks["first_end"] is None:
                marks["first_end"] = time.time()
            if state.global_step > warmup:         # TRL's parts, as step_cost.timed_step splits grpo_edu's
                policy = spent.get("training_step", 0.0) - spent.get("prepare", 0.0)
                split = {"sampling": spent.get("sampling", 0.0), "reference": spent.get("reference", 0.0),
                         "policy": policy, "optimizer": spent.get("optimizer", 0.0)}
                split["other"] = max(times[-1] - sum(split.values()), 0.0)
                for part, value in split.items():
                    parts[part].append(value)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs and state.global_step > warmup:
                marks["tokens"] += logs["completions/mean_length"] * G * B

    def timed(part, function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[part] = spent.get(part, 0.0) + time.perf_counter() - start
        return wrapper

    def reward_addition(prompts, completions, answer, **kw):       # the task's own checker
        return task.reward(prompts, completions, answer)

    B, G = settings["batch_size"], settings["num_generations"]
    with tempfile.TemporaryDirectory() as tmp:
        args = TRLConfig(output_dir=tmp, per_device_train_batch_size=B * G, num_generations=G,
                         max_completion_length=settings["max_completion_length"], beta=settings["beta"],
                         num_iterations=1, learning_rate=settings["learning_rate"], lr_scheduler_type="constant",
                         loss_type=settings["loss_type"], temperature=1.0, top_k=0, bf16=False, use_cpu=True,
                         max_steps=steps + warmup, logging_steps=1, report_to=[], save_strategy="no",
                         seed=0, disable_tqdm=True, dataloader_num_workers=0,
                         model_init_kwargs=no_hub_kernels())        # PyTorch's own layers, as grpo_edu's models
        trainer = TRLTrainer(model=_model_dir(workload), reward_funcs=[reward_addition], args=args,
                             train_dataset=datasets.Dataset.from_list(task.split("train")), callbacks=[Timer()])
        # TRL's step: training_step → _prepare_inputs (generation: _generate, then the reference model's
        # log-probs; with one iteration no π_θold pass) → compute_loss and backward; then the optimizer step
        logps = trainer._get_per_token_logps_and_entropies
        trainer._get_per_token_logps_and_entropies = lambda model, *a, **kw: (
            timed("reference", logps) if model is trainer.ref_model else logps)(model, *a, **kw)
        trainer._generate = timed("sampling", trainer._generate)
        trainer._prepare_inputs = timed("prepare", trainer._prepare_inputs)
        trainer.training_step = timed("training_step", trainer.training_step)
        trainer.train()
    return _report("trl", t0, times[warmup:], marks["tokens"], marks["first_end"], parts)


# --- samplers (grpo-edu bench --sampler: grpo_edu/beyond/bench_samplers.py; the step children stay here) ---


def _sampler_step(t0, steps, warmup, sampler):
    """One training step of the ``sums`` preset (16 prompts × G = 8, ≤ 42 new tokens) with ``sampler``, at the
    constant-work learning rate."""
    from grpo_edu.training.trainers.config import PRESETS

    settings = dict(SETTINGS, batch_size=16, num_generations=8, max_completion_length=PRESETS["sums"][
        "max_completion_length"], sampler=sampler)
    return child_grpo_edu(t0, steps, warmup, settings, name=f"step, {sampler}")


def child_step_loop(t0, steps, warmup):
    return _sampler_step(t0, steps, warmup, "loop")


def child_step_engine(t0, steps, warmup):
    return _sampler_step(t0, steps, warmup, "engine")


CHILDREN = {"grpo_edu": child_grpo_edu, "floor": child_floor, "trl": child_trl,
            "replay_step": child_replay_step, "plain_step": child_plain_step, "plain_184": child_plain_same_rows,
            "replay_in_place": child_replay_in_place, "step_loop": child_step_loop, "step_engine": child_step_engine}
REPLAY_CHILDREN = {"no replay": "plain_step", "replay 0.3": "replay_step", "no replay, 184 rows": "plain_184",
                   "replay 0.3 in place": "replay_in_place"}


def _run_child(name, steps, warmup, threads=None, workload="adder"):
    env = dict(os.environ, GRPO_EDU_BENCH_T0=repr(time.time()), TOKENIZERS_PARALLELISM="false",
               GRPO_EDU_BENCH_WORKLOAD=workload)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-m", "grpo_edu.beyond.bench", "--child", name, "--steps", str(steps),
                           "--warmup", str(warmup)], env=env, capture_output=True, text=True)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"the {name} benchmark failed:\n" + "\n".join(tail))
    return json.loads(lines[-1])


FLOOR_TO_STEP = 78.7 / 71.8
"""The floor's step converted to the trainer's that the course's time budgets were set with (1.096): on the slowest
laptop seen (a 2-core AMD EPYC Zen 3 with AVX2 only), one ``grpo-edu bench`` gave that trainer 78.7 ms a step and the
floor 71.8 ms."""


def step_ms(rounds=5, steps=20, warmup=3, threads=1):
    """This machine's bench step, the ruler of the course's time budgets: the floor's median ms per step on
    ``threads`` torch threads (one, as each worker of the test run has), the median over ``rounds``, times
    :data:`FLOOR_TO_STEP`.

    The floor is the bare PyTorch passes of one GRPO step on the adder (sampling, the reference pass, the
    policy's forward and backward, the optimizer step) with no grpo_edu trainer code, so the ruler measures the
    machine, not the library. A ruler that timed the trainer shrank with every speed-up of the trainer, and a
    faster library could never show in a scaled time: the trainer of commit d8d27fa, with which the 80 ms was
    read, took 1.15–1.26 times the step of commit f53272f on this project's machine. Times FLOOR_TO_STEP,
    the floor reads as that trainer's step did: about 80 ms on the slowest laptop (its trainer took 82.6 ms
    on one thread, 78.7 ms on two), the machine the budgets are set for (``grpo_edu.course.testing.lesson_times``);
    a machine where it reads s ms runs a lesson about 80 / s times as fast.
    """
    return statistics.median(_run_child("floor", steps, warmup, threads)["median_step_s"]
                             for _ in range(rounds)) * 1000 * FLOOR_TO_STEP


def print_parts(rounds, names):
    """Each contender's median step split into its parts (milliseconds, medians over the rounds), and the
    arithmetic limit of grpo_edu's step; a contender that cannot be split says so."""
    from grpo_edu.beyond.step_cost import PARTS

    print(f"\nwhere a step's time goes (ms, medians over {len(rounds)} rounds)")
    print(f"{'':10} " + " ".join(f"{part:>10}" for part in PARTS) + f" {'step':>10}")
    for name in names:
        if "parts_s" not in rounds[0][name]:
            print(f"{name:10} (cannot be split: {rounds[0][name].get('parts_note', 'no timer inside it')})")
            continue
        cells = [statistics.median(rnd[name]["parts_s"].get(part, 0.0) for rnd in rounds) * 1000 for part in PARTS]
        step = statistics.median(rnd[name]["median_step_s"] for rnd in rounds) * 1000
        print(f"{name:10} " + " ".join(f"{c:10.1f}" for c in cells) + f" {step:10.1f}")
    limit = statistics.median(rnd["grpo_edu"]["limit_s"] for rnd in rounds) * 1000
    print(f"{'limit':10} {limit:10.2f} ms: grpo_edu's step's FLOPs at this core's matmul throughput")
    print_roofline(rounds)


def roofline_of(rounds):
    """grpo_edu's roofline from the rounds (``roofline.roofline``'s ``(table, info)``): each part's FLOPs and
    bytes, this core's matmul rate and copy bandwidth, and each part's measured time, medians over the rounds."""
    from grpo_edu.beyond import roofline

    runs = [rnd["grpo_edu"] for rnd in rounds]

    def med(get):
        return statistics.median(get(run) for run in runs)

    parts = roofline.PARTS
    return roofline.roofline({p: med(lambda r: r["roofline"]["flops"][p]) for p in parts},
                             {p: med(lambda r: r["roofline"]["bytes"][p]) for p in parts},
                             flops_per_s=med(lambda r: r["matmul_flops_per_s"]),
                             bytes_per_s=med(lambda r: r["roofline"]["bytes_per_s"]),
                             seconds={p: med(lambda r: r["parts_s"][p]) for p in parts})


def print_roofline(rounds):
    """The roofline of grpo_edu's step: per part, which roof binds (FLOPs at the matmul rate, or bytes at the
    copy bandwidth) and how many times that limit the part took (``grpo_edu.beyond.roofline``)."""
    from grpo_edu.beyond import roofline

    table, info = roofline_of(rounds)
    runs = [rnd["grpo_edu"] for rnd in rounds]
    rate = statistics.median(r["matmul_flops_per_s"] for r in runs)
    bandwidth = statistics.median(r["roofline"]["bytes_per_s"] for r in runs)
    print(f"\nthe roofline of grpo_edu's step (medians over {len(rounds)} rounds): a part takes at least "
          f"max(FLOPs / {rate / 1e9:.1f} GFLOP/s, bytes / {bandwidth / 1e9:.1f} GB/s)")
    print(roofline.format_roofline(table, info))


def trl_problem():
    """Why TRL cannot take part, in words (None when ``import trl`` works). A TRL that is installed but fails to
    import (a TRL built for another transformers raises AttributeError or TypeError, not ImportError) is named
    with its error and the fix, and the rest of the bench runs."""
    try:
        import trl  # noqa: F401
    except ImportError as err:
        if getattr(err, "name", None) == "trl":
            return "trl is not installed (pip install trl to add it)"
        return f"trl is installed but its import fails ({type(err).__name__}: {err}; pip install -U trl transformers)"
    except Exception as err:                          # noqa: BLE001 - any failure of a third-party import
        return (f"trl is installed but its import fails ({type(err).__name__}: {err}; often a TRL built for "
                "another transformers: pip install -U trl transformers)")
    return None


def main(argv=None):
    from grpo_edu.common import command_line

    parser = argparse.ArgumentParser(prog="grpo-edu bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds; ratios are reported as median and range over them (default 5)")
    parser.add_argument("--no-trl", action="store_true", help="skip TRL even when installed")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="adder",
                        help="adder: the bundled adder, ≤ 8 new tokens (default); sums: lesson 11's model that "
                             "writes its working, ≤ 42 new tokens, where generation is most of a step")
    parser.add_argument("--json", metavar="FILE", help="also write every round's results as JSON (an existing file "
                                                       "is refused unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="let --json replace an existing file")
    parser.add_argument("--replay", action="store_true",
                        help="time the replay buffer (add, sample at 10,000 samples) and a step at replay_ratio 0.3")
    parser.add_argument("--sampler", action="store_true",
                        help="time the two samplers: tokens per second of the loop (rollout.generate) and the engine "
                             "(engine.generate) on one thread, on lesson 11's model and the adder, then the sums "
                             "preset's training step with each (try --steps 3 --warmup 1)")
    parser.add_argument("--static-cache", action="store_true",
                        help="with --sampler: add the engine over a static KV cache in batch-size buckets "
                             "(training/rollouts/static_cache.py), finished rows masked and dropped, and skip the step")
    parser.add_argument("--step-ms", action="store_true",
                        help="print only this machine's bench step, the ruler the course's time budgets scale by "
                             "(grpo-edu lesson-times): the floor's median ms per step on one thread over the rounds, "
                             "in the units of the trainer the budgets were set with (× 1.096)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = command_line.parse_args(parser, argv)
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error(f"--steps and --rounds must be ≥ 1, --warmup ≥ 0 (got --steps {args.steps}, --warmup "
                     f"{args.warmup}, --rounds {args.rounds}). Fix: e.g. --steps 20 --warmup 3 --rounds 5")
    if args.static_cache and not args.sampler:
        parser.error("--static-cache: times the samplers, so it needs --sampler. Fix: grpo-edu bench --sampler "
                     "--static-cache")
    modes = [f"--{flag.replace('_', '-')}" for flag in ("replay", "sampler", "step_ms") if getattr(args, flag)]
    if len(modes) > 1:                                # each returns before the others would run: one at a time
        parser.error(f"{modes[1]}: cannot be combined with {modes[0]} (each is a measurement of its own). Fix: "
                     "run them one after the other")
    if args.json and not args.child:                  # checked before the run: it must not end on a bad path
        from grpo_edu.common import _checks

        for flag in ("replay", "sampler", "step_ms"):
            if getattr(args, flag):
                parser.error(f"--json: --{flag.replace('_', '-')} writes no file (it prints its numbers). Fix: drop "
                             "--json, or drop --" + flag.replace("_", "-"))
        problem = _checks.output_file_problem(args.json, overwrite=args.overwrite)
        if problem:
            parser.error(f"--json: {problem[0]}. Fix: {problem[1]}")
    elif args.overwrite:
        parser.error("--overwrite: replaces the --json file, but no --json is given. Fix: drop --overwrite, or add "
                     "--json FILE")

    if args.child:
        t0 = float(os.environ.get("GRPO_EDU_BENCH_T0", time.time()))
        print(json.dumps(CHILDREN[args.child](t0, args.steps, args.warmup)), flush=True)
        return 0
    if args.replay:
        return replay_main(args)
    if args.sampler:
        return sampler_main(args, _run_child)
    if args.step_ms:
        print(f"{step_ms(args.rounds, args.steps, args.warmup):.1f}")
        return 0

    names = ["grpo_edu", "floor"]
    if not args.no_trl:                               # --no-trl never imports it: a broken TRL cannot stop the bench
        skip = trl_problem()
        if skip:
            print(f"{skip}: skipping the TRL comparison")
        else:
            names.append("trl")
    settings = WORKLOADS[args.workload]["settings"]
    print(f"workload {args.workload} ({WORKLOADS[args.workload]['model']} on {WORKLOADS[args.workload]['task']}): "
          f"one step = {settings['batch_size']} prompts × G={settings['num_generations']}, "
          f"≤{settings['max_completion_length']} new tokens, beta={settings['beta']}, 1 iteration, "
          f"lr {settings['learning_rate']:g} (constant work per step); {args.steps} timed steps after "
          f"{args.warmup} warm-up, {args.rounds} interleaved rounds; torch threads: default")
    rounds = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]          # rotate who goes first
        rounds.append({name: _run_child(name, args.steps, args.warmup, workload=args.workload) for name in order})
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {rounds[-1][n]['median_step_s'] * 1000:.1f} ms/step" for n in names), flush=True)

    def med(name, key):
        return statistics.median(rnd[name][key] for rnd in rounds)

    print(f"\nmedians over {args.rounds} rounds")
    print(f"{'':10} {'s/step':>10} {'tokens/s':>10} {'start→1st step s':>17} {'peak RSS MiB':>13}")
    for name in names:
        print(f"{name:10} {med(name, 'median_step_s'):10.4f} {med(name, 'tokens_per_s'):10.0f} "
              f"{med(name, 'first_step_s'):17.2f} {med(name, 'peak_rss_mib'):13.0f}")
    print_parts(rounds, names)
    print()
    print(_ratio_line("grpo_edu step / floor step", [rnd["grpo_edu"]["median_step_s"] / rnd["floor"]["median_step_s"]
                                                     for rnd in rounds],
                      "goal ≤ 1.15×" if args.workload == "sums" else "goal ≤ 1.2×"))
    if "trl" in names:
        print(_ratio_line("TRL step / grpo_edu step", [rnd["trl"]["median_step_s"] / rnd["grpo_edu"]["median_step_s"]
                                                       for rnd in rounds], "goal ≥ 1.5×"))
        print(_ratio_line("peak RSS grpo_edu / TRL", [rnd["grpo_edu"]["peak_rss_mib"] / rnd["trl"]["peak_rss_mib"]
                                                      for rnd in rounds], "goal < 1"))
    print(_ratio_line("grpo_edu step / arithmetic limit", [rnd["grpo_edu"]["median_step_s"] / rnd["grpo_edu"]["limit_s"]
                                                            for rnd in rounds],
                      f"the step's {med('grpo_edu', 'flops') / 1e9:.2f} GFLOP at "
                      f"{med('grpo_edu', 'matmul_flops_per_s') / 1e9:.1f} GFLOP/s, this core's matmul"))
    table, _ = roofline_of(rounds)
    print("grpo_edu / roofline limit     " + ", ".join(f"{part} {row['times_limit']:.1f}× ({row['binds']})"
                                                        for part, row in table.items()))
    print(f"start → first step (grpo_edu): median {med('grpo_edu', 'first_step_s'):.2f} s")
    if args.json:
        from grpo_edu.common import _checks

        written = _checks.write_result_file(args.json, json.dumps({"workload": args.workload, "settings": settings,
                                                                   "rounds": rounds}, indent=1),
                                            overwrite=args.overwrite)
        if str(written) != args.json:
            print(f"{args.json} appeared during the run (another bench?): kept it, and wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
