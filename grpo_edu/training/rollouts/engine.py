"""A faster sampler (an *engine*) beside the readable loop of ``rollout.generate``: same answers' law, less work.

``rollout.generate`` is the loop a learner reads: every step runs the ``transformers`` forward on
all N rows, finished or not, until the longest answer ends. On lesson 11's model one batch of 32
rows decodes to the 42-token cap because one answer runs that long while the mean is 22 tokens,
and each step pays the library's per-call overhead (cache objects, mask building). Production
samples with an inference engine (vLLM, SGLang) instead. This module does, in about 300 lines,
the three things of theirs that matter at this size:

==============================  ============================================================
here                            what vLLM does
==============================  ============================================================
``_LlamaDecoder`` cache         a preallocated KV cache: each row's keys and values in every
                                layer, written in place, in buffers kept from call to call
                                (vLLM: paged blocks the scheduler hands out, so no row
                                reserves the whole context, in memory taken once at start-up)
``Decoder.keep`` after EOS      continuous batching: a finished sequence leaves the batch at
                                once and its cache slots are freed (vLLM then fills the slot
                                with a waiting request; here nothing waits, so the batch shrinks)
prefill once per prompt, then   parallel sampling (``n`` > 1): the n samples share the
``Decoder.repeat(G)``           prompt's full KV blocks by reference, through the prefix
                                cache (here the prompt is read once and its cache copied
                                to the G rows)
``_LlamaDecoder._layer``        the model's forward without the framework around it: one
                                ``scaled_dot_product_attention`` call per layer (vLLM: fused
                                paged-attention kernels and CUDA graphs)
==============================  ============================================================

The fast path reads the weights of ``transformers.LlamaForCausalLM`` (the bundled models' and
Llama's family: RoPE, RMSNorm, SwiGLU, grouped KV heads) and computes what its forward computes;
``tests/test_engine.py`` checks the log-probs against a teacher-forced forward to 1e-5. It serves only
what it can prove is that forward (:func:`fast_path_refusal`): the class itself, not a subclass, built of
plain Llama modules, with no forward hook anywhere; a ``peft`` LoRA policy too, with its adapters merged
into the weights it reads (W + (α/r)·B·A, as TRL merges before vLLM samples). Any other model decodes
through its own ``transformers`` forward and KV cache, still dropping finished rows, and says why in one
line: slower, never silently wrong.

On a GPU the decode steps can run over a cache that never moves, recorded once in CUDA graphs
(``static_cache.py``, ``cuda_graphs.py``; ``generate(decoding=...)``): off by default, slower on the CPU.

The return value is :class:`~grpo_edu.training.rollouts.rollout.Rollout`, exactly as ``rollout.generate``
makes it (left-padded prompts, pad after the first EOS, the mask up to and including it, log-probs at
the temperature). The answers come from the same distribution but not from the same random numbers:
when rows leave the batch, the next draw of ``torch.multinomial`` lands on other rows, so a seed gives
other answers than the loop's (greedy answers are the same). Shapes: B prompts, G completions per
prompt, N = B·G rows, n of them still decoding, P prompt tokens, S = P + max_new_tokens cache slots,
H query heads, K KV heads, d head size, D hidden size, V vocabulary.
"""

import contextlib
import math
import sys
import threading

import torch
import torch.nn.functional as F

from grpo_edu.common import _checks
from grpo_edu.training.model import lora
from grpo_edu.training.rollouts.rollout import Rollout, _cache_name, _check_args, _positions, check_readable

FAST_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
"""RoPE types whose angles depend on the position only (so one table serves every step); "dynamic"
and "longrope" rescale with the sequence length and take the ``transformers`` path."""

CUDA_ATTENTION_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
"""The attention kernels the fast path may use on CUDA (``torch.nn.attention.SDPBackend`` names), cuDNN's left
out. cuDNN builds an execution plan for each new shape, and a decode step has a new one every time (one more
cache slot, fewer live rows): on an H200 that planning made the engine 4.4 times slower than the loop on the GPU
run's model, and 10 times slower than without cuDNN on the bundled sums model, the GPU idle while the CPU planned. Flash and memory-efficient attention need no plan."""

