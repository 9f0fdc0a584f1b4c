"""A KV cache that never moves, for decode steps that can be recorded once (``cuda_graphs.py``) and replayed.

The engine's own cache (``engine._LlamaDecoder``) fits each step exactly: attention reads the slots written so
far, finished rows leave the batch, so every step has a new shape. That is right for the CPU, where work is what
costs, and wrong for a GPU recorded in a CUDA graph, which replays one shape on one piece of memory. vLLM's answer,
taken here:

==============================  ============================================================
here                            what vLLM does
==============================  ============================================================
:class:`StaticCache`, made once one tensor per layer of KV blocks, allocated at start-up to the
with ``slots`` positions and   memory the GPU has, kept for the engine's life; the weights
kept across calls              and the cache are at the same addresses at every step
a few batch sizes               ``cudagraph_capture_sizes``: one graph per batch size in a short
(:data:`BUCKETS`), rows padded  list; a batch of 27 runs in the graph of 32, its 5 padding rows
up to the next one              computing nothing anyone reads
every slot read, an additive    attention over fixed block tables, with the sequence lengths in
mask hiding the unwritten ones  a buffer the graph reads (not in the shape)
finished rows stay (``mask``),  a finished request's slot is padding until the scheduler refills
or move to a smaller bucket     it; the batch drops to a smaller captured size when it fits
(``drop``)
==============================  ============================================================

Settings (:class:`DecodeSettings`) pick the path: ``engine.generate(..., decoding=...)``, or for a whole run
``with static_cache.using(DecodeSettings(static_cache=True)):`` (``python -m grpo_edu.beyond.gpu_run
--static-cache --cuda-graphs``). Off by default: on the CPU the engine's exact-fit cache is faster (every step
here reads all slots and all bucket rows; ``docs/gpu-run.md`` has the CPU timing and the command). Shapes as in
``engine.py``: n live rows, b the bucket (n ≤ b ≤ R rows of the cache), S slots, L layers, K KV heads, d head
size, V vocabulary.
"""

import contextlib
import dataclasses
import math
import threading
import weakref

import torch
import torch.nn.functional as F

from grpo_edu.common import _checks
from grpo_edu.training.rollouts import cuda_graphs, engine

BUCKETS = (8, 16, 32, 64, 128, 256, 512)
"""Batch sizes with a graph each: the GPU run's 64 prompts × G = 8 fill the largest."""

SLOT_STEP = 64
"""Slots are prompt + new tokens rounded up to a multiple of this, so that calls with prompts a few tokens apart
share one cache (and one set of graphs)."""

FINISHED = ("mask", "drop")
"""What a finished row does: "mask" stays in its bucket row, fed padding, its output unread (one graph for the
whole call); "drop" leaves, and the live rows move to the front of a smaller bucket when they fit one (fewer rows
computed, one gather and, on a GPU, one more graph)."""


MAX_BUCKET = 1 << 16
"""The largest bucket :class:`DecodeSettings` takes: 65,536 rows, far past any sampling batch (B·G)."""


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How the engine's decode steps run (``engine.generate(decoding=...)``); the default is the engine as it was."""

    static_cache: bool = False
    """Decode over a :class:`StaticCache` (fixed shapes: bucket rows × all slots) instead of the exact-fit cache."""
    cuda_graphs: bool = False
    """Record each bucket's decode step in a CUDA graph and replay it (CUDA only; elsewhere the same step runs
    eagerly on the same buffers). Needs ``static_cache``."""
    buckets: tuple = BUCKETS
    """Batch sizes, increasing: a batch of n rows runs in the smallest bucket ≥ n."""
    finished: str = "mask"
    """What a finished row does (:data:`FINISHED`)."""

    def __post_init__(self):
        for name in ("static_cache", "cuda_graphs"):              # 'no' or 'yes' would read as on
            if not isinstance(getattr(self, name), bool):
                _checks.fail(name, f"must be True or False, got {getattr(self, name)!r}", f"pass {name}=True or False")
        if self.cuda_graphs and not self.static_cache:
            _checks.fail("cuda_graphs", "a CUDA graph replays fixed shapes, so it needs the static cache",
                         "pass static_cache=True as well (gpu_run: --cuda-graphs turns on --static-cache)")
        buckets = tuple(self.buckets)
        if (not buckets or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in buckets)
                or list(buckets) != sorted(set(buckets))):
            _checks.fail("buckets", f"{self.buckets!r} is not a list of increasing positive batch sizes",
                         "pass e.g. (8, 16, 32)")
        if buckets[-1] > MAX_BUCKET:                               # a cache that size fails to allocate, late
            _checks.fail("buckets", f"holds {buckets[-1]:,}, but a bucket is a batch's rows, each holding a slot of "
                         f"the cache for every layer: at most {MAX_BUCKET:,}", "pass the batch sizes the sampler "
                         "draws (B·G rows), e.g. (8, 16, 32)")
        object.__setattr__(self, "buckets", buckets)
        if self.finished not in FINISHED:
            _checks.fail("finished", f"{self.finished!r} is not one of {FINISHED}", "pass 'mask' or 'drop'")

    def decoder(self, model, max_new_tokens):
        """The decoder ``engine.decoder_for`` uses for a Llama when ``static_cache`` is on."""
        return StaticDecoder(model, max_new_tokens, self)


