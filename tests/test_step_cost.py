"""What a step costs (grpo_edu/beyond/step_cost.py): FLOPs counted by hand, the time split, memory by part."""

from types import SimpleNamespace

import pytest

from grpo_edu.beyond import step_cost

# L = 1 layer, D = 2, H = K = 1 head of d = 2, MLP I = 3, V = 5 tokens
TINY = SimpleNamespace(num_hidden_layers=1, hidden_size=2, num_attention_heads=1, num_key_value_heads=1, head_dim=2,
                       intermediate_size=3, vocab_size=5)


def test_one_layers_weight_flops_by_hand():
    # q, k, v: D × (H + 2K)·d = 2 × 3·2 = 12 weights; o: H·d × D = 4; gate, up, down: 3 × D·I = 18; 2 FLOPs each
    assert step_cost.layer_weight_flops(TINY) == 2 * (12 + 4 + 18) == 68


def test_forward_flops_by_hand():
    # two new tokens after one cached: positions 2 and 3 see 2 + 3 = 5 positions; attention 2·2·H·d = 8 per position
    # seen; one logit row: 2·D·V = 20
    assert step_cost.forward_flops(TINY, 2, context=1, logits=1) == 2 * 68 + 8 * 5 + 20 == 196
    # a whole pass of 3 tokens with logits for all: positions 1 + 2 + 3 = 6
    assert step_cost.forward_flops(TINY, 3) == 3 * 68 + 8 * 6 + 3 * 20 == 312
    assert step_cost.forward_flops(TINY, 0, context=7) == 0


def test_step_flops_by_hand():
    # one prompt of 2 tokens, G = 2 answers of 1 and 3 tokens
    flops = step_cost.step_flops(TINY, [2], [1, 3], num_generations=2)
    prefill = 2 * 68 + 8 * (1 + 2) + 20                       # read the prompt once, logits of its last token: 180
    decode = 2 * 68 + 8 * (3 + 4) + 2 * 20                    # the 3-token answer feeds 2 tokens at positions 3, 4: 232
    assert flops["sampling"] == prefill + 0 + decode == 412   # the 1-token answer feeds none
    # the trainer's passes share the prompt: the same tokens as sampling, teacher-forced
    assert flops["reference"] == 412
    assert flops["policy"] == 3 * 412                         # forward + backward (2× the forward)
    assert flops["total"] == 412 + 412 + 3 * 412
    # a plain pass reads each row's prompt again
    unshared = step_cost.step_flops(TINY, [2], [1, 3], num_generations=2, shared_prompts=False)
    short = 3 * 68 + 8 * (1 + 2 + 3) + 1 * 20                 # prompt + 1 answer token, one logit row: 272
    long = 5 * 68 + 8 * 15 + 3 * 20                           # prompt + 3 answer tokens, three logit rows: 520
    assert unshared["reference"] == short + long == 792 and unshared["policy"] == 3 * 792
    no_ref = step_cost.step_flops(TINY, [2], [1, 3], num_generations=2, reference=False, num_iterations=2)
    assert no_ref["reference"] == 0 and no_ref["policy"] == 2 * 3 * 412


def test_a_forward_pass_is_two_flops_per_weight_plus_attention():
    """Kaplan's 2·N per token, checked against the real model's weights (every Linear, the lm_head included)."""
    import torch

    from grpo_edu.training.model.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer("bundled-sums")
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    s = step_cost.shape_of(model.config)
    assert step_cost.forward_flops(model.config, 1) == 2 * weights + 4 * s["H"] * s["d"] * s["L"]


def test_step_flops_refuses_lengths_that_do_not_match():
    with pytest.raises(ValueError, match="completion_lengths.*3 rows.*2 prompts × G = 2"):
        step_cost.step_flops(TINY, [2, 2], [1, 2, 3], num_generations=2)
    with pytest.raises(ValueError, match="logits"):
        step_cost.forward_flops(TINY, 2, logits=3)


