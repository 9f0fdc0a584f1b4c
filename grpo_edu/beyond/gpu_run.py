"""The GPU run that needs no network: ``python -m grpo_edu.beyond.gpu_run``.

Lesson 10's GPU section first needed the hub (Qwen2.5-0.5B-Instruct, GSM8K), which a GPU machine
without internet cannot reach. This run needs nothing but this package:

1. **Build** a larger model that writes its working, on the GPU, with the same warm-up that made
   ``assets/tiny-sums`` (``make_model``): 8 layers, hidden 512, 33.6 M parameters, stopped
   when its held-out sampled accuracy reaches 40 %.
2. **Train** it with GRPO (``GRPOTrainer``, the ``sums`` preset, bf16 autocast on CUDA, sampling with the
   engine, the trainer's default) and print held-out accuracy before and after, completion tokens per second
   and peak GPU memory; then the sampling tokens per second of both samplers, the engine and the loop.
3. **Compare** with TRL's ``GRPOTrainer`` on the same model, prompts, reward and settings
   (``to_trl``; TRL in fp32, as the export says), when TRL is installed.

Without CUDA the same code runs on the CPU at a tiny size (2 layers, hidden 32, a few steps), so
the test command proves the whole path; its accuracies mean nothing. Nothing is downloaded either
way (``HF_HUB_OFFLINE`` is set).

``--static-cache`` decodes over a static KV cache in batch-size buckets (``--buckets``, ``--finished``;
``training/rollouts/static_cache.py``) and ``--cuda-graphs`` records each bucket's decode step in a CUDA graph
(``cuda_graphs.py``; it turns on ``--static-cache``): the training run samples that way, and the sampler timing
adds the engine over the static cache, without and with graphs. Beside tokens per second and peak memory each
part prints how busy the GPU was (:func:`gpu_utilisation`, read every half second). ``--dry-run`` checks the
arguments and prints the plan, without building anything.
"""

import argparse
import os
import sys
import tempfile
import time

SIZES = {
    "gpu": {"build": dict(hidden_size=512, num_layers=8, lr=5e-4, batch_size=256, check_every=25, max_steps=3000,
                          stop_at=0.4, eval_samples=8),
            "train": dict(batch_size=64, num_generations=8, total_training_steps=60, learning_rate=1e-4,
                          eval_size=500)},
    "tiny": {"build": dict(hidden_size=32, num_layers=2, lr=2e-3, batch_size=64, check_every=20, max_steps=20,
                           stop_at=0.4, eval_samples=1),
             "train": dict(batch_size=4, num_generations=4, total_training_steps=3, learning_rate=3e-4, eval_size=16)},
}
"""What each size builds and trains. ``gpu``: the tiny-sums recipe's learning rates scaled down for a 30× larger
model; on one H200 it warmed up in 275 steps (35 s) and GRPO took held-out accuracy from 0.50 to 0.74 in 60 steps
(docs/gpu-run.md).
``tiny``: the CPU stand-in the tests run."""

WARM_UP = dict(task="sums", label_smoothing=0.0, max_positions=64, stop_metric="sampled", worked_fraction=0.5,
               check_prompts=200)
"""The tiny-sums recipe (``assets/README.md``), shared by both sizes."""


MODEL_FILES = ("model.safetensors", "config.json")
"""Files that mark a folder as holding a model: ``--out`` refuses such a folder unless ``--overwrite``."""
LOCK = ".grpo_edu.lock"
"""The lock a run holds in its ``--out`` folder while it writes there (``grpo_edu.common.locks``)."""


def check_out(parser, out, *, overwrite):
    """Refuse an ``--out`` that would replace a model or cannot be written, before any work."""
    from pathlib import Path

    from grpo_edu.common import _checks
    from grpo_edu.training.model.models import ASSETS

    path = Path(out)
    if path.exists() and not path.is_dir():
        parser.error(f"--out: {out} is a file. Fix: pass a folder (it is created if missing)")
    resolved = path.resolve()
    if resolved == ASSETS or ASSETS in resolved.parents:
        parser.error(f"--out: {out} is inside {ASSETS}, the course's bundled models, which the lessons and "
                     "grpo-edu doctor check. Fix: pass a folder of your own; to rebuild a bundled model use "
                     "python -m grpo_edu.training.model.make_model")
    held = [name for name in MODEL_FILES if (path / name).exists()]
    if held and not overwrite:
        parser.error(f"--out: {out} already holds a model ({', '.join(held)}), which this run would replace. Fix: "
                     "pass another folder, or --overwrite to replace it")
    blocked = _checks.unwritable_folder(path)
    if blocked is not None:
        parser.error(f"--out: {out} cannot create or write ({blocked} is not a writable folder). Fix: pass a folder "
                     "you can write to")