_BUFFERS = threading.local()
"""The two KV-cache buffers of the last ``generate`` call on the CPU, kept for the next call of the same model
that needs no more rows and slots (vLLM too allocates its cache once, at start-up): on the CPU a fresh buffer
of tens of MB costs more to map than to fill (CUDA's caching allocator reuses its blocks by itself). One pair
per thread, of at most :data:`KEPT_BUFFER_BYTES` each: a larger cache (an evaluation's thousand rows) is made
for its call."""

KEPT_BUFFER_BYTES = 64 * 2**20
"""The largest cache buffer kept between calls (a training step's: lesson 11's 128 rows take 29 MB)."""

DECODING = [None]
"""The decode settings in force when a call passes none (``static_cache.using`` pushes its own; None: this
module's exact-fit cache). They live in ``static_cache.py``, which builds on this module."""

_told = set()
"""Reasons already given in the fallback line (each is printed once per process)."""


ATTENTION_IMPLEMENTATIONS = (None, "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
"""``config._attn_implementation`` values that compute softmax(q·kᵀ/√d + mask)·v as the fast path does; a kernel
registered under another name could compute anything, so such a model takes the ``transformers`` path."""


def _plain_modules():
    """The module classes the fast path computes exactly (its own code reads their weights, not their forward):
    plain Llama's, and ``peft``'s LoRA wrappers around them (merged by ``lora.merged_linear``). A subclass of
    any of them is not one of them: its forward may do something else (a banned token, a changed norm)."""
    from transformers.activations import ACT2FN
    from transformers.models.llama import modeling_llama as llama

    plain = {torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.ParameterDict, torch.nn.Linear, torch.nn.Embedding,
             torch.nn.Identity, torch.nn.Dropout, type(ACT2FN["silu"]), llama.LlamaForCausalLM, llama.LlamaModel,
             llama.LlamaDecoderLayer, llama.LlamaAttention, llama.LlamaMLP, llama.LlamaRMSNorm,
             llama.LlamaRotaryEmbedding}
    with contextlib.suppress(ImportError):
        import peft

        plain |= {peft.PeftModelForCausalLM, peft.tuners.lora.LoraModel, peft.tuners.lora.layer.Linear}
    return plain


def llama_of(model):
    """The ``LlamaForCausalLM`` (or other model) under a ``peft`` wrapper, else ``model`` itself."""
    return model.get_base_model() if lora.is_lora(model) else model


GRADIENT_HOOKS = ("make_inputs_require_grads", "make_inputs_require_grad")
"""Forward hooks that change no value: transformers' ``enable_input_require_grads`` (which gradient checkpointing
calls) and peft's own copies set ``output.requires_grad_(True)`` on the embeddings, so that checkpointed layers
over frozen weights still get gradients. Sampling runs without gradients: the fast path may skip them."""


def _value_hooks(module):
    """The forward hooks and pre-hooks of ``module`` that may change what it computes (all but :data:`GRADIENT_HOOKS`
    from transformers or peft)."""
    hooks = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
    return [hook for hook in hooks if not (getattr(hook, "__name__", "") in GRADIENT_HOOKS
                                           and getattr(hook, "__module__", "").split(".")[0] in ("transformers", "peft"))]


def _changed_module(model):
    """The first module of ``model`` whose forward the fast path would not compute (a short reason), or None:
    a class it does not know (a subclass included), a forward replaced on the instance, a forward hook or
    pre-hook (the fast path calls no module's forward, so a hook would never run), dropout in training mode,
    a LoRA layer that is not W + (α/r)·B·A."""
    from torch.nn.modules import module as torch_module

    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return "a global forward hook is registered (torch.nn.modules.module.register_module_forward_hook)"
    plain = _plain_modules()
    for name, module in model.named_modules():
        where = name or "the model"
        if type(module) not in plain:
            return f"{where} is a {type(module).__name__}, whose own forward the fast path would skip"
        if "forward" in vars(module):
            return f"{where} has its forward replaced on the instance"
        if _value_hooks(module):
            return f"{where} has a forward hook, which the fast path would skip"
        if isinstance(module, torch.nn.Dropout) and module.training and module.p > 0:
            return f"{where} drops out (training mode)"
        if hasattr(module, "base_layer") and lora.merge_refusal(module) is not None:
            return f"{where}: {lora.merge_refusal(module)}"
    return None


def fast_path_refusal(model):
    """Why ``model`` cannot take the fast Llama path (a short reason), or None when it can.

    The fast path computes plain Llama's forward from the weights, so it serves only a model it can prove
    computes exactly that: a ``LlamaForCausalLM`` (not a subclass) made of plain Llama modules with no forward
    hooks, or such a model under ``peft`` LoRA adapters, whose weights it merges (``lora.merged_linear``)."""
    from transformers import LlamaForCausalLM

    if lora.is_lora(model) and getattr(getattr(model, "active_peft_config", None), "peft_type", None) != "LORA":
        return f"its peft adapter is {model.active_peft_config.peft_type}, not LoRA"
    llama = llama_of(model)
    config = llama.config
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if not isinstance(llama, LlamaForCausalLM):
        return f"{type(llama).__name__} is not LlamaForCausalLM"
    if type(llama) is not LlamaForCausalLM:
        return f"{type(llama).__name__} is a subclass of LlamaForCausalLM, whose own code the fast path would skip"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"its hidden_act is {config.hidden_act!r}, not SwiGLU's 'silu'"
    if rope.get("rope_type", "default") not in FAST_ROPE_TYPES:
        return f"its RoPE type {rope.get('rope_type')!r} depends on the sequence length"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "it splits its linear layers (pretraining_tp > 1)"
    if getattr(config, "_attn_implementation", None) not in ATTENTION_IMPLEMENTATIONS:
        return f"its attention implementation {config._attn_implementation!r} is not one the fast path computes"
    if llama.training and getattr(config, "attention_dropout", 0.0) > 0:
        return "its attention drops out (training mode)"
    if not hasattr(llama.model, "rotary_emb") or not all(hasattr(layer.self_attn, "scaling")
                                                         for layer in llama.model.layers):
        return "its transformers version lays Llama out otherwise (no model.rotary_emb or attention scaling)"
    return _changed_module(model)


def _joined(*linears):
    """The weights (and biases, when they have them) of several Linear layers stacked: one matmul for all.
    A LoRA layer gives its merged weight W + (α/r)·B·A (``lora.merged_linear``)."""
    pairs = [lora.merged_linear(lin) for lin in linears]
    weight = torch.cat([w for w, _ in pairs], dim=0)                                   # (Σ out, in)
    bias = None if pairs[0][1] is None else torch.cat([b for _, b in pairs], dim=0)
    return weight, bias


class _Weights:
    """One layer's tensors, read once per ``generate`` call (no module lookups in the decode loop)."""

    def __init__(self, layer):
        attn, mlp = layer.self_attn, layer.mlp
        self.input_norm = layer.input_layernorm.weight                                 # (D,)
        # vLLM's fused projections (QKVParallelLinear, MergedColumnParallelLinear): q, k, v in one matmul,
        # gate and up in another; the same numbers as three and two, in fewer calls
        self.qkv = _joined(attn.q_proj, attn.k_proj, attn.v_proj)                      # ((H + 2K)·d, D)
        self.o = lora.merged_linear(attn.o_proj)                                       # (D, H·d)
        self.post_norm = layer.post_attention_layernorm.weight                         # (D,)
        self.gate_up = _joined(mlp.gate_proj, mlp.up_proj)                             # (2I, D)
        self.down = lora.merged_linear(mlp.down_proj)                                  # (D, I)
        self.scaling = attn.scaling                                                    # 1/√d


def rms_norm(x, weight, eps):
    """RMSNorm: x / √(mean(x²) + ε) · w, in float32 as ``LlamaRMSNorm`` computes it."""
    x32 = x if x.dtype == torch.float32 else x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (x32 if x.dtype == torch.float32 else x32.to(x.dtype))


def attention_kernels(device):
    """On CUDA, SDPA restricted to :data:`CUDA_ATTENTION_BACKENDS`; elsewhere nothing changes."""
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, name) for name in CUDA_ATTENTION_BACKENDS])


