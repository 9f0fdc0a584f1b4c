"""Word problems with a final-number answer: the prompts and rewards of the GPU section.

Grade-school maths data sets (GSM8K and its kind) give a question in words and a reference
answer that ends in one number. A chat model answers in sentences, so its reward needs two
parts, the DeepSeek-R1 recipe in miniature:

* ``final_number_reward``: 1.0 when the *last number* of the answer equals the reference's
  (after "####" when the answer has that marker; commas and a trailing ".0" ignored);
* ``format_reward``: 1.0 when the answer ends with a line ``#### <number>``, the format the
  system prompt asks for, so the number can be found at all.

``chat_prompts`` turns rows into prompts through the tokenizer's chat template, as a chat model
expects. All of this runs on the CPU in the tests, on a tiny model of the same kind.
"""

import re

SYSTEM_PROMPT = "Solve the problem. Think step by step, then give the final answer on its own line as #### <number>."
"""The instruction the format reward checks against."""

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FINAL_LINE = re.compile(r"####\s*(-?\d[\d,]*(?:\.\d+)?)\s*$")


def final_number(text):
    """The answer's number as a canonical string ("1,234.50" → "1234.5"), or None if it has none.

    After a "####" marker the first number there counts; otherwise the last number in the text.
    """
    text = str(text)
    marker = text.rfind("####")
    if marker >= 0 and _NUMBER.search(text[marker:]):
        raw = _NUMBER.search(text[marker:]).group()
    else:
        found = _NUMBER.findall(text)
        if not found:
            return None
        raw = found[-1]
    raw = raw.replace(",", "")
    if "." in raw:
        raw = raw.rstrip("0").rstrip(".")
    return "0" if raw in ("-0", "") else raw


def final_number_reward(prompts, completions, answer, **kwargs):
    """1.0 when the completion's final number equals the reference answer's, else 0.0."""
    return [1.0 if (got := final_number(c)) is not None and got == final_number(a) else 0.0
            for c, a in zip(completions, answer)]


def format_reward(prompts, completions, **kwargs):
    """1.0 when the completion ends with a line "#### <number>", else 0.0. It says nothing about
    whether the number is right: weigh it below ``final_number_reward`` (lesson 07)."""
    return [1.0 if _FINAL_LINE.search(c.strip()) else 0.0 for c in completions]


def chat_prompts(tokenizer, rows, *, system=SYSTEM_PROMPT):
    """Rows {"question", "answer"} → rows {"prompt", "answer"} with the prompt written through the
    tokenizer's chat template (a system turn, the user's question, and the assistant's turn opened)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer: it has no chat_template. Fix: use a chat (instruct) model, or set "
                         "tokenizer.chat_template to the model's template.")
    out = []
    for i, row in enumerate(rows):
        if "question" not in row or "answer" not in row:
            raise ValueError(f"rows: row {i} lacks 'question' or 'answer'. Fix: give every row both.")
        messages = [{"role": "system", "content": system}, {"role": "user", "content": row["question"]}]
        out.append({"prompt": tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                    "answer": str(row["answer"])})
    return out