OFF = DecodeSettings()


@contextlib.contextmanager
def using(settings):
    """Within the block, ``engine.generate`` decodes with ``settings`` unless a call passes its own."""
    if not isinstance(settings, DecodeSettings):
        _checks.fail("settings", f"{type(settings).__name__} is not a DecodeSettings", "pass DecodeSettings(...)")
    engine.DECODING.append(settings)
    try:
        yield settings
    finally:
        engine.DECODING.remove(settings)


def current():
    """The settings in force (the innermost :func:`using`, else :data:`OFF`)."""
    return engine.DECODING[-1] or OFF


def pick_bucket(n, buckets):
    """The smallest bucket ≥ ``n`` rows; past the largest, ``n`` rounded up to a multiple of it."""
    for b in buckets:
        if b >= n:
            return b
    return buckets[-1] * math.ceil(n / buckets[-1])


def _clone(value):
    """A copy of one of ``engine._Weights``'s values (a tensor, a (weight, bias) pair, a number)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    return value


def _copy(target, value):
    """Copy ``value`` into ``target`` in place (the graph reads ``target``'s memory)."""
    if isinstance(target, torch.Tensor):
        target.copy_(value)
    elif isinstance(target, tuple):
        for t, v in zip(target, value):
            if t is not None:
                t.copy_(v)


class StaticCache:
    """The cache, the weights, RoPE's table and the step's input buffers, at fixed addresses across calls.

    ``cache`` (R, L, 2, K, S, d) zeros at first (every slot is read, masked or not, and −∞ · 0 of a NaN would be
    NaN); ``tokens`` (R,), ``positions`` (R,), ``slot`` (1,) the slot this step writes, ``mask`` (R, 1, 1, S):
    0 where a row may look, −∞ where not. A bucket b computes rows 0 … b − 1 (views of these buffers).
    """

    def __init__(self, decoder, rows, slots, dtype, settings):
        device = decoder.embed.device
        self.rows, self.slots, self.dtype, self.settings = rows, slots, dtype, settings
        self.heads, self.kv_heads, self.head_dim, self.eps = (decoder.heads, decoder.kv_heads, decoder.head_dim,
                                                              decoder.eps)
        self.model = weakref.ref(decoder.model)
        self.cache = torch.zeros(rows, len(decoder.weights), 2, self.kv_heads, slots, self.head_dim, dtype=dtype,
                                 device=device)                                        # (R, L, 2, K, S, d)
        self.weights = [_Weights(w) for w in decoder.weights]
        self.embed, self.final_norm, self.lm_head = (_clone(decoder.embed), _clone(decoder.final_norm),
                                                     _clone(decoder.lm_head))
        self.cos = torch.zeros(slots, self.head_dim, dtype=decoder.embed.dtype, device=device)   # (S, d)
        self.sin = torch.zeros_like(self.cos)
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)              # (R,)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)           # (R,)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)                   # (1,)
        self.mask = torch.full((rows, 1, 1, slots), float("-inf"), dtype=dtype, device=device)   # (R, 1, 1, S)
        self.graphs = {}                                                              # bucket → StepGraph
        use = settings.cuda_graphs and cuda_graphs.graphs_possible(device)
        self.pool = torch.cuda.graph_pool_handle() if use else None                   # one memory pool for all

    def fits(self, decoder, rows, slots, dtype, settings):
        return (self.model() is decoder.model and self.rows >= rows and self.slots == slots and self.dtype == dtype
                and self.settings == settings and self.cache.device == decoder.embed.device
                and len(self.weights) == len(decoder.weights))

    def load(self, decoder):
        """This call's weights and RoPE table, copied into the buffers the graphs read."""
        for mine, theirs in zip(self.weights, decoder.weights):
            mine.load(theirs)
        _copy(self.embed, decoder.embed)
        _copy(self.final_norm, decoder.final_norm)
        _copy(self.lm_head, decoder.lm_head)
        h0 = torch.zeros(1, 1, dtype=decoder.embed.dtype, device=self.cos.device)
        cos, sin = decoder.model.model.rotary_emb(h0, torch.arange(self.slots, device=self.cos.device)[None])
        self.cos.copy_(cos[0])
        self.sin.copy_(sin[0])

    def graph(self, b):
        """The bucket ``b``'s decode step over rows 0 … b − 1 (made at its first use)."""
        if b not in self.graphs:
            inputs = {"tokens": self.tokens[:b], "positions": self.positions[:b], "slot": self.slot,
                      "mask": self.mask[:b], "cache": self.cache[:b]}
            self.graphs[b] = cuda_graphs.StepGraph(self.decode, inputs, use_graph=self.settings.cuda_graphs,
                                                   pool=self.pool)
        return self.graphs[b]

    # --- the step a graph records: fixed shapes, no host reads ---------------------------------
    def decode(self, tokens, positions, slot, mask, cache):
        """One decode step of b rows: write each row's key and value at ``slot``, attend over all S slots
        under ``mask``; returns the next logits, (b, V). Computes what ``engine._LlamaDecoder._forward`` does
        for one token (the masked slots weigh exactly 0)."""
        h = F.embedding(tokens[:, None], self.embed)                                  # (b, 1, D)
        cos, sin = self.cos[positions][:, None, None], self.sin[positions][:, None, None]   # (b, 1, 1, d)
        with engine.attention_kernels(cache.device):
            for i, w in enumerate(self.weights):
                h = self._layer(w, h, cos, sin, slot, mask, cache[:, i])
        return F.linear(engine.rms_norm(h[:, -1], self.final_norm, self.eps), *self.lm_head)   # (b, V)

    def _layer(self, w, h, cos, sin, slot, mask, cache):
        """One layer on ``h`` (b, 1, D); ``cache`` (b, 2, K, S, d) is this layer's keys and values."""
        b = h.shape[0]
        H, K, d = self.heads, self.kv_heads, self.head_dim
        x = engine.rms_norm(h, w.input_norm, self.eps)                                # (b, 1, D)
        qkv = F.linear(x, *w.qkv).view(b, 1, H + 2 * K, d)                             # (b, 1, H + 2K, d)
        turned = engine._LlamaDecoder._rope(qkv[:, :, :H + K].transpose(1, 2), cos, sin)   # (b, H + K, 1, d)
        queries, keys = turned[:, :H], turned[:, H:]                                   # (b, H, 1, d), (b, K, 1, d)
        values = qkv[:, :, H + K:].transpose(1, 2)                                     # (b, K, 1, d)
        cache_k, cache_v = cache[:, 0], cache[:, 1]                                    # (b, K, S, d) each
        cache_k.index_copy_(2, slot, keys.to(cache.dtype))                             # slot from a buffer, so one
        cache_v.index_copy_(2, slot, values.to(cache.dtype))                           # graph serves every step
        out = F.scaled_dot_product_attention(queries, cache_k, cache_v, attn_mask=mask, scale=w.scaling,
                                             enable_gqa=K != H)                        # (b, H, 1, d)
        h = h + F.linear(out.transpose(1, 2).reshape(b, 1, H * d), *w.o)              # (b, 1, D)
        gate, up = F.linear(engine.rms_norm(h, w.post_norm, self.eps), *w.gate_up).chunk(2, dim=-1)
        return h + F.linear(F.silu(gate) * up, *w.down)                                # (b, 1, D)