def test_matmul_throughput_is_measured():
    assert step_cost.matmul_flops_per_s(64, 64, 64, repeats=3) > 1e6


def paused_clock(monkeypatch, module, durations):
    """``module.time.perf_counter`` reads as if the timed calls took ``durations`` seconds, one after the other."""
    reads = iter([t for i, d in enumerate(durations) for t in (100.0 * i, 100.0 * i + d)])
    monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=lambda: next(reads)))


def test_a_roof_is_the_fastest_call_so_other_load_on_the_host_does_not_lower_it(monkeypatch):
    # 3 of 5 calls were paused by other work on the host (4 s): the core's rate is the uninterrupted 1 s call's,
    # where a median would read 4 s and put the roof 4 times too low
    from grpo_edu.beyond import roofline

    paused_clock(monkeypatch, step_cost, [1.0, 4.0, 4.0, 1.5, 4.0])
    assert step_cost.matmul_flops_per_s(8, 4, 2, repeats=5) == 2 * 8 * 4 * 2 / 1.0
    paused_clock(monkeypatch, roofline, [4.0, 2.0, 4.0])
    assert roofline.memory_bandwidth(400, repeats=3) == 2 * 400 / 2.0


@pytest.fixture
def small_trainer():
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    return GRPOTrainer(GRPOConfig(batch_size=2, num_generations=4, max_completion_length=4, total_training_steps=3,
                                  eval_size=0, sampler="engine", num_iterations=2))


def test_timed_step_splits_the_step_and_records_its_tokens(small_trainer):
    metrics, seconds, tokens = step_cost.timed_step(small_trainer)
    assert set(seconds) == set(step_cost.PARTS) and all(v >= 0 for v in seconds.values())
    assert seconds["sampling"] > 0 and seconds["reference"] > 0 and seconds["policy"] > 0 and seconds["optimizer"] > 0
    assert sum(seconds.values()) == pytest.approx(metrics["seconds"], rel=0.05, abs=0.01)
    (prompts, completions), = tokens["sampled"]
    assert len(completions) == 8 and sum(completions) / 8 == pytest.approx(metrics["completion_length"])
    assert tokens["trained"][:2] == (prompts, completions)
    assert sorted(tokens["trained"][2]) == sorted(prompts[::4])           # the 2 distinct prompts, read once each
    flops = step_cost.flops_of_step(small_trainer, tokens)
    again = step_cost.step_flops(small_trainer.model.config, prompts[::4], completions, num_generations=4,
                                 num_iterations=2)
    assert flops == again
    assert "_sample" not in vars(small_trainer) and "step" not in vars(small_trainer.optimizer)   # unwrapped


def test_memory_parts(small_trainer):
    small_trainer.step()
    rollout = small_trainer._sample(["12+34="] * 2)
    parts = step_cost.memory_parts(small_trainer, rollout)
    params = sum(p.numel() for p in small_trainer.model.parameters())
    assert parts["weights"] == parts["reference"] == parts["gradients"] == 4 * params    # float32, full fine-tuning
    assert parts["optimizer"] == 2 * 4 * params                                         # AdamW's two moments
    assert parts["kv_cache"] == step_cost.kv_cache_bytes(small_trainer.model.config, 8,
                                                          rollout.prompt_ids.shape[1] + rollout.completion_ids.shape[1])
    bigger = small_trainer._sample(["12+34="] * 4)
    assert 1.6 < step_cost.activation_bytes(small_trainer.model, bigger) / parts["activations"] < 2.4   # ∝ rows


def _family_trainer(method, reward=None, **overrides):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.family import make_trainer

    reward = reward or (lambda prompts, completions, **kw: [float(len(c) % 2) for c in completions])   # mixed
    settings = dict(batch_size=2, num_generations=4, max_completion_length=4, total_training_steps=3, eval_size=0,
                    sampler="engine", num_iterations=2, beta=0.04, **overrides)
    return make_trainer(method, GRPOConfig(**settings), reward_funcs=[reward])


