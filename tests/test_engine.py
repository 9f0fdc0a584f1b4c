"""The engine (grpo_edu/training/rollouts/engine.py) against the loop and a teacher-forced forward.

Each check can fail: the log-probs are compared with one ``transformers`` forward over prompt +
completion (the trainer's own ``completion_logprobs``) to 1e-5, greedy answers with
``model.generate(do_sample=False)`` token for token, and sampled answers with the loop's by a χ²
test over many draws (not by a seed: rows leaving the batch move the random numbers), whose power
is shown on a sampler that is slightly off.
"""

import pytest
import torch

from grpo_edu.training.rollouts import engine, rollout
from grpo_edu.training.model.models import load_model_and_tokenizer

ADDER_PROMPTS = ["12+34=", "7+5=", "99+1=", "3+40=", "56+78=", "0+0=", "8+91=", "45+45="]


def _sums_prompts():
    from grpo_edu.training.task.tasks import get_task

    return [row["prompt"] for row in get_task("sums").split("heldout")[:8]]


@pytest.fixture(scope="module")
def adder():
    model, tokenizer = load_model_and_tokenizer("bundled")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def sums():
    model, tokenizer = load_model_and_tokenizer("bundled-sums")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def wide_llama(char_tokenizer):
    """A random Llama of another shape: 6 query heads on 2 KV heads (GQA), head size 16, biases, RoPE θ = 5e5,
    128 positions, untied head; weights large enough that its distributions are far from uniform."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
                      num_key_value_heads=2, head_dim=16, intermediate_size=160, max_position_embeddings=128,
                      attention_bias=True, mlp_bias=True, tie_word_embeddings=False, initializer_range=0.2,
                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg).eval(), tok


@pytest.fixture(scope="module")
def tiny_gpt2(char_tokenizer):
    """Not a Llama: a random 2-layer GPT-2 built here (nothing downloaded), for the fallback path."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = char_tokenizer
    torch.manual_seed(2)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                     initializer_range=0.2)
    return GPT2LMHeadModel(cfg).eval(), tok


def _case(request, name):
    """(model, tokenizer, prompts, max_new_tokens) of a named model."""
    model, tokenizer = request.getfixturevalue(name)
    prompts = _sums_prompts() if name == "sums" else ADDER_PROMPTS
    return model, tokenizer, prompts, {"adder": 4, "sums": 42, "wide_llama": 40, "tiny_gpt2": 12}[name]


def _teacher_forced(model, out, temperature):
    """What the trainer computes from the rollout: one forward over prompt + completion, (N, T) each."""
    logprobs, entropy = rollout.completion_logprobs(model, out.input_ids, out.attention_mask,
                                                    out.completion_ids.shape[1], temperature=temperature,
                                                    with_entropy=True)
    return logprobs.detach() * out.completion_mask, entropy.detach() * out.completion_mask


