"""Rollouts: sample G completions per prompt, with the log-prob of every sampled token.

This is steps 1–2 of the GRPO algorithm box: for each prompt q in the batch, sample G
completions o_1..o_G from the current policy π_θold. We sample with our own short loop
over the model's KV cache (``past_key_values``) rather than ``model.generate``: the loop
gives us log π_θold(o_t) of each sampled token for free, stops as soon as every sequence
has produced EOS, and has less per-token overhead, which dominates for a tiny model.

Layout: row ``b·G + g`` holds completion g of prompt b, so any per-row quantity reshapes
to (B, G) with ``.view(B, G)``. Shapes: N = B·G rows, P prompt tokens (left-padded),
T completion tokens, V vocabulary.

Masking follows TRL: a completion's mask is 1 up to *and including* its first EOS and 0
after it; a completion that never emits EOS (cut at ``max_new_tokens``) keeps all T tokens.
"""

import inspect
from dataclasses import dataclass

import torch

from grpo_edu.common import _checks


@dataclass
class Rollout:
    """One batch of sampled completions (all tensors on the model's device)."""

    prompts: list
    """The B prompt strings (each appears G times in the rows below)."""
    num_generations: int
    """G: completions per prompt."""
    prompt_ids: torch.Tensor       # (N, P) left-padded
    prompt_mask: torch.Tensor      # (N, P) 1 = real token
    completion_ids: torch.Tensor   # (N, T) pad after the first EOS
    completion_mask: torch.Tensor  # (N, T) 1 up to and including the first EOS
    logprobs: torch.Tensor         # (N, T) log π_θold of each sampled token (at the temperature)
    completions: list
    """The N decoded completions, without special tokens."""
    entropy: torch.Tensor | None = None   # (N, T) H(π(·|q, o_<t)) at each token, 0 after EOS; generate(with_entropy=True)
    tool_mask: torch.Tensor | None = None  # (N, T) 1 on tokens the model wrote, 0 on a tool's reply (TRL); multi_turn
    tool_calls: list | None = None         # N calls per completion (multi_turn.generate_with_tools)
    tool_failures: list | None = None      # N failed calls per completion

    @property
    def input_ids(self):           # (N, P + T)
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self):      # (N, P + T)
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    @property
    def lengths(self):             # (N,) completion lengths in tokens, EOS included
        return self.completion_mask.sum(dim=1)


def _positions(attention_mask):
    """Position ids that skip left padding: 0 at each row's first real token."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def _cache_name(model):
    """The KV-cache keyword: ``cache`` in transformers ≥ 5.2x, ``past_key_values`` before. A ``peft`` wrapper
    passes its keywords on to the model it wraps, so that model's forward decides (the first class of its
    that names one of the two)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    for cls in type(inner).__mro__:                      # a subclass's forward(*args, **kwargs) names neither
        params = inspect.signature(cls.forward).parameters if "forward" in vars(cls) else {}
        if "cache" in params or "past_key_values" in params:
            return "cache" if "cache" in params else "past_key_values"
    return "past_key_values"


def _check_args(prompts, num_generations, max_new_tokens, temperature, tokenizer):
    if isinstance(prompts, str) or not prompts or not all(isinstance(p, str) for p in prompts):
        _checks.fail("prompts", "must be a non-empty list of strings", 'pass e.g. ["12+34="]')
    _checks.positive_int("num_generations", num_generations)
    _checks.positive_int("max_new_tokens", max_new_tokens)
    _checks.positive_float("temperature", temperature, allow_zero=True,
                           fix="pass a sampling temperature ≥ 0 (0 means greedy)")
    if tokenizer.eos_token_id is None:
        _checks.fail("tokenizer", "has no eos_token_id", "set tokenizer.eos_token before sampling")


