"""The roofline of a step (grpo_edu.beyond.roofline): bytes counted by hand on a tiny config, the binding roof,
and the bench's table built from its rounds."""

import pytest
from transformers import LlamaConfig

from grpo_edu.beyond import bench, roofline

# L = 1, D = 4, H = K = 1, d = 4, I = 8, V = 5, tied embeddings
TINY = LlamaConfig(vocab_size=5, hidden_size=4, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                   intermediate_size=8, tie_word_embeddings=True)


def test_the_weights_are_counted_as_the_model_holds_them(random_model):
    # a layer: q, k, v (4·3·4 = 48), o (16), gate, up, down (3·4·8 = 96), two norms (8); embedding 20; final norm 4
    assert roofline.weight_count(TINY) == 48 + 16 + 96 + 8 + 20 + 4
    assert roofline.weight_count(random_model.config) == sum(p.numel() for p in random_model.parameters())


def test_sampling_reads_every_weight_once_per_decode_step_and_the_cache_of_the_live_rows():
    # one prompt of 2 tokens, one answer of 3: the prefill (192 weights + 2 positions × 8 KV numbers), then decode
    # steps 1 and 2, each 192 weights + the cache so far (3, then 4 positions) + 5 logits; 4 bytes a number
    got = roofline.step_bytes(TINY, [2], [3], num_generations=1)
    assert got["sampling"] == 4 * ((192 + 2 * 8) + (192 + 3 * 8 + 5) + (192 + 4 * 8 + 5))
    # G rows decode together: 8 answers read the weights as often as one, so far less than 8 times the bytes
    eight = roofline.step_bytes(TINY, [2], [3] * 8, num_generations=8)["sampling"]
    assert eight == 4 * ((192 + 16) + (192 + 8 * (3 * 8 + 5)) + (192 + 8 * (4 * 8 + 5)))
    # a row that ended leaves the batch: answers of 1 and 3 tokens decode 2 steps, the second with one row
    assert roofline.step_bytes(TINY, [2], [1, 3], num_generations=2)["sampling"] == 4 * (
        (192 + 16) + (192 + 3 * 8 + 5) + (192 + 4 * 8 + 5))


def test_the_passes_and_the_optimizer_by_hand():
    got = roofline.step_bytes(TINY, [2], [3], num_generations=1, num_iterations=2, trainable=10)
    forward = 192 + 2 * 1 * 4 * 5 + 5 * 3                    # weights, 2·L·D per token over 5 tokens, 3 logits rows
    kept = 1 * 5 * (4 * 4 + 1 * 4 + 3 * 8) + 5 * 3           # per token and layer 4D + Hd + 3I, then the logits
    assert got["reference"] == 4 * forward
    assert got["policy"] == 4 * 2 * (forward + 2 * kept + 192 + 10)
    assert got["optimizer"] == 4 * 7 * 10
    assert roofline.step_bytes(TINY, [2], [3], num_generations=1, reference=False)["reference"] == 0


def test_the_larger_limit_binds_and_the_measured_time_is_read_against_it():
    table, info = roofline.roofline({"sampling": 100.0, "optimizer": 10.0}, {"sampling": 10.0, "optimizer": 40.0},
                                    flops_per_s=10.0, bytes_per_s=2.0, seconds={"sampling": 30.0})
    assert info["ridge_flops_per_byte"] == 5.0
    assert table["sampling"]["binds"] == "compute" and table["sampling"]["limit_s"] == 10.0   # 100/10 > 10/2
    assert table["sampling"]["times_limit"] == 3.0
    assert table["optimizer"]["binds"] == "memory" and table["optimizer"]["limit_s"] == 20.0  # 40/2 > 10/10
    assert "seconds" not in table["optimizer"]
    text = roofline.format_roofline(table, info)
    assert "compute" in text and "memory" in text and "3.0×" in text


@pytest.mark.parametrize("name, value", [("flops_per_s", 0.0), ("bytes_per_s", float("nan"))])
def test_a_rate_that_is_not_positive_is_refused(name, value):
    rates = {"flops_per_s": 1.0, "bytes_per_s": 1.0, name: value}
    with pytest.raises(ValueError, match=f"^{name}: "):
        roofline.roofline({"sampling": 1.0}, {"sampling": 1.0}, **rates)


def test_a_length_list_that_does_not_match_G_is_refused():
    with pytest.raises(ValueError, match="^completion_lengths: holds 3 rows"):
        roofline.step_bytes(TINY, [2, 2], [3, 3, 3], num_generations=2)


def test_the_bandwidth_is_a_positive_rate_and_a_tiny_buffer_is_refused():
    assert roofline.memory_bandwidth(1 << 16, repeats=3) > 0
    with pytest.raises(ValueError, match="^nbytes: "):
        roofline.memory_bandwidth(2)


