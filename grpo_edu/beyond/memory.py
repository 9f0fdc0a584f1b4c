"""How much GPU memory a GRPO run needs: weights, gradients, optimizer, reference model, KV cache.

``memory_per_gpu(arch, ...)`` → ``(GiB by part, info)``. The parts, for P parameters:

* **policy weights**: P × 2 bytes (bf16);
* **gradients**: P × 2 bytes (bf16);
* **optimizer**: AdamW's two moments plus an fp32 master copy, P × (4 + 4 + 4) bytes;
* **reference model** (only when β > 0): P × 2 bytes, frozen;
* **KV cache** while sampling: 2 (K and V) × layers × kv_heads × head_dim × 2 bytes per token,
  for every sequence generated at once (prompt + completion tokens);
* **logits** of the loss pass: sequences × tokens × vocabulary × 4 bytes (float32, as the log-softmax
  needs them): GRPO's classic out-of-memory source, 37 GiB for 128 × 512 tokens of Qwen's vocabulary.

The KV cache and the logits belong to the sequences a GPU itself samples and scores: with ``n_gpus``
data-parallel GPUs each holds 1/n_gpus of them, with or without ZeRO (ZeRO shards the training state,
not the batch). Micro-batches (gradient accumulation) shrink the logits further: only one micro-batch's
are alive at a time.

ZeRO (DeepSpeed) or FSDP shards across ``n_gpus``: stage 1 the optimizer, stage 2 also the
gradients, stage 3 also the weights (the reference model too). Activations are left out: they
depend on micro-batch size and gradient checkpointing, and are what those two knobs trade.
The numbers are a floor to plan with, not a promise; frameworks add buffers and fragmentation.
They assume bf16 mixed precision as DeepSpeed does it (bf16 weights and gradients, fp32 master
weights and moments). Two things to add for TRL: without DeepSpeed it keeps the float32 it loads
models in unless told otherwise (``model_init_kwargs={"dtype": "bfloat16"}``), which doubles the
weights and the reference model (DeepSpeed's bf16 mode converts them, as this table assumes); and
under ZeRO-3 it gathers the full weights on every GPU to generate (``ds3_gather_for_generation``),
one more whole bf16 copy at that moment.
"""

from dataclasses import dataclass

from grpo_edu.common import _checks

GiB = 1024 ** 3


@dataclass(frozen=True)
class Architecture:
    """What the memory depends on, from a model's config.json."""

    name: str
    num_params: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int


ARCHITECTURES = {
    # from each model's config.json on the Hugging Face hub (hidden_size / num_attention_heads = head_dim)
    "Qwen2.5-0.5B": Architecture("Qwen2.5-0.5B", 494_032_768, 24, 2, 64, 151_936),
    "Qwen2.5-7B": Architecture("Qwen2.5-7B", 7_615_616_512, 28, 4, 128, 152_064),
}
"""Two sizes a learner meets first: a 0.5B model fits one consumer GPU; a 7B model needs care."""


def memory_per_gpu(arch, *, beta=0.04, sequences=128, seq_len=512, n_gpus=1, zero_stage=0):
    """GiB per GPU by part for training ``arch`` with GRPO. Returns ``(parts, info)``.

    ``sequences``: completions generated at once (batch_size × G on one GPU, before sharding);
    ``seq_len``: prompt + completion tokens; ``zero_stage``: 0 (plain data parallel: every GPU
    holds everything), 1, 2 or 3 (ZeRO / FSDP). The KV cache and the logits are split over
    ``n_gpus`` by data parallelism (each GPU samples and scores its share of the sequences), at
    every ZeRO stage.
    """
    _checks.positive_int("n_gpus", n_gpus)
    _checks.positive_int("sequences", sequences)
    _checks.positive_int("seq_len", seq_len)
    if zero_stage not in (0, 1, 2, 3):
        _checks.fail("zero_stage", f"is {zero_stage!r}", "use 0 (no sharding), 1, 2 or 3")
    P = arch.num_params
    shard = lambda stage: n_gpus if zero_stage >= stage else 1          # noqa: E731
    kv_per_token = 2 * arch.num_layers * arch.num_kv_heads * arch.head_dim * 2            # bytes, K and V in bf16
    parts = {
        "policy weights (bf16)": 2 * P / shard(3),
        "gradients (bf16)": 2 * P / shard(2),
        "AdamW moments + fp32 master weights": 12 * P / shard(1),
        "reference model (bf16)": (2 * P / shard(3)) if beta > 0 else 0.0,
        "KV cache while sampling": kv_per_token * seq_len * -(-sequences // n_gpus),
        "logits in the loss pass (fp32)": 4 * arch.vocab_size * seq_len * -(-sequences // n_gpus),
    }
    parts = {k: v / GiB for k, v in parts.items()}
    total = sum(parts.values())
    return parts, {"total_gib": total, "kv_bytes_per_token": kv_per_token, "params": P}


def memory_table(*, beta=0.04, sequences=128, seq_len=512):
    """Rows for a table: each bundled architecture on 1 GPU (no sharding) and on 8 GPUs with ZeRO-3."""
    rows = []
    for arch in ARCHITECTURES.values():
        for n_gpus, stage in ((1, 0), (8, 3)):
            parts, info = memory_per_gpu(arch, beta=beta, sequences=sequences, seq_len=seq_len, n_gpus=n_gpus,
                                         zero_stage=stage)
            rows.append({"model": arch.name, "GPUs": n_gpus, "ZeRO stage": stage,
                         **{k: round(v, 2) for k, v in parts.items()}, "total GiB per GPU": round(info["total_gib"], 1)})
    return rows


def main():
    from grpo_edu.common.display import Table

    print(Table(memory_table(), title="GRPO memory per GPU, GiB (β > 0, 128 sequences of 512 tokens sampled at "
                                      "once; activations not included)", digits=4))


if __name__ == "__main__":
    main()