class _LlamaDecoder:
    """Llama's forward over a preallocated KV cache, with the model's own weights and nothing around them.

    One decoder lives for one ``generate`` call. Its state: the cache (one tensor, (n, layers, 2, K, S, d):
    each row's keys and values in every layer), which cache slots each row may attend to (``visible``, (n, S):
    left padding is hidden), each row's next RoPE position (``position``, (n,)) and how many slots are written.
    The row comes first so that the live rows are the first n of a buffer: ``keep`` gathers their written
    slots into the other of two buffers (:func:`_buffers`), so no step allocates a cache.
    """

    def __init__(self, model, max_new_tokens):
        model = llama_of(model)                                                        # under peft: its Llama
        config = model.config
        self.model, self.max_new = model, max_new_tokens
        self.heads = config.num_attention_heads                                        # H
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads      # K (GQA when K < H)
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads   # d
        self.eps = config.rms_norm_eps
        self.weights = [_Weights(layer) for layer in model.model.layers]
        self.embed = model.model.embed_tokens.weight                                   # (V, D)
        self.final_norm = model.model.norm.weight                                      # (D,)
        self.lm_head = lora.merged_linear(model.lm_head)                               # (V, D)

    # --- the pieces of one layer -------------------------------------------------------------
    def _rms_norm(self, x, weight):
        return rms_norm(x, weight, self.eps)

    @staticmethod
    def _rope(x, cos, sin):
        """Rotate each (x₁, x₂) half-pair by its position's angle: x·cos + rotate_half(x)·sin."""
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)                  # (n, heads, q, d)
        return x * cos + rotated * sin

    def _layer(self, i, w, h, cos, sin, mask, start):
        """Layer ``i`` (weights ``w``) on ``h`` (n, q, D), whose q tokens go to cache slots start … start+q−1."""
        n, q, _ = h.shape
        H, K, d = self.heads, self.kv_heads, self.head_dim
        x = self._rms_norm(h, w.input_norm)                                            # (n, q, D)
        qkv = F.linear(x, *w.qkv).view(n, q, H + 2 * K, d)                             # (n, q, H + 2K, d)
        # RoPE is elementwise, so queries and keys turn in one call (the same numbers as two)
        turned = self._rope(qkv[:, :, :H + K].transpose(1, 2), cos, sin)              # (n, H + K, q, d)
        queries, keys = turned[:, :H], turned[:, H:]                                   # (n, H, q, d), (n, K, q, d)
        values = qkv[:, :, H + K:].transpose(1, 2)                                     # (n, K, q, d)
        end = start + q
        cache_k, cache_v = self.cache[:, i, 0], self.cache[:, i, 1]                    # (n, K, S, d) each
        cache_k[:, :, start:end] = keys                                                # write in place
        cache_v[:, :, start:end] = values
        # softmax(q·kᵀ/√d + mask)·v over every written slot; GQA: each KV head serves H/K query heads
        out = F.scaled_dot_product_attention(queries, cache_k[:, :, :end], cache_v[:, :, :end], attn_mask=mask,
                                             is_causal=mask is None and q > 1, scale=w.scaling,
                                             enable_gqa=K != H)                        # (n, H, q, d)
        h = h + F.linear(out.transpose(1, 2).reshape(n, q, H * d), *w.o)              # (n, q, D)
        # SwiGLU: down(silu(gate(x)) ⊙ up(x))
        gate, up = F.linear(self._rms_norm(h, w.post_norm), *w.gate_up).chunk(2, dim=-1)   # (n, q, I) each
        return h + F.linear(F.silu(gate) * up, *w.down)                                # (n, q, D)

    def _forward(self, ids, positions, mask, start):
        """Logits of each row's last token, (n, V), after writing ``ids`` (n, q) to the cache.

        ``mask`` is additive (0 where a query may look, −∞ where not), made once for all layers:
        ``scaled_dot_product_attention`` would turn a boolean mask into this in every call."""
        h = F.embedding(ids, self.embed)                                               # (n, q, D)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)  # (n, 1, q, d)
        with self._attention_kernels():
            for i, w in enumerate(self.weights):
                h = self._layer(i, w, h, cos, sin, mask, start)
        return F.linear(self._rms_norm(h[:, -1], self.final_norm), *self.lm_head)      # (n, V)

    def _attention_kernels(self):
        return attention_kernels(self.embed.device)

    def _additive(self, allowed):
        """A boolean mask as SDPA's additive one, in the cache's dtype: 0 where True, −∞ where False."""
        return torch.zeros(allowed.shape, dtype=self.cache.dtype, device=allowed.device).masked_fill_(
            ~allowed, float("-inf"))

    # --- the decoder's interface (shared with _TransformersDecoder) --------------------------
    def prefill(self, prompt_ids, prompt_mask):
        """Read the B prompts (B, P), left-padded; returns the logits of each one's next token, (B, V)."""
        B, P = prompt_ids.shape
        S = P + self.max_new                                                           # cache slots
        device = self.embed.device
        # RoPE's cos and sin for every position once, from the model's own rotary module
        h0 = torch.zeros(1, 1, dtype=self.embed.dtype, device=device)
        cos, sin = self.model.model.rotary_emb(h0, torch.arange(S, device=device)[None])
        self.cos, self.sin = cos[0], sin[0]                                            # (S, d) each
        # under autocast (bf16 sampling) the keys come out in the autocast dtype: the cache holds that
        kind = device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else self.embed.dtype
        # a slot is read only after it is written (attention reads slots < start + q): no zeros needed
        self.buffers = _buffers(B, (len(self.weights), 2, self.kv_heads, S, self.head_dim), dtype, device)
        self.cache = self.buffers[1][:B]                                               # (B, layers, 2, K, S, d)
        self.padded = not bool(prompt_mask.all())
        self.visible = torch.ones(B, S, dtype=torch.bool, device=device)               # (B, S)
        self.visible[:, :P] = prompt_mask.bool()
        self.position = prompt_mask.sum(1)                                             # (B,) next token's position
        self.written = P
        mask = None                                                                    # plain causal: is_causal
        if self.padded:
            causal = torch.ones(P, P, dtype=torch.bool, device=device).tril()          # (P, P)
            # a pad query sees itself, so no softmax row is empty (an empty one is NaN, and NaN · 0 is NaN)
            mask = (causal & self.visible[:, None, :P]) | torch.eye(P, dtype=torch.bool, device=device)
            mask = self._additive(mask.unsqueeze(1))                                   # (B, 1, P, P)
        return self._forward(prompt_ids, _positions(prompt_mask), mask, start=0)

    def repeat(self, G):
        """Copy each row's cache G times, consecutively: rows b·G … b·G + G − 1 share prompt b."""
        B, device = self.cache.shape[0], self.cache.device
        self.buffers = _buffers(B * G, self.cache.shape[1:], self.cache.dtype, device)
        self.cache = self._gather(torch.arange(B, device=device).repeat_interleave(G), self.buffers[0])
        self.visible = self.visible.repeat_interleave(G, 0)                            # (N, S)
        self.position = self.position.repeat_interleave(G, 0)                          # (N,)

    def keep(self, rows):
        """Keep only ``rows`` (indices into the live rows): the others' cache rows are freed."""
        spare = self.buffers[1] if self.cache.data_ptr() == self.buffers[0].data_ptr() else self.buffers[0]
        self.cache = self._gather(rows, spare)                                         # (n', layers, 2, K, S, d)
        self.visible = self.visible[rows]                                              # (n', S)
        self.position = self.position[rows]                                            # (n',)

    def _gather(self, rows, buffer):
        """Cache rows ``rows`` (their written slots) copied into the first len(rows) rows of ``buffer``."""
        target = buffer[:len(rows)]                                                    # (n', layers, 2, K, S, d)
        torch.index_select(self.cache[..., :self.written, :], 0, rows, out=target[..., :self.written, :])
        return target

    def step(self, tokens):
        """Feed one token per live row, (n,); returns the next logits, (n, V)."""
        start = self.written
        mask = self._additive(self.visible[:, None, None, :start + 1]) if self.padded else None   # (n, 1, 1, slots)
        logits = self._forward(tokens[:, None], self.position[:, None], mask, start)   # (n, V)
        self.written += 1
        self.position = self.position + 1
        return logits


