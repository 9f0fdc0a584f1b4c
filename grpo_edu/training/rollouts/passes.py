"""Training passes that skip padding: each answer is computed over its own length, not the batch's longest.

A step's rows hold answers of many lengths (lesson 11's: 22 tokens on average, 42 for the longest), but
``rollout.completion_logprobs`` on the whole batch computes every row to the longest prompt plus the
longest answer: on the sums workload about half the reference and policy passes' tokens are padding.
This module does what TRL's ``padding_free`` and verl's ``use_remove_padding`` do, in the plainest way:

1. sort the rows by answer length;
2. cut the sorted rows into groups, each computed by one forward pass trimmed to its own longest prompt
   and answer (a cut costs one more pass, so it is made only where the padding it saves is worth more:
   :func:`length_groups`);
3. put each row's log-probs back in its place, 0 after its answer's end.

And a fourth, where the rows repeat a prompt (GRPO's G answers to one question always do):

4. **share the prompt** (:func:`shared_prompt_logprobs`): read each distinct prompt once, keep its keys and
   values (a KV cache, as when sampling), and run each answer over the cache of its own prompt. The G
   answers then cost their own tokens only: on lesson 11's model a prompt is about a third of a row. The
   engine does the same when it samples (prefill once, then ``repeat(G)``); vLLM calls it prefix caching.
   The gradient of every answer flows back into its prompt's shared keys and values and adds up there, as
   it would over G copies.

Every cut and the shared prompt cost one more forward pass, and on a tiny model a pass's fixed cost (the
framework's calls, the same few dozen per layer whatever the width) is worth many tokens: one cost model
(:func:`pass_cost_tokens`, :func:`passes_cost`) decides both, from the model's shape alone, so the same rows
always take the same passes. On lesson 11's model (answers of 3–42 tokens) the rows are cut and the prompts
shared; on the adder's 4 prompts × 8 answers (7-token prompts, answers of 2–8) one padded pass is cheaper than
either, and at 16 prompts × 8 sharing pays again.

The result has the shape, the row order and (up to float rounding) the numbers of one padded pass, and
the gradient flows through the gathering, so the loss of the trainer's micro-batch is unchanged:
``tests/test_passes.py`` checks the loss and every parameter gradient against the padded pass to 1e-6.
Shapes: N rows, P prompt slots (left-padded), T answer slots, each group g of n_g rows trimmed to
P_g + T_g; U distinct prompts, p the longest prompt's tokens.
"""

import sys

import torch

from grpo_edu.training.rollouts.rollout import _cache_name, _positions, completion_logprobs, token_logprobs

_unshared = set()
"""Model classes whose forward gave no plain key/value cache to share (told once, then computed unshared)."""

PASS_COST_TOKENS = 64
"""What one more forward pass costs on lesson 11's model, counted in its tokens of work: the fixed cost of a
``transformers`` forward (and its backward) on one CPU thread is a few ms, about 64 of its tokens' worth
(a fit of time = a + b · tokens over passes of 8 to 1,792 tokens: a / b = 69 tokens forward, 52 forward and
backward)."""

PASS_COST_LAYER_WEIGHTS = 262_144
"""The weights of one layer of lesson 11's model (D = 128, I = 512), the model :data:`PASS_COST_TOKENS` is
measured on."""


def layer_weights(config):
    """The weights one token meets in one layer's matmuls (q, k, v, o; gate, up, down) of a Llama-style
    ``config``: D·(H + 2K)·d + H·d·D + 3·D·I. None when the config does not name these sizes."""
    try:
        D, H, I = config.hidden_size, config.num_attention_heads, config.intermediate_size
    except AttributeError:
        return None
    K = getattr(config, "num_key_value_heads", None) or H
    d = getattr(config, "head_dim", None) or D // H
    return D * (H + 2 * K) * d + H * d * D + 3 * D * I


