"""Multi-turn rollouts: the model writes, calls a tool, reads its reply, and writes on.

    prompt      347+85=
    turn 1      [347+85]          the model's tokens (tool mask 1); the row stops at "]"
    tool        =432              the tool's reply, appended as tokens (tool mask 0, no log-prob)
    turn 2      #432<eos>         the model's tokens again, reading the reply

Each turn samples every unfinished row until ``<eos>``, the tool's ``call_end``, or the row's budget
(``max_new_tokens`` counts all completion tokens, the tool's included, like TRL's
``max_completion_length``). A row that stopped at ``call_end`` gets its call run
(:meth:`~grpo_edu.training.rollouts.tools.Tool.run`, contained), the reply's tokens appended, and resumes in the
next turn, up to ``tool.max_calls`` calls; after the last one ``call_end`` is an ordinary token.

Turns are joined **as token ids**, never by decoding the text and encoding it again: a tokenizer is
not a bijection (TRL issue #5224), so re-encoded turns can differ from what was sampled, and the loss
would then score tokens the policy never chose. Here the ids the sampler drew are the ids the loss
sees (``tests/test_tools.py`` checks it). Each turn re-reads its rows' whole prefix once (no KV cache
is kept across turns: simple, and cheap at this size), then decodes with the cache, as
``rollout.generate`` does.

The result is a :class:`~grpo_edu.training.rollouts.rollout.Rollout` with ``tool_mask`` (N, T), and
``tool_calls`` / ``tool_failures`` per row. ``logprobs`` is 0 on the tool's tokens: they were not
sampled from π_θold, and :func:`~grpo_edu.training.rollouts.tools.loss_mask` keeps them out of the loss.
Shapes: N = B·G rows, L a turn's longest prefix, T completion tokens.
"""

import torch

from grpo_edu.training.rollouts.rollout import Rollout, _cache_name, _check_args, _positions, check_readable


def _left_padded(rows, pad, device):
    """Token-id lists → (ids, mask), both (n, L), padded on the left."""
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), pad, dtype=torch.long, device=device)            # (n, L)
    mask = torch.zeros((len(rows), L), dtype=torch.long, device=device)               # (n, L)
    for i, r in enumerate(rows):
        ids[i, L - len(r):] = torch.tensor(r, dtype=torch.long, device=device)
        mask[i, L - len(r):] = 1
    return ids, mask


@torch.no_grad()
def _sample_turn(model, rows, budgets, stop_on_call, *, eos, pad, call_end, temperature, generator):
    """Continue each row (prompt + completion so far, as ids) until ``<eos>``, ``call_end`` (where
    ``stop_on_call``) or its budget of new tokens. Returns each row's new ids and their log-probs (lists)."""
    device = next(model.parameters()).device
    ids, mask = _left_padded(rows, pad, device)                                       # (n, L)
    n = len(rows)
    budgets_t = torch.tensor(budgets, device=device)                                   # (n,)
    may_stop_on_call = torch.tensor(stop_on_call, dtype=torch.bool, device=device)     # (n,)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    pos = _positions(mask)
    cache_name = _cache_name(model)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    new_ids, new_logps = [[] for _ in range(n)], [[] for _ in range(n)]
    for t in range(max(budgets)):
        logits = out.logits[:, -1, :].float()                                          # (n, V)
        if temperature > 0:
            logp = torch.log_softmax(logits / temperature, dim=-1)                     # log π(·|…) at τ
            tok = torch.multinomial(logp.exp(), 1, generator=generator)                # (n, 1)
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logits.argmax(dim=-1, keepdim=True)                                  # (n, 1)
        tok = tok.masked_fill(done.unsqueeze(1), pad)
        chosen = logp.gather(1, tok).squeeze(1)                                        # (n,)
        for i in (~done).nonzero().flatten().tolist():
            new_ids[i].append(int(tok[i]))
            new_logps[i].append(float(chosen[i]))
        flat = tok.squeeze(1)
        done |= (flat == eos) | (may_stop_on_call & (flat == call_end)) | (t + 1 >= budgets_t)
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones_like(tok)], dim=1)                          # attend to the new token
        pos = pos[:, -1:] + 1
        out = model(input_ids=tok, attention_mask=mask, position_ids=pos, use_cache=True,
                    **{cache_name: getattr(out, cache_name)})
    return new_ids, new_logps


def _call_text(tokenizer, completion, start_id):
    """The text of the call that ends ``completion``: the tokens after its last ``call_start``, without
    the ``call_end`` (None when no ``call_start`` opened it: a malformed call)."""
    body = completion[:-1]
    if start_id not in body:
        return None
    start = len(body) - body[::-1].index(start_id)
    return tokenizer.decode(body[start:], skip_special_tokens=False)