def _buffers(rows, row_shape, dtype, device):
    """Two cache buffers with at least ``rows`` rows of ``row_shape`` (layers, 2, K, S, d) and at least S slots:
    on the CPU the last call's when they are large enough (see :data:`_BUFFERS`), else new ones."""
    shape = (rows, *row_shape)
    if torch.device(device).type != "cpu" or math.prod(shape) * dtype.itemsize > KEPT_BUFFER_BYTES:
        return [torch.empty(shape, dtype=dtype, device=device) for _ in range(2)]   # CUDA reuses its blocks
    pair = getattr(_BUFFERS, "pair", None)
    have = pair[0].shape if pair is not None else None                              # (R, layers, 2, K, S, d)
    fits = (have is not None and pair[0].dtype == dtype and have[1:4] == shape[1:4] and have[5] == shape[5]
            and have[0] >= rows and have[4] >= shape[4])                            # rows and slots enough
    if not fits:
        _BUFFERS.pair = None                                                         # free the old pair first
        _BUFFERS.pair = [torch.empty(shape, dtype=dtype, device=device) for _ in range(2)]
    return _BUFFERS.pair


class _TransformersDecoder:
    """Any causal LM through its own ``transformers`` forward and KV cache, finished rows dropped."""

    def __init__(self, model, max_new_tokens):
        self.model, self.cache_name = model, _cache_name(model)

    def prefill(self, prompt_ids, prompt_mask):
        self.padded = not bool(prompt_mask.all())
        self.mask = prompt_mask if self.padded else None                               # (B, P)
        self.position = _positions(prompt_mask)[:, -1:] if self.padded else None       # (B, 1)
        out = self.model(input_ids=prompt_ids, attention_mask=self.mask,
                         position_ids=_positions(prompt_mask) if self.padded else None, use_cache=True,
                         logits_to_keep=1)
        self.cache = getattr(out, self.cache_name)
        for method in ("batch_repeat_interleave", "batch_select_indices"):
            if not hasattr(self.cache, method):
                _checks.fail("model", f"its KV cache ({type(self.cache).__name__}) cannot select rows, so the engine "
                             "cannot drop finished answers", "sample with the loop: GRPOConfig(sampler='loop')")
        return out.logits[:, -1]                                                       # (B, V)

    def repeat(self, G):
        self.cache.batch_repeat_interleave(G)
        if self.padded:
            self.mask = self.mask.repeat_interleave(G, 0)                              # (N, slots)
            self.position = self.position.repeat_interleave(G, 0)                      # (N, 1)

    def keep(self, rows):
        self.cache.batch_select_indices(rows)
        if self.padded:
            self.mask, self.position = self.mask[rows], self.position[rows]            # (n', slots), (n', 1)

    def step(self, tokens):
        if self.padded:
            self.mask = torch.cat([self.mask, torch.ones_like(tokens[:, None])], dim=1)   # (n, slots + 1)
            self.position = self.position + 1
        out = self.model(input_ids=tokens[:, None], attention_mask=self.mask, position_ids=self.position,
                         use_cache=True, **{self.cache_name: self.cache})
        self.cache = getattr(out, self.cache_name)
        return out.logits[:, -1]                                                       # (n, V)


