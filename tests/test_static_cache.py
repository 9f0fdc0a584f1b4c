"""The engine's decode steps over a static cache in buckets (``static_cache.py``, ``cuda_graphs.py``), on the CPU.

On the CPU the "graph" is the step function called on the buffers it was made with, so every piece of a graph's
bookkeeping runs here: the copies into static input buffers, the bucket picked and its padding rows, the
position and mask updates, finished rows masked or moved to a smaller bucket. Each bucket layout keeps the
engine's parity tests (log-probs equal a teacher-forced forward to 1e-5 in float32; greedy equal to
``model.generate``), and the two bugs a graph invites turn them red: a stale input (a buffer not refreshed before
replay) and a token placed in the wrong bucket row, which writes into another row's cache.
"""

import pytest
import torch

from grpo_edu.training.model.models import load_model_and_tokenizer
from grpo_edu.training.rollouts import cuda_graphs, engine, rollout, static_cache
from grpo_edu.training.rollouts.static_cache import DecodeSettings

LAYOUTS = {
    "exact": DecodeSettings(static_cache=True, buckets=(32,)),                       # 32 rows in a bucket of 32
    "padded": DecodeSettings(static_cache=True, buckets=(8, 40)),                    # 8 padding rows behind them
    "drop": DecodeSettings(static_cache=True, buckets=(1, 2, 4, 8, 16, 32), finished="drop"),   # shrinking
    "graphs": DecodeSettings(static_cache=True, cuda_graphs=True, buckets=(16, 64)),  # eager off CUDA
}
"""Bucket layouts for 8 prompts × G = 4 = 32 rows."""


@pytest.fixture(scope="module")
def sums():
    model, tokenizer = load_model_and_tokenizer("bundled-sums")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def adder():
    model, tokenizer = load_model_and_tokenizer("bundled")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def gqa_llama(char_tokenizer):
    """A random Llama with 6 query heads on 2 KV heads, biases and an untied head (far from uniform)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, head_dim=16, intermediate_size=160, max_position_embeddings=128,
                      attention_bias=True, mlp_bias=True, tie_word_embeddings=False, initializer_range=0.2,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg).eval(), tok


def _prompts(name):
    from grpo_edu.training.task.tasks import get_task

    task = "addition" if name == "adder" else "sums"
    return [row["prompt"] for row in get_task(task).split("heldout")[:8]]


def _case(request, name):
    model, tokenizer = request.getfixturevalue(name)
    return model, tokenizer, _prompts(name), {"adder": 4, "sums": 42, "gqa_llama": 20}[name]


def _gap(model, out, atol=1e-5):
    """The engine's log-probs equal a teacher-forced forward over prompt + answer (the trainer's own)."""
    logprobs = rollout.completion_logprobs(model, out.input_ids, out.attention_mask, out.completion_ids.shape[1],
                                           temperature=1.0)[0].detach() * out.completion_mask
    torch.testing.assert_close(out.logprobs, logprobs, atol=atol, rtol=1e-5)


@pytest.fixture
def buckets_used(monkeypatch):
    """The bucket of every decode step, in order."""
    used, graph = [], static_cache.StaticCache.graph
    monkeypatch.setattr(static_cache.StaticCache, "graph", lambda self, b: used.append(b) or graph(self, b))
    return used


def _sample(model, tokenizer, prompts, max_new, settings, G=4, temperature=1.0):
    return engine.generate(model, tokenizer, prompts, num_generations=G, max_new_tokens=max_new,
                           temperature=temperature, generator=torch.Generator().manual_seed(0), decoding=settings)


@pytest.mark.parametrize("name, layout", [("sums", layout) for layout in sorted(LAYOUTS)] + [("gqa_llama", "drop")])
def test_logprobs_equal_a_teacher_forced_forward_in_every_bucket_layout(request, name, layout, buckets_used):
    model, tokenizer, prompts, max_new = _case(request, name)
    settings = LAYOUTS[layout]
    out = _sample(model, tokenizer, prompts, max_new, settings)
    _gap(model, out)
    lengths = out.lengths
    assert lengths.min() < lengths.max(), "some rows finished before others"
    assert len(buckets_used) == out.completion_ids.shape[1] - 1                      # every step in a bucket
    if settings.finished == "drop":                                                   # rows left: smaller buckets
        assert buckets_used == [static_cache.pick_bucket(int((lengths > t + 1).sum()), settings.buckets)
                                for t in range(len(buckets_used))]
        assert buckets_used[-1] < buckets_used[0] == 32
    else:                                                                             # rows stay: one bucket
        assert set(buckets_used) == {static_cache.pick_bucket(32, settings.buckets)}


_GREEDY = {}


def _greedy(request, name):
    """``model.generate``'s greedy answers to the 8 prompts, (8, T), computed once per model."""
    model, tokenizer, prompts, max_new = _case(request, name)
    if name not in _GREEDY:
        enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
        _GREEDY[name] = model.generate(**enc, max_new_tokens=max_new, do_sample=False,
                                       pad_token_id=tokenizer.pad_token_id,
                                       eos_token_id=tokenizer.eos_token_id)[:, enc["input_ids"].shape[1]:]
    return _GREEDY[name]


