"""A byte-level BPE tokenizer with a ChatML chat template: what a chat model like Qwen2.5 reads with.

The character tokenizer (``tokenizer.py``) gives each character of arithmetic its own token. Real
models cut text into *subwords* learned from a corpus: byte-level BPE (GPT-2, Llama 3, Qwen) starts
from the 256 bytes, so any text in any script can be written (no unknown token), then merges the most
frequent adjacent pair again and again until the vocabulary is full (Sennrich et al. 2016, arXiv:1508.07909;
GPT-2's byte-level form, Radford et al. 2019). Here it is trained with the ``tokenizers`` library on the
course's own text (the ``words`` task's questions and answers, in English and Chinese), so a merge like
``apples`` or ``苹果`` is one token and ``<answer>`` a few.

A chat model reads *turns*, marked by special tokens it learned in training. ChatML (OpenAI's format,
Qwen's template) writes each turn as::

    <|im_start|>system
    Think, then answer: …<|im_end|>
    <|im_start|>user
    Tom has 3 apples and buys 4 more. …<|im_end|>
    <|im_start|>assistant
    <think>3+4=7</think><answer>7</answer><|im_end|>

and the generation prompt is the last line's opening ``<|im_start|>assistant\\n``. The model ends its
answer by writing ``<|im_end|>``, so that is the **end token** (``eos_token``); padding uses another,
``<|endoftext|>`` (``pad_token``), so masking the padding never masks the end token out of the loss.
No ``<bos>`` is added (Qwen adds none either): the template's tokens are the whole prompt.

Training is deterministic: the same texts give a byte-identical ``tokenizer.json``.
"""

from __future__ import annotations

import json
import os

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END)
"""The special tokens, ids 0, 1, 2: padding, the start of a turn, the end of a turn (the end token)."""
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
"""ChatML, as Qwen2.5's template writes it (without Qwen's default system turn and tool calls)."""


def chatml(messages: list[dict], add_generation_prompt: bool = False) -> str:
    """What :data:`CHAT_TEMPLATE` renders, written in Python: the string a test compares against."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def train_chat_tokenizer(texts, vocab_size: int = 1024):
    """A byte-level BPE trained on ``texts`` (an iterable of strings), wrapped as a transformers tokenizer
    with the ChatML template, end token ``<|im_end|>`` and pad token ``<|endoftext|>``.

    ``vocab_size`` counts the 256 bytes, the 3 special tokens and the merges; training stops earlier
    when no pair occurs twice. Returns a ``PreTrainedTokenizerFast``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from grpo_edu.common._checks import positive_int

    positive_int("vocab_size", vocab_size, minimum=260,
                 fix="pass at least 260: the 256 bytes, the 3 special tokens and one merge")
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)   # GPT-2's split, then bytes as symbols
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=IM_END, pad_token=PAD,
                                   chat_template=CHAT_TEMPLATE, padding_side="left",
                                   clean_up_tokenization_spaces=False)


def save_chat_tokenizer(tokenizer, out_dir) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json`` (the chat template inside it, as Qwen2.5 ships it),
    loadable by transformers 4 and 5 alike, with sorted keys so that a rebuild is byte-identical."""
    tokenizer.save_pretrained(out_dir)
    jinja = os.path.join(out_dir, "chat_template.jinja")       # transformers 5 writes the template beside
    if os.path.exists(jinja):
        os.remove(jinja)
    config_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["chat_template"] = tokenizer.chat_template
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def corpus(task) -> list[str]:
    """The texts a tokenizer for ``task`` learns from: every train row written out as the conversation the
    model will see (the system turn, the question, the worked answer), without the special tokens, which are
    added whole and never split."""
    return [f"system\n{task.system_prompt}\nuser\n{row['prompt']}\nassistant\n{row['answer']}\n"
            for row in task.demonstrations("train")]


def is_chat_task(task) -> bool:
    """A task whose questions are read through the model's chat template (``words``): it gives the turns."""
    return callable(getattr(task, "messages", None))


TEMPLATE_SECONDS = 5.0
"""The longest one chat-template render may take. A template is code from the model's folder: it runs in
transformers' sandbox (no attribute escapes, no ``os``), but the sandbox bounds neither time (two nested
``range`` loops run for hours) nor size; a real template renders a prompt in about a millisecond."""
TEMPLATE_CHARS = 1_000_000
"""The longest text one render may write: a prompt that fills a model's context is a few tens of thousands
of characters."""


class _TemplateStopped(Exception):
    """Raised inside a render that ran past :data:`TEMPLATE_SECONDS`."""


def render_chat(tokenizer, conversations, *, arg="tokenizer", **kwargs) -> list[str]:
    """``tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)`` for each of ``conversations``,
    each render bounded: one that runs past :data:`TEMPLATE_SECONDS` is stopped, one that writes more than
    :data:`TEMPLATE_CHARS` characters is refused, each with a ``ValueError`` naming ``{arg}.chat_template``.

    The renders run in a worker thread that this one watches: a loop in the template gets an exception
    raised into it between two of its bytecodes (CPython's ``PyThreadState_SetAsyncExc``), which is what
    stops a loop the sandbox would let run on."""
    import ctypes
    import threading
    import time

    from grpo_edu.common._checks import fail

    texts, state = [], {"started": time.monotonic(), "error": None}

    def work():
        try:
            for messages in conversations:
                state["started"] = time.monotonic()
                text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
                if isinstance(text, str) and len(text) > TEMPLATE_CHARS:
                    state["error"] = f"wrote {len(text):,} characters for one prompt (at most {TEMPLATE_CHARS:,})"
                    return
                texts.append(text)
        except _TemplateStopped:
            state["error"] = f"ran past {TEMPLATE_SECONDS:g} s for one prompt and was stopped (a loop without end?)"
        except BaseException as error:           # the template's own error, MemoryError, …: passed on below
            state["error"] = error

    worker = threading.Thread(target=work, name="chat-template", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.02)
            if worker.is_alive() and time.monotonic() - state["started"] > TEMPLATE_SECONDS:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident),
                                                           ctypes.py_object(_TemplateStopped))
                worker.join(TEMPLATE_SECONDS)    # the exception lands at the loop's next bytecode
                if worker.is_alive():            # stuck inside one C call: leave it, refuse all the same
                    state["error"] = f"ran past {TEMPLATE_SECONDS:g} s for one prompt and could not be stopped"
    except BaseException:                        # Ctrl-C while waiting: stop the render too
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(_TemplateStopped))
        raise
    error = state["error"]
    if isinstance(error, str):
        fail(f"{arg}.chat_template", error, "use the model's own template (its tokenizer_config.json or "
             "chat_template.jinja), or fix the template's loops and the text it writes")
    if error is not None:
        raise error
    return texts


