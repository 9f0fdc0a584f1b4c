"""The roofline of a GRPO step: for each part, the bytes it must move beside the FLOPs it must compute.

A part of a step cannot take less time than the larger of two numbers (Williams, Waterman and Patterson 2009,
"Roofline: an insightful visual performance model"):

    time ≥ max(FLOPs / F, bytes / W)        F: the core's matmul rate (FLOP/s), W: its memory bandwidth (bytes/s)

``step_cost.step_flops`` counts the FLOPs; this module counts the bytes, and says which of the two binds.
The ratio FLOPs / bytes is the part's *arithmetic intensity* I; a part with I below the machine's ridge point
F / W is bound by memory traffic, one above it by arithmetic.

Decoding is the part the FLOP count alone cannot explain: each decode step reads every weight (and each live
row's KV cache) to produce one token per row, so its intensity is about 2·rows FLOPs per 4 bytes of fp32
weight, however long the answers are. A training pass reads each weight a few times for thousands of tokens.

What is counted (fp32, 4 bytes a number unless a model says otherwise; the least traffic the arithmetic needs,
every tensor moved once per use, nothing re-read from a cache miss):

* **sampling**: the prompts' prefill reads the weights once and writes their KV cache; each decode step reads
  the weights once, reads the live rows' KV cache (positions so far) and writes one position per live row,
  and writes one row of logits (V numbers) per live row. The engine decodes all live rows together and drops
  a row when it ends (``training.engine``), so step s has the rows whose answers are longer than s.
* **reference**: one teacher-forced forward: the weights once, every layer's input and output hidden state
  (2·L·D numbers per token) and the answers' logits.
* **policy**: the same forward, the activations it keeps for the backward pass written once and read once
  (per token and layer the inputs of the matmuls and norms, about 4·D + H·d + 3·I numbers, and the logits),
  the weights read again by the backward pass and the gradients written: ``num_iterations`` times.
* **optimizer**: AdamW reads each trainable weight, its gradient and two moments and writes the weight and
  both moments: 7 numbers per weight.

W is measured as a copy in this process (``memory_bandwidth``) of the size a decode step reads, the model's
weights: a tiny model's weights sit in the core's caches, and a copy of a larger buffer would time main
memory instead, a slower roofline than the step runs against.

Shapes as in ``step_cost``: B prompts, G completions per prompt, N = B·G rows, P prompt tokens, T completion
tokens, L layers, D hidden size, H query heads, K KV heads, d head size, I MLP width, V vocabulary.
"""

import time

import torch

from grpo_edu.beyond.step_cost import shape_of
from grpo_edu.common import _checks
from grpo_edu.training.rollouts.passes import layer_weights

SPEC_SHEETS = {"H100 SXM (bf16, dense)": (989e12, 3.35e12)}
"""A GPU's roofs from its maker's data sheet, (matmul FLOP/s, memory bytes/s): NVIDIA's H100 SXM5 data sheet gives
989 TFLOP/s of dense bf16 tensor-core arithmetic (1,979 with 2:4 sparsity) and 3.35 TB/s of HBM3 bandwidth.
Peak numbers, which no real kernel reaches: a roofline drawn with them is the most optimistic one."""

PARTS = ("sampling", "reference", "policy", "optimizer")
"""The parts of a step a roofline is drawn for (``step_cost.PARTS`` less ``other``, which computes no matmul)."""


def weight_count(config):
    """Weights of a Llama-style model: L layers' matmuls, the embedding, the LM head unless tied, the norms."""
    s = shape_of(config)
    head = 0 if getattr(config, "tie_word_embeddings", False) else s["V"] * s["D"]
    return s["L"] * (layer_weights(config) + 2 * s["D"]) + s["V"] * s["D"] + head + s["D"]