def _check_layout(out, tokenizer, max_new_tokens):
    """Rollout's conventions: pad after the first EOS, the mask up to and including it, texts decoded."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids, mask = out.completion_ids, out.completion_mask
    assert ids.shape[1] <= max_new_tokens and ids.shape == mask.shape == out.logprobs.shape
    for row, m in zip(ids.tolist(), mask.tolist()):
        n = sum(m)
        assert m == [1] * n + [0] * (len(m) - n)                                    # a prefix of ones
        assert row[n:] == [pad] * (len(row) - n)                                    # pad after it
        assert eos not in row[:n - 1] and (row[n - 1] == eos or n == len(row))     # ends at the first EOS, or cut
    assert (ids.shape[1] == max_new_tokens) or bool((ids == eos).any(1).all())      # stops when all ended
    assert (out.logprobs[mask == 0] == 0).all()
    assert out.completions == tokenizer.batch_decode(ids * mask + pad * (1 - mask), skip_special_tokens=True)


@pytest.mark.parametrize("name", ["adder", "sums", "wide_llama", "tiny_gpt2"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_teacher_forced_forward(request, name, temperature):
    model, tokenizer, prompts, max_new = _case(request, name)
    out = engine.generate(model, tokenizer, prompts, num_generations=4, max_new_tokens=max_new,
                          temperature=temperature, generator=torch.Generator().manual_seed(0), with_entropy=True)
    assert out.completion_ids.shape[0] == 4 * len(prompts)
    _check_layout(out, tokenizer, max_new)
    logprobs, entropy = _teacher_forced(model, out, temperature)
    # 1e-5, absolute and relative: the wide model's log-probs reach −10, and float32 sums over 40 positions
    # differ in the 6th digit (the loop's own, against the same forward, by 7.6e-6)
    torch.testing.assert_close(out.logprobs, logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.entropy, entropy, atol=1e-5, rtol=1e-5)
    lengths = out.lengths
    assert lengths.min() < lengths.max(), "rows of different lengths, so some left the batch before others"


@pytest.mark.parametrize("name", ["adder", "sums", "wide_llama", "tiny_gpt2"])
def test_greedy_answers_equal_model_generate(request, name):
    model, tokenizer, prompts, max_new = _case(request, name)
    out = engine.generate(model, tokenizer, prompts, num_generations=2, max_new_tokens=max_new, temperature=0)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    theirs = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                            eos_token_id=tokenizer.eos_token_id)[:, enc["input_ids"].shape[1]:]   # (B, T)
    assert torch.equal(out.completion_ids, theirs.repeat_interleave(2, dim=0))
    loop = rollout.generate(model, tokenizer, prompts, num_generations=2, max_new_tokens=max_new, temperature=0)
    assert torch.equal(out.completion_ids, loop.completion_ids) and out.completions == loop.completions
    torch.testing.assert_close(out.logprobs, loop.logprobs, atol=1e-5, rtol=0)
    assert torch.equal(out.prompt_ids, loop.prompt_ids) and torch.equal(out.prompt_mask, loop.prompt_mask)


@pytest.mark.parametrize("name", ["sums", "tiny_gpt2"])
def test_finished_answers_leave_the_batch(request, name, monkeypatch):
    """Each decode step computes exactly the rows still going: after token t, those longer than t + 1 tokens."""
    model, tokenizer, prompts, max_new = _case(request, name)
    decoder = engine._LlamaDecoder if name == "sums" else engine._TransformersDecoder
    rows, step = [], decoder.step
    monkeypatch.setattr(decoder, "step", lambda self, tokens: rows.append(len(tokens)) or step(self, tokens))
    out = engine.generate(model, tokenizer, prompts, num_generations=4, max_new_tokens=max_new,
                          generator=torch.Generator().manual_seed(0))
    lengths = out.lengths
    assert rows == [int((lengths > t + 1).sum()) for t in range(out.completion_ids.shape[1] - 1)]
    assert rows[-1] < rows[0] <= len(lengths)


def test_the_cache_buffers_are_kept_between_calls_and_a_large_cache_is_not(sums, monkeypatch):
    """A training step's cache is made once and reused by the next call that fits in it (no more rows, no
    more slots); a call with longer prompts gets a larger pair; one over ``KEPT_BUFFER_BYTES`` is made for its
    call and leaves the kept pair alone. Answers drawn in a reused pair still equal a teacher-forced forward."""
    from grpo_edu.training.task.tasks import get_task

    model, tokenizer = sums
    prompts = sorted({row["prompt"] for row in get_task("sums").split("heldout")}, key=len)
    short, long = prompts[:8], prompts[-8:]                              # 2 terms; 6 terms
    made = []
    empty = torch.empty
    monkeypatch.setattr(engine.torch, "empty", lambda *a, **k: made.append(a) or empty(*a, **k))
    monkeypatch.setattr(engine, "_BUFFERS", engine.threading.local())

    def sample(batch, G=4):
        out = engine.generate(model, tokenizer, batch, num_generations=G, max_new_tokens=42,
                              generator=torch.Generator().manual_seed(0))
        # float32 over up to 42 tokens: 1e-5 to 3e-5 apart by rounding alone, depending on the answers drawn; a cache
        # row read from the wrong place is off by more than 0.1
        torch.testing.assert_close(out.logprobs, _teacher_forced(model, out, 1.0)[0], atol=1e-4, rtol=1e-5)
        return engine._BUFFERS.pair, len(made)

    first, count = sample(short)
    assert count >= 2
    assert sample(short) == (first, count)
    assert sample(short[:4]) == (first, count)                           # fewer rows fit the same pair
    larger, more = sample(long)                                          # more slots do not
    assert larger is not first and more > count and larger[0].shape[4] > first[0].shape[4]
    monkeypatch.setattr(engine, "KEPT_BUFFER_BYTES", larger[0].nbytes // 2)
    pair, most = sample(long)                                            # now too large to keep
    assert pair is larger and most > more


def _chi2_p(first, second, min_expected=5.0):
    """Two-sample χ² test of equal distributions over the categories of two lists; returns (p, categories).
    Categories expected fewer than ``min_expected`` times in either sample are pooled into one."""
    cats = sorted(set(first) | set(second))
    counts = torch.tensor([[first.count(c) for c in cats], [second.count(c) for c in cats]], dtype=torch.float64)
    expected = counts.sum(0) * counts.sum(1, keepdim=True) / counts.sum()       # (2, k) under H0
    rare = (expected < min_expected).any(0)
    if rare.any():
        counts = torch.cat([counts[:, ~rare], counts[:, rare].sum(1, keepdim=True)], dim=1)
        expected = counts.sum(0) * counts.sum(1, keepdim=True) / counts.sum()
    stat = ((counts - expected) ** 2 / expected).sum()
    df = counts.shape[1] - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2)), df


def _draws(sampler, model, tokenizer, prompts, max_new, temperature, rounds, seed):
    """(first two tokens, length) of every completion over ``rounds`` batches of 8 per prompt."""
    generator = torch.Generator().manual_seed(seed)
    pairs, lengths = [], []
    for _ in range(rounds):
        out = sampler(model, tokenizer, prompts, num_generations=8, max_new_tokens=max_new, temperature=temperature,
                      generator=generator)
        pairs += [tuple(row[:2]) for row in out.completion_ids.tolist()]
        lengths += out.lengths.tolist()
    return pairs, lengths


def test_sampled_answers_come_from_the_loops_distribution(adder):
    """χ² over the first two tokens and over the length of 1,024 answers, engine against loop; then the same
    test must see a loop at a temperature 20 % off (as a sampler that forgot τ = 1.2 would be), so it has the
    power to see a wrong sampler. (The random models are too near uniform, and lesson 11's model too slow
    for enough draws: their log-probs and greedy answers are checked above.)"""
    model, tokenizer = adder
    prompts, max_new, tau, rounds = ADDER_PROMPTS, 4, 1.2, 16
    ours = _draws(engine.generate, model, tokenizer, prompts, max_new, tau, rounds, seed=1)
    loop = _draws(rollout.generate, model, tokenizer, prompts, max_new, tau, rounds, seed=2)
    for what, a, b in zip(("first two tokens", "length"), ours, loop):
        p, df = _chi2_p(a, b)
        assert df >= 3 and p > 1e-3, f"{what}: engine and loop differ, p = {p:.2g} over {df} degrees of freedom"
    off = _draws(rollout.generate, model, tokenizer, prompts, max_new, tau / 1.2, rounds, seed=3)
    assert _chi2_p(loop[0], off[0])[0] < 1e-3, "the test cannot see τ 20 % off"


def test_a_non_llama_model_takes_the_transformers_path_and_says_so_once(tiny_gpt2, capsys, monkeypatch):
    model, tokenizer = tiny_gpt2
    monkeypatch.setattr(engine, "_told", set())
    assert "GPT2LMHeadModel is not LlamaForCausalLM" in engine.fast_path_refusal(model)
    for seed in (0, 1):
        out = engine.generate(model, tokenizer, ADDER_PROMPTS, num_generations=3, max_new_tokens=12,
                              generator=torch.Generator().manual_seed(seed))
        logprobs, _ = _teacher_forced(model, out, 1.0)
        torch.testing.assert_close(out.logprobs, logprobs, atol=1e-5, rtol=0)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("engine:")]
    assert len(lines) == 1 and "transformers forward" in lines[0] and "GPT2LMHeadModel" in lines[0]


def test_the_bundled_models_take_the_fast_path(adder, sums, wide_llama):
    for model, _ in (adder, sums, wide_llama):
        assert engine.fast_path_refusal(model) is None
        assert isinstance(engine.decoder_for(model, 4), engine._LlamaDecoder)


def test_cuda_attention_leaves_out_cudnn():
    """cuDNN plans every new shape, and each decode step has one: on an H200 the engine sampled 10 times slower with
    it (docs/gpu-run.md). The names must be SDPBackend members, or the fast path would fail on CUDA alone."""
    from torch.nn.attention import SDPBackend

    assert engine.CUDA_ATTENTION_BACKENDS and "CUDNN_ATTENTION" not in engine.CUDA_ATTENTION_BACKENDS
    assert all(isinstance(getattr(SDPBackend, name), SDPBackend) for name in engine.CUDA_ATTENTION_BACKENDS)
    from torch.nn.attention import sdpa_kernel

    q = torch.randn(2, 4, 1, 8)
    with sdpa_kernel([getattr(SDPBackend, name) for name in engine.CUDA_ATTENTION_BACKENDS]):   # the list is usable
        assert torch.nn.functional.scaled_dot_product_attention(q, q, q).shape == q.shape


def test_bad_input_is_refused_before_any_work(adder):
    model, tokenizer = adder
    with pytest.raises(ValueError, match=r"^prompts: "):
        engine.generate(model, tokenizer, "12+34=")
    with pytest.raises(ValueError, match=r"^num_generations: "):
        engine.generate(model, tokenizer, ADDER_PROMPTS, num_generations=0)
    with pytest.raises(ValueError, match=r"^temperature: "):
        engine.generate(model, tokenizer, ADDER_PROMPTS, temperature=-1.0)


def test_bf16_autocast_samples_close_to_float32(adder):
    """The trainer's sampling_dtype="bfloat16" wraps the sampler in autocast: the cache follows its dtype."""
    model, tokenizer = adder
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = engine.generate(model, tokenizer, ADDER_PROMPTS, num_generations=4, max_new_tokens=4,
                              generator=torch.Generator().manual_seed(0))
    logprobs, _ = _teacher_forced(model, out, 1.0)
    assert (out.logprobs - logprobs).abs().max() < 0.1