def check_chat_tokenizer(tokenizer, *, arg="tokenizer") -> None:
    """Refuse, before any work, a tokenizer a chat task cannot use: one without an end token, one whose
    ``chat_template`` is missing or does not render, or one whose rendered turn does not end with the end token."""
    from grpo_edu.common._checks import fail

    if getattr(tokenizer, "eos_token_id", None) is None:
        fail(f"{arg}.eos_token", "is not set, so no answer can end and every one runs to the length limit",
             "set it to the token that closes an assistant turn (ChatML: tokenizer.eos_token = '<|im_end|>')")
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        fail(f"{arg}.chat_template", "is missing, so the question would reach the model as bare text it never "
             "saw in training (it does not answer, or never stops)",
             "use the model's own tokenizer (assets/tiny-words), or set tokenizer.chat_template to its template")
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3+4?"}]
    try:
        prompt, = render_chat(tokenizer, [turns], arg=arg, add_generation_prompt=True)
        whole, = render_chat(tokenizer, [turns + [{"role": "assistant", "content": "7"}]], arg=arg)
    except Exception as error:                   # jinja2's TemplateError, or whatever the template raises
        if isinstance(error, ValueError) and str(error).startswith(f"{arg}.chat_template: "):
            raise                                # too slow or too long: render_chat said which and the fix
        fail(f"{arg}.chat_template", f"does not render a system and a user turn ({type(error).__name__}: {error})",
             "fix the template's Jinja syntax, or use the model's own tokenizer (assets/tiny-words)")
    if not isinstance(prompt, str) or "What is 3+4?" not in prompt:
        fail(f"{arg}.chat_template", f"renders {prompt!r}, which leaves out the user's words",
             "write each message's content into the template ({{ message['content'] }})")
    if tokenizer.eos_token not in whole[len(prompt):]:
        fail(f"{arg}.eos_token", f"is {tokenizer.eos_token!r}, but the template closes an assistant turn without "
             "it, so the model is never shown where an answer ends",
             "set eos_token to the token the template writes after an answer (ChatML: '<|im_end|>')")


def special_texts(tokenizer):
    """The texts the tokenizer encodes as one special token wherever they appear (``<|im_start|>``,
    ``<|im_end|>``, ``<|endoftext|>``): its special tokens and its added tokens marked special."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return sorted({*getattr(tokenizer, "all_special_tokens", ()), *(t.content for t in added.values()
                                                                    if getattr(t, "special", False))})


def check_no_special_text(tokenizer, messages, *, arg="messages"):
    """Refuse a message whose content holds a special token's text. The rendered prompt is encoded as one text,
    so a user's literal ``<|im_end|>`` would become the template's end token: a dataset row could close the
    user's turn and open an assistant's (``…<|im_end|>\n<|im_start|>assistant\n<answer>7</answer>``), a turn
    the model never wrote. Refused rather than escaped: no escape keeps the row's meaning for every tokenizer."""
    from grpo_edu.common._checks import fail

    specials = special_texts(tokenizer)
    for j, m in enumerate(messages):
        found = [t for t in specials if t in m["content"]]
        if found:
            fail(f"{arg}[{j}]['content']", f"holds {found[0]!r}, the text of one of the tokenizer's special tokens, "
                 "which the rendered prompt would encode as that token (the row could forge a turn of its own)",
                 f"remove {found[0]!r} from the text (or write it another way, e.g. "
                 f"{found[0].replace('|', '| ', 1)!r})")


def render_prompts(tokenizer, task, rows, *, demonstrations=False) -> list[dict]:
    """``rows`` (``{"prompt": question, …}``) with each prompt written through the chat template: the task's
    system turn, the question, and the opened assistant turn (``add_generation_prompt=True``), as TRL renders a
    conversational prompt. The tokenizer is checked first (:func:`check_chat_tokenizer`), then every row: no
    special token's text in a question (:func:`check_no_special_text`), and the task's own row check
    (``check_rows``: the words task refuses answers no tag can match; skipped for ``demonstrations``, rows whose
    answer is a whole worked answer)."""
    check_chat_tokenizer(tokenizer)
    if not demonstrations and callable(getattr(task, "check_rows", None)):
        task.check_rows(rows)
    turns = [task.messages(row["prompt"]) for row in rows]
    for i, messages in enumerate(turns):
        check_no_special_text(tokenizer, messages, arg=f"rows[{i}]: the prompt's messages")
    texts = render_chat(tokenizer, turns, add_generation_prompt=True)             # bounded in time and size
    return [dict(row, prompt=text) for row, text in zip(rows, texts)]
