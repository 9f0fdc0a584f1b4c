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
  policy's forward and backward, the optimizer step, and the rest (rewards, advantages, metrics). The
  family's trainers (``training.family``: PPO, REINFORCE, rejection sampling, DPO) are split the same way,
  each by its own update, and PPO's critic is a part of its own (:data:`CRITIC`).
* **Memory** (:func:`memory_parts`): bytes by part: the policy's weights, the reference model, gradients,
  AdamW's moments, the KV cache while sampling, and the activations the backward pass keeps; PPO's critic
  (its weights, gradients and moments) as a part of its own.

The *arithmetic limit* of a step is its FLOPs at this core's matmul throughput (:func:`matmul_flops_per_s`,
measured on a matmul of the training pass's shape): the time a step would take if every FLOP ran at
the speed of one large matmul and nothing else cost anything. grpo_edu's step over it says how far the
step is from its arithmetic: on these tiny models, mostly per-call overhead of many small operations.

Shapes: B prompts, G completions per prompt, N = B·G rows, P prompt tokens, T completion tokens,
L layers, D hidden size, H query heads, K KV heads, d head size, I MLP width, V vocabulary.
"""

import contextlib
import time

import torch

from grpo_edu.common import _checks
from grpo_edu.training.rollouts.passes import layer_weights

PARTS = ("sampling", "reference", "policy", "optimizer", "other")
"""The parts of a step's time, in the order the step runs them (``other``: rewards, advantages, metrics)."""

MEMORY_PARTS = ("weights", "reference", "gradients", "optimizer", "kv_cache", "activations")
"""The parts of a step's memory (bytes), in the order of :func:`memory_parts`."""

CRITIC = "critic"
"""One more part of PPO's step, in its time, FLOPs and memory: its critic V(s_t) (``training.critic``)."""


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
    G = _checks.positive_int("num_generations", num_generations, fix="pass G ≥ 1, the answers sampled per prompt")
    _checks.positive_int("num_iterations", num_iterations)
    prompts, completions = [int(n) for n in prompt_lengths], [int(n) for n in completion_lengths]
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
    """This core's matmul throughput in FLOP/s: the fastest of ``repeats`` calls of (rows, inner) @ (inner, cols),
    2·rows·inner·cols FLOPs each, after two untimed calls (on the torch threads of this process). A roof is the
    best the core does, and other load on the host only ever adds time: a median would move with the load."""
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
    return 2 * rows * inner * cols / min(times)


def training_matmul_shape(config, rows, tokens):
    """The shape of the training pass's biggest matmul: (rows·tokens, D) @ (D, I), the MLP's up projection."""
    s = shape_of(config)
    return rows * tokens, s["D"], s["I"]


# --- time ------------------------------------------------------------------------------------------
def _updates():
    """{a trainer's ``step`` function: the method its step trains the policy with}: the steps timed_step knows.
    A method's own update runs its policy's forward and backward; for DPO it also holds π_ref's forward."""
    from grpo_edu.training.trainers import family
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    return {GRPOTrainer.step: "_update",                                   # grpo, reinforce
            family.PPOTrainer.step: "_update",                             # the policy's part; the critic's below
            family.RejectionSamplingTrainer.step: "_sft_update",
            family.DPOTrainer.step: "_dpo_update"}                         # dpo, dpo_offline


def parts_of(trainer):
    """The parts :func:`timed_step` splits ``trainer``'s step into: :data:`PARTS`, with ``"critic"`` (its value
    model's forward passes, backward and optimizer step) before ``"other"`` for a trainer with a critic (PPO)."""
    return PARTS[:-1] + (CRITIC, PARTS[-1]) if getattr(trainer, "critic", None) is not None else PARTS


class _Clock:
    """Seconds by part, each call counted once: a timed call inside another (the optimizer step inside the
    update, π_ref's forward inside DPO's update) is taken out of the outer part's time."""

    def __init__(self, parts):
        self.spent = dict.fromkeys(parts, 0.0)
        self.open = []                                                     # [start, seconds in calls inside]

    def timed(self, part, function, record=None, during=None):
        def wrapper(*args, **kwargs):
            frame = [time.perf_counter(), 0.0]
            self.open.append(frame)
            try:
                with during() if during else contextlib.nullcontext():
                    out = function(*args, **kwargs)
            finally:
                self.open.pop()
                elapsed = time.perf_counter() - frame[0]
                self.spent[part] += elapsed - frame[1]
                if self.open:
                    self.open[-1][1] += elapsed
            if record:
                record(args, out)
            return out
        return wrapper


