"""Real text: what stands between a chat model and GRPO (lesson 16).

The bundled arithmetic models read and write single characters. A chat model (Qwen, Llama, the bundled
``tiny-words``) reads a *rendered* conversation: its chat template (对话模板) wraps each message in the
template's own tokens (``<|im_start|>user\\n … <|im_end|>``), and the model must learn to write the end token
(结束符) ``<|im_end|>`` itself, or it never stops. This room holds each piece of that layer, one per module:

``chat``             a conversational prompt (system + user) rendered through the tokenizer's template, as TRL
                     renders it; the rows TRL builds from such prompts; tokenizer and row checks up front
``completion_mask``  which tokens the loss sees: the assistant's, up to and including its end token; which tokens
                     of a rendered conversation are the template's, the user's, the model's
``extraction``       the answer pulled out of free text, in two grades (strict: the tag; lenient: the last number),
                     and what each grade gets wrong
``format_reward``    a reward for the ``<think>…</think><answer>…</answer>`` shape, by a regular expression
``drift``            decode-then-encode drift: text sampled as ids, decoded, encoded again, compared

Imports ``common`` only (and transformers' tokenizers, passed in by the caller).
"""
