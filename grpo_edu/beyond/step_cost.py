"""What one GRPO step costs: its arithmetic, where its time goes, and where its memory goes.

Three questions, one function each (lesson 14 and ``grpo-edu bench`` ask them):

* **Arithmetic** (:func:`step_flops`): the floating-point operations the step's tokens need, from the
  model's config and the lengths actually sampled. A Llama layer's matmuls cost 2 FLOPs per weight per
  token (one multiply, one add), so a forward pass is about 2·(weights) per token plus attention,
  which grows with the context (q·kᵀ and the weighted sum of v: 2·2·H·d per position seen). A backward
  pass costs about twice its forward (a gradient for the input and one for the weights), so training
  is about 6·(weights) per token (Kaplan et al. 2020, "Scaling laws", table 1). Norms, RoPE, softmax and
  the optimizer's element-wise update are left out: they are a few FLOPs per number, not per weight.
* **Time** (:func:`timed_step`): ``GRPOTrainer.step()`` split into sampling, the reference pass, the
  policy's forward and backward, the optimizer step, and the rest (rewards, advantages, metrics).
* **Memory** (:func:`memory_parts`): bytes by part: the policy's weights, the reference model, gradients,
  AdamW's moments, the KV cache while sampling, and the activations the backward pass keeps.

The *arithmetic limit* of a step is its FLOPs at this core's matmul throughput (:func:`matmul_flops_per_s`,
measured on a matmul of the training pass's shape): the time a step would take if every FLOP ran at
the speed of one large matmul and nothing else cost anything. grpo_edu's step over it says how far the
step is from its arithmetic: on these tiny models, mostly per-call overhead of many small operations.

Shapes: B prompts, G completions per prompt, N = B·G rows, P prompt tokens, T completion tokens,
L layers, D hidden size, H query heads, K KV heads, d head size, I MLP width, V vocabulary.
"""

import contextlib
import statistics
import time

import torch

from grpo_edu.common import _checks
from grpo_edu.training.passes import layer_weights

PARTS = ("sampling", "reference", "policy", "optimizer", "other")
"""The parts of a step's time, in the order the step runs them (``other``: rewards, advantages, metrics)."""

MEMORY_PARTS = ("weights", "reference", "gradients", "optimizer", "kv_cache", "activations")
"""The parts of a step's memory (bytes), in the order of :func:`memory_parts`."""


def shape_of(config):
    """The numbers a Llama-style config's FLOPs depend on: {L, D, H, K, d, I, V}."""
    heads = config.num_attention_heads
    return {"L": config.num_hidden_layers, "D": config.hidden_size, "H": heads,
            "K": getattr(config, "num_key_value_heads", None) or heads,
            "d": getattr(config, "head_dim", None) or config.hidden_size // heads,
            "I": config.intermediate_size, "V": config.vocab_size}


def layer_weight_flops(config):
    """FLOPs of one token through one layer's matmuls: 2 per weight (q, k, v, o; gate, up, down:
    ``training.passes.layer_weights``)."""
    return 2 * layer_weights(config)


def forward_flops(config, tokens, *, context=0, logits=None):
    """FLOPs of a forward pass over ``tokens`` new tokens of one row that already has ``context`` tokens
    before them (in a KV cache, or earlier in the same pass), computing ``logits`` of them (default all).

    The token at position p (from 1) attends over p positions: 2·2·H·d·p FLOPs per layer for q·kᵀ and
    the weighted sum of v; Σ p over the new tokens is a difference of triangular numbers.
    """
    for name, value in (("tokens", tokens), ("context", context)):
        _checks.positive_int(name, value, minimum=0)
    logits = tokens if logits is None else logits
    if not 0 <= logits <= tokens:
        _checks.fail("logits", f"is {logits}, but only {tokens} tokens are computed", "pass 0 … tokens")
    s = shape_of(config)
    end = context + tokens
    positions_seen = end * (end + 1) // 2 - context * (context + 1) // 2               # Σ p for p = context+1 … end
    layers = s["L"] * (tokens * layer_weight_flops(config) + 4 * s["H"] * s["d"] * positions_seen)
    return layers + logits * 2 * s["D"] * s["V"]                                        # + lm_head