@torch.no_grad()
def generate_with_tools(model, tokenizer, prompts, tool, *, num_generations=1, max_new_tokens=16,
                        temperature=1.0, generator=None):
    """Sample ``num_generations`` completions per prompt, running ``tool`` where the model calls it.

    Returns a :class:`Rollout` laid out as ``rollout.generate``'s (row b·G + g, left-padded prompts,
    completion then pad, mask up to and including ``<eos>``) with ``tool_mask``, ``tool_calls`` and
    ``tool_failures``. A tool syntax the tokenizer cannot write is refused before any sampling.
    """
    _check_args(prompts, num_generations, max_new_tokens, temperature, tokenizer)
    syntax = tool.check_tokenizer(tokenizer)
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    check_readable(model, tokenizer, prompts, enc["input_ids"], enc["attention_mask"], max_new_tokens)
    prompt_rows = [ids for ids in tokenizer(list(prompts))["input_ids"] for _ in range(num_generations)]
    N = len(prompt_rows)
    completion = [[] for _ in range(N)]       # every token after the prompt, the model's and the tool's
    logps = [[] for _ in range(N)]            # log π_θold of the model's tokens, 0 on the tool's
    own = [[] for _ in range(N)]              # the tool mask: 1 model, 0 tool
    calls, failures = [0] * N, [0] * N
    active = list(range(N))
    while active:
        new_ids, new_logps = _sample_turn(
            model, [prompt_rows[i] + completion[i] for i in active],
            [max_new_tokens - len(completion[i]) for i in active],
            [calls[i] < tool.max_calls for i in active],
            eos=eos, pad=pad, call_end=syntax["call_end_id"], temperature=temperature, generator=generator)
        resume = []
        for i, ids, lp in zip(active, new_ids, new_logps):
            completion[i] += ids                                                        # joined as ids
            logps[i] += lp
            own[i] += [1] * len(ids)
            room = max_new_tokens - len(completion[i])
            if ids[-1] != syntax["call_end_id"] or calls[i] >= tool.max_calls or room <= 0:
                continue                                                                # <eos>, or out of room
            text = _call_text(tokenizer, completion[i], syntax["call_start_id"])
            calls[i] += 1
            if text is None:                                                            # "]" with no "[" before it
                reply, failed = syntax["error_ids"], True
            else:
                reply, info = tool.run(text, tokenizer)
                failed = info["failed"]
            failures[i] += int(failed)
            reply = reply[:room]                                                        # the budget counts these too
            completion[i] += reply
            logps[i] += [0.0] * len(reply)
            own[i] += [0] * len(reply)
            if len(completion[i]) < max_new_tokens:
                resume.append(i)
        active = resume

    T = max(len(c) for c in completion)
    completion_ids = torch.full((N, T), pad, dtype=torch.long)                          # (N, T)
    completion_mask = torch.zeros((N, T), dtype=torch.long)                             # (N, T)
    tool_mask = torch.ones((N, T), dtype=torch.long)                                    # (N, T) pad: 1, as TRL pads
    logprobs = torch.zeros((N, T))                                                      # (N, T)
    for i in range(N):
        n = len(completion[i])
        completion_ids[i, :n] = torch.tensor(completion[i])
        completion_mask[i, :n] = 1             # every token up to and including <eos>: nothing follows it
        tool_mask[i, :n] = torch.tensor(own[i])
        logprobs[i, :n] = torch.tensor(logps[i])
    prompt_ids, prompt_mask = _left_padded(prompt_rows, pad, device)
    texts = tokenizer.batch_decode([c for c in completion], skip_special_tokens=True)
    return Rollout(prompts=list(prompts), num_generations=num_generations, prompt_ids=prompt_ids,
                   prompt_mask=prompt_mask, completion_ids=completion_ids.to(device),
                   completion_mask=completion_mask.to(device), logprobs=logprobs.to(device), completions=texts,
                   tool_mask=tool_mask.to(device), tool_calls=calls, tool_failures=failures)


def sample_with_tools(model, tokenizer, prompts, tool, *, temperature=1.0, num_samples=1, seed=0,
                      max_new_tokens=16, chunk=256):
    """``num_samples`` completions per prompt with ``tool`` in the loop, prompt-major, ``chunk`` rows at a
    time. Returns ``(texts, stopped, calls, failures)``: lists, one entry per completion (``stopped``:
    it ended with ``<eos>``)."""
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    per_chunk = max(1, chunk // num_samples)
    texts, stopped, calls, failures = [], [], [], []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(prompts), per_chunk):
            out = generate_with_tools(model, tokenizer, list(prompts[start:start + per_chunk]), tool,
                                      num_generations=num_samples, max_new_tokens=max_new_tokens,
                                      temperature=temperature, generator=generator)
            ends = out.completion_ids.gather(1, (out.lengths - 1).unsqueeze(1)).squeeze(1)   # (n,)
            texts += out.completions
            stopped += (ends == tokenizer.eos_token_id).tolist()
            calls += out.tool_calls
            failures += out.tool_failures
    finally:
        model.train(was_training)
    return texts, stopped, calls, failures


def evaluate_with_tools(model, tokenizer, rows, task, tool, **sampling):
    """Accuracy with ``tool`` in the loop, and how the model used it, over ``rows`` × ``num_samples``.

    Returns ``{"accuracy", "call_rate"`` (share of answers with a call), ``"accuracy_with_call"``,
    ``"accuracy_without_call"`` (None when no answer fell on that side), ``"failed_call_rate"`` (share
    of answers with a failed call), ``"samples"`` (prompt, completion, answer, correct, calls)}.
    """
    n = sampling.get("num_samples", 1)
    texts, _, calls, failures = sample_with_tools(model, tokenizer, [r["prompt"] for r in rows], tool, **sampling)
    answers = [rows[i // n]["answer"] for i in range(len(texts))]
    correct = [task.is_correct(t, a) for t, a in zip(texts, answers)]

    def mean(values):
        return sum(values) / len(values) if values else None

    return {"accuracy": mean(correct), "call_rate": mean([c > 0 for c in calls]),
            "accuracy_with_call": mean([ok for ok, c in zip(correct, calls) if c]),
            "accuracy_without_call": mean([ok for ok, c in zip(correct, calls) if not c]),
            "failed_call_rate": mean([f > 0 for f in failures]),
            "samples": [(rows[i // n]["prompt"], t, a, ok, c)
                        for i, (t, a, ok, c) in enumerate(zip(texts, answers, correct, calls))]}
