"""Tools a policy may call in the middle of its answer: the call syntax, a calculator, and containment.

A model calls a tool by writing its syntax, e.g. ``[12+345]``: ``call_start``, the call's text, then
``call_end``. The sampler (:mod:`grpo_edu.training.rollouts.multi_turn`) stops the row there, hands the text to
the tool, appends the tool's reply (``=357``) as tokens the *environment* wrote, and lets the model
write on. Those reply tokens are not the policy's: their tool mask is 0 (TRL's convention: 1 on tokens
the model wrote, 0 on the tool's), and :func:`loss_mask` keeps them out of the ratio, the KL and the
entropy, as TRL's ``completion_mask * tool_mask`` does.

A tool is plain Python, and whatever it does wrong is *contained*: it raises (even ``SystemExit``),
returns something that is not a string, returns characters the tokenizer cannot encode, runs past
``timeout_s``, or returns more than ``max_result_tokens`` tokens. Then the row gets ``error_text``
instead, the call counts as a failure (TRL's ``tools/failure_frequency``), the run goes on, and the
first such case is reported once with the tool's name. A *malformed call* (the model wrote ``[12+]``)
is the model's mistake, not the tool's: it gets ``error_text`` and counts as a failure too, without a
warning. Nothing here uses ``eval`` or a shell: :func:`calculator` is a small parser.

Where a tool runs: a tool's function runs in a **worker process** of its own (:class:`_Worker`), so one
that never returns can be *stopped*, not only abandoned: at ``timeout_s`` the worker is killed and the
next call starts a fresh one (Python cannot kill a thread; an abandoned thread would spin on and slow
every later batch). The built-in :func:`calculator` runs in the sampler's own process: it is a parser of
at most 8 numbers that cannot hang, and a process round trip would cost more than the parse. What a tool
keeps between calls (a counter, a cache) lives in its worker: the run's process does not see it, and a
restart after a timeout starts it afresh.

Every method's loss sees the same tokens, :func:`trained_mask`: GRPO's, REINFORCE's, PPO's policy and
critic, rejection sampling's and DPO's (``training.family``).

Standard library only at import (torch is imported where a mask is built).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import re
import signal
import threading
import warnings
import weakref
from dataclasses import dataclass, field

from grpo_edu.common import _checks


class ToolCallError(ValueError):
    """The call's text does not follow the tool's syntax: the model's mistake, counted as a failure."""


_CALL = re.compile(r"[0-9]{1,12}(?:[+\-*][0-9]{1,12}){0,7}\Z")
"""What :func:`calculator` reads: up to 8 whole numbers of at most 12 ASCII digits, joined by ``+``, ``-`` or
``*``, and nothing after them (``\\Z``: ``$`` would also let a trailing newline through; ``[0-9]``: ``\\d``
would also take ``١٢٣`` or ``１２``)."""


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
    """Seconds one call may take; a call still running then is stopped (its worker process killed) and counts
    as a failure."""
    max_result_tokens: int = 16
    """The longest reply kept, in tokens; a longer one is replaced by ``error_text``."""
    reply_in_loss: bool = False
    """Lesson 15's ablation, never a setting to train with: True leaves the reply's tokens in the loss
    (the tool mask is ignored), so the policy is pushed to write the tool's answers itself."""
    reported: set = field(default_factory=set, repr=False, compare=False)
    """The tools whose first failure has been reported (once per ``Tool`` object)."""
    _worker: object = field(default=None, init=False, repr=False, compare=False)
    """The worker process that runs ``function`` (:class:`_Worker`), started at the first call."""

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
        on any failure) and ``{"failed": bool, "problem": str | None}``.

        A reply longer in characters than ``max_result_tokens`` of the tokenizer's longest tokens cannot fit,
        so it is refused by its length before it is tokenized (a 10 MB reply costs no tokenizer time)."""
        max_chars = self.max_result_tokens * _longest_token_chars(tokenizer)
        if self.function is calculator:                # a parser that cannot hang: no process round trip
            value, problem = _call_here(calculator, call_text)
        else:
            if self._worker is None:
                self._worker = _Worker(self.function)
                weakref.finalize(self, self._worker.stop)       # no worker outlives its Tool
            value, problem = self._worker.call(call_text, self.timeout_s, max_chars)
        malformed = isinstance(problem, ToolCallError)
        if problem is None:
            if not isinstance(value, str):
                problem = f"returned a {type(value).__name__}, not a string"
            elif len(value) > max_chars:
                problem = (f"returned {len(value)} characters, more than max_result_tokens = {self.max_result_tokens} "
                           "tokens can hold")
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
            if isinstance(problem, BaseException):
                problem = f"raised {getattr(problem, 'kind', type(problem).__name__)}: {problem}"
        if not malformed and self.name not in self.reported:
            self.reported.add(self.name)
            warnings.warn(f"tool {self.name!r} {problem} on the call {call_text!r}; the row got {self.error_text!r} "
                          "and the call counts as a failure (tools/failure_frequency). The run goes on; later "
                          "failures of this tool are counted, not reported", stacklevel=3)
        return tokenizer(self.error_text, add_special_tokens=False)["input_ids"], {
            "failed": True, "problem": str(problem)}

    def close(self):
        """Stop this tool's worker process, if one is running (a later call starts a new one)."""
        if self._worker is not None:
            self._worker.stop()

    def __getstate__(self):                            # a copy of the Tool gets its own worker, when it needs one
        return {**self.__dict__, "_worker": None}