def pass_cost_tokens(model):
    """What one more forward pass costs on ``model``, in tokens of its work.

    A pass's fixed cost is per layer (the same calls whatever the layer's width), and a token's work in a layer
    is its weights w, so a pass costs :data:`PASS_COST_TOKENS` × 262,144 / w tokens: 64 on lesson 11's model,
    256 on the adder (w = 65,536, where the same fit gives a / b = 258 forward, 132 forward and backward).
    It depends on the model's shape only, never on a timing, so the same rows always take the same passes
    (and give the same digits). A model whose config names no layer sizes gets :data:`PASS_COST_TOKENS`.
    """
    weights = layer_weights(getattr(_transformers_model(model), "config", None))
    return PASS_COST_TOKENS if not weights else round(PASS_COST_TOKENS * PASS_COST_LAYER_WEIGHTS / weights)


def length_groups(prompt_lengths, answer_lengths, pass_cost=PASS_COST_TOKENS):
    """The rows cut into groups of similar length: a list of row-index lists, shortest answers first.

    The rows are sorted by answer length; a group of n rows costs n · (its longest prompt + its longest
    answer) tokens plus ``pass_cost``. Rows of one answer length always go together, and the cuts between
    the D distinct lengths are chosen by dynamic programming to make the total cost least (D ≤ T + 1, so
    this is at most a few thousand additions).
    """
    order = sorted(range(len(answer_lengths)), key=lambda i: (answer_lengths[i], prompt_lengths[i]))
    runs = []                                            # the sorted rows, one run per answer length
    for i in order:
        if runs and answer_lengths[runs[-1][0]] == answer_lengths[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    # best[j]: the least cost of runs[:j]; start[j]: where the last group of that best split begins
    best, start = [0.0] + [float("inf")] * len(runs), [0] * (len(runs) + 1)
    for j in range(1, len(runs) + 1):
        rows, longest_prompt = 0, 0
        for i in range(j - 1, -1, -1):                   # the last group is runs[i:j]
            rows += len(runs[i])
            longest_prompt = max(longest_prompt, max(prompt_lengths[r] for r in runs[i]))
            cost = best[i] + rows * (longest_prompt + answer_lengths[runs[j - 1][0]]) + pass_cost
            if cost < best[j]:
                best[j], start[j] = cost, i
    groups, j = [], len(runs)
    while j > 0:
        groups.append([r for run in runs[start[j]:j] for r in run])
        j = start[j]
    return groups[::-1]


def passes_cost(groups, prompt_lengths, answer_lengths, pass_cost=PASS_COST_TOKENS):
    """The cost :func:`length_groups` minimises, of these ``groups``: for each, its rows × (its longest prompt
    + its longest answer, at least 1) tokens, plus ``pass_cost`` for its pass."""
    return sum(len(rows) * (max(prompt_lengths[r] for r in rows) + max(1, max(answer_lengths[r] for r in rows)))
               + pass_cost for rows in groups)


def share_pays(prompt_lengths, answer_lengths, distinct_prompts, pass_cost=PASS_COST_TOKENS):
    """Whether reading each of the ``distinct_prompts`` once (one more pass, over their longest prompt but one
    token) and then the answers alone costs less than the rows with their own prompts: both by
    :func:`passes_cost` over the best :func:`length_groups`."""
    unshared = passes_cost(length_groups(prompt_lengths, answer_lengths, pass_cost), prompt_lengths,
                           answer_lengths, pass_cost)
    no_prompts = [0] * len(answer_lengths)
    shared = (pass_cost + distinct_prompts * (max(prompt_lengths) - 1)
              + passes_cost(length_groups(no_prompts, answer_lengths, pass_cost), no_prompts, answer_lengths,
                            pass_cost))
    return shared < unshared


def answer_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature=1.0,
                    with_entropy=False, entropy_grad=False, pass_cost=None, share_prompts=True):
    """``rollout.completion_logprobs`` of these rows, each computed over its own length (and each prompt
    once, by :func:`shared_prompt_logprobs`, when some rows repeat a prompt, ``share_prompts`` and
    :func:`share_pays`). ``pass_cost``: one more pass's cost in tokens (default :func:`pass_cost_tokens`).

    Takes the rows' four tensors (prompts (N, P) left-padded, answers (N, T)) and returns
    ``(logprobs, entropy)``, (N, T) each, 0 after each answer's end (``completion_mask``), in the rows'
    own order; ``entropy`` is None unless ``with_entropy``. Gradients flow as through one padded pass.
    """
    N, T = completion_ids.shape
    P = prompt_ids.shape[1]
    pass_cost = pass_cost_tokens(model) if pass_cost is None else pass_cost
    prompt_lengths, answer_lengths = prompt_mask.sum(1).tolist(), completion_mask.sum(1).tolist()
    if share_prompts and type(model) not in _unshared and not _checkpointing(model):
        distinct = _distinct_prompts(prompt_ids, prompt_mask)
        if distinct < N and share_pays(prompt_lengths, answer_lengths, distinct, pass_cost):
            shared = shared_prompt_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                            temperature=temperature, with_entropy=with_entropy,
                                            entropy_grad=entropy_grad, pass_cost=pass_cost)
            if shared is not None:
                return shared
    logprob_parts, entropy_parts, order = [], [], []
    for rows in length_groups(prompt_lengths, answer_lengths, pass_cost):
        p = max(prompt_lengths[r] for r in rows)          # the group's longest prompt and answer
        t = max(1, max(answer_lengths[r] for r in rows))   # (an empty answer still takes one slot)
        index = torch.tensor(rows, device=prompt_ids.device)
        ids = torch.cat([prompt_ids[index, P - p:], completion_ids[index, :t]], dim=1)        # (n_g, p + t)
        mask = torch.cat([prompt_mask[index, P - p:], completion_mask[index, :t]], dim=1)     # (n_g, p + t)
        logprobs, entropy = completion_logprobs(model, ids, mask, t, temperature=temperature,
                                                with_entropy=with_entropy, entropy_grad=entropy_grad)
        logprob_parts.append(torch.nn.functional.pad(logprobs, (0, T - t)))                 # (n_g, T)
        if with_entropy:
            entropy_parts.append(torch.nn.functional.pad(entropy, (0, T - t)))
        order += rows
    return _in_own_order(logprob_parts, entropy_parts if with_entropy else None, order, completion_mask)