def lock_out(out, parser=None):
    """Hold ``out/.grpo_edu.lock`` while this run writes there: a second run into the same folder is refused."""
    from pathlib import Path

    from grpo_edu.common import locks

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return locks.acquire(folder / LOCK, arg="--out", what=str(out), fix="wait for that run to finish, or pass "
                             "another --out")
    except ValueError as err:
        if parser is None:
            raise
        parser.error(str(err).rstrip("."))


def _peak_gib(torch, device):
    return torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else None


NVIDIA_SMI = ("nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "--id=0")
"""The fallback query when torch cannot read NVML itself (a fixed command: nothing of the user's goes in)."""


def gpu_utilisation():
    """Percent of the last sample period in which a kernel ran on GPU 0 (NVML's "utilization.gpu"), or None when
    nothing can say: no CUDA, or neither ``torch.cuda.utilization`` (needs ``pynvml``) nor ``nvidia-smi``."""
    import shutil
    import subprocess

    import torch

    if not torch.cuda.is_available():
        return None
    try:
        return float(torch.cuda.utilization())
    except Exception:                                          # no pynvml / amdsmi: ask nvidia-smi
        pass
    if shutil.which(NVIDIA_SMI[0]) is None:
        return None
    try:
        done = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=5, check=True)
        return float(done.stdout.strip().splitlines()[0])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return None


class UtilisationProbe:
    """Reads :func:`gpu_utilisation` every ``period`` seconds in a thread while the block runs; ``text()`` says
    the mean and the largest reading (or why there are none)."""

    def __init__(self, device, period=0.5):
        self.device, self.period, self.readings = device, period, []

    def __enter__(self):
        import threading

        self._stop = threading.Event()
        self._thread = None
        if self.device == "cuda" and gpu_utilisation() is not None:
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        return self

    def _read(self):
        while not self._stop.wait(self.period):
            value = gpu_utilisation()
            if value is not None:
                self.readings.append(value)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def text(self):
        if self.device != "cuda":
            return "GPU busy n/a (CPU)"
        if not self.readings:
            return "GPU busy n/a (no reading: install pynvml, or put nvidia-smi on the PATH)"
        return (f"GPU busy {sum(self.readings) / len(self.readings):.0f} % mean, {max(self.readings):.0f} % max "
                f"({len(self.readings)} readings)")


def run_grpo_edu(model_dir, device, size, decoding=None):
    """Train ``model_dir`` with GRPOTrainer, sampling with ``decoding`` (``static_cache.DecodeSettings``); returns the
    numbers the command prints."""
    import torch

    from grpo_edu.training.rollouts import static_cache
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = GRPOConfig.preset("sums", model=model_dir, device=device, **SIZES[size]["train"])
    trainer = GRPOTrainer(config)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with static_cache.using(decoding or static_cache.OFF):
        before = trainer.evaluate()["accuracy"]
        start = time.perf_counter()
        with UtilisationProbe(device) as busy:
            trainer.train(progress=True)
        seconds = time.perf_counter() - start
        after = trainer.evals[-1]["accuracy"] if trainer.evals else trainer.evaluate()["accuracy"]
    tokens = sum(m["completion_length"] * config.batch_size * config.num_generations for m in trainer.history)
    step_seconds = sum(m["seconds"] for m in trainer.history)
    return {"config": config, "before": before, "after": after, "seconds": seconds,
            "tokens_per_s": tokens / step_seconds, "peak_gib": _peak_gib(torch, device), "busy": busy.text()}


def samplers_for(decoding):
    """The samplers to time: the loop and the engine, then with ``decoding.static_cache`` the engine over the static
    cache without graphs, and with ``decoding.cuda_graphs`` with them too. {name: generate function}."""
    import dataclasses
    import functools

    from grpo_edu.training.rollouts import engine, rollout

    samplers = {"loop": rollout.generate, "engine": engine.generate}
    if decoding is not None and decoding.static_cache:
        eager = dataclasses.replace(decoding, cuda_graphs=False)
        samplers["engine+static"] = functools.partial(engine.generate, decoding=eager)
        if decoding.cuda_graphs:
            samplers["engine+static+graphs"] = functools.partial(engine.generate, decoding=decoding)
    return samplers


