"""``grpo-edu bench --sampler``: the two samplers against each other.

Tokens per second of the readable loop (``rollout.generate``) and the engine (``engine.generate``) on one
thread, on lesson 11's model and the adder, then the sums preset's whole training step with each sampler, each
in a child process of ``grpo_edu.beyond.bench`` (its ``step_loop`` and ``step_engine`` children, which stay there
beside the step they time).
``gpu_run`` times the samplers on a GPU with :func:`time_samplers`.
"""

import statistics
import time

SAMPLER_WORKLOADS = {
    "sums": {"model": "bundled-sums", "task": "sums", "batch_size": 8, "num_generations": 4, "max_new_tokens": 42},
    "adder": {"model": "bundled", "task": "addition", "batch_size": 16, "num_generations": 8, "max_new_tokens": 4},
}
"""What one sampling batch is: lesson 11's model at 8 prompts × G = 4 (32 rows, ≤ 42 new tokens, the issue's
measurement), and the adder at the course's default 16 × 8 (128 rows, ≤ 4 new tokens)."""

SAMPLERS = ("loop", "engine")


def time_samplers(model, tokenizer, batches, *, num_generations, max_new_tokens, rounds, seed=0, samplers=None):
    """Sampling throughput of the loop (``rollout.generate``) and the engine (``engine.generate``) on
    ``batches`` (lists of prompts): ``rounds`` rounds, interleaved (who goes first alternates), each sampler
    drawing the same batches at temperature 1, after one untimed batch each. Returns {sampler: [tokens per
    second, one per round]}, counting completion tokens up to and including ``<eos>`` (reading the count
    waits for the device, so GPU timings are honest too). ``samplers``: {name: a function called as
    ``engine.generate`` is}, instead of those two (``gpu_run`` adds the engine over a static cache)."""
    import torch

    from grpo_edu.training.rollouts import engine, rollout

    samplers = samplers or {"loop": rollout.generate, "engine": engine.generate}
    names = tuple(samplers)
    device = next(model.parameters()).device

    def draw(name, batch, generator):
        out = samplers[name](model, tokenizer, batch, num_generations=num_generations,
                             max_new_tokens=max_new_tokens, generator=generator)
        return int(out.completion_mask.sum())

    for name in names:                                             # warm up (first calls allocate)
        draw(name, batches[0], torch.Generator(device).manual_seed(seed))
    results = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            generator = torch.Generator(device).manual_seed(seed + r)
            start = time.perf_counter()
            tokens = sum(draw(name, batch, generator) for batch in batches)
            results[name].append(tokens / (time.perf_counter() - start))
    return results


def sampler_tokens_per_s(workload, batches, rounds, seed=0, samplers=None):
    """:func:`time_samplers` on a :data:`SAMPLER_WORKLOADS` entry, over ``batches`` batches of its training prompts."""
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.task.tasks import get_task

    w = SAMPLER_WORKLOADS[workload]
    model, tokenizer = load_model_and_tokenizer(w["model"])
    rows, B = get_task(w["task"]).split("train"), w["batch_size"]
    prompts = [[r["prompt"] for r in rows[i * B:(i + 1) * B]] for i in range(batches)]
    return time_samplers(model.eval(), tokenizer, prompts, num_generations=w["num_generations"],
                         max_new_tokens=w["max_new_tokens"], rounds=rounds, seed=seed, samplers=samplers)


def static_samplers():
    """``--static-cache``: the loop, the engine, and the engine over ``static_cache.py``'s static cache with finished
    rows masked in place and dropped to smaller buckets (no CUDA graphs: this bench runs on the CPU)."""
    import functools

    from grpo_edu.training.rollouts import engine, rollout, static_cache

    def static(finished):
        return functools.partial(engine.generate, decoding=static_cache.DecodeSettings(static_cache=True,
                                                                                      finished=finished))
    return {"loop": rollout.generate, "engine": engine.generate, "static, mask": static("mask"),
            "static, drop": static("drop")}


def ratio_line(label, values, goal):
    """One line: the median and range of ratios measured round by round, and what they are read against."""
    values = sorted(values)
    return (f"{label:28} median {statistics.median(values):.2f}×, range {values[0]:.2f}–{values[-1]:.2f}× "
            f"over {len(values)} rounds ({goal})")


def _spread(values, unit=""):
    values = sorted(values)
    return f"median {statistics.median(values):,.0f}{unit}, range {values[0]:,.0f}–{values[-1]:,.0f}{unit}"


def sampler_main(args, run_child):
    """``grpo-edu bench --sampler``: tokens per second of both samplers on one thread, then the sums preset's
    whole training step with each, timed in child processes by ``run_child`` (``bench._run_child``)."""
    import torch

    torch.set_num_threads(1)
    print(f"sampling on one thread, {args.rounds} interleaved rounds of {args.steps} batches per sampler "
          "(the CPU may be shared: read the range, not one round)")
    samplers = static_samplers() if getattr(args, "static_cache", False) else None
    for workload, w in SAMPLER_WORKLOADS.items():
        results = sampler_tokens_per_s(workload, args.steps, args.rounds, samplers=samplers)
        rows = w["batch_size"] * w["num_generations"]
        print(f"{workload} ({w['model']}, {w['batch_size']} prompts × G={w['num_generations']} = {rows} rows, "
              f"≤ {w['max_new_tokens']} new tokens)")
        width = max(7, *map(len, results))
        for name in results:
            print(f"  {name:{width}} {_spread(results[name], ' tokens/s')}")
        ratios = [e / l for e, l in zip(results["engine"], results["loop"])]
        print("  " + ratio_line("engine / loop", ratios, "tokens per second, round by round"), flush=True)
        for name in [n for n in results if n.startswith("static")]:
            ratios = [s / e for s, e in zip(results[name], results["engine"])]
            print("  " + ratio_line(f"{name} / engine", ratios, "tokens per second, round by round"), flush=True)
    if samplers is not None:
        return 0                                                   # the static cache changes no step: done
    print(f"\ntraining step of the sums preset (16 prompts × G=8, ≤ 42 new tokens, lr 1e-9: constant work), "
          f"one thread, {args.steps} timed steps after {args.warmup} warm-up, {args.rounds} interleaved rounds")
    rounds = []
    for r in range(args.rounds):
        order = ("step_loop", "step_engine") if r % 2 == 0 else ("step_engine", "step_loop")
        rounds.append({n: run_child(n, args.steps, args.warmup, threads=1, workload="sums") for n in order})
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n[5:]} {rounds[-1][n]['median_step_s'] * 1000:.0f} ms/step" for n in ("step_loop", "step_engine")),
            flush=True)
    print(ratio_line("step, engine / loop", [rnd["step_engine"]["median_step_s"] / rnd["step_loop"]["median_step_s"]
                                              for rnd in rounds], "seconds per step"))
    return 0