def test_the_bench_reads_its_roofline_from_the_rounds_medians():
    def run(scale):
        parts = dict.fromkeys(roofline.PARTS, 1.0)
        return {"grpo_edu": {"matmul_flops_per_s": 10.0 * scale, "parts_s": {p: 2.0 * scale for p in parts},
                             "roofline": {"flops": {**parts, "sampling": 40.0}, "bytes": parts,
                                          "bytes_per_s": 1.0}}}
    table, info = bench.roofline_of([run(1), run(2), run(3)])                 # medians: F = 20, W = 1, 4 s a part
    assert info["ridge_flops_per_byte"] == 20.0
    assert table["sampling"]["binds"] == "compute" and table["sampling"]["limit_s"] == 2.0
    assert table["policy"]["binds"] == "memory" and table["policy"]["times_limit"] == 4.0


def test_the_chart_draws_a_roof_per_machine_and_places_each_part():
    from grpo_edu.course import viz

    table, info = roofline.roofline({"sampling": 100.0, "optimizer": 10.0}, {"sampling": 10.0, "optimizer": 40.0},
                                    flops_per_s=10.0, bytes_per_s=2.0, seconds={"sampling": 30.0})
    fig = viz.roofline_chart({"a": (table, info, 10.0), "b": (table, info, 20.0)})
    ax = fig.axes[0]
    roofs = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
    assert len(roofs) == 2 and max(roofs[0].get_ydata()) == 10.0 and max(roofs[1].get_ydata()) == 20.0
    # each machine: two limits on the roof (hollow) and one measured point (sampling's 100 FLOPs in 30 s)
    points = [(float(line.get_xdata()[0]), float(line.get_ydata()[0])) for line in ax.get_lines()
              if len(line.get_xdata()) == 1]
    assert (10.0, 100.0 / 30.0) in points and (10.0, 10.0) in points and (0.25, 0.5) in points


# The sums model's sampling in lesson 14's step (engine, 4 prompts × G = 8): its FLOPs and bytes depend only on the
# lengths sampled, 5.6 FLOPs per byte. Two CPUs' measured roofs: this project's AMD EPYC on the sums model's shape
# (lesson 14's stored run) and the Intel Xeon with AVX-512 of issue 65, where the README's command once failed because
# the lesson asserted that arithmetic binds. Which roof binds is the machine's: the lesson prints it, computed, and
# checks only the relation between the part's intensity and the machine's ridge.
SUMS_SAMPLING = {"sampling": 1373.6e6}, {"sampling": 243.52e6}
MACHINES = {"AMD EPYC, AVX2 (33.7 GFLOP/s, 40.4 GB/s)": (33.7e9, 40.4e9, "compute"),
            "Intel Xeon, AVX-512 (355 GFLOP/s, 58 GB/s)": (355e9, 58e9, "memory")}


@pytest.mark.parametrize("machine", MACHINES)
def test_which_roof_binds_sampling_is_computed_from_the_machine_and_the_lessons_claim_holds_on_both(machine):
    flops_per_s, bytes_per_s, expected = MACHINES[machine]
    table, info = roofline.roofline(*SUMS_SAMPLING, flops_per_s=flops_per_s, bytes_per_s=bytes_per_s)
    row = table["sampling"]
    roof, got = roofline.binding_roof(row["intensity"], info["ridge_flops_per_byte"])
    # lesson 14's claim: the roof on sampling's side of the ridge is the one whose time limits it
    assert roof == row["binds"] == expected
    assert got["over_ridge"] == pytest.approx(row["intensity"] / (flops_per_s / bytes_per_s))
    sentence = roofline.roof_sentence("the sums model's sampling", row, info)
    words = {"memory": "memory traffic binds", "compute": "arithmetic binds"}
    assert words[expected] in sentence and words[{"memory": "compute", "compute": "memory"}[expected]] not in sentence
    assert f"{row['intensity']:.2f} FLOPs per byte" in sentence and f"ridge at {flops_per_s / bytes_per_s:.2f}" in sentence


def test_the_binding_roof_turns_at_the_ridge_and_refuses_what_is_not_a_rate():
    assert roofline.binding_roof(5.9, 6.1)[0] == "memory"            # the Xeon's: just below its ridge
    assert roofline.binding_roof(6.1, 6.1)[0] == "compute"           # at the ridge both limits are equal
    assert roofline.binding_roof(5.6, 0.83)[0] == "compute"
    for name, args in (("intensity", (0.0, 1.0)), ("ridge", (1.0, float("nan")))):
        with pytest.raises(ValueError, match=f"^{name}: "):
            roofline.binding_roof(*args)