def timed_step(trainer):
    """Run ``trainer.step()`` with its parts timed. Returns ``(metrics, seconds, tokens)``.

    ``trainer``: a ``GRPOTrainer`` or any trainer of ``training.family.METHODS`` (PPO, REINFORCE, rejection
    sampling, DPO online and offline); another ``step()`` is refused, since its parts are unknown.
    ``seconds``: {part: seconds} for :func:`parts_of` (``trainer``), each second counted in one part only:
    sampling, π_ref's forward (``reference``), the update's forward and backward (``policy``), the optimizer
    step, PPO's critic, and the rest (rewards, advantages, metrics). ``tokens``: what :func:`step_flops` needs:
    the prompt lengths and completion lengths of every batch sampled (``"sampled"``, a list of (prompt lengths,
    completion lengths)), and of the rows the update passed through the policy (``"trained"``: with replayed
    rows for GRPO, every answer for rejection sampling (its loss masks the wrong ones), the chosen and
    rejected answers for DPO; None when the step was skipped), one entry per row, then the lengths of their
    distinct prompts; for PPO, ``"critic"``: one (real tokens per row, completion tokens, with a gradient) per
    call of the critic. The trainer's methods are wrapped for this one call only.
    """
    update = _updates().get(type(trainer).step)
    if update is None:
        _checks.fail("trainer", f"{type(trainer).__name__}.step() is not a step timed_step knows (GRPOTrainer's "
                     "or a training.family trainer's), so its parts cannot be told apart",
                     "time a GRPOTrainer or a trainer of training.family.METHODS (make_trainer)")
    clock = _Clock(parts_of(trainer))
    tokens = {"sampled": [], "trained": None}

    def lengths(rollout):
        """Real prompt tokens per row, (N,), and completion tokens per row, (N,)."""
        return rollout.prompt_mask.sum(1).tolist(), rollout.completion_mask.sum(1).tolist()

    def trained_lengths(rollout, rows=None):
        """:func:`lengths` of ``rows`` (default all), and the real tokens of each distinct prompt among them
        (the passes read each once)."""
        prompts, completions = lengths(rollout)
        rows = range(len(prompts)) if rows is None else rows
        joined = torch.cat([rollout.prompt_ids, rollout.prompt_mask], 1).tolist()
        distinct = {tuple(joined[i]) for i in rows}
        return [prompts[i] for i in rows], [completions[i] for i in rows], [sum(r[len(r) // 2:]) for r in distinct]

    def record_trained(args, out):
        rollout, *rest = args
        rows = rest[0].reshape(-1).tolist() if update == "_dpo_update" else None   # (P, 2) pairs → 2P rows
        tokens["trained"] = trained_lengths(rollout, rows)

    def reference_inside(owner):
        """π_ref's forward, timed as ``reference`` while DPO's update runs (its log-probs are computed there)."""
        @contextlib.contextmanager
        def during():
            with contextlib.ExitStack() as undo:
                _wrap(undo, owner, "forward", clock.timed("reference", owner.forward))
                yield
        return during

    during = None
    if update == "_dpo_update" and isinstance(trainer.ref_model, torch.nn.Module):
        during = reference_inside(trainer.ref_model)
    wrapped = [(trainer, "_sample", clock.timed("sampling", trainer._sample,
                                                lambda a, out: tokens["sampled"].append(lengths(out)))),
               (trainer, "_ref_logprobs", clock.timed("reference", trainer._ref_logprobs)),
               (trainer, update, clock.timed("policy", getattr(trainer, update), record_trained, during)),
               (trainer.optimizer, "step", clock.timed("optimizer", trainer.optimizer.step))]
    critic = getattr(trainer, "critic", None)
    if critic is not None:                                                 # PPO: V(s_t), its loss, its AdamW step
        tokens[CRITIC] = []

        def record_critic(args, out):
            input_ids, attention_mask, T = args
            tokens[CRITIC].append((attention_mask.sum(1).tolist(), T, torch.is_grad_enabled()))
        wrapped += [(critic, "forward", clock.timed(CRITIC, critic.forward, record_critic)),
                    (trainer, "_update_critic", clock.timed(CRITIC, trainer._update_critic))]
    with contextlib.ExitStack() as undo:
        for owner, name, function in wrapped:
            _wrap(undo, owner, name, function)
        start = time.perf_counter()
        metrics = trainer.step()
        total = time.perf_counter() - start
    spent = clock.spent
    spent["other"] = max(total - sum(v for p, v in spent.items() if p != "other"), 0.0)
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
    """:func:`step_flops` of a step timed by :func:`timed_step` (its ``tokens``), by part: sampling, π_ref's
    forward over the trained rows (when the trainer has π_ref), the policy's forward and backward over them
    ``num_iterations`` times (0 for both when the step was skipped), and for PPO its critic's passes."""
    c = trainer.config
    config = trainer.model.config
    G = c.num_generations
    sampling = sum(step_flops(config, p[::G], t, num_generations=G, reference=False)["sampling"]
                   for p, t in tokens["sampled"])                                      # each prompt read once
    forward = 0
    if tokens["trained"] is not None:                                                  # None: a skipped step
        prompts, completions, distinct = tokens["trained"]                              # per row, replayed ones too
        forward = teacher_forced_flops(config, prompts, completions, distinct_prompt_lengths=distinct)
    flops = {"sampling": sampling, "reference": forward if trainer.ref_model is not None else 0,
             "policy": 3 * forward * c.num_iterations}
    if CRITIC in tokens:
        flops[CRITIC] = sum(critic_flops(config, n, T, backward=grad) for n, T, grad in tokens[CRITIC])
    flops["total"] = sum(flops.values())
    return flops


def critic_flops(config, row_tokens, num_completion_tokens, *, backward=False):
    """FLOPs of one call of PPO's critic (``training.critic.Critic``) on rows of ``row_tokens`` real tokens each:
    the policy's body over every token (no lm_head), then the value head (D → 1, 2·D per position) over the last
    ``num_completion_tokens`` positions; with ``backward``, 3× (the forward and a backward of twice its cost)."""
    s = shape_of(config)
    T = _checks.positive_int("num_completion_tokens", num_completion_tokens, minimum=0)
    forward = sum(forward_flops(config, int(n), logits=0) + 2 * s["D"] * T for n in row_tokens)
    return 3 * forward if backward else forward


# --- memory ----------------------------------------------------------------------------------------
def _bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def activation_bytes(model, rollout, temperature=1.0):
    """Bytes the backward pass of the policy's loss pass would keep (the tensors autograd saves, each
    storage counted once, weights not counted), measured on one forward over ``rollout``'s rows."""
    from grpo_edu.training.rollouts.rollout import completion_logprobs

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
    AdamW's two moments, the sampler's KV cache (N rows × (P + T) positions), and the activations. A trainer
    with a critic (PPO) has one more part, :data:`CRITIC`: the critic's weights, their gradients and its own
    AdamW's moments, a second model's training state (its activations come after the policy's are freed, so
    the policy's are the step's peak)."""
    model = trainer.model
    params = list(model.parameters())
    ref = trainer.ref_model
    ref_params = list(ref.parameters()) if isinstance(ref, torch.nn.Module) else []
    own = {p.data_ptr() for p in params}
    N, T = rollout.completion_ids.shape
    parts = {"weights": _bytes(params),
             "reference": _bytes(p for p in ref_params if p.data_ptr() not in own),
             "gradients": _bytes(p for p in params if p.requires_grad),
             "optimizer": _bytes(_moments(trainer.optimizer)),
             "kv_cache": kv_cache_bytes(model.config, N, rollout.prompt_ids.shape[1] + T),
             "activations": activation_bytes(model, rollout, trainer.config.temperature)}
    critic = getattr(trainer, "critic", None)
    if critic is not None:
        critic_params = list(critic.parameters())
        parts[CRITIC] = (_bytes(critic_params) + _bytes(p for p in critic_params if p.requires_grad)
                         + _bytes(_moments(trainer.critic_optimizer)))
    return parts


def _moments(optimizer):
    """The tensors an optimizer keeps per weight (AdamW: its two moments; its step counters are scalars)."""
    return [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t) and t.dim() > 0]