def decoder_for(model, max_new_tokens, decoding=None):
    """The fast Llama decoder when ``model`` is a Llama, else its own forward (and one line saying so).
    ``decoding`` (``static_cache.DecodeSettings``) with ``static_cache=True`` puts the Llama decoder's steps on a
    static cache, in CUDA graphs when asked (``static_cache.py``, ``cuda_graphs.py``)."""
    refusal = fast_path_refusal(model)
    if refusal is None and decoding is not None and decoding.static_cache:
        return decoding.decoder(model, max_new_tokens)                                 # static_cache.StaticDecoder
    if refusal is None:
        return _LlamaDecoder(model, max_new_tokens)
    if refusal not in _told:
        _told.add(refusal)
        print(f"engine: {refusal}, so it samples through the transformers forward (finished rows still leave "
              "the batch; correct, only slower)", file=sys.stderr)
    return _TransformersDecoder(model, max_new_tokens)


def _check_logits(logits, t):
    if not bool((logits < float("inf")).all()):                                        # NaN or +∞
        _checks.fail("model", f"its output holds NaN or ∞ at completion token {t + 1}, so nothing can be sampled: "
                     "its weights are damaged, or the run that made them diverged",
                     "load an earlier checkpoint or the bundled model; when training diverges, lower the "
                     "learning rate (lesson 09)")