def test_the_engine_is_the_default_sampler_of_training_and_evaluation(monkeypatch):
    """The trainer's steps and its held-out evaluation sample with the engine unless the config says "loop";
    then both use the loop, so a run is scored by the sampler it trained with."""
    from grpo_edu.training.task import evaluation
    from grpo_edu.training.rollouts import rollout as rollout_module
    from grpo_edu.training.trainers import trainer as trainer_module
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    with pytest.raises(ValueError, match=r"^sampler: "):
        GRPOConfig(sampler="vllm")
    assert GRPOConfig().sampler == "engine"
    calls = []
    for module, name in ((engine, "engine"), (rollout_module, "loop")):
        real = getattr(module, "generate")
        monkeypatch.setattr(module, "generate", lambda *a, _real=real, _name=name, **k: calls.append(_name)
                            or _real(*a, **k))
    monkeypatch.setattr(evaluation, "SAMPLERS", {"engine": engine.generate, "loop": rollout_module.generate})
    monkeypatch.setattr(trainer_module, "generate", rollout_module.generate)
    settings = dict(batch_size=4, num_generations=4, total_training_steps=2, eval_size=4)
    trainer = GRPOTrainer(GRPOConfig(**settings))
    metrics = trainer.step()
    assert calls == ["engine"] and metrics["completion_length"] > 0
    trainer.evaluate()
    assert calls == ["engine", "engine"], "held-out evaluation samples with the run's sampler"
    calls.clear()
    loop = GRPOTrainer(GRPOConfig(sampler="loop", **settings))
    loop.step()
    loop.evaluate()
    assert calls == ["loop", "loop"]
    with pytest.raises(ValueError, match=r"^sampler: "):
        evaluation.sample_completions(trainer.model, trainer.tokenizer, ["1+2="], sampler="vllm")