def memory_bandwidth(nbytes, *, repeats=20):
    """This process's copy bandwidth in bytes/s on a buffer of ``nbytes``: the fastest of ``repeats`` calls of
    ``dst.copy_(src)``, which reads ``nbytes`` and writes ``nbytes``, after two untimed copies (a roof is the best
    the core does; other load on the host only ever adds time)."""
    _checks.positive_int("nbytes", nbytes, minimum=4)
    _checks.positive_int("repeats", repeats)
    src = torch.randn(nbytes // 4)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / min(times)


def _forward_bytes(config, tokens, logits, number):
    """Bytes of one teacher-forced forward over ``tokens`` tokens with ``logits`` of them scored: the weights
    once, each layer's input and output hidden state (2·L·D per token), the logits (V per scored token)."""
    s = shape_of(config)
    return number * (weight_count(config) + 2 * s["L"] * s["D"] * tokens + s["V"] * logits)


def saved_activations(config, tokens, logits):
    """Numbers the backward pass keeps from a forward over ``tokens`` tokens (``logits`` of them scored): per
    token and layer the inputs of q/k/v (D), of o (H·d), of gate/up (D), of down and the SiLU's two inputs (3·I),
    and the two norms' inputs (2·D); then the scored tokens' logits (V each). Attention's softmax is left out."""
    s = shape_of(config)
    return s["L"] * tokens * (4 * s["D"] + s["H"] * s["d"] + 3 * s["I"]) + s["V"] * logits


def step_bytes(config, prompt_lengths, completion_lengths, *, num_generations, reference=True, num_iterations=1,
               trainable=None, number=4):
    """Bytes one GRPO step must move by part, for prompts of ``prompt_lengths`` (B, real tokens) and the
    completions sampled from them, ``completion_lengths`` (N = B·G, ``<eos>`` included), as the module
    docstring counts them. ``trainable``: weights the optimizer updates (default all: full fine-tuning; LoRA's
    adapter is far fewer). ``number``: bytes per number (4: fp32). Returns {part: bytes} for :data:`PARTS`."""
    prompts, completions = [int(n) for n in prompt_lengths], [int(n) for n in completion_lengths]
    G = num_generations
    if len(completions) != len(prompts) * G:
        _checks.fail("completion_lengths", f"holds {len(completions)} rows, but {len(prompts)} prompts × G = {G} "
                     f"make {len(prompts) * G}", "pass one length per completion, G per prompt, in prompt order")
    s = shape_of(config)
    weights = weight_count(config)
    kv_per_position = 2 * s["L"] * s["K"] * s["d"]                          # K and V, every layer
    rows = [(prompts[i // G], t) for i, t in enumerate(completions)]
    # prefill: the weights once, each prompt's KV written once
    sampling = weights + kv_per_position * sum(prompts)
    for step in range(1, max(completions, default=0)):                     # decode steps after the first token
        live = [(p, t) for p, t in rows if t > step]                       # rows still writing
        if not live:
            break
        sampling += weights                                                 # every weight, once per step
        sampling += kv_per_position * sum(p + step for p, _ in live)       # read the cache, write one position
        sampling += s["V"] * len(live)                                      # one row of logits per live row
    tokens = sum(p + t for p, t in rows)
    scored = sum(completions)
    forward = _forward_bytes(config, tokens, scored, 1)
    kept = saved_activations(config, tokens, scored)
    trainable = weights if trainable is None else int(trainable)
    policy = num_iterations * (forward + 2 * kept + weights + trainable)    # + backward's weights, gradients
    return {"sampling": number * sampling, "reference": number * forward if reference else 0,
            "policy": number * policy, "optimizer": number * 7 * trainable}


ADAMW_FLOPS_PER_WEIGHT = 14
"""AdamW's arithmetic per trainable weight, element-wise: m ← β₁m + (1−β₁)g (3), v ← β₂v + (1−β₂)g² (4),
√v̂ + ε with the bias corrections (3), θ ← θ − η·m̂/(√v̂ + ε) (3), the decoupled decay θ ← θ(1 − ηλ) (1)."""


def optimizer_flops(trainable):
    """FLOPs of one AdamW step over ``trainable`` weights (:data:`ADAMW_FLOPS_PER_WEIGHT` each)."""
    return ADAMW_FLOPS_PER_WEIGHT * int(trainable)


def bytes_of_step(trainer, tokens):
    """:func:`step_bytes` of a step timed by ``step_cost.timed_step`` (its ``tokens``), by part: sampling over
    the batches it sampled, the passes and the optimizer over the rows it trained on (one optimizer step per
    update: ``num_iterations`` of them)."""
    c, config = trainer.config, trainer.model.config
    G = c.num_generations
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    sampling = sum(step_bytes(config, p[::G], t, num_generations=G)["sampling"] for p, t in tokens["sampled"])
    prompts, completions = tokens["trained"][:2]                                      # per row, replayed ones too
    passes = step_bytes(config, prompts, completions, num_generations=1, reference=trainer.ref_model is not None,
                        num_iterations=c.num_iterations, trainable=trainable)
    return {"sampling": sampling, "reference": passes["reference"], "policy": passes["policy"],
            "optimizer": passes["optimizer"] * c.num_iterations}


def roofline(flops, nbytes, *, flops_per_s, bytes_per_s, seconds=None):
    """Each part's limit: ``{part: {"flops", "bytes", "intensity", "compute_s", "memory_s", "limit_s", "binds",
    "seconds", "times_limit"}}`` from {part: FLOPs} and {part: bytes} (the parts both name), at this machine's
    matmul rate F = ``flops_per_s`` and bandwidth W = ``bytes_per_s``; ``seconds`` ({part: measured s}) adds
    the measured time and how many times its limit it is. Returns ``(table, info)``, info holding the ridge
    point F / W (FLOPs per byte) where the two roofs meet."""
    for name, value in (("flops_per_s", flops_per_s), ("bytes_per_s", bytes_per_s)):
        if not value > 0:
            _checks.fail(name, f"is {value!r}", "pass a measured rate above 0")
    table = {}
    for part in [p for p in PARTS if p in flops and p in nbytes]:
        compute, memory = flops[part] / flops_per_s, nbytes[part] / bytes_per_s       # FLOPs / F, bytes / W
        row = {"flops": flops[part], "bytes": nbytes[part],
               "intensity": flops[part] / nbytes[part] if nbytes[part] else float("inf"),
               "compute_s": compute, "memory_s": memory, "limit_s": max(compute, memory),
               "binds": "memory" if memory > compute else "compute"}
        if seconds is not None and part in seconds:
            row["seconds"] = seconds[part]
            row["times_limit"] = seconds[part] / row["limit_s"] if row["limit_s"] else float("inf")
        table[part] = row
    return table, {"ridge_flops_per_byte": flops_per_s / bytes_per_s}


def binding_roof(intensity, ridge):
    """Which roof binds a part that does ``intensity`` FLOPs per byte on a machine whose ridge point is ``ridge``
    (F / W, FLOPs per byte): "memory" below the ridge, "compute" at or above it, since FLOPs / F ≥ bytes / W
    exactly when FLOPs / bytes ≥ F / W. The answer is the machine's as much as the part's: the same part is
    bound by arithmetic on a CPU whose matmul is slow beside its memory and by memory on one with wide vector
    units. Returns ``(roof, info)``, info {"intensity", "ridge", "over_ridge": intensity / ridge}."""
    for name, value in (("intensity", intensity), ("ridge", ridge)):
        if not value > 0:
            _checks.fail(name, f"is {value!r}", "pass FLOPs per byte above 0 (a part's intensity, a machine's F / W)")
    roof = "memory" if intensity < ridge else "compute"
    return roof, {"intensity": intensity, "ridge": ridge, "over_ridge": intensity / ridge}


def roof_sentence(what, row, info, *, where="on this machine"):
    """The sentence a lesson prints about which roof binds ``what`` (a part's row of :func:`roofline`) on the
    machine of ``info`` (its ridge point): computed from that machine's two rates, never asserted."""
    roof, i = binding_roof(row["intensity"], info["ridge_flops_per_byte"])
    side = "below" if roof == "memory" else "at or above"
    return (f"{where}, {'memory traffic' if roof == 'memory' else 'arithmetic'} binds {what}: it does "
            f"{i['intensity']:.2f} FLOPs per byte, {side} the ridge at {i['ridge']:.2f} ({i['over_ridge']:.2f} times it)")


def format_roofline(table, info):
    """The table as text: one line a part (GFLOP, MB, intensity, which roof binds, the limit in ms, and the
    measured ms and its ratio to the limit where known)."""
    lines = [f"{'part':10} {'MFLOP':>9} {'MB':>8} {'FLOP/B':>7} {'binds':>8} {'limit ms':>9} {'ms':>8} {'× limit':>8}"]
    for part, row in table.items():
        measured = (f"{row['seconds'] * 1000:8.2f} {row['times_limit']:7.1f}×" if "seconds" in row
                    else f"{'':8} {'':8}")
        lines.append(f"{part:10} {row['flops'] / 1e6:9.1f} {row['bytes'] / 1e6:8.2f} {row['intensity']:7.1f} "
                     f"{row['binds']:>8} {row['limit_s'] * 1000:9.3f} {measured}")
    lines.append(f"ridge point: {info['ridge_flops_per_byte']:.1f} FLOPs per byte (a part below it is bound by "
                 "memory traffic)")
    return "\n".join(lines)