def context_of(model):
    """How many positions ``model`` has (``max_position_embeddings``; GPT-2's ``n_positions``), or None."""
    config = getattr(model, "config", None)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def check_readable(model, tokenizer, prompts, prompt_ids, prompt_mask, max_new_tokens):
    """Refuse, before any sampling, what ``model`` cannot read: prompts holding the tokenizer's unknown token (the
    model would answer ``<unk><unk>…``), a prompt longer than its context, and a ``max_new_tokens`` that runs
    past the context after the longest prompt (positions the model never learned: GPT-2 has no embedding there,
    and the engine would reserve a KV cache that long). ``prompt_ids``/``prompt_mask``: the prompts tokenized,
    (B, P). The trainer refuses the same prompts when it starts (:func:`check_prompts`)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None:
        unknown = ((prompt_ids == unk) & prompt_mask.bool()).any(1).nonzero().flatten().tolist()   # rows
        if unknown:
            i = unknown[0]
            _checks.fail("prompts", f"{len(unknown)} of {len(prompts)} hold characters the tokenizer cannot encode "
                         f"(they become {tokenizer.unk_token}, so the model cannot see them); first: row {i}, "
                         f"{prompts[i]!r}", "remove or rewrite those prompts, or use a model whose tokenizer knows "
                         "these characters")
    context = context_of(model)
    if not context:
        return
    lengths = prompt_mask.sum(1)                                                   # (B,) tokens per prompt
    i = int(lengths.argmax())
    longest = int(lengths[i])
    if longest >= context:
        _checks.fail("prompts", f"row {i} has {longest} tokens, but the model has {context} positions: no room for "
                     f"an answer ({prompts[i][:40]!r}…)", f"shorten the prompts to fewer than {context} tokens, or "
                     "use a model with a longer context")
    if longest + max_new_tokens > context:
        _checks.fail("max_new_tokens", f"is {max_new_tokens}, but the model has {context} positions and the longest "
                     f"prompt (row {i}) takes {longest} of them", f"pass max_new_tokens ≤ {context - longest}, shorten "
                     "the prompts, or use a model with a longer context")


def check_prompts(tokenizer, prompts, *, max_new_tokens, context=None, where="the prompts"):
    """Refuse prompts the model cannot read, before any sampling: characters the tokenizer
    maps to its unknown token, and prompts that with ``max_new_tokens`` overrun the model's
    ``context`` (its ``max_position_embeddings``). Returns ``info`` (``"tokenized"``: whether the
    full prompts had to be tokenized; cheap bounds settle the usual case).
    """
    prompts = list(prompts)
    unk = getattr(tokenizer, "unk_token_id", None)
    # cheap first: a character unknown on its own is the only way a prompt can hold one
    chars = sorted(set().union(*prompts))
    suspect = unk is not None and unk in tokenizer(" ".join(chars), add_special_tokens=False)["input_ids"]
    # a prompt has at most 2 tokens per UTF-8 byte (byte-level BPE: 1; SentencePiece: + "▁"), plus specials
    bound = 2 * max(len(p.encode("utf-8")) for p in prompts) + 8 if prompts else 0
    if not suspect and (not context or bound + max_new_tokens <= context):
        return {"tokenized": False}
    ids = tokenizer(prompts, add_special_tokens=True)["input_ids"]
    unknown = [i for i, row in enumerate(ids) if unk is not None and unk in row]
    if unknown:
        i = unknown[0]
        _checks.fail("prompts", f"{len(unknown)} of {len(ids)} of {where} hold characters the tokenizer cannot "
                     f"encode (they become {tokenizer.unk_token}, so the model cannot see them); "
                     f"first: row {i}, {prompts[i]!r}",
                     "remove or rewrite those rows, or use a model whose tokenizer knows these characters")
    lengths = [len(row) for row in ids]
    too_long = [i for i, n in enumerate(lengths) if context and n + max_new_tokens > context]
    if too_long:
        i = max(too_long, key=lambda j: lengths[j])
        _checks.fail("prompts", f"{len(too_long)} of {len(ids)} of {where} are too long for the model: with "
                     f"max_completion_length={max_new_tokens} they need more than its {context} positions "
                     f"(longest: row {i}, {lengths[i]} prompt tokens)",
                     "shorten or drop those prompts, lower max_completion_length, or use a model with a longer "
                     "context")
    return {"tokenized": True}


@torch.no_grad()
def generate(model, tokenizer, prompts, *, num_generations=1, max_new_tokens=8, temperature=1.0,
             generator=None, with_entropy=False):
    """Sample ``num_generations`` completions for each prompt; returns a :class:`Rollout`.

    ``temperature=0`` samples greedily (argmax). ``generator`` (a ``torch.Generator`` on the
    model's device) makes the sampling reproducible. ``with_entropy``: also keep, at each
    completion token, the entropy H = −Σ_v π(v) log π(v) of the distribution the loop holds
    there anyway: the sampling one at τ > 0, the policy's own (τ = 1) when greedy. No extra
    forward pass is needed (``Rollout.entropy``).
    """
    _check_args(prompts, num_generations, max_new_tokens, temperature, tokenizer)
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos

    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left")
    check_readable(model, tokenizer, prompts, enc["input_ids"], enc["attention_mask"], max_new_tokens)
    prompt_ids = enc["input_ids"].to(device).repeat_interleave(num_generations, dim=0)     # (N, P)
    prompt_mask = enc["attention_mask"].to(device).repeat_interleave(num_generations, dim=0)
    N = prompt_ids.shape[0]

    tokens, logps, entropies = [], [], []
    finished = torch.zeros(N, dtype=torch.bool, device=device)
    # Without left padding the plain causal mask is exact, and letting the model build it
    # is much cheaper than passing an explicit mask at every decoding step.
    padded = not bool(prompt_mask.all())
    attn = prompt_mask if padded else None
    pos = _positions(prompt_mask) if padded else None
    cache_name = _cache_name(model)
    out = model(input_ids=prompt_ids, attention_mask=attn, position_ids=pos, use_cache=True,
                logits_to_keep=1)
    for t in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()                                   # (N, V)
        if not bool((logits < float("inf")).all()):                             # NaN or +∞ (−∞ is a banned token)
            _checks.fail("model", f"its output holds NaN or ∞ at completion token {t + 1}, so nothing can be sampled: "
                         "its weights are damaged, or the run that made them diverged",
                         "load an earlier checkpoint or the bundled model; when training diverges, lower the "
                         "learning rate (lesson 09)")
        if temperature > 0:
            logp = torch.log_softmax(logits / temperature, dim=-1)              # log π(·|q, o_<t) at τ
            tok = torch.multinomial(logp.exp(), 1, generator=generator)         # (N, 1)
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logits.argmax(dim=-1, keepdim=True)                           # (N, 1)
        tok = tok.masked_fill(finished.unsqueeze(1), pad)                       # nothing after EOS
        if with_entropy:
            entropies.append(-(logp.exp() * logp).sum(-1, keepdim=True))       # (N, 1)
        tokens.append(tok)
        logps.append(logp.gather(1, tok))                                       # (N, 1)
        finished |= tok.squeeze(1) == eos
        if finished.all():
            break
        if padded:
            attn = torch.cat([attn, torch.ones_like(tok)], dim=1)              # attend to the new token
            pos = pos[:, -1:] + 1
        out = model(input_ids=tok, attention_mask=attn, position_ids=pos, use_cache=True,
                    **{cache_name: getattr(out, cache_name)})

    completion_ids = torch.cat(tokens, dim=1)                                   # (N, T)
    is_eos = completion_ids == eos
    # 1 up to and including the first EOS: count EOS strictly before each position
    eos_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    completion_mask = (~eos_before).long()                                      # (N, T)
    logprobs = torch.cat(logps, dim=1) * completion_mask                        # (N, T)
    texts = tokenizer.batch_decode(completion_ids * completion_mask + pad * (1 - completion_mask),
                                   skip_special_tokens=True)
    entropy = torch.cat(entropies, dim=1) * completion_mask if with_entropy else None   # (N, T)
    return Rollout(prompts=list(prompts), num_generations=num_generations, prompt_ids=prompt_ids,
                   prompt_mask=prompt_mask, completion_ids=completion_ids,
                   completion_mask=completion_mask, logprobs=logprobs, completions=texts, entropy=entropy)


def finished(rollout, eos_token_id):
    """(N,) bool: which completions ended with ``<eos>``; the others were cut at ``max_new_tokens`` (truncated)."""
    lengths = rollout.lengths                                                    # (N,)
    last = rollout.completion_ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)   # (N,)
    return (last == eos_token_id) & (lengths > 0)


def token_lists(rollout):
    """Each completion's token ids as a list, up to and including its ``<eos>`` (what the mask covers)."""
    return [ids[:n].tolist() for ids, n in zip(rollout.completion_ids, rollout.lengths.tolist())]


def length_stats(rollout, eos_token_id, correct=None):
    """How long a step's completions are, in tokens with ``<eos>``; TRL's ``completions/*`` names in brackets.

    ``completion_length`` (``mean_length``), ``_min`` and ``_max`` over all N; ``truncated_fraction``
    (``clipped_ratio``): the share cut at ``max_completion_length`` without ``<eos>``;
    ``completion_length_terminated`` (``mean_terminated_length``): the mean over those that ended.
    With ``correct`` (N booleans): ``completion_length_correct`` and ``_wrong``, the means over right
    and wrong answers. A mean over no completions is None (not measured), never 0.
    """
    lengths = rollout.lengths                                                    # (N,)
    ended = finished(rollout, eos_token_id)                                      # (N,)

    def mean(select):
        return float(lengths[select].float().mean()) if bool(select.any()) else None

    stats = {"completion_length": float(lengths.float().mean()), "completion_length_min": int(lengths.min()),
             "completion_length_max": int(lengths.max()), "truncated_fraction": float((~ended).float().mean()),
             "completion_length_terminated": mean(ended)}
    if correct is not None:
        right = torch.tensor(list(correct), dtype=torch.bool, device=lengths.device)    # (N,)
        stats.update(completion_length_correct=mean(right), completion_length_wrong=mean(~right))
    return stats


def completion_logprobs(model, input_ids, attention_mask, num_completion_tokens, *, temperature=1.0,
                        with_entropy=False, entropy_grad=False):
    """log π(o_t | q, o_<t) for the last ``num_completion_tokens`` positions of each row.

    One forward pass over prompt + completion (teacher forcing). Logits are divided by the
    sampling temperature, as TRL does, so that the log-probs match those the sampler used.
    Returns ``(logprobs, entropy)``: (N, T) each; ``entropy`` is None unless ``with_entropy``, and
    has no gradient unless ``entropy_grad`` (an entropy bonus in the loss needs one).
    """
    T = num_completion_tokens
    if bool(attention_mask[:, 0].all()):
        # No left padding: the only zeros in the mask follow an EOS, and under causal
        # attention no earlier token can see them, so the plain causal mask gives the same
        # log-probs for every token that counts, and costs less.
        attention_mask = None
    position_ids = None if attention_mask is None else _positions(attention_mask)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                logits_to_keep=T + 1, use_cache=False)                          # one pass: no KV cache to keep
    logits = out.logits[:, :-1, :]                                              # (N, T, V): predicts tokens P..P+T-1
    return token_logprobs(logits, input_ids[:, -T:], temperature=temperature, with_entropy=with_entropy,
                          entropy_grad=entropy_grad)