def test_bench_sampler_prints_both_samplers_and_the_step(capsys, monkeypatch):
    """``grpo-edu bench --sampler`` wiring, made small: tiny batches, and the step's children answered in-process."""
    from grpo_edu.beyond import bench, bench_samplers

    monkeypatch.setattr(bench_samplers, "SAMPLER_WORKLOADS", {
        "sums": dict(bench_samplers.SAMPLER_WORKLOADS["sums"], batch_size=2, num_generations=2, max_new_tokens=6),
        "adder": dict(bench_samplers.SAMPLER_WORKLOADS["adder"], batch_size=2, num_generations=2)})
    steps = []
    monkeypatch.setattr(bench, "_run_child", lambda name, s, w, **kw: steps.append((name, kw)) or {
        "median_step_s": {"step_loop": 0.2, "step_engine": 0.1}[name]})
    before = torch.get_num_threads()
    try:
        assert bench.main(["--sampler", "--steps", "1", "--warmup", "0", "--rounds", "2"]) == 0
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr().out
    for workload in ("sums", "adder"):
        assert f"{workload} (" in out
    assert len([line for line in out.splitlines() if line.startswith(("  loop ", "  engine  "))]) == 4
    assert out.count("  engine / loop ") == 2 and "step, engine / loop          median 0.50×" in out
    assert sorted(steps) == [("step_engine", {"threads": 1, "workload": "sums"})] * 2 + [
        ("step_loop", {"threads": 1, "workload": "sums"})] * 2
    assert set(bench.CHILDREN) >= {"step_loop", "step_engine"}