@pytest.mark.parametrize("method", ["ppo", "reinforce", "rft", "dpo", "dpo_offline"])
def test_every_family_method_is_timed_and_counted_by_its_own_update(method):
    """SC04: DPO's update is its own method (not GRPO's _update): its time was counted negative and its FLOPs
    failed; rejection sampling the same. SC03: PPO's critic is a part of its own, in time and FLOPs."""
    trainer = _family_trainer(method)
    trainer.step()                                                          # warm-up
    metrics, seconds, tokens = step_cost.timed_step(trainer)
    assert tuple(seconds) == step_cost.parts_of(trainer) and all(v >= 0 for v in seconds.values())
    assert seconds["sampling"] > 0 and seconds["policy"] > 0 and seconds["optimizer"] > 0
    assert sum(seconds.values()) == pytest.approx(metrics["seconds"], rel=0.05, abs=0.01)
    (prompts, completions), = tokens["sampled"]
    rows = {"ppo": 8, "reinforce": 8, "rft": 8}.get(method, 2 * round(metrics.get("pair_fraction", 0) * 2))
    assert len(tokens["trained"][0]) == rows > 0                            # DPO: its chosen and rejected answers
    flops = step_cost.flops_of_step(trainer, tokens)
    forward = step_cost.teacher_forced_flops(trainer.model.config, *tokens["trained"][:2],
                                             distinct_prompt_lengths=tokens["trained"][2])
    assert flops["policy"] == 3 * 2 * forward                               # μ = 2 forward + backward passes
    if method in ("dpo", "dpo_offline"):                                    # π_ref's forward, inside DPO's update
        assert seconds["reference"] > 0 and flops["reference"] == forward
    if method == "ppo":
        assert seconds["critic"] > 0 and seconds["reference"] > 0
        T = tokens["critic"][0][1]
        rows_tokens = [p + t for p, t in zip(prompts, completions)]
        one = step_cost.critic_flops(trainer.model.config, rows_tokens, T)
        assert [grad for *_, grad in tokens["critic"]] == [False, True, True]   # V_old, then μ = 2 updates
        assert flops["critic"] == one + 2 * 3 * one
    assert flops["total"] == sum(v for k, v in flops.items() if k != "total")
    assert "_sample" not in vars(trainer) and "step" not in vars(trainer.optimizer)   # unwrapped
    assert "forward" not in vars(trainer.ref_model) if trainer.ref_model is not None else True


def test_a_skipped_step_costs_its_sampling_only():
    trainer = _family_trainer("dpo", reward=lambda prompts, completions, **kw: [1.0] * len(completions))
    with pytest.warns(UserWarning, match="no pair"):
        metrics, seconds, tokens = step_cost.timed_step(trainer)
    assert metrics["skipped"] and tokens["trained"] is None and seconds["policy"] == 0
    flops = step_cost.flops_of_step(trainer, tokens)
    assert flops["policy"] == flops["reference"] == 0 < flops["sampling"] == flops["total"]


def test_a_step_of_unknown_parts_is_refused():
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    class Mine(GRPOTrainer):
        def step(self):
            return {}
    with pytest.raises(ValueError, match=r"trainer: Mine.step\(\) is not a step timed_step knows.*Fix:"):
        step_cost.timed_step(Mine.__new__(Mine))


def test_step_flops_refuses_no_answers_per_prompt():
    with pytest.raises(ValueError, match="num_generations: must be an integer ≥ 1, got 0"):      # SC02
        step_cost.step_flops(TINY, [5, 6], [], num_generations=0)


def test_memory_parts_count_ppos_critic():
    """SC05: the critic is a second model with its own gradients and AdamW: PPO's memory holds it."""
    trainer = _family_trainer("ppo")
    trainer.step()
    parts = step_cost.memory_parts(trainer, trainer._sample(["12+34="] * 2))
    critic = sum(p.numel() for p in trainer.critic.parameters())
    assert parts["critic"] == 4 * 4 * critic                                # float32 weights, gradients, 2 moments
    assert parts["weights"] == 4 * sum(p.numel() for p in trainer.model.parameters())