@pytest.mark.parametrize("name, layout", [("adder", layout) for layout in sorted(LAYOUTS)]
                         + [("sums", "exact"), ("sums", "drop")])
def test_greedy_answers_equal_model_generate_in_every_bucket_layout(request, name, layout):
    model, tokenizer, prompts, max_new = _case(request, name)
    for G in ((4, 1) if layout == "exact" else (4,)):                                 # G = 1: no repeat
        out = _sample(model, tokenizer, prompts, max_new, LAYOUTS[layout], G=G, temperature=0)
        assert torch.equal(out.completion_ids, _greedy(request, name).repeat_interleave(G, dim=0))


def test_the_cache_and_its_graphs_are_kept_across_calls_and_read_the_new_weights(sums):
    """A training step changes the weights in place between calls: the kept cache copies them in at each call."""
    import copy

    model, tokenizer = sums
    model = copy.deepcopy(model)
    prompts, settings = _prompts("sums"), LAYOUTS["padded"]
    # float32 over up to 42 tokens of the changed model: 1e-5 to 3e-5 apart by rounding alone (as in
    # test_engine's kept-buffer test); weights left from the last call are off by more than 0.01
    _gap(model, _sample(model, tokenizer, prompts, 20, settings), atol=1e-4)
    kept = static_cache._KEPT.state
    graphs = dict(kept.graphs)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.05)                                                              # as an optimizer step would
    _gap(model, _sample(model, tokenizer, prompts[:5], 20, settings), atol=1e-4)      # 20 rows: same bucket of 40
    assert static_cache._KEPT.state is kept and kept.graphs == graphs
    _gap(model, _sample(model, tokenizer, prompts, 20, LAYOUTS["exact"]), atol=1e-4)  # other settings: a new one
    assert static_cache._KEPT.state is not kept


def test_the_default_is_the_engines_own_cache_and_using_switches_it(sums, monkeypatch):
    model, tokenizer = sums
    made = []
    for cls in (engine._LlamaDecoder, static_cache.StaticDecoder):
        init = cls.__init__
        monkeypatch.setattr(cls, "__init__", lambda self, *a, _init=init, _cls=cls, **k: (
            made.append(_cls.__name__) if type(self) is _cls else None) or _init(self, *a, **k))
    _sample(model, tokenizer, _prompts("sums")[:2], 6, None)
    with static_cache.using(DecodeSettings(static_cache=True)):
        _sample(model, tokenizer, _prompts("sums")[:2], 6, None)
        assert static_cache.current().static_cache
    _sample(model, tokenizer, _prompts("sums")[:2], 6, None)
    assert made == ["_LlamaDecoder", "StaticDecoder", "_LlamaDecoder"] and static_cache.current() == static_cache.OFF


@pytest.mark.parametrize("n, bucket", [(1, 8), (8, 8), (9, 16), (512, 512), (513, 1024), (1100, 1536)])
def test_a_batch_runs_in_the_smallest_bucket_that_holds_it(n, bucket):
    assert static_cache.pick_bucket(n, static_cache.BUCKETS) == bucket