# --- the fast path serves only plain Llama (faults-4 E58, E59) ----------------------------------------------
def _greedy_pair(model, tokenizer, prompts, max_new):
    a = engine.generate(model, tokenizer, prompts, temperature=0.0, max_new_tokens=max_new)
    b = rollout.generate(model, tokenizer, prompts, temperature=0.0, max_new_tokens=max_new)
    return a, b


def test_a_subclass_that_changes_the_forward_takes_the_transformers_path(capsys, monkeypatch):
    """A LlamaForCausalLM subclass whose forward bans a token: the fast path would read its weights and sample
    the token anyway (E58), so it must fall back, say so once, and never sample the banned token."""
    from transformers import LlamaForCausalLM

    model, tokenizer = load_model_and_tokenizer("bundled")
    five = tokenizer.convert_tokens_to_ids("5")

    class Banned(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits[..., five] = float("-inf")
            return out

    banned = Banned(model.config)
    banned.load_state_dict(model.state_dict())
    banned.eval()
    monkeypatch.setattr(engine, "_told", set())
    assert "Banned is a subclass of LlamaForCausalLM" in engine.fast_path_refusal(banned)
    out = engine.generate(banned, tokenizer, ADDER_PROMPTS, num_generations=4, max_new_tokens=6,
                          generator=torch.Generator().manual_seed(0))
    assert int((out.completion_ids[out.completion_mask.bool()] == five).sum()) == 0
    plain = engine.generate(model.eval(), tokenizer, ADDER_PROMPTS, num_generations=4, max_new_tokens=6,
                            generator=torch.Generator().manual_seed(0))
    assert int((plain.completion_ids[plain.completion_mask.bool()] == five).sum()) > 0   # the ban does act
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("engine:")]
    assert len(lines) == 1 and "Banned" in lines[0] and "transformers forward" in lines[0]


@pytest.mark.parametrize("where", ["lm_head", "model.layers.1.mlp", "model.norm"])
@pytest.mark.parametrize("kind", ["hook", "pre_hook"])
def test_a_model_with_a_forward_hook_takes_the_transformers_path(where, kind, monkeypatch):
    """A hook on any module changes what the model computes; the fast path calls no module's forward, so it
    would skip the hook (E59: other greedy answers than the loop's). It must fall back and answer as the loop."""
    model, tokenizer = load_model_and_tokenizer("bundled")
    model.eval()
    five = tokenizer.convert_tokens_to_ids("5")
    module = model.get_submodule(where)
    if where == "lm_head":
        def hook(mod, inp, out):
            out = out.clone()
            out[..., five] = float("-inf")
            return out
    else:
        def hook(mod, inp, out):                                                   # features permuted
            return out.flip(-1)
    if kind == "pre_hook":
        handle = module.register_forward_pre_hook(lambda mod, args: (args[0].flip(-1),))
    else:
        handle = module.register_forward_hook(hook)
    monkeypatch.setattr(engine, "_told", set())
    assert f"{where} has a forward hook" in engine.fast_path_refusal(model)
    prompts = ADDER_PROMPTS[:4]
    a, b = _greedy_pair(model, tokenizer, prompts, 6)
    assert a.completions == b.completions
    handle.remove()
    assert engine.fast_path_refusal(model) is None
    plain, _ = _greedy_pair(model, tokenizer, prompts, 6)
    assert plain.completions != a.completions                                      # the hook does change answers


def test_a_forward_replaced_on_the_instance_or_a_global_hook_takes_the_transformers_path():
    model, _ = load_model_and_tokenizer("bundled")
    original = model.model.layers[0].mlp.forward
    model.model.layers[0].mlp.forward = lambda x: original(x) * 2
    assert "model.layers.0.mlp has its forward replaced" in engine.fast_path_refusal(model)
    del model.model.layers[0].mlp.forward
    assert engine.fast_path_refusal(model) is None
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, inp, out: out)
    try:
        assert "global forward hook" in engine.fast_path_refusal(model)
    finally:
        handle.remove()


