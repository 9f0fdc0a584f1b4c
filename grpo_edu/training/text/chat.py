"""A conversational prompt rendered through the tokenizer's chat template, as TRL renders it.

A chat dataset row holds messages, not text: ``{"prompt": [{"role": "system", …}, {"role": "user", …}]}``
(TRL calls this the *conversational* form, ``trl.data_utils.is_conversational``). The trainer renders it with
``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``: each message wrapped in the template's
tokens, then the assistant's turn opened (``<|im_start|>assistant\\n``) so that the model's first token is its
answer's first token. TRL 1.16 does exactly this in ``GRPOTrainer._tokenize_prompts``; :func:`render_prompt`
returns the same ids (``tests/test_text.py`` proves it against TRL's own method).

Passing the prompt as a plain string skips all of it: the model sees a question it was never trained to
answer in that form, no assistant turn is opened, and it rarely writes ``<|im_end|>`` (the words model: 17 % of
its answers end, against 72 % through the template; lesson 16's clinic, case "no chat template"). The rule is to
render prompts as the model was trained: through its template for a chat model; for a base model, the plain
format its pretraining or warm-up used.

Refused before any work, each naming the field and the fix (:func:`check_chat_tokenizer`,
:func:`check_conversational_rows`): a tokenizer without an end token, a template that does not render, a
template whose assistant turn does not close with the tokenizer's end token, and a dataset row without the
fields a conversational prompt needs.
"""

from __future__ import annotations

from grpo_edu.common._checks import fail

ROLES = ("system", "user", "assistant")
"""The roles a message may have here (tool messages belong to lesson 15's rollouts)."""


def conversation(question, *, system=None):
    """The messages of one prompt: an optional system turn, then the user's question."""
    if not isinstance(question, str) or not question:
        fail("question", f"must be a non-empty string, got {question!r}", "pass the question's text")
    head = [{"role": "system", "content": system}] if system else []
    return head + [{"role": "user", "content": question}]


def conversational_rows(rows, *, system=None):
    """Rows ``{"question", "answer", …}`` → the rows TRL's GRPOTrainer takes: ``{"prompt": [messages],
    "answer": str, …}`` (the other columns kept: TRL hands them to the reward functions by name)."""
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "question" not in row or "answer" not in row:
            fail(f"rows[{i}]", "lacks 'question' or 'answer'", "give every row both, e.g. "
                 '{"question": "Tom has 3 apples…", "answer": "7"}')
        if row["answer"] is None or (isinstance(row["answer"], str) and not row["answer"].strip()):
            fail(f"rows[{i}]['answer']", f"is {row['answer']!r}, which would be kept as the text {str(row['answer'])!r}",
                 'give every row its reference answer, e.g. "7"')
        rest = {k: v for k, v in row.items() if k != "question"}
        out.append({**rest, "prompt": conversation(row["question"], system=system), "answer": str(row["answer"])})
    return out


def check_conversational_rows(rows):
    """Refuse rows a conversational prompt cannot be built from, naming the row and the field."""
    if not isinstance(rows, (list, tuple)) or not rows:
        fail("rows", "must be a non-empty list of dicts", 'pass e.g. [{"prompt": [{"role": "user", "content": "…"}]}]')
    for i, row in enumerate(rows):
        messages = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(messages, list) or not messages:
            fail(f"rows[{i}]['prompt']", f"must be a non-empty list of messages, got {messages!r}",
                 'write the prompt as [{"role": "system", "content": …}, {"role": "user", "content": …}] '
                 "(conversational_rows builds it from a question)")
        for j, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                fail(f"rows[{i}]['prompt'][{j}]", "lacks 'role' or 'content'",
                     'give every message both, e.g. {"role": "user", "content": "…"}')
            if m["role"] not in ROLES:
                fail(f"rows[{i}]['prompt'][{j}]['role']", f"is {m['role']!r}", f"use one of {ROLES}")
            if not isinstance(m["content"], str):
                fail(f"rows[{i}]['prompt'][{j}]['content']", "must be a string", "pass the message's text")
        if messages[-1]["role"] != "user":
            fail(f"rows[{i}]['prompt']", f"ends with a {messages[-1]['role']!r} message",
                 "end the prompt with the user's message; the generation prompt opens the assistant's turn")


def check_chat_tokenizer(tokenizer):
    """Refuse a tokenizer a chat GRPO run cannot use (no end token, no template, a template that does not render,
    or one that does not close the assistant's turn with the end token): ``model/chat_tokenizer``'s check, which
    the trainer runs for the words task. Returns the end token's id."""
    from grpo_edu.training.model.chat_tokenizer import check_chat_tokenizer as check

    check(tokenizer)
    return tokenizer.eos_token_id


def render_prompt(tokenizer, messages):
    """One prompt's ids as the trainer feeds them to the model, and the rendered text.

    The text is the template applied with ``add_generation_prompt=True``; the ids are that text encoded
    without the tokenizer's own special tokens (the template writes every special token it wants), which is
    what ``apply_chat_template(…, tokenize=True)`` does and so what TRL 1.16 builds. Returns ``(ids, info)``
    with ``info["text"]``."""
    from grpo_edu.training.model.chat_tokenizer import check_no_special_text, render_chat

    check_conversational_rows([{"prompt": messages}])
    check_no_special_text(tokenizer, messages)
    text, = render_chat(tokenizer, [messages], add_generation_prompt=True)      # bounded in time and size
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids, {"text": text}


def rendered_rows(tokenizer, rows):
    """Conversational rows → the rows grpo_edu's trainer samples from: the prompt rendered to text (the
    trainer encodes it), every other column kept. The tokenizer and rows are checked first."""
    from grpo_edu.training.model.chat_tokenizer import check_no_special_text

    check_chat_tokenizer(tokenizer)
    check_conversational_rows(rows)
    for i, row in enumerate(rows):
        check_no_special_text(tokenizer, row["prompt"], arg=f"rows[{i}]['prompt']")
    if tokenizer("x")["input_ids"] != tokenizer("x", add_special_tokens=False)["input_ids"]:
        fail("tokenizer", "adds special tokens of its own to every text (a <bos>?), so the rendered prompt "
             "would be encoded with tokens the template did not write", "use a tokenizer whose "
             "post-processor adds nothing (the template writes the special tokens), as Qwen's does")
    return [{**row, "prompt": render_prompt(tokenizer, row["prompt"])[1]["text"]} for row in rows]


def trl_completions(texts):
    """The completions TRL 1.16 hands reward functions when the prompts are conversational: each decoded answer
    as one assistant message, ``[{"role": "assistant", "content": text}]``."""
    return [[{"role": "assistant", "content": t}] for t in texts]


def completion_text(completion):
    """A completion's text in either form a reward function may get: a string (grpo_edu, TRL with plain prompts)
    or TRL's list of one assistant message (conversational prompts)."""
    if isinstance(completion, list):
        if not completion or not isinstance(completion[-1], dict) or not isinstance(completion[-1].get("content"), str):
            fail("completion", f"is {completion!r}, not a list ending with an assistant message (TRL's form)",
                 'pass [{"role": "assistant", "content": "…"}], or the text itself')
        return completion[-1]["content"]
    return completion