def run_samplers(model_dir, device, size, decoding=None):
    """Sampling tokens per second of the loop and the engine (and the engine over a static cache, by ``decoding``) on
    ``model_dir`` (``bench_samplers.time_samplers``), at the training batch (batch_size × G rows, ≤ the preset's new
    tokens), bf16 autocast on CUDA as the trainer samples. Returns (results, rows, max_new_tokens, busy); results maps
    each sampler to its tokens per second, one per round; busy says how busy the GPU was over all of it."""
    import contextlib

    import torch

    from grpo_edu.beyond.bench_samplers import time_samplers
    from grpo_edu.training.trainers.config import PRESETS
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.task.tasks import get_task

    train = SIZES[size]["train"]
    B, G, max_new = train["batch_size"], train["num_generations"], PRESETS["sums"]["max_completion_length"]
    model, tokenizer = load_model_and_tokenizer(model_dir, device=device)
    rows = get_task("sums").split("train")
    batches = [[r["prompt"] for r in rows[i * B:(i + 1) * B]] for i in range(2 if size == "gpu" else 1)]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()
    with autocast, UtilisationProbe(device) as busy:
        results = time_samplers(model.eval(), tokenizer, batches, num_generations=G, max_new_tokens=max_new,
                                rounds=3 if size == "gpu" else 1, samplers=samplers_for(decoding))
    return results, B * G, max_new, busy.text()


def run_trl_side(config):
    """The same config in TRL's GRPOTrainer (``graduation.run_trl``); None when TRL is missing."""
    try:
        import trl  # noqa: F401
    except ImportError:
        return None
    import torch

    from grpo_edu.beyond.graduation import run_trl

    if config.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with UtilisationProbe(config.device) as busy:
        log, info = run_trl(config)
    seconds = time.perf_counter() - start
    lengths = [row["completions/mean_length"] for row in log if "completions/mean_length" in row]
    tokens = sum(lengths) * config.batch_size * config.num_generations
    return {"before": info["evals"][0]["accuracy"], "after": info["evals"][-1]["accuracy"], "seconds": seconds,
            "tokens_per_s": tokens / seconds, "peak_gib": _peak_gib(torch, config.device), "busy": busy.text()}


def parse_buckets(parser, text):
    """``--buckets 8,16,32`` as (8, 16, 32); anything else is refused naming the flag."""
    try:
        buckets = tuple(int(part) for part in text.split(","))
    except ValueError:
        buckets = None
    if not buckets or any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
        parser.error(f"--buckets: {text!r} is not a comma-separated list of increasing positive batch sizes. Fix: "
                     "pass e.g. --buckets 64,128,256,512 (the largest at least the training batch, prompts × G)")
    return buckets


def decode_settings(parser, args):
    """The ``static_cache.DecodeSettings`` the switches ask for (--cuda-graphs turns on --static-cache)."""
    from grpo_edu.training.rollouts import static_cache

    if (args.buckets is not None or args.finished is not None) and not (args.static_cache or args.cuda_graphs):
        parser.error("--buckets and --finished shape the static cache, which is off. Fix: add --static-cache "
                     "(or --cuda-graphs)")
    buckets = parse_buckets(parser, args.buckets) if args.buckets is not None else static_cache.BUCKETS
    try:
        return static_cache.DecodeSettings(static_cache=args.static_cache or args.cuda_graphs,
                                           cuda_graphs=args.cuda_graphs, buckets=buckets,
                                           finished=args.finished or "mask")
    except ValueError as err:                    # e.g. a bucket too large to allocate: named as the flag typed
        parser.error(f"--{str(err).rstrip('.')}")


