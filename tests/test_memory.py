"""grpo_edu.beyond.memory: the parts of a GRPO run's GPU memory, by hand."""

import pytest

from grpo_edu.beyond.memory import ARCHITECTURES, GiB, memory_per_gpu, memory_table


def test_a_half_billion_model_on_one_gpu_by_hand():
    arch = ARCHITECTURES["Qwen2.5-0.5B"]
    P = 494_032_768
    parts, info = memory_per_gpu(arch, beta=0.04, sequences=128, seq_len=512)
    assert parts["policy weights (bf16)"] == pytest.approx(2 * P / GiB)                  # 0.92 GiB
    assert parts["AdamW moments + fp32 master weights"] == pytest.approx(12 * P / GiB)   # 5.52 GiB
    assert parts["reference model (bf16)"] == pytest.approx(2 * P / GiB)
    assert info["kv_bytes_per_token"] == 2 * 24 * 2 * 64 * 2                             # 12,288 bytes
    assert parts["KV cache while sampling"] == pytest.approx(12_288 * 512 * 128 / GiB)   # 0.75 GiB
    logits = 128 * 512 * 151_936 * 4                                                    # B·T·V floats: 37.1 GiB
    assert parts["logits in the loss pass (fp32)"] == pytest.approx(logits / GiB) and 37 < logits / GiB < 37.2
    assert info["total_gib"] == pytest.approx((18 * P + 12_288 * 512 * 128 + logits) / GiB)
    no_ref, _ = memory_per_gpu(arch, beta=0.0)
    assert no_ref["reference model (bf16)"] == 0.0                                       # TRL's default β = 0


def test_zero_stages_shard_what_they_promise():
    arch = ARCHITECTURES["Qwen2.5-7B"]
    one, _ = memory_per_gpu(arch, n_gpus=8, zero_stage=0)
    z1, _ = memory_per_gpu(arch, n_gpus=8, zero_stage=1)
    z3, _ = memory_per_gpu(arch, n_gpus=8, zero_stage=3)
    opt = "AdamW moments + fp32 master weights"
    assert z1[opt] == pytest.approx(one[opt] / 8) and z1["gradients (bf16)"] == one["gradients (bf16)"]
    for part in ("policy weights (bf16)", "gradients (bf16)", "reference model (bf16)", opt):
        assert z3[part] == pytest.approx(one[part] / 8)
    for part in ("KV cache while sampling", "logits in the loss pass (fp32)"):   # data parallel, not ZeRO
        assert one[part] == pytest.approx(z3[part]) == pytest.approx(memory_per_gpu(arch)[0][part] / 8)
    with pytest.raises(ValueError, match="^zero_stage: is 4"):
        memory_per_gpu(arch, zero_stage=4)


def test_the_table_has_both_models_alone_and_sharded():
    rows = memory_table()
    assert [(r["model"], r["GPUs"], r["ZeRO stage"]) for r in rows] == [
        ("Qwen2.5-0.5B", 1, 0), ("Qwen2.5-0.5B", 8, 3), ("Qwen2.5-7B", 1, 0), ("Qwen2.5-7B", 8, 3)]
    assert rows[2]["total GiB per GPU"] > 130 > rows[3]["total GiB per GPU"]    # 7B alone: beyond one 80 GB GPU
    assert rows[0]["logits in the loss pass (fp32)"] > rows[0]["AdamW moments + fp32 master weights"]   # 0.5B: logits win
