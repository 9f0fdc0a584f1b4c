"""Decode-then-encode drift: ids sampled, decoded to text, encoded again, and compared.

The sampler chooses token ids; a reward, a replay buffer or a second trainer often keeps only the *text*.
Encoding that text again need not give the same ids: a byte-level BPE encodes each string one canonical way
(``" 12"`` may be one token), while the model may have sampled a non-canonical split (``" 1"``, ``"2"``), or
bytes that only decode to text together. The log-probs are then computed for tokens the model never sampled:
the ratio π_θ/π_θold is wrong, and for a non-canonical split it is of a different sequence altogether (TRL
#5224). The cure is to keep the sampled ids and score those, never to re-encode the text.
"""

from __future__ import annotations

from grpo_edu.common._checks import fail


def retokenize(tokenizer, ids):
    """``ids`` → text → ids: decoded with special tokens kept (so ``<|im_end|>`` survives), encoded without the
    tokenizer's own additions."""
    text = tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def drift(tokenizer, samples):
    """How many sampled id lists come back different after decode-then-encode. ``samples``: lists of ids
    (each answer's own tokens, its end token included, no padding). Returns ``(share, info)`` with
    ``info["changed"]`` (their indices), ``info["examples"]`` (up to 3: sampled → re-encoded, as tokens),
    ``info["token_share"]`` (the share of sampled tokens at a position where the two lists disagree), and the
    changed answers split by cause: ``info["broken_bytes"]``, those whose decoded text holds U+FFFD (bytes that
    are no UTF-8 character: the text itself changed), and ``info["non_canonical"]``, the others (the same text,
    split into other tokens than the tokenizer would: TRL #5224's case)."""
    changed, examples, differing, total, broken = [], [], 0, 0, []
    vocabulary = len(tokenizer)
    for i, ids in enumerate(samples):
        ids = list(ids)
        outside = [t for t in ids if isinstance(t, bool) or not hasattr(t, "__index__") or not 0 <= int(t) < vocabulary]
        if outside:                                   # decoded to nothing, they would count as drift
            fail(f"samples[{i}]", f"holds {outside[0]!r}, not a token id of this tokenizer (0 to {vocabulary - 1})",
                 "pass the ids the model sampled with this tokenizer (rollout.completion_ids, without padding)")
        ids = [int(t) for t in ids]
        again = retokenize(tokenizer, ids)
        total += len(ids)
        if again != ids:
            changed.append(i)
            if "\ufffd" in tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
                broken.append(i)
            same = sum(a == b for a, b in zip(ids, again))
            differing += len(ids) - same
            if len(examples) < 3:
                examples.append((tokenizer.convert_ids_to_tokens(ids), tokenizer.convert_ids_to_tokens(again)))
    return len(changed) / max(len(samples), 1), {"changed": changed, "examples": examples,
                                                  "token_share": differing / max(total, 1), "broken_bytes": broken,
                                                  "non_canonical": [i for i in changed if i not in set(broken)]}