def describe(decoding, device):
    """One line saying how the engine decodes in this run."""
    if not decoding.static_cache:
        return "decoding: the engine's exact-fit cache (no --static-cache)"
    graphs = ("off" if not decoding.cuda_graphs else "recorded per bucket" if device == "cuda"
              else "asked for, but there is no CUDA: the same step runs eagerly")
    return (f"decoding: static cache, buckets {','.join(map(str, decoding.buckets))}, finished rows "
            f"{'masked in place' if decoding.finished == 'mask' else 'dropped to a smaller bucket'}; CUDA graphs "
            f"{graphs}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.beyond.gpu_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto: CUDA when torch sees it, else the CPU (at the tiny size)")
    parser.add_argument("--size", choices=sorted(SIZES), default=None,
                        help="gpu (33.6 M parameters) or tiny (the CPU stand-in); default: gpu on CUDA, tiny on CPU")
    parser.add_argument("--no-trl", action="store_true", help="skip the TRL comparison")
    parser.add_argument("--out", help="where to save the built model (default: a temporary folder); a folder that "
                                      "already holds a model is refused unless --overwrite")
    parser.add_argument("--overwrite", action="store_true",
                        help="let --out replace the model already in that folder (never a bundled model)")
    parser.add_argument("--static-cache", action="store_true",
                        help="decode over a static KV cache in batch-size buckets (training/rollouts/static_cache.py)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="record each bucket's decode step in a CUDA graph (turns on --static-cache; on the CPU "
                             "the same step runs eagerly)")
    parser.add_argument("--buckets", help="batch sizes of the static cache, comma-separated and increasing "
                                          "(default 8,16,32,64,128,256,512)")
    parser.add_argument("--finished", choices=("mask", "drop"), default=None,
                        help="finished rows stay masked in their bucket (mask, the default) or leave for a smaller "
                             "bucket (drop)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the arguments and print the plan; build and train nothing")
    args = parser.parse_args(argv)
    decoding = decode_settings(parser, args)
    if args.out:                                              # before torch loads: nothing is replaced by surprise
        check_out(parser, args.out, overwrite=args.overwrite)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")              # this run never downloads
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import torch
    from safetensors.torch import load_file

    from grpo_edu.training.model.make_model import build_tiny_model

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here; use --device cpu")
    size = args.size or ("gpu" if device == "cuda" else "tiny")
    if size == "gpu" and device == "cpu":
        build = SIZES["gpu"]["build"]
        print(f"grpo_edu.beyond.gpu_run: warning: --size gpu on the CPU builds 33.6 M parameters with up to "
              f"{build['max_steps']} warm-up steps of {build['batch_size']} prompts: hours, not minutes. --size tiny "
              "is the CPU stand-in; --device cuda runs the gpu size where there is a GPU", file=sys.stderr, flush=True)
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"device: {where}; size: {size}; nothing is downloaded", flush=True)
    print(describe(decoding, device), flush=True)
    if args.dry_run:
        print("dry run: nothing built or trained")
        return 0

    start = time.perf_counter()
    model_dir = args.out or os.path.join(tempfile.mkdtemp(prefix="grpo_edu_gpu_run_"), "sums-model")
    if args.out:
        _, held = lock_out(args.out, parser)                  # a second run into this folder is refused
        if held["took_over"]:
            print(held["took_over"], file=sys.stderr)
        check_out(parser, args.out, overwrite=args.overwrite)   # again, locked: a run that finished meanwhile
    made = build_tiny_model(model_dir, device=device, **WARM_UP, **SIZES[size]["build"])
    params = sum(t.numel() for t in load_file(os.path.join(model_dir, "model.safetensors")).values())
    print(f"1. built {model_dir}: {params:,} parameters, {made['warmup_steps']} warm-up steps in "
          f"{made['wall_seconds']:.0f} s; held-out sampled accuracy {made['heldout_sampled_accuracy']:.3f}", flush=True)

    ours = run_grpo_edu(model_dir, device, size, decoding)
    c = ours["config"]
    peak = f"{ours['peak_gib']:.2f} GiB" if ours["peak_gib"] is not None else "n/a (CPU)"
    static = ""
    if decoding.static_cache:
        static = " over the static cache" + (" in CUDA graphs" if decoding.cuda_graphs else "")
    print(f"2. grpo_edu GRPO ({c.total_training_steps} steps, {c.batch_size} prompts × G={c.num_generations}, "
          f"lr {c.learning_rate:g}, sampler {c.sampler}{static}{', bf16 autocast' if device == 'cuda' else ''}): "
          f"held-out accuracy {ours['before']:.3f} → {ours['after']:.3f}; {ours['seconds']:.0f} s; "
          f"{ours['tokens_per_s']:,.0f} completion tokens/s; peak GPU memory {peak}; {ours['busy']}", flush=True)

    speeds, rows, max_new, busy = run_samplers(model_dir, device, size, decoding)
    print(f"   sampling {rows} rows, ≤ {max_new} new tokens, median tokens/s over {len(speeds['loop'])} round(s): "
          + ", ".join(f"{name} {sorted(v)[len(v) // 2]:,.0f}" for name, v in speeds.items())
          + " (the engine: grpo_edu.training.rollouts.engine, the trainer's default; the loop: GRPOConfig(sampler='loop'))"
          + f"; {busy} over all samplers", flush=True)

    if args.no_trl:
        print("3. TRL comparison skipped (--no-trl)")
    else:
        theirs = run_trl_side(c)
        if theirs is None:
            print("3. TRL is not installed: comparison skipped (pip install -e \".[trl]\")")
        else:
            peak = f"{theirs['peak_gib']:.2f} GiB" if theirs["peak_gib"] is not None else "n/a (CPU)"
            print(f"3. TRL GRPOTrainer, same settings (fp32): held-out accuracy {theirs['before']:.3f} → "
                  f"{theirs['after']:.3f}; {theirs['seconds']:.0f} s; {theirs['tokens_per_s']:,.0f} completion "
                  f"tokens/s; peak GPU memory {peak}; {theirs['busy']}")
    print(f"total: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