@torch.no_grad()
def generate(model, tokenizer, prompts, *, num_generations=1, max_new_tokens=8, temperature=1.0,
             generator=None, with_entropy=False, decoding=None):
    """``rollout.generate``'s answers, from the same distribution, by the engine; returns a :class:`Rollout`.

    Same arguments and the same return value (see ``rollout.generate``); only the random numbers go
    elsewhere, since finished rows leave the batch (greedy decoding, ``temperature=0``, gives the loop's
    answers token for token). ``decoding``: a ``static_cache.DecodeSettings`` (the static cache, CUDA graphs,
    buckets); None takes the one ``static_cache.using`` set, else the engine's own exact-fit cache.
    """
    _check_args(prompts, num_generations, max_new_tokens, temperature, tokenizer)
    decoding = DECODING[-1] if decoding is None else decoding
    if decoding is not None and not callable(getattr(decoding, "decoder", None)):
        _checks.fail("decoding", f"{type(decoding).__name__} is not a DecodeSettings",
                     "pass grpo_edu.training.rollouts.static_cache.DecodeSettings(...) or None")
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    G = num_generations

    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left")
    check_readable(model, tokenizer, prompts, enc["input_ids"], enc["attention_mask"], max_new_tokens)  # before the cache
    unique_ids, unique_mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)   # (B, P)
    decoder = decoder_for(model, max_new_tokens, decoding)
    logits = decoder.prefill(unique_ids, unique_mask)                                  # (B, V): each prompt once
    if G > 1:
        decoder.repeat(G)
        logits = logits.repeat_interleave(G, 0)                                        # (N, V)
    N = unique_ids.shape[0] * G

    tokens = torch.full((N, max_new_tokens), pad, dtype=torch.long, device=device)    # (N, max_new), pad after EOS
    logps = torch.zeros(N, max_new_tokens, device=device)                              # (N, max_new)
    entropies = torch.zeros(N, max_new_tokens, device=device) if with_entropy else None
    live = torch.arange(N, device=device)                                              # (n,) which row each live one is
    for t in range(max_new_tokens):
        logits = logits.float()                                                        # (n, V)
        _check_logits(logits, t)
        if temperature > 0:
            logp = torch.log_softmax(logits / temperature, dim=-1)                     # log π(·|q, o_<t) at τ
            tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)     # (n,)
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logits.argmax(dim=-1)                                                # (n,)
        tokens[live, t] = tok
        logps[live, t] = logp.gather(1, tok[:, None]).squeeze(1)
        if with_entropy:
            entropies[live, t] = -(logp.exp() * logp).sum(-1)                         # H(π(·|q, o_<t))
        going = tok != eos                                                             # (n,)
        if not bool(going.any()) or t == max_new_tokens - 1:
            break
        if not bool(going.all()):                                                      # continuous batching:
            stay = going.nonzero().squeeze(1)                                          # finished rows leave
            live, tok = live[stay], tok[stay]
            decoder.keep(stay)
        logits = decoder.step(tok)                                                     # (n, V)

    T = t + 1
    completion_ids = tokens[:, :T]                                                     # (N, T)
    is_eos = completion_ids == eos
    completion_mask = ((is_eos.cumsum(dim=1) - is_eos.long()) == 0).long()            # 1 up to and including EOS
    texts = tokenizer.batch_decode(completion_ids * completion_mask + pad * (1 - completion_mask),
                                   skip_special_tokens=True)
    return Rollout(prompts=list(prompts), num_generations=G, prompt_ids=unique_ids.repeat_interleave(G, 0),
                   prompt_mask=unique_mask.repeat_interleave(G, 0), completion_ids=completion_ids,
                   completion_mask=completion_mask, logprobs=logps[:, :T] * completion_mask, completions=texts,
                   entropy=entropies[:, :T] * completion_mask if with_entropy else None)