def _in_own_order(logprob_parts, entropy_parts, order, completion_mask):
    """The groups' (n_g, T) rows joined and put back in the rows' own order, 0 after each answer's end:
    ``(logprobs, entropy)``, (N, T) each (``entropy`` None without ``entropy_parts``)."""
    back = torch.argsort(torch.tensor(order, device=completion_mask.device))                 # sorted → own order
    keep = completion_mask.to(logprob_parts[0].dtype)                                        # (N, T)
    logprobs = torch.cat(logprob_parts)[back] * keep
    entropy = torch.cat(entropy_parts)[back] * keep if entropy_parts is not None else None
    return logprobs, entropy


def _distinct_prompts(prompt_ids, prompt_mask):
    """How many distinct prompts the rows hold (fewer than the rows: sharing them saves a forward over their
    tokens)."""
    return len({tuple(r) for r in torch.cat([prompt_ids, prompt_mask], 1).tolist()})


def _transformers_model(model):
    """The ``transformers`` model inside ``model`` (through ``peft``'s wrapper and LoRA's ``AdapterOff``): its
    forward names the cache keyword."""
    while not hasattr(model, "forward") or hasattr(model, "get_base_model"):
        model = model.get_base_model() if hasattr(model, "get_base_model") else model.model
    return model


def _checkpointing(model):
    """Whether ``model`` recomputes its layers in the backward pass (gradient checkpointing): then it keeps no
    KV cache in training, and each row reads its prompt again."""
    inner = _transformers_model(model)
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):    # transformers ≥ 5.2x, before
        if hasattr(type(inner), name):
            return bool(getattr(inner, name)) and inner.training
    return False


def _keys_and_values(cache):
    """Per layer (keys, values), each (U, K, p, d), of a plain ``DynamicCache``; None for any other cache
    (sliding windows, linear attention: their state is not one key and value per position)."""
    if type(cache).__name__ != "DynamicCache":
        return None
    if hasattr(cache, "layers"):                                      # transformers ≥ 4.56
        if not all(type(layer).__name__ == "DynamicLayer" for layer in cache.layers):
            return None
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))              # earlier versions


