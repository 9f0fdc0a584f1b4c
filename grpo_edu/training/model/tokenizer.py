"""A character-level tokenizer: one token per character, so the reader can see every step.

Real LLM tokenizers merge characters into sub-words (``"12"`` may be one token, ``"123"``
two), which hides what the policy is choosing. Here each character is one token, so a
completion of ``"46<eos>"`` is exactly three sampling decisions, and the log-probability
of an answer is the sum of three numbers a learner can print.

The tokenizer is built from the ``tokenizers`` library's parts and wrapped in a standard
``transformers`` fast tokenizer, so a saved directory loads with a plain
``AutoTokenizer.from_pretrained(path)``: no custom code, no ``trust_remote_code``.

Choices a caller depends on:

* ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, then :data:`CHARS` in order;
* ``tokenizer(text)`` puts ``<bos>`` first and nothing at the end: the model is trained
  to *produce* ``<eos>``, so the prompt must not contain it;
  ``tokenizer(text, add_special_tokens=False)`` gives the bare characters;
* padding is on the left, so that in a batch every prompt ends at the same position and
  generation appends new tokens right after each prompt;
* ``decode`` joins characters with nothing in between (``"46"``, not ``"4 6"``).
"""

from __future__ import annotations

import json
import os

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
"""Special tokens, ids 0..3 in this order. ``<unk>`` stands for any character not in CHARS."""

CHARS = "0123456789+-*= "
"""Every ordinary character the tokenizer knows: the digits and the arithmetic signs the
tasks use, plus space (completions may start with one; ``is_correct`` strips it)."""


def build_char_tokenizer(chars=CHARS):
    """A ``PreTrainedTokenizerFast`` over :data:`SPECIAL_TOKENS` then ``chars`` (default :data:`CHARS`;
    the GPU section's tests pass all printable ASCII, for word problems)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if len(set(chars)) != len(chars):
        raise ValueError("chars: a character appears twice. Fix: pass each character once.")
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *chars])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    # "." matches any single character (space included): every character is its own token
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    # WordLevel's default decoding joins tokens with spaces; Fuse joins them with nothing
    core.decoder = decoders.Fuse()
    bos_id = vocab["<bos>"]
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B:1", special_tokens=[("<bos>", bos_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,  # never edit the decoded characters
    )


def save_char_tokenizer(tokenizer, out_dir) -> None:
    """``tokenizer.save_pretrained(out_dir)``, loadable by transformers 4 and 5 alike.

    transformers 5 records its class as ``"TokenizersBackend"``, a name transformers 4
    does not know; ``"PreTrainedTokenizerFast"`` means the same thing to both.
    """
    tokenizer.save_pretrained(out_dir)
    config_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