def test_bench_prints_the_split_and_the_arithmetic_limit(capsys, monkeypatch, tmp_path):
    import json
    import re
    import time

    from grpo_edu.beyond import bench
    from grpo_edu.cli import main

    # the children run in this process (test_cli proves the subprocess machinery)
    monkeypatch.setattr(bench, "_run_child", lambda name, steps, warmup, **kw: bench.CHILDREN[name](time.time(), steps,
                                                                                                   warmup))
    out_file = tmp_path / "bench.json"
    assert main(["bench", "--steps", "2", "--warmup", "0", "--rounds", "1", "--no-trl", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    number = r" +[\d.]+"
    for name in ("grpo_edu", "floor"):                     # sampling, reference, policy, optimizer, other, step
        assert re.search(rf"^{name}{number * 6}$", out, re.M), name
    assert re.search(r"grpo_edu step / arithmetic limit +median [\d.]+×.*GFLOP at [\d.]+ GFLOP/s", out)
    rnd = json.loads(out_file.read_text())["rounds"][0]
    ours = rnd["grpo_edu"]
    assert set(ours["parts_s"]) == set(step_cost.PARTS) and set(rnd["floor"]["parts_s"]) == set(step_cost.PARTS[:-1])
    assert sum(ours["parts_s"].values()) == pytest.approx(ours["median_step_s"], rel=0.3)
    assert 0 < ours["limit_s"] < ours["median_step_s"] and ours["limit_s"] == ours["flops"] / ours["matmul_flops_per_s"]


@pytest.mark.parametrize("no_trl", [True, False])
def test_a_trl_that_fails_to_import_never_stops_the_bench(no_trl, capsys, monkeypatch, tmp_path):
    """B21: a TRL built for another transformers raises AttributeError on import, not ImportError: --no-trl must
    not import it at all, and without --no-trl the bench names it and runs the rest."""
    import sys

    from grpo_edu.beyond import bench
    from grpo_edu.cli import main

    (tmp_path / "trl").mkdir()
    (tmp_path / "trl" / "__init__.py").write_text("raise AttributeError('simulated: a TRL built for another "
                                                  "transformers')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "trl" or m.startswith("trl.")]:
        monkeypatch.delitem(sys.modules, name)
    ran = []
    fake = {"median_step_s": 1.0, "tokens_per_s": 1.0, "first_step_s": 1.0, "peak_rss_mib": 1.0, "limit_s": 0.5,
            "flops": 1e9, "matmul_flops_per_s": 2e9, "parts_s": dict.fromkeys(step_cost.PARTS, 0.2),
            "roofline": {"flops": dict.fromkeys(step_cost.PARTS, 1e8), "bytes": dict.fromkeys(step_cost.PARTS, 1e7),
                         "bytes_per_s": 1e10}}
    monkeypatch.setattr(bench, "_run_child", lambda name, steps, warmup, **kw: ran.append(name) or fake)
    argv = ["bench", "--steps", "1", "--warmup", "0", "--rounds", "1"] + (["--no-trl"] if no_trl else [])
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert ran == ["grpo_edu", "floor"]
    if no_trl:
        assert "trl" not in sys.modules and "TRL" not in out                 # never imported
    else:
        assert ("trl is installed but its import fails (AttributeError: simulated: a TRL built for another "
                "transformers; often a TRL built for another transformers: pip install -U trl transformers): "
                "skipping the TRL comparison") in out


def test_the_bench_times_trls_step_by_part_and_counts_the_tokens_it_sampled():
    """TRL's child splits its step as grpo_edu's is split and counts TRL's sampled tokens from its logs (a callback
    once defined after a return counted none: TRL's tokens/s read 0)."""
    import time

    pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    from grpo_edu.beyond import bench

    report = bench.child_trl(time.time(), 2, 1)
    assert report["steps"] == 2 and report["tokens_per_s"] > 0
    assert set(report["parts_s"]) == set(step_cost.PARTS)
