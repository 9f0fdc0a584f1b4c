"""Tools a policy may call in the middle of its answer: the call syntax, a calculator, and containment.

A model calls a tool by writing its syntax, e.g. ``[12+345]``: ``call_start``, the call's text, then
``call_end``. The sampler (:mod:`grpo_edu.training.multi_turn`) stops the row there, hands the text to
the tool, appends the tool's reply (``=357``) as tokens the *environment* wrote, and lets the model
write on. Those reply tokens are not the policy's: their tool mask is 0 (TRL's convention: 1 on tokens
the model wrote, 0 on the tool's), and :func:`loss_mask` keeps them out of the ratio, the KL and the
entropy, as TRL's ``completion_mask * tool_mask`` does.

A tool is plain Python, and whatever it does wrong is *contained*: it raises, returns something that
is not a string, returns characters the tokenizer cannot encode, runs past ``timeout_s``, or returns
more than ``max_result_tokens`` tokens. Then the row gets ``error_text`` instead, the call counts as a
failure (TRL's ``tools/failure_frequency``), the run goes on, and the first such case is reported once
with the tool's name. A *malformed call* (the model wrote ``[12+]``) is the model's mistake, not the
tool's: it gets ``error_text`` and counts as a failure too, without a warning. Nothing here uses
``eval`` or a shell: :func:`calculator` is a small parser.

Standard library only at import (torch is imported where a mask is built).
"""

from __future__ import annotations

import re
import threading
import warnings
from dataclasses import dataclass, field

from grpo_edu.common import _checks


class ToolCallError(ValueError):
    """The call's text does not follow the tool's syntax: the model's mistake, counted as a failure."""


_NUMBER = re.compile(r"\d{1,12}")
_CALL = re.compile(r"^\d{1,12}(?:[+\-*]\d{1,12}){0,7}$")
"""What :func:`calculator` reads: up to 8 whole numbers of at most 12 digits, joined by ``+``, ``-`` or ``*``."""


def calculator(expression: str) -> str:
    """``"12+345"`` → ``"=357"``: whole numbers joined by ``+``, ``-``, ``*`` (``*`` first, as in school).

    A parser, not ``eval``: the text must match :data:`_CALL` (digits and three signs, nothing else),
    else :class:`ToolCallError`. The reply starts with ``=`` so the transcript reads ``[12+345]=357``.
    """
    if not isinstance(expression, str) or not _CALL.match(expression):
        raise ToolCallError(f"not a sum of whole numbers: {expression!r}")
    total, sign, product = 0, 1, None
    for token in re.findall(r"\d+|[+\-*]", expression):
        if token.isdigit():
            product = int(token) if product is None else product * int(token)
        elif token == "*":
            continue                                   # the next number multiplies the running product
        else:                                          # + or −: the product so far is one term
            total, sign, product = total + sign * product, (1 if token == "+" else -1), None
    return f"={total + sign * product}"