def _longest_token_chars(tokenizer):
    """The most characters one token of ``tokenizer`` writes (≥ 1): its vocabulary's longest entry. A byte-level
    entry is at least as long as the text it decodes to, so n tokens write at most n × this many characters.
    A tokenizer without ``get_vocab`` sets no bound (inf): its replies are measured in tokens only."""
    try:
        return _longest_known(tokenizer)
    except TypeError:                                  # an unhashable tokenizer: not cached
        return _longest_known.__wrapped__(tokenizer)


@functools.lru_cache(maxsize=16)
def _longest_known(tokenizer):
    if not callable(getattr(tokenizer, "get_vocab", None)):
        return float("inf")
    return max(1, max((len(token) for token in tokenizer.get_vocab()), default=1))


class _ToolFailed(Exception):
    """What a tool raised in its worker process, by name and message (the exception itself may not pickle)."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _call_here(function, text):
    """``(value, None)`` or ``(None, the exception)``: one call in this process (the calculator's way)."""
    try:
        return function(text), None
    except Exception as err:                           # any error of the tool's is contained
        return None, err


def _serve(function, conn, other_end, parent):
    """The worker process's loop: read ``(text, max_chars)``, call ``function``, send back what happened.

    Whatever the function does is caught (``SystemExit`` too) and sent as a tag and a message; a string
    longer than ``max_chars`` is sent as its length alone. A watcher thread ends the worker when its parent
    is gone (a kill -9 of the run), so a tool stuck in a loop never outlives the run."""
    other_end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)       # Ctrl-C stops the run, which stops this worker

    def watch():
        while os.getppid() == parent:
            threading.Event().wait(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    while True:
        try:
            text, max_chars = conn.recv()
        except (EOFError, OSError):                    # the run closed the pipe: done
            return
        try:
            value = function(text)
            if not isinstance(value, str):
                reply = ("not a string", type(value).__name__)
            elif len(value) > max_chars:
                reply = ("too long", len(value))
            else:
                reply = ("value", value)
        except ToolCallError as err:
            reply = ("malformed", str(err))
        except BaseException as err:                   # noqa: B036: SystemExit and KeyboardInterrupt are the tool's too
            reply = ("raised", (type(err).__name__, str(err)))
        conn.send(reply)


class _Worker:
    """A child process that runs one tool's calls, one at a time, and is killed when a call runs past its limit.

    Started at the first call; on a timeout it is killed (``SIGKILL``), reaped, and the next call starts a new
    one. ``fork`` where the system has it, so any function runs (a lambda, a closure); elsewhere ``spawn``,
    which needs a function defined at a module's top level."""

    def __init__(self, function):
        self.function = function
        self.process = self.conn = None

    def _start(self):
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        if context.get_start_method() != "fork":
            try:
                pickle.dumps(self.function)
            except Exception:
                _checks.fail("function", f"{getattr(self.function, '__name__', self.function)!r} cannot be sent to "
                             "the tool's worker process (this system has no fork)",
                             "define the tool as a function at the top level of a module")
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=_serve, args=(self.function, child_end, self.conn, os.getpid()),
                                       daemon=True, name="grpo_edu-tool")
        with warnings.catch_warnings():                # the child runs the tool's Python only, never torch
            warnings.simplefilter("ignore", DeprecationWarning)
            self.process.start()
        child_end.close()

    def call(self, text, timeout_s, max_chars):
        """``(value, None)``, or ``(None, problem)``: the tool's exception, or a sentence (ran past its limit…)."""
        if self.process is None or not self.process.is_alive():
            self.stop()
            self._start()
        try:
            self.conn.send((text, max_chars))
            if not self.conn.poll(timeout_s):
                self.stop()
                return None, f"ran past its time limit of {timeout_s} s (timeout_s); its worker process was stopped"
            tag, payload = self.conn.recv()
        except (EOFError, OSError):                    # the worker died mid-call (os._exit, a crash)
            code = self.process.exitcode
            self.stop()
            return None, f"ended its worker process (exit code {code}) without a reply"
        if tag == "value":
            return payload, None
        if tag == "not a string":
            return None, f"returned a {payload}, not a string"
        if tag == "too long":
            return None, f"returned {payload} characters, more than max_result_tokens tokens can hold"
        if tag == "malformed":
            return None, ToolCallError(payload)
        return None, _ToolFailed(*payload)

    def stop(self):
        """Kill the worker (if any) and reap it: no process or zombie is left."""
        process, conn, self.process, self.conn = self.process, self.conn, None, None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join()
            process.close()


def loss_mask(completion_mask, tool_mask):
    """The tokens the loss sees: ``completion_mask * tool_mask`` (TRL's ``_compute_loss``), (N, T).

    ``tool_mask`` None (no tool) leaves ``completion_mask`` as it is. The same mask weighs the policy
    term, the KL and the entropy, so a tool's tokens enter none of them.
    """
    if tool_mask is None:
        return completion_mask
    return completion_mask * tool_mask.to(completion_mask.dtype)


def trained_mask(rollout, tool=None):
    """The tokens every method's loss sees, (N, T): :func:`loss_mask` of the rollout, so the tool's replies are
    out, or all the completion's tokens under lesson 15's ablation (``tool.reply_in_loss``).

    One rule for every method: GRPO's and REINFORCE's update, PPO's policy and its critic's value loss,
    rejection sampling's NLL and DPO's log π(y) all take their mask from here (``training.family``)."""
    replies_out = tool is None or not tool.reply_in_loss
    return loss_mask(rollout.completion_mask, rollout.tool_mask if replies_out else None)


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
    what :func:`~grpo_edu.training.rollouts.multi_turn.generate_with_tools` records as it samples (lesson 15's
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