# --- lengths the model cannot hold are refused before any work (E04, E05, E07, E10, E11, E42, E44, E25, T44) ---
@pytest.mark.parametrize("sampler", [engine.generate, rollout.generate])
def test_a_prompt_longer_than_the_context_is_refused(adder, sampler):
    model, tokenizer = adder
    with pytest.raises(ValueError, match=r"^prompts: row 1 has 42 tokens, but the model has 32 positions.*Fix: "):
        sampler(model, tokenizer, ["1+2=", "1+" * 20 + "="], max_new_tokens=4)


@pytest.mark.parametrize("sampler", [engine.generate, rollout.generate])
@pytest.mark.parametrize("max_new", [26, 200_000, 10**12])
def test_max_new_tokens_past_the_context_is_refused_before_any_allocation(adder, sampler, max_new):
    """The engine would reserve a cache of P + max_new_tokens slots: 10**12 asks for terabytes (E10, E11, E42)."""
    model, tokenizer = adder
    with pytest.raises(ValueError, match=rf"^max_new_tokens: is {max_new}, but the model has 32 positions and the "
                                         r"longest prompt \(row 0\) takes 7 of them.*Fix: pass max_new_tokens ≤ 25"):
        sampler(model, tokenizer, ["12+34=", "1+2="], max_new_tokens=max_new, num_generations=8)
    assert sampler(model, tokenizer, ["12+34=", "1+2="], max_new_tokens=25).completion_ids.shape[0] == 2   # fits


@pytest.mark.parametrize("sampler", [engine.generate, rollout.generate])
def test_gpt2_past_its_positions_is_refused_not_an_index_error(char_tokenizer, sampler):
    """GPT-2 has no position embedding past n_positions: an IndexError mid-sampling before (E04, E05, E44)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = char_tokenizer
    cfg = GPT2Config(vocab_size=len(tok), n_positions=16, n_embd=32, n_layer=1, n_head=4,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = GPT2LMHeadModel(cfg).eval()
    with pytest.raises(ValueError, match=r"^prompts: .* 16 positions"):
        sampler(model, tok, ["1+" * 15 + "="], max_new_tokens=4)
    with pytest.raises(ValueError, match=r"^max_new_tokens: is 40, .* 16 positions"):
        sampler(model, tok, ["12+34="], max_new_tokens=40)


@pytest.mark.parametrize("sampler", [engine.generate, rollout.generate])
def test_a_prompt_the_tokenizer_cannot_encode_is_refused(adder, sampler):
    model, tokenizer = adder
    with pytest.raises(ValueError, match=r"^prompts: 1 of 2 hold characters the tokenizer cannot encode.*'abc\?'"):
        sampler(model, tokenizer, ["1+2=", "abc?"], max_new_tokens=4)


def test_eval_refuses_max_new_tokens_past_the_context_by_its_flag(capsys):
    """E54: `grpo-edu eval --max-new-tokens 1000000` asked for 262 GB; now refused as train refuses (E50)."""
    from grpo_edu.cli import main

    assert main(["eval", "--n", "4", "--max-new-tokens", "1000000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grpo-edu eval: error: --max-new-tokens: is 1000000, but the model has 32 positions")


def test_generate_with_tools_refuses_a_budget_past_the_context():
    """T44: 200 tokens of transcript on the calc model's 48 positions were sampled silently."""
    from grpo_edu.training.model.models import calc_model_dir
    from grpo_edu.training.rollouts.multi_turn import generate_with_tools
    from grpo_edu.training.rollouts.tools import Tool

    model, tokenizer = load_model_and_tokenizer(calc_model_dir())
    with pytest.raises(ValueError, match=r"^max_new_tokens: is 200, but the model has 48 positions"):
        generate_with_tools(model.eval(), tokenizer, ["347+85="], Tool(), num_generations=2, max_new_tokens=200)


def test_gradient_checkpointings_input_hook_keeps_the_fast_path():
    """Gradient checkpointing hooks the embeddings (transformers' enable_input_require_grads: requires_grad_ on
    their output, no value changed); a run with it on must still sample on the fast path, LoRA or not."""
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    for lora_rank in (None, 4):
        trainer = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=1, eval_size=0,
                                         gradient_checkpointing=True, lora_rank=lora_rank))
        embed = trainer.model.get_input_embeddings()
        assert embed._forward_hooks                                                # the hook is there
        trainer.model.eval()
        assert engine.fast_path_refusal(trainer.model) is None
