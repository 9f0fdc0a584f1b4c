"""Which tokens the loss sees: the assistant's, up to and including its end token.

A sampled answer is ``o_1 … o_|o|`` where ``o_|o|`` is the end token ``<|im_end|>`` when the model stopped
by itself (else it was cut at ``max_completion_length``). GRPO's loss sums over exactly these |o| tokens
(DeepSeekMath eq. 3, the 1/|o_i| Σ_t): the end token is one of the model's decisions, the one that says "stop",
and it must be trained like any other. TRL 1.16 builds the same mask (``_generate_single_turn``: positions
``≤`` the first EOS).

Two ways to get it wrong, both seen in real runs:

* ``pad_token = eos_token`` and a mask built as ``ids != pad_token_id`` (:func:`padding_mask`; transformers'
  ``DataCollatorForLanguageModeling`` and many hand-written loops build it so): every end token is taken for
  padding and leaves the loss, so the end token gets no gradient of its own. (In GRPO the words model still learned
  to stop, through the tokens before the end: lesson 16, case (b). TRL 1.16's trainers set pad = eos themselves
  and are unaffected: their masks come from lengths and positions, not ids.)
* the template's tokens in the loss: the generation prompt ``<|im_start|>assistant\\n`` counted as the model's,
  so the loss pushes tokens the model never chose.

:func:`token_roles` labels each token of a rendered conversation (the template's, the system's, the user's, the
model's, the end token), for the lesson's token-by-token view.
"""

from __future__ import annotations

from grpo_edu.common._checks import fail


def completion_mask(completion_ids, end_token_id):
    """(N, T) 1 on each answer's tokens up to and including its first end token, 0 after it.

    ``completion_ids`` (N, T) as sampled (anything may follow the end: padding, or more samples). Returns
    ``(mask, info)`` with ``info["ended"]`` (N,) bool: which answers wrote the end token (the others were cut
    at T and keep all T tokens) and ``info["lengths"]`` (N,) = |o_i|."""
    import torch

    if not torch.is_tensor(completion_ids) or completion_ids.dim() != 2:
        fail("completion_ids", "must be an (N, T) tensor of token ids", "stack the answers, padded on the right")
    if end_token_id is None:
        fail("end_token_id", "is None, so no answer can end", "pass tokenizer.eos_token_id ('<|im_end|>')")
    is_end = completion_ids == end_token_id                                      # (N, T)
    # count the end tokens strictly before each position: 0 up to and including the first end
    ends_before = is_end.long().cumsum(dim=1) - is_end.long()                    # (N, T)
    mask = (ends_before == 0).long()                                             # (N, T)
    return mask, {"ended": is_end.any(dim=1), "lengths": mask.sum(dim=1)}


def padding_mask(completion_ids, pad_token_id):
    """(N, T) ``ids != pad_token_id``: the mask a collator builds from padding ids (transformers'
    ``DataCollatorForLanguageModeling``: ``labels[labels == pad_token_id] = -100``). WRONG when the tokenizer's pad
    token is its end token (``pad_token = eos_token``, a common one-line "fix" for a tokenizer without a pad
    token): every end token is then masked out and gets no gradient of its own. Kept here to be measured (lesson
    16's clinic); use :func:`completion_mask`."""
    return (completion_ids != pad_token_id).long()


def token_roles(tokenizer, messages, completion_ids=()):
    """Each token of ``messages`` rendered with the generation prompt, then the model's ``completion_ids``, as
    ``(tokens, roles)``: ``roles[k]`` is "template" (a token the template wrote), the message's role ("system",
    "user") for a token of its content, "model" for a sampled token and "end" for the model's end token.

    A token is a message's when its characters lie inside that message's content in the rendered text
    (the fast tokenizer's offsets); byte-level BPE never merges across the template's newlines or special
    tokens, so no token straddles the two."""
    from grpo_edu.training.model.chat_tokenizer import render_chat

    text, = render_chat(tokenizer, [messages], add_generation_prompt=True)      # bounded in time and size
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans, start = [], 0
    for i, m in enumerate(messages):                            # each content's (start, end) in the text
        at = text.find(m["content"], start)
        if at < 0:                                              # the template trimmed or edited it
            fail(f"messages[{i}]['content']", "is not written verbatim by the tokenizer's chat template (it trims "
                 "or edits the content), so its tokens cannot be told from the template's",
                 "pass content as the template writes it (e.g. without leading or trailing spaces)")
        spans.append((at, at + len(m["content"]), m["role"]))
        start = at + len(m["content"])
    roles = []
    for a, b in enc["offset_mapping"]:
        inside = [role for s, e, role in spans if s <= a and b <= e and b > a]
        roles.append(inside[0] if inside else "template")
    ids = list(enc["input_ids"]) + list(completion_ids)
    end = tokenizer.eos_token_id
    roles += ["end" if t == end else "model" for t in completion_ids]
    return [tokenizer.convert_ids_to_tokens(t) for t in ids], roles