def test_a_step_graph_off_cuda_reads_the_buffers_it_was_made_with():
    """What a graph does on a GPU, shown on the CPU: a refreshed buffer is read, a rebound name is not."""
    x = torch.zeros(3)
    graph = cuda_graphs.StepGraph(lambda x: x * 2, {"x": x}, use_graph=True)          # no CUDA here: eager
    assert not graph.use_graph
    graph.refresh("x", torch.tensor([1.0, 2.0, 3.0]))
    assert graph.replay().tolist() == [2.0, 4.0, 6.0]
    graph.refresh("x", torch.tensor([5.0, 6.0]), rows=torch.tensor([0, 2]))
    assert graph.replay().tolist() == [10.0, 4.0, 12.0]
    graph.inputs["x"] = torch.ones(3)                                                 # rebound, not copied: stale
    assert graph.replay().tolist() == [10.0, 4.0, 12.0]


# --- the bugs a graph invites turn the parity test red ------------------------------------------
def _stale_tokens(self, graph, tokens):
    """Bug: the token buffer rebound instead of copied into, so the graph replays the first step's tokens."""
    graph.inputs["tokens"] = graph.inputs["tokens"].clone().index_copy_(0, self.rows, tokens)


def _packed_tokens(self, graph, tokens):
    """Bug: live tokens written to bucket rows 0 … n − 1 as if packed at the front; once rows finish in place,
    a live row's token (and its key and value) lands in a finished or padding row's cache, and the live row's
    own cache row is written with that row's token."""
    graph.refresh("tokens", tokens, rows=torch.arange(len(tokens)))


@pytest.mark.parametrize("bug", [_stale_tokens, _packed_tokens])
def test_a_stale_input_or_a_token_in_the_wrong_bucket_row_breaks_the_parity(sums, monkeypatch, bug):
    model, tokenizer = sums
    monkeypatch.setattr(static_cache.StaticDecoder, "_fill", bug)
    out = _sample(model, tokenizer, _prompts("sums"), 16, LAYOUTS["padded"])
    with pytest.raises(AssertionError):
        _gap(model, out)


def test_bad_settings_are_refused_naming_the_field(adder):
    for kwargs, field in [(dict(cuda_graphs=True), "cuda_graphs"), (dict(buckets=(16, 8)), "buckets"),
                          (dict(buckets=()), "buckets"), (dict(buckets=(0, 4)), "buckets"),
                          (dict(finished="keep"), "finished")]:
        with pytest.raises(ValueError, match=f"^{field}: .* Fix: "):
            DecodeSettings(**kwargs)
    model, tokenizer = adder
    with pytest.raises(ValueError, match="^decoding: str is not a DecodeSettings"):
        engine.generate(model, tokenizer, ["1+1="], decoding="static")
    with pytest.raises(ValueError, match="^settings: dict is not a DecodeSettings"):
        with static_cache.using({"static_cache": True}):
            pass


def test_bench_sampler_static_cache_times_the_static_samplers_beside_the_engine(capsys, monkeypatch):
    """``grpo-edu bench --sampler --static-cache`` wiring, made small; the step (which it skips) is never run."""
    from grpo_edu.beyond import bench, bench_samplers

    monkeypatch.setattr(bench_samplers, "SAMPLER_WORKLOADS", {
        "sums": dict(bench_samplers.SAMPLER_WORKLOADS["sums"], batch_size=2, num_generations=2, max_new_tokens=6)})
    monkeypatch.setattr(bench, "_run_child", lambda *a, **k: pytest.fail("the step is not timed"))
    before = torch.get_num_threads()
    try:
        assert bench.main(["--sampler", "--static-cache", "--steps", "1", "--warmup", "0", "--rounds", "1"]) == 0
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr().out
    for line in ("  loop ", "  engine ", "  static, mask ", "  static, drop ", "  static, mask / engine ",
                 "  static, drop / engine "):
        assert line in out
    with pytest.raises(SystemExit):
        bench.main(["--static-cache"])
    assert "--static-cache: times the samplers, so it needs --sampler" in capsys.readouterr().err