def token_logprobs(logits, targets, *, temperature=1.0, with_entropy=False, entropy_grad=False):
    """log π(o_t | q, o_<t) of ``targets`` (N, T) under ``logits`` (N, T, V), at the sampling temperature
    (in float32); ``(logprobs, entropy)``, (N, T) each, ``entropy`` as in :func:`completion_logprobs`."""
    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)                                # (N, T, V)
    logprobs = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)           # (N, T)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp_all.exp() * logp_all).sum(-1)                      # H(π(·|q, o_<t)), (N, T)
    return logprobs, entropy


def answer_token_ids(tokenizer, texts):
    """The tokens of each completion text, ``<eos>`` excluded (one tokenizer call for all): how a
    stored answer is turned back into the tokens the model is scored on."""
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def rollout_from_text(tokenizer, prompts, completions, *, device=None):
    """A :class:`Rollout` of given (prompt, completion text) pairs, each completion ending in ``<eos>``.

    This is how replayed samples are scored: their stored answer is tokenized again and
    ``<eos>`` appended, so a replayed row has exactly the layout of a sampled one (left-padded
    prompt, completion then pad). ``logprobs`` is left at 0: the caller decides what π_θold is.
    One row per pair, so ``num_generations`` is 1.
    """
    if len(prompts) != len(completions) or not prompts:
        _checks.fail("completions", f"has {len(completions)} texts for {len(prompts)} prompts",
                     "pass one completion per prompt, at least one")
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left")
    answers = [ids + [eos] for ids in answer_token_ids(tokenizer, completions)]
    completion_ids, completion_mask = pad_right(answers, pad)                            # (N, T) each
    device = device or completion_ids.device
    return Rollout(prompts=list(prompts), num_generations=1, prompt_ids=enc["input_ids"].to(device),
                   prompt_mask=enc["attention_mask"].to(device), completion_ids=completion_ids.to(device),
                   completion_mask=completion_mask.to(device),
                   logprobs=torch.zeros(completion_ids.shape, device=device), completions=list(completions))