class _Weights:
    """A layer's ``engine._Weights``, copied to memory of its own (refreshed in place at each call)."""

    def __init__(self, weights):
        for name, value in vars(weights).items():
            setattr(self, name, _clone(value))

    def load(self, weights):
        for name, value in vars(weights).items():
            _copy(getattr(self, name), value)


_KEPT = threading.local()
"""The last :class:`StaticCache` of this thread, kept for the next call of the same model that fits it (its graphs
are recorded once, not once per call)."""


def static_cache_for(decoder, rows, slots, dtype, settings):
    """The kept :class:`StaticCache` when it fits (same model, ≥ rows, same slots and settings), else a new one."""
    kept = getattr(_KEPT, "state", None)
    if kept is None or not kept.fits(decoder, rows, slots, dtype, settings):
        _KEPT.state = None                                                            # free the old one first
        _KEPT.state = StaticCache(decoder, rows, slots, dtype, settings)
    _KEPT.state.load(decoder)
    return _KEPT.state


class StaticDecoder(engine._LlamaDecoder):
    """The engine's decoder with its decode steps over a :class:`StaticCache`, in buckets.

    The prompt is read as the engine reads it (one eager pass, its own cache); the first ``repeat``, ``keep`` or
    ``step`` copies the rows into the static cache. From then on ``rows`` (n,) says which bucket row each live row
    is: finished rows leave ``rows`` but keep their bucket row (``finished="mask"``), or the live rows move to the
    front of a smaller bucket (``"drop"``).
    """

    def __init__(self, model, max_new_tokens, settings):
        super().__init__(model, max_new_tokens)
        self.settings, self.state = settings, None

    def prefill(self, prompt_ids, prompt_mask):
        self.state = None
        return super().prefill(prompt_ids, prompt_mask)                                # (B, V), engine's own cache

    def repeat(self, G):
        self._enter(torch.arange(self.cache.shape[0], device=self.cache.device).repeat_interleave(G))

    def _enter(self, index):
        """Copy the prompts' rows ``index`` (N,) of the engine's cache into bucket rows 0 … N − 1."""
        N, P = len(index), self.written
        slots = SLOT_STEP * math.ceil((P + self.max_new) / SLOT_STEP)
        self.bucket = pick_bucket(N, self.settings.buckets)
        s = self.state = static_cache_for(self, self.bucket, slots, self.cache.dtype, self.settings)
        torch.index_select(self.cache[..., :P, :], 0, index, out=s.cache[:N, ..., :P, :])
        s.mask.fill_(float("-inf"))                                                   # padding rows see nothing
        s.mask[:N, 0, 0, :P].masked_fill_(self.visible[index, :P], 0.0)               # but their own slot
        s.positions.zero_()
        s.positions[:N] = self.position[index]
        s.slot.fill_(P)
        self.rows = torch.arange(N, device=index.device)                               # (N,) live → bucket row

    def _ensure(self):
        if self.state is None:                                                        # G = 1: no repeat
            self._enter(torch.arange(self.cache.shape[0], device=self.cache.device))

    def keep(self, rows):
        self._ensure()
        self.rows = self.rows[rows]                                                    # (n',)
        smaller = pick_bucket(len(self.rows), self.settings.buckets)
        if self.settings.finished == "drop" and smaller < self.bucket:
            self._compact(smaller)

    def _compact(self, bucket):
        """Move the live rows to bucket rows 0 … n − 1 (their written slots, mask and position)."""
        s, src, w = self.state, self.rows, self.written
        n = len(src)
        s.cache[:n, ..., :w, :] = s.cache[src, ..., :w, :]                             # the index makes a copy first
        s.mask[:n] = s.mask[src]
        s.positions[:n] = s.positions[src]
        self.rows, self.bucket = torch.arange(n, device=src.device), bucket

    def _fill(self, graph, tokens):
        """Each live row's token into its bucket row of the graph's static input (never a new tensor)."""
        graph.refresh("tokens", tokens, rows=self.rows)

    def step(self, tokens):
        """Feed one token per live row, (n,); returns the next logits, (n, V)."""
        self._ensure()
        s = self.state
        graph = s.graph(self.bucket)
        self._fill(graph, tokens)
        s.mask.index_fill_(3, s.slot, 0.0)                                             # every row sees this slot
        logits = graph.replay()                                                        # (b, V), static on CUDA
        s.positions.add_(1)
        s.slot.add_(1)
        self.written += 1
        return logits.index_select(0, self.rows)                                       # (n, V), a copy