def step_flops(config, prompt_lengths, completion_lengths, *, num_generations, reference=True, num_iterations=1,
               shared_prompts=True):
    """FLOPs of one GRPO step by part, for prompts of ``prompt_lengths`` (B, real tokens, no padding) and the
    completions sampled from them, ``completion_lengths`` (N = B·G, up to and including ``<eos>``).

    * sampling: each prompt read once (its last logits give the first token), then each row feeds its
      tokens but the last one by one over its KV cache: the engine's work, with nothing padded;
    * reference: the same tokens, teacher-forced: each prompt read once and shared by its G answers
      (``training.passes.shared_prompt_logprobs``), each answer over its prompt's cache, so exactly the
      sampling FLOPs (``shared_prompts=False``: every row reads its prompt again, as a plain pass does).
      This is the least arithmetic the tokens need; the passes share the prompt only where that also saves
      time (``training.passes.share_pays``: on the adder one plain pass is quicker); the count is this
      least arithmetic either way;
    * policy: the same forward plus its backward (2× the forward), ``num_iterations`` times.
    Returns {"sampling", "reference", "policy", "total"} in FLOPs.
    """
    prompts, completions = [int(n) for n in prompt_lengths], [int(n) for n in completion_lengths]
    G = num_generations
    if len(completions) != len(prompts) * G:
        _checks.fail("completion_lengths", f"holds {len(completions)} rows, but {len(prompts)} prompts × G = {G} "
                     f"make {len(prompts) * G}", "pass one length per completion, G per prompt, in prompt order")
    rows = [(prompts[i // G], t) for i, t in enumerate(completions)]
    sampling = sum(forward_flops(config, p, logits=1) for p in prompts)
    sampling += sum(forward_flops(config, max(t - 1, 0), context=p) for p, t in rows)
    teacher_forced = teacher_forced_flops(config, [p for p, _ in rows], completions,
                                          distinct_prompt_lengths=prompts if shared_prompts else None)
    flops = {"sampling": sampling, "reference": teacher_forced if reference else 0,
             "policy": 3 * teacher_forced * num_iterations}
    flops["total"] = sum(flops.values())
    return flops


def teacher_forced_flops(config, prompt_lengths, completion_lengths, *, distinct_prompt_lengths=None):
    """FLOPs of one teacher-forced forward over rows of ``prompt_lengths`` and ``completion_lengths`` (one each
    per row), with logits for the answers' tokens only.

    With ``distinct_prompt_lengths`` (the least arithmetic: a prompt shared among the rows that repeat it,
    as the trainer's passes do where that pays): each distinct prompt read once, the logits of its last token
    giving the first answer token, then each row's answer tokens but the last over its prompt's cache.
    Without: each row reads its own prompt and answer in one pass.
    """
    rows = list(zip([int(n) for n in prompt_lengths], [int(n) for n in completion_lengths]))
    if distinct_prompt_lengths is None:
        return sum(forward_flops(config, p + t, logits=t) for p, t in rows)
    return (sum(forward_flops(config, int(p), logits=1) for p in distinct_prompt_lengths)
            + sum(forward_flops(config, max(t - 1, 0), context=p) for p, t in rows))


def matmul_flops_per_s(rows, inner, cols, *, repeats=20, dtype=torch.float32):
    """This core's matmul throughput in FLOP/s: the median over ``repeats`` of (rows, inner) @ (inner, cols),
    2·rows·inner·cols FLOPs each, after two untimed calls (on the torch threads of this process)."""
    for name, value in (("rows", rows), ("inner", inner), ("cols", cols), ("repeats", repeats)):
        _checks.positive_int(name, value)
    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, cols, dtype=dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * rows * inner * cols / statistics.median(times)


def training_matmul_shape(config, rows, tokens):
    """The shape of the training pass's biggest matmul: (rows·tokens, D) @ (D, I), the MLP's up projection."""
    s = shape_of(config)
    return rows * tokens, s["D"], s["I"]


# --- time ------------------------------------------------------------------------------------------
def timed_step(trainer):
    """Run ``trainer.step()`` with its parts timed. Returns ``(metrics, seconds, tokens)``.

    ``seconds``: {part: seconds} for :data:`PARTS`; the policy part is the update's time less the optimizer
    step's. ``tokens``: what :func:`step_flops` needs: the prompt lengths and completion lengths of every
    batch sampled (``"sampled"``, a list of (prompt lengths, completion lengths)), and of the rows trained
    on (``"trained"``, with replayed rows), one entry per row, then the lengths of their distinct prompts. The trainer's methods are wrapped for this one call only.
    """
    spent = dict.fromkeys(PARTS, 0.0)
    tokens = {"sampled": [], "trained": None}

    def timed(part, function, record=None):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                out = function(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start
            if record:
                record(args, out)
            return out
        return wrapper

    def lengths(rollout):
        """Real prompt tokens per row, (N,), and completion tokens per row, (N,)."""
        return rollout.prompt_mask.sum(1).tolist(), rollout.completion_mask.sum(1).tolist()

    def trained_lengths(rollout):
        """:func:`lengths`, and the real tokens of each distinct prompt (the passes read each once)."""
        distinct = {tuple(r) for r in torch.cat([rollout.prompt_ids, rollout.prompt_mask], 1).tolist()}
        return (*lengths(rollout), [sum(r[len(r) // 2:]) for r in distinct])

    wrapped = {"_sample": timed("sampling", trainer._sample, lambda a, out: tokens["sampled"].append(lengths(out))),
               "_ref_logprobs": timed("reference", trainer._ref_logprobs),
               "_update": timed("policy", trainer._update,
                                lambda a, out: tokens.__setitem__("trained", trained_lengths(a[0])))}
    with contextlib.ExitStack() as undo:
        for name, function in wrapped.items():
            _wrap(undo, trainer, name, function)
        _wrap(undo, trainer.optimizer, "step", timed("optimizer", trainer.optimizer.step))
        start = time.perf_counter()
        metrics = trainer.step()
        total = time.perf_counter() - start
    spent["policy"] -= spent["optimizer"]                                             # the update holds the steps
    spent["other"] = max(total - sum(spent[p] for p in PARTS[:-1]), 0.0)
    return metrics, spent, tokens


def _wrap(undo, owner, name, function):
    """Set ``owner.name = function`` until ``undo`` closes; then what was there before (a wrapper of someone
    else's, or the class's own method) is back."""
    own = vars(owner)
    if name in own:
        undo.callback(setattr, owner, name, own[name])
    else:
        undo.callback(delattr, owner, name)
    setattr(owner, name, function)


def flops_of_step(trainer, tokens):
    """:func:`step_flops` of a step timed by :func:`timed_step` (its ``tokens``), by part."""
    c = trainer.config
    config = trainer.model.config
    G = c.num_generations
    sampling = sum(step_flops(config, p[::G], t, num_generations=G, reference=False)["sampling"]
                   for p, t in tokens["sampled"])                                      # each prompt read once
    prompts, completions, distinct = tokens["trained"]                                  # per row, replayed ones too
    forward = teacher_forced_flops(config, prompts, completions, distinct_prompt_lengths=distinct)
    flops = {"sampling": sampling, "reference": forward if trainer.ref_model is not None else 0,
             "policy": 3 * forward * c.num_iterations}
    flops["total"] = sum(flops.values())
    return flops


# --- memory ----------------------------------------------------------------------------------------
def _bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def activation_bytes(model, rollout, temperature=1.0):
    """Bytes the backward pass of the policy's loss pass would keep (the tensors autograd saves, each
    storage counted once, weights not counted), measured on one forward over ``rollout``'s rows."""
    from grpo_edu.training.rollout import completion_logprobs

    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logprobs, _ = completion_logprobs(model, rollout.input_ids, rollout.attention_mask,
                                          rollout.completion_ids.shape[1], temperature=temperature)
    del logprobs
    return sum(seen.values())


def kv_cache_bytes(config, rows, positions, dtype=torch.float32):
    """Bytes of a KV cache for ``rows`` sequences of ``positions`` tokens: 2 (K, V) × L × rows × K × positions × d."""
    s = shape_of(config)
    return 2 * s["L"] * rows * s["K"] * positions * s["d"] * torch.finfo(dtype).bits // 8


def memory_parts(trainer, rollout):
    """Bytes by :data:`MEMORY_PARTS` of ``trainer``'s step on ``rollout`` (a rollout it sampled), after at least
    one step (so AdamW's moments exist): weights and gradients of the policy (gradients of the trainable
    weights only), the reference model (0 without one, or when it is the policy with its adapter off),
    AdamW's two moments, the sampler's KV cache (N rows × (P + T) positions), and the activations."""
    model = trainer.model
    params = list(model.parameters())
    ref = trainer.ref_model
    ref_params = list(ref.parameters()) if isinstance(ref, torch.nn.Module) else []
    own = {p.data_ptr() for p in params}
    moments = [t for state in trainer.optimizer.state.values() for t in state.values()
               if torch.is_tensor(t) and t.dim() > 0]
    N, T = rollout.completion_ids.shape
    return {"weights": _bytes(params),
            "reference": _bytes(p for p in ref_params if p.data_ptr() not in own),
            "gradients": _bytes(p for p in params if p.requires_grad),
            "optimizer": _bytes(moments),
            "kv_cache": kv_cache_bytes(model.config, N, rollout.prompt_ids.shape[1] + T),
            "activations": activation_bytes(model, rollout, trainer.config.temperature)}