def select_groups(rollout, groups):
    """The rows of the groups ``groups`` (indices into the B prompts), in that order, as a :class:`Rollout`."""
    G = rollout.num_generations
    rows = torch.tensor([b * G + g for b in groups for g in range(G)], dtype=torch.long,
                        device=rollout.completion_ids.device)                   # (len(groups)·G,)
    pick = (lambda t: None if t is None else t[rows])
    return Rollout(prompts=[rollout.prompts[b] for b in groups], num_generations=G,
                   prompt_ids=pick(rollout.prompt_ids), prompt_mask=pick(rollout.prompt_mask),
                   completion_ids=pick(rollout.completion_ids), completion_mask=pick(rollout.completion_mask),
                   logprobs=pick(rollout.logprobs), completions=[rollout.completions[i] for i in rows.tolist()],
                   entropy=pick(rollout.entropy))


def concat_rollouts(first, second, *, pad_token_id):
    """The rows of ``first`` then ``second`` in one :class:`Rollout`: prompts padded on the left and
    completions on the right to the longer of the two. ``num_generations`` is ``first``'s (its
    rows keep the b·G + g layout; ``second``'s rows follow them)."""
    def pad(t, width, value, left):
        extra = width - t.shape[1]
        if extra == 0:
            return t
        fill = torch.full((t.shape[0], extra), value, dtype=t.dtype, device=t.device)
        return torch.cat([fill, t] if left else [t, fill], dim=1)

    P = max(first.prompt_ids.shape[1], second.prompt_ids.shape[1])
    T = max(first.completion_ids.shape[1], second.completion_ids.shape[1])

    def both(name, width, value, left):
        return torch.cat([pad(getattr(r, name), width, value, left) for r in (first, second)], dim=0)

    return Rollout(prompts=first.prompts + second.prompts, num_generations=first.num_generations,
                   prompt_ids=both("prompt_ids", P, pad_token_id, True), prompt_mask=both("prompt_mask", P, 0, True),
                   completion_ids=both("completion_ids", T, pad_token_id, False),
                   completion_mask=both("completion_mask", T, 0, False), logprobs=both("logprobs", T, 0.0, False),
                   completions=first.completions + second.completions)


def pad_right(id_lists, pad_token_id):
    """(ids, mask), (N, L) each: lists of token ids padded on the right with ``pad_token_id``; mask 1 on real tokens."""
    L = max(len(ids) for ids in id_lists)
    ids = torch.full((len(id_lists), L), pad_token_id, dtype=torch.long)                # (N, L)
    mask = torch.zeros((len(id_lists), L), dtype=torch.long)                            # (N, L)
    for i, row in enumerate(id_lists):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return ids, mask