@dataclass
class Tool:
    """One tool and its call syntax (TRL: a function in ``tools=[…]``; here the syntax is ours, not a chat template's).

    ``function`` takes the call's text and returns the reply text. The defaults make the calculator
    of lesson 15: ``[12+345]`` → ``=357``.
    """

    function: object = calculator
    """str → str: the tool. Called with the text between ``call_start`` and ``call_end``."""
    name: str = ""
    """How reports name it (default: the function's ``__name__``)."""
    call_start: str = "["
    """The one token that opens a call."""
    call_end: str = "]"
    """The one token that closes a call: the sampler stops a row there and runs the tool."""
    error_text: str = "=?"
    """What a failed call gets back instead of a reply (must tokenize, like any reply)."""
    max_calls: int = 2
    """Calls per completion; the ``call_end`` after the last one is an ordinary token (TRL:
    ``max_tool_calling_iterations``)."""
    timeout_s: float = 1.0
    """Seconds one call may take; a call still running then is abandoned and counts as a failure."""
    max_result_tokens: int = 16
    """The longest reply kept, in tokens; a longer one is replaced by ``error_text``."""
    reply_in_loss: bool = False
    """Lesson 15's ablation, never a setting to train with: True leaves the reply's tokens in the loss
    (the tool mask is ignored), so the policy is pushed to write the tool's answers itself."""
    reported: set = field(default_factory=set, repr=False, compare=False)
    """The tools whose first failure has been reported (once per ``Tool`` object)."""

    def __post_init__(self):
        if not callable(self.function):
            _checks.fail("function", f"{self.function!r} is not callable", "pass a function str → str, e.g. calculator")
        self.name = self.name or getattr(self.function, "__name__", "tool")
        for arg in ("call_start", "call_end", "error_text"):
            if not isinstance(getattr(self, arg), str) or not getattr(self, arg):
                _checks.fail(arg, f"must be a non-empty string, got {getattr(self, arg)!r}", "pass e.g. '[' and ']'")
        if self.call_start == self.call_end:
            _checks.fail("call_end", f"is the same as call_start ({self.call_end!r}), so a call could not be "
                         "told from its end", "pass two different tokens, e.g. '[' and ']'")
        _checks.positive_int("max_calls", self.max_calls,
                             fix="allow at least 1 call per completion (TRL: max_tool_calling_iterations ≥ 1), "
                                 "or train without a tool")
        _checks.positive_float("timeout_s", self.timeout_s, fix="pass a time limit in seconds > 0, e.g. 1.0")
        _checks.positive_int("max_result_tokens", self.max_result_tokens)

    def check_tokenizer(self, tokenizer):
        """Refuse, before any sampling, a syntax this tokenizer cannot write: ``call_start`` and ``call_end``
        must each be one known token, and ``error_text`` must encode without ``<unk>``. Returns
        ``{"call_start_id", "call_end_id", "error_ids"}``."""
        ids = {}
        for arg in ("call_start", "call_end"):
            tokens = tokenizer(getattr(self, arg), add_special_tokens=False)["input_ids"]
            if len(tokens) != 1 or tokens[0] == getattr(tokenizer, "unk_token_id", None):
                _checks.fail(arg, f"{getattr(self, arg)!r} is {len(tokens)} tokens"
                             + (" (unknown to the tokenizer)" if tokenizer.unk_token_id in tokens else "")
                             + ", but the model must write it as one token and the sampler stops on it",
                             "pick a character the tokenizer knows as one token, or build the model's tokenizer "
                             "with it (make_model.task_chars)")
            ids[f"{arg}_id"] = tokens[0]
        error_ids = tokenizer(self.error_text, add_special_tokens=False)["input_ids"]
        if getattr(tokenizer, "unk_token_id", None) in error_ids or not error_ids:
            _checks.fail("error_text", f"{self.error_text!r} holds characters the tokenizer cannot encode",
                         "pass an error reply made of characters the model's tokenizer knows")
        if len(error_ids) > self.max_result_tokens:
            _checks.fail("error_text", f"is {len(error_ids)} tokens, more than max_result_tokens = "
                         f"{self.max_result_tokens}", "shorten it or raise max_result_tokens")
        ids["error_ids"] = error_ids
        return ids

    def run(self, call_text, tokenizer):
        """Run one call, contained. Returns ``(reply_ids, info)``: the reply's token ids (``error_text``'s
        on any failure) and ``{"failed": bool, "problem": str | None}``."""
        value, problem = _call_with_timeout(self.function, call_text, self.timeout_s)
        malformed = isinstance(problem, ToolCallError)
        if problem is None:
            if not isinstance(value, str):
                problem = f"returned a {type(value).__name__}, not a string"
            else:
                ids = tokenizer(value, add_special_tokens=False)["input_ids"]
                if getattr(tokenizer, "unk_token_id", None) in ids or (value and not ids):
                    problem = f"returned {value[:40]!r}, which the tokenizer cannot encode"
                elif set(ids) & set(tokenizer.all_special_ids):          # e.g. "<eos>": the tool cannot end a row
                    problem = f"returned {value[:40]!r}, which holds special tokens"
                elif len(ids) > self.max_result_tokens:
                    problem = f"returned {len(ids)} tokens, more than max_result_tokens = {self.max_result_tokens}"
                else:
                    return ids, {"failed": False, "problem": None}
        elif not malformed:
            problem = f"raised {type(problem).__name__}: {problem}" if not isinstance(problem, str) else problem
        if not malformed and self.name not in self.reported:
            self.reported.add(self.name)
            warnings.warn(f"tool {self.name!r} {problem} on the call {call_text!r}; the row got {self.error_text!r} "
                          "and the call counts as a failure (tools/failure_frequency). The run goes on; later "
                          "failures of this tool are counted, not reported", stacklevel=3)
        return tokenizer(self.error_text, add_special_tokens=False)["input_ids"], {
            "failed": True, "problem": str(problem)}


def _call_with_timeout(function, text, timeout_s):
    """``(value, None)``, or ``(None, the exception)``, or ``(None, "ran past …")`` when it hangs.

    The call runs in a daemon thread: a tool that never returns is abandoned (Python cannot kill a
    thread), and the sampler moves on without it.
    """
    box = {}

    def target():
        try:
            box["value"] = function(text)
        except Exception as err:                       # any error of the tool's is contained
            box["error"] = err

    worker = threading.Thread(target=target, daemon=True, name="grpo_edu-tool")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return None, f"ran past its time limit of {timeout_s} s (timeout_s)"
    if "error" in box:
        return None, box["error"]
    return box["value"], None


def loss_mask(completion_mask, tool_mask):
    """The tokens the loss sees: ``completion_mask * tool_mask`` (TRL's ``_compute_loss``), (N, T).

    ``tool_mask`` None (no tool) leaves ``completion_mask`` as it is. The same mask weighs the policy
    term, the KL and the entropy, so a tool's tokens enter none of them.
    """
    if tool_mask is None:
        return completion_mask
    return completion_mask * tool_mask.to(completion_mask.dtype)


def tool_stats(rollout):
    """TRL's tool metrics for one rollout: ``tools/call_frequency`` (calls per completion) and
    ``tools/failure_frequency`` (failed calls / calls, 0 without calls); also the model's own
    tokens per completion (``model_completion_length``, TRL's ``completion_length`` with tools)."""
    calls = sum(rollout.tool_calls)
    failures = sum(rollout.tool_failures)
    own = loss_mask(rollout.completion_mask, rollout.tool_mask).sum(dim=1).float()
    return {"tools/call_frequency": calls / len(rollout.tool_calls),
            "tools/failure_frequency": failures / calls if calls else 0.0,
            "model_completion_length": float(own.mean())}


def tool_mask_of(ids, call_end_id, reply_lengths):
    """The tool mask of one completion from its ids: after the k-th ``call_end`` the model wrote, the next
    ``reply_lengths[k]`` tokens are the tool's (0), every other token the model's (1).

    A ``call_end`` inside a reply is the tool's text, not a call: the walk skips replies whole. This is
    what :func:`~grpo_edu.training.multi_turn.generate_with_tools` records as it samples (lesson 15's
    exercise rebuilds it).
    """
    mask, replies, i = [], list(reply_lengths), 0
    ids = list(ids)
    while i < len(ids):
        mask.append(1)
        if ids[i] == call_end_id and replies:
            n = min(replies.pop(0), len(ids) - i - 1)
            mask += [0] * n
            i += n
        i += 1
    return mask