def shared_prompt_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature=1.0,
                           with_entropy=False, entropy_grad=False, pass_cost=None):
    """:func:`answer_logprobs` with each distinct prompt read once: ``(logprobs, entropy)``, (N, T) each.

    1. one forward over the U distinct prompts but their last token (trimmed to the longest, p − 1 tokens)
       keeps their KV cache;
    2. the answers, grouped by length (:func:`length_groups`, their prompts costing nothing now), each run
       over a cache made of their own prompts' rows, fed the prompt's last token and then answer tokens
       1 … t−1: the t logits predict answer tokens 1 … t. (Feeding the prompt's last token here rather than
       in step 1 keeps every logit in one full pass, so a frozen reference and the policy compute them with
       the same kernels, bit for bit, as one padded pass does.)

    Returns None (and the caller computes unshared) when every prompt is one token, or the model's cache is
    not one key and value per position (said once per model class).
    """
    from transformers import DynamicCache

    pass_cost = pass_cost_tokens(model) if pass_cost is None else pass_cost
    N, T = completion_ids.shape
    P = prompt_ids.shape[1]
    p = int(prompt_mask.sum(1).max())                                        # the longest prompt's tokens
    if p < 2:
        return None                                                          # nothing before the last token
    ids, mask = prompt_ids[:, P - p:], prompt_mask[:, P - p:]                # (N, p) each
    distinct, inverse = torch.unique(torch.cat([ids, mask], 1), dim=0, return_inverse=True)   # (U, 2p), (N,)
    u_ids, u_mask = distinct[:, :p], distinct[:, p:]                         # (U, p) each, left-padded
    padded = not bool(u_mask.all())
    name = _cache_name(_transformers_model(model))
    head_mask = u_mask[:, :-1]                                               # (U, p − 1): all but the last token
    out = model(input_ids=u_ids[:, :-1], attention_mask=head_mask if padded else None,
                position_ids=_positions(head_mask) if padded else None, use_cache=True, logits_to_keep=1)
    kv = _keys_and_values(getattr(out, name, None) or getattr(out, "past_key_values", None))
    if kv is None:
        _unshared.add(type(model))
        print(f"passes: {type(model).__name__}'s cache is not one key and value per position, so each answer "
              "reads its prompt again (correct, only slower)", file=sys.stderr)
        return None
    last = u_mask.sum(1) - 1                                                 # (U,) the prompt's last position
    answer_lengths = completion_mask.sum(1).tolist()
    logprob_parts, entropy_parts, order = [], [], []
    for rows in length_groups([0] * N, answer_lengths, pass_cost):
        t = max(1, max(answer_lengths[r] for r in rows))                     # the group's longest answer
        index = torch.tensor(rows, device=prompt_ids.device)
        mine = inverse[index]                                                # (n_g,) each row's prompt
        cache = DynamicCache()
        for layer, (keys, values) in enumerate(kv):
            cache.update(keys[mine], values[mine], layer)                    # (n_g, K, p − 1, d): its prompts' rows
        fed = torch.cat([u_ids[mine, -1:], completion_ids[index, :t - 1]], 1)          # (n_g, t)
        positions = last[mine, None] + torch.arange(t, device=fed.device)[None]        # (n_g, t)
        attention = (torch.cat([u_mask[mine], completion_mask[index, :t - 1]], 1)     # (n_g, p − 1 + t)
                     if padded else None)
        logits = model(input_ids=fed, attention_mask=attention, position_ids=positions, use_cache=True,
                       **{name: cache}).logits                               # (n_g, t, V): predict tokens 1 … t
        logprobs, entropy = token_logprobs(logits, completion_ids[index, :t], temperature=temperature,
                                           with_entropy=with_entropy, entropy_grad=entropy_grad)  # (n_g, t) each
        logprob_parts.append(torch.nn.functional.pad(logprobs, (0, T - t)))                # (n_g, T)
        if with_entropy:
            entropy_parts.append(torch.nn.functional.pad(entropy, (0, T - t)))
        order += rows
    return _in_own_order(logprob_parts, entropy_parts if with_entropy else None, order, completion_mask)


def rollout_logprobs(model, rollout, rows=slice(None), **kwargs):
    """:func:`answer_logprobs` of a :class:`~grpo_edu.training.rollouts.rollout.Rollout`'s ``rows`` (all by default)."""
    return answer_logprobs(model, rollout.prompt_ids[rows], rollout.prompt_mask[rows], rollout.completion_ids[rows],
                           rollout.completion_mask[rows], **kwargs)
