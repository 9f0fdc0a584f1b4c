"""Build the bundled tiny model: a 2-layer Llama that half knows two-digit addition.

GRPO can only improve a policy that is *sometimes* right: a group of G answers that are
all wrong (or all right) has σ = 0 and gives no gradient. So the course does not start
from random weights. This script trains a tiny ``LlamaForCausalLM`` by ordinary
supervised next-token prediction (teacher forcing) on the addition train split and stops
early; label smoothing keeps it unsure, so that sampling at temperature 1 answers under
half of the held-out prompts correctly although its greedy answer is usually right.
Stopped there, the model already writes the format (digits, then ``<eos>``) and on most
prompts puts real but not overwhelming probability on the right answer, which is the
starting point where GRPO has the most to do and the most signal to do it with.

Run ``grpo-edu make-model`` (or ``python -m grpo_edu.training.model.make_model --out assets/tiny-adder``;
about a minute on a 2-core laptop). The same seed gives byte-identical
``model.safetensors`` on one machine. The command writes nothing unless the new model's
accuracy lands in :data:`BAND`: it is built aside and only then moved into place, so a
failed rebuild never replaces the bundled model.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

from grpo_edu.common._checks import choice, fail, positive_float, positive_int, unwritable_folder
from grpo_edu.training.task.evaluation import evaluate_accuracy, sample_completions

RECIPE_SAMPLER = "loop"
"""The sampler that measured the bundled models in assets/ (their recipes and numbers): the loop, which was the
only one when they were made; the engine draws the same distribution with other random numbers, so keeping the
loop here keeps every recipe reproducible to the digit."""
from grpo_edu.training.model.models import ASSETS
from grpo_edu.training.task.tasks import get_task
from grpo_edu.training.model.tokenizer import CHARS, build_char_tokenizer, save_char_tokenizer
from grpo_edu.training.model.chat_tokenizer import (corpus, is_chat_task, render_prompts, save_chat_tokenizer,
                                                    train_chat_tokenizer)

BUNDLED_DIR = ASSETS / "tiny-adder"
DEFAULT_OUT = str(BUNDLED_DIR)
"""The command's default --out: the bundled model's folder, wherever the command is run from."""
BAND = (0.20, 0.60)
"""Held-out sampled accuracy the bundled model must land in (the tests check it)."""
STOP_METRICS = ("greedy", "sampled")
"""What the periodic check measures on held-out prompts, to decide when to stop (see build_tiny_model)."""


def tiny_llama_config(tokenizer, *, hidden_size: int = 64, num_layers: int = 2,
                      num_heads: int = 4, max_positions: int = 32):
    """A ``LlamaConfig`` small enough to train and run RL on a laptop CPU.

    About 130k parameters with the defaults. The output layer reuses the embedding matrix
    (``tie_word_embeddings``), which halves the vocabulary's share of the weights.
    """
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def encode_for_warmup(tokenizer, rows: list[dict]):
    """Token ids and labels for teacher forcing: ``<bos> prompt answer <eos>``, right-padded.

    Labels are -100 (ignored by the loss) on ``<bos>``, the prompt and the padding, so the
    model learns to *answer* and to stop, not to write prompts. A row with an ``answer_mask`` (one 0/1 per
    answer character, the character tokenizer's one token each) has its 0 characters left out as well:
    a tool's reply in a demonstration is the tool's to write, not the model's (``calc``).
    Returns ``input_ids, labels``, both ``(R, L)`` with R rows, L the longest sequence.
    """
    import torch

    sequences, labels = [], []
    for row in rows:
        prompt = tokenizer(row["prompt"])["input_ids"]  # <bos> first
        answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"]
        keep = list(row.get("answer_mask") or [1] * len(answer)) + [1]   # <eos> is always the model's
        answer = answer + [tokenizer.eos_token_id]
        sequences.append(prompt + answer)
        labels.append([-100] * len(prompt) + [a if k else -100 for a, k in zip(answer, keep)])
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(rows), length), tokenizer.pad_token_id)  # (R, L)
    target = torch.full((len(rows), length), -100)  # (R, L)
    for i, (s, y) in enumerate(zip(sequences, labels)):
        input_ids[i, : len(s)] = torch.tensor(s)
        target[i, : len(y)] = torch.tensor(y)
    return input_ids, target


def build_tiny_model(out_dir, *, seed: int = 0, task: str = "addition", lr: float = 1e-3,
                     batch_size: int = 64, check_every: int = 250, max_steps: int = 6000,
                     stop_at: float = 0.95, label_smoothing: float = 0.2, eval_samples: int = 8,
                     hidden_size: int = 64, device: str = "cpu", num_layers: int = 2, max_positions: int = 32,
                     stop_metric: str = "greedy", worked_fraction: float = -1.0, check_prompts: int = 500,
                     vocab_size: int = 1024) -> dict:
    """Warm up a tiny Llama on ``task`` and save it (weights + tokenizer) to ``out_dir``.

    ``task`` may name several tasks, comma-separated ("addition,subtraction"): their train
    splits form one shuffled pool, the greedy check uses the mean over the tasks, and the
    model is in band only when every task's sampled accuracy is. Lesson 06's
    ``assets/tiny-two-tasks`` is made so (2000 steps, no early stop).

    The loss is cross-entropy with ``label_smoothing`` ε: the target puts 1 − ε on the
    right token and spreads ε over the whole vocabulary. The model thus learns *which*
    answer is right while staying unsure of it: its greedy answer is usually correct, but
    an answer sampled at temperature 1 is right well under half the time. That is the
    situation RL fine-tuning of LLMs is in (the right answer is among the samples, not
    reliably on top), and GRPO's job in lesson 08 is to sharpen it.

    Every ``check_every`` steps the held-out *greedy* accuracy is measured; training stops
    at the first check where it reaches ``stop_at``, or after ``max_steps``. The held-out
    split is thus used to choose *when to stop*: its accuracy here is a calibration
    target for the starting policy, not a claim about generalisation.
    Returns a summary of what was measured; ``in_band`` says whether the sampled accuracy
    is inside :data:`BAND`.

    ``device``: "cpu" (the default: deterministic, byte-identical weights for one seed) or
    "cuda", to warm up a larger model (``hidden_size=256``, task ``"addition3"``) on a GPU
    (lesson 08). The weights are initialised on the CPU either way; on CUDA the training
    is fast but not bit-reproducible.

    Long answers (the ``sums`` task, ``assets/tiny-sums``): ``worked_fraction`` in [0, 1] shows that
    share of the train rows with their written working and the rest with the answer alone
    (``task.demonstration``; a seeded, fixed choice per row), so that how much to write is the
    model's choice; −1 (the default) shows the plain answer. ``stop_metric="sampled"`` stops at the
    first check where the held-out *sampled* accuracy (τ = 1, one answer for each of the first
    ``check_prompts`` prompts) reaches ``stop_at``: with long answers the sampled accuracy climbs
    steeply, and a check every few dozen steps lands it in :data:`BAND`. ``num_layers`` and
    ``max_positions`` size the model (prompt, answer and ``<eos>`` must fit in ``max_positions``).
    """
    model, tokenizer, summary, history, timing = _warm_up(
        out_dir, seed=seed, task=task, lr=lr, batch_size=batch_size, check_every=check_every, max_steps=max_steps,
        stop_at=stop_at, label_smoothing=label_smoothing, eval_samples=eval_samples, hidden_size=hidden_size,
        device=device, num_layers=num_layers, max_positions=max_positions, stop_metric=stop_metric,
        worked_fraction=worked_fraction, check_prompts=check_prompts, vocab_size=vocab_size)
    _save(model, tokenizer, out_dir, summary, history)
    return _finish(summary, history, timing)


def _warm_up(out_dir, *, seed: int = 0, task: str = "addition", lr: float = 1e-3,
             batch_size: int = 64, check_every: int = 250, max_steps: int = 6000,
             stop_at: float = 0.95, label_smoothing: float = 0.2, eval_samples: int = 8,
             hidden_size: int = 64, device: str = "cpu", num_layers: int = 2, max_positions: int = 32,
             stop_metric: str = "greedy", worked_fraction: float = -1.0, check_prompts: int = 500,
             vocab_size: int = 1024, progress: bool = False) -> tuple:
    """``build_tiny_model`` without the saving: (model, tokenizer, summary, history, timing).
    ``progress``: a bar over the steps, with each check's accuracy (the command shows it)."""
    positive_int("seed", seed, minimum=0)
    positive_float("lr", lr)
    positive_int("batch_size", batch_size)
    positive_int("check_every", check_every)
    positive_int("max_steps", max_steps)
    positive_int("eval_samples", eval_samples)
    positive_int("hidden_size", hidden_size)
    positive_int("num_layers", num_layers)
    positive_int("max_positions", max_positions)
    positive_int("check_prompts", check_prompts)
    choice("device", device, ("cpu", "cuda"))
    choice("stop_metric", stop_metric, STOP_METRICS)
    if not 0 < stop_at < 1:
        fail("stop_at", f"must be a held-out accuracy strictly between 0 and 1, got {stop_at!r}",
             "pass about 0.95 (greedy) or 0.4 (sampled)")
    if not 0 <= label_smoothing < 1:
        fail("label_smoothing", f"must be in [0, 1), got {label_smoothing!r}", "pass about 0.2")
    names = task.split(",")
    tasks = [get_task(name) for name in names]  # checks the names before any work
    if worked_fraction != -1.0:
        if not 0 <= worked_fraction <= 1:
            fail("worked_fraction", f"must be a share in [0, 1] (or -1 for plain answers), got {worked_fraction!r}",
                 "pass e.g. 0.5: half the warm-up rows show their working")
        plain = [t.name for t in tasks if not hasattr(t, "demonstration")]
        if plain:
            fail("worked_fraction", f"task {plain[0]!r} has no written working to show",
                 "use it with a task that has (sums), or leave it at -1")
    chat = any(is_chat_task(t) for t in tasks)
    if chat and len(tasks) > 1:
        fail("task", f"{task!r} mixes a chat task with others", "build a chat task's model on its own (--task words)")
    longest = 0 if chat else max(len(r["prompt"]) + 1 + t.max_answer_chars + 1      # <bos> prompt answer <eos>
                                 for t in tasks for r in t.split("heldout"))
    if longest > max_positions:
        fail("max_positions", f"is {max_positions}, but a prompt with <bos>, its longest answer and <eos> need "
             f"{longest}",
             f"pass --max-positions {longest} or more")

    import torch
    from transformers import LlamaForCausalLM

    from grpo_edu.common.progress import progress_bar

    if device == "cuda" and not torch.cuda.is_available():
        fail("device", "'cuda' was asked for but torch sees no CUDA device", "use device='cpu'")

    started = time.perf_counter()
    if chat:       # words: a BPE learned from the task's text, questions rendered by its chat template
        tokenizer, train_rows, heldout, max_new_tokens = _chat_setup(tasks[0], vocab_size, max_positions)
    else:
        tokenizer = build_char_tokenizer(task_chars(tasks))
        train_rows = [row for t in tasks for row in _demonstrations(t, worked_fraction, seed)]   # several tasks: one pool
        heldout = {t.name: t.split("heldout") for t in tasks}
        max_new_tokens = max(t.max_answer_chars for t in tasks) + 1  # the answer, then <eos>
    input_ids, labels = encode_for_warmup(tokenizer, train_rows)  # (R, L)
    input_ids, labels = input_ids.to(device), labels.to(device)
    attention_mask = (input_ids != tokenizer.pad_token_id).long()  # (R, L)

    def check_accuracy(m):   # the mean over the tasks, greedy (all held-out prompts) or sampled (the first few)
        if any(getattr(t, "uses_calculator", False) for t in tasks):   # calc: the calculator in the loop
            return sum(_tool_accuracy(m, tokenizer, heldout[t.name] if stop_metric == "greedy" else
                                      heldout[t.name][:check_prompts], t, stop_metric, max_new_tokens)
                       for t in tasks) / len(tasks)
        if stop_metric == "greedy":
            return sum(evaluate_accuracy(m, tokenizer, heldout[t.name], t, temperature=0,
                                         max_new_tokens=max_new_tokens) for t in tasks) / len(tasks)
        return sum(evaluate_accuracy(m, tokenizer, heldout[t.name][:check_prompts], t, temperature=1.0,
                                     max_new_tokens=max_new_tokens, sampler=RECIPE_SAMPLER)
                   for t in tasks) / len(tasks)

    deterministic = torch.are_deterministic_algorithms_enabled()
    if device == "cpu":  # CUDA would also need CUBLAS_WORKSPACE_CONFIG; there we accept tiny differences
        torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # initial weights
            model = LlamaForCausalLM(tiny_llama_config(tokenizer, hidden_size=hidden_size, num_layers=num_layers,
                                                       max_positions=max_positions)).to(device)
            order = torch.Generator().manual_seed(seed)  # batch order
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
            model.train()
            history, step, batches = [], 0, []
            bar = progress_bar(max_steps, desc="warm-up", disable=not progress)
            while step < max_steps:
                if not batches:  # a new epoch: a fresh permutation, the last partial batch dropped
                    perm = torch.randperm(len(train_rows), generator=order)
                    batches = list(perm.split(batch_size))[: len(train_rows) // batch_size]
                index = batches.pop(0)  # (batch_size,)
                logits = model(input_ids=input_ids[index],
                               attention_mask=attention_mask[index]).logits[:, :-1]  # (b, L-1, V)
                target = labels[index][:, 1:]                                         # (b, L-1)
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100,
                    label_smoothing=label_smoothing)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                bar.update(1)
                if step % check_every == 0 or step == max_steps:
                    accuracy = check_accuracy(model)
                    bar.set_postfix({f"held-out {stop_metric}": f"{accuracy:.3f}"})
                    history.append({"step": step, "loss": round(loss.item(), 4),
                                    f"heldout_{stop_metric}_accuracy": accuracy})
                    if accuracy >= stop_at:
                        break
            bar.close()
    finally:
        torch.use_deterministic_algorithms(deterministic)
    train_seconds = time.perf_counter() - started

    per_task = {t.name: _measure(model, tokenizer, heldout[t.name], t, eval_samples, max_new_tokens) for t in tasks}
    if len(tasks) == 1:
        summary = per_task[task]
    else:   # the mean over tasks at the top; each task's own numbers under "per_task"
        values = {key: [m[key] for m in per_task.values()] for key in per_task[names[0]]}
        summary = {key: v[0] if len(set(v)) == 1 else round(sum(v) / len(v), 4) for key, v in values.items()}
        summary["per_task"] = per_task
    summary.update(
        task=task, seed=seed, warmup_steps=step, lr=lr, batch_size=batch_size,
        check_every=check_every, stop_at=stop_at, label_smoothing=label_smoothing,
        in_band=all(BAND[0] <= m["heldout_sampled_accuracy"] <= BAND[1] for m in per_task.values()),
        num_parameters=sum(p.numel() for p in model.parameters()),
        command=_command(out_dir, seed=seed, task=task, lr=lr, batch_size=batch_size,
                         check_every=check_every, max_steps=max_steps, stop_at=stop_at,
                         label_smoothing=label_smoothing, eval_samples=eval_samples, hidden_size=hidden_size,
                         device=device, num_layers=num_layers, max_positions=max_positions, stop_metric=stop_metric,
                         worked_fraction=worked_fraction, check_prompts=check_prompts, vocab_size=vocab_size),
    )
    if chat:
        summary["vocab_size"] = len(tokenizer)
    return model, tokenizer, summary, history, {"started": started, "train_seconds": train_seconds}


def _chat_setup(task, vocab_size, max_positions):
    """A chat task's tokenizer (a BPE trained on its text, :mod:`chat_tokenizer`), its train demonstrations and
    held-out rows with the questions rendered by the chat template, and the answer's token budget."""
    tokenizer = train_chat_tokenizer(corpus(task), vocab_size)
    train_rows = render_prompts(tokenizer, task, task.demonstrations("train"), demonstrations=True)
    heldout = {task.name: render_prompts(tokenizer, task, task.split("heldout"))}
    longest = max(len(tokenizer(r["prompt"])["input_ids"]) + len(tokenizer(r["answer"])["input_ids"]) + 1
                  for r in train_rows)                                            # prompt, answer, end token
    max_new_tokens = task.max_completion_tokens
    need = max(longest, max(len(tokenizer(r["prompt"])["input_ids"]) for r in heldout[task.name]) + max_new_tokens)
    if need > max_positions:
        fail("max_positions", f"is {max_positions}, but a rendered prompt and its answer need {need} tokens",
             f"pass --max-positions {need} or more")
    return tokenizer, train_rows, heldout, max_new_tokens


def task_chars(tasks) -> str:
    """The characters the tokenizer needs for ``tasks``: the course's :data:`CHARS`, then any a task adds
    (``task.chars``, e.g. ``;`` and ``#`` for sums), in order."""
    extra = "".join(getattr(t, "chars", "") for t in tasks)
    return CHARS + "".join(dict.fromkeys(c for c in extra if c not in CHARS))


def _demonstrations(task, worked_fraction, seed) -> list[dict]:
    """The train rows a warm-up shows: the answer alone, or (``worked_fraction`` ≥ 0) a seeded mix of
    worked and direct demonstrations, one fixed choice per row."""
    rows = task.split("train")
    if worked_fraction == -1.0:
        return rows
    pick = random.Random(seed)
    shown = [dict(row, answer=task.demonstration(row, pick.random() < worked_fraction)) for row in rows]
    if hasattr(task, "demonstration_mask"):            # a tool's reply inside the demonstration: not a label
        shown = [dict(row, answer_mask=task.demonstration_mask(row["answer"])) for row in shown]
    return shown


def _tool_accuracy(model, tokenizer, rows, task, stop_metric, max_new_tokens):
    """Held-out accuracy of a task answered with the calculator in the loop (``multi_turn``)."""
    from grpo_edu.training.rollouts.multi_turn import evaluate_with_tools
    from grpo_edu.training.rollouts.tools import Tool

    return evaluate_with_tools(model, tokenizer, rows, task, Tool(), temperature=0 if stop_metric == "greedy" else 1.0,
                               max_new_tokens=max_new_tokens)["accuracy"]


def _finish(summary, history, timing) -> dict:
    """The summary build_tiny_model returns: the measured numbers, the history and the timings."""
    summary["history"] = history
    summary["train_seconds"] = round(timing["train_seconds"], 1)
    summary["wall_seconds"] = round(time.perf_counter() - timing["started"], 1)
    return summary


def _measure(model, tokenizer, heldout_rows, task, eval_samples, max_new_tokens) -> dict:
    """The numbers the README and the lessons quote about the starting policy."""
    sampling = dict(seed=0, max_new_tokens=max_new_tokens)
    if getattr(task, "uses_calculator", False):          # the multi-turn sampler has one loop of its own
        return _measure_with_tool(model, tokenizer, heldout_rows, task, eval_samples, sampling)
    sampling["sampler"] = RECIPE_SAMPLER
    texts, stopped = sample_completions(model, tokenizer, [r["prompt"] for r in heldout_rows],
                                        temperature=1.0, num_samples=eval_samples, **sampling)
    answers = [heldout_rows[i // eval_samples]["answer"] for i in range(len(texts))]
    correct = [task.is_correct(t, a) for t, a in zip(texts, answers)]
    rates = [sum(correct[i: i + eval_samples]) / eval_samples
             for i in range(0, len(correct), eval_samples)]
    if hasattr(task, "well_formed"):    # the task's own format (sums: working, then #answer), then <eos>
        well_formed = [s and task.well_formed(t) for t, s in zip(texts, stopped)]
    else:                               # 1..max_answer_chars digits, then <eos>
        well_formed = [s and t.isdigit() and len(t) <= task.max_answer_chars
                       for t, s in zip(texts, stopped)]
    n = len(heldout_rows)
    lengths = {"ended_fraction": round(sum(stopped) / len(stopped), 4)} if is_chat_task(task) else {}
    if hasattr(task, "demonstration"):  # long answers: how long, how often cut, how often worked
        lengths = answer_lengths(texts, stopped, correct)
    return {**lengths, 
        "heldout_prompts": n,
        "eval_samples_per_prompt": eval_samples,
        "heldout_sampled_accuracy": round(sum(correct) / len(correct), 4),
        "heldout_greedy_accuracy": round(evaluate_accuracy(
            model, tokenizer, heldout_rows, task, temperature=0, **sampling), 4),
        "fraction_prompts_0_lt_p_lt_1": round(sum(0 < p < 1 for p in rates) / n, 4),
        "fraction_prompts_p_eq_0": round(sum(p == 0 for p in rates) / n, 4),
        "fraction_prompts_p_eq_1": round(sum(p == 1 for p in rates) / n, 4),
        "well_formed_rate": round(sum(well_formed) / len(well_formed), 4),
    }


def _measure_with_tool(model, tokenizer, rows, task, eval_samples, sampling) -> dict:
    """The starting numbers of a model that may call the calculator: accuracy with and without a call,
    how often it calls, how often a call fails, and the share well formed (lesson 15)."""
    from grpo_edu.training.rollouts.multi_turn import evaluate_with_tools, sample_with_tools
    from grpo_edu.training.rollouts.tools import Tool

    texts, stopped, calls, failures = sample_with_tools(model, tokenizer, [r["prompt"] for r in rows], Tool(),
                                                        temperature=1.0, num_samples=eval_samples, **sampling)
    answers = [rows[i // eval_samples]["answer"] for i in range(len(texts))]
    correct = [task.is_correct(t, a) for t, a in zip(texts, answers)]
    rates = [sum(correct[i: i + eval_samples]) / eval_samples for i in range(0, len(correct), eval_samples)]

    def share(values):
        return round(sum(values) / len(values), 4) if values else None

    n = len(rows)
    return {
        "heldout_prompts": n, "eval_samples_per_prompt": eval_samples,
        "heldout_sampled_accuracy": share(correct),
        "heldout_greedy_accuracy": round(evaluate_with_tools(model, tokenizer, rows, task, Tool(), temperature=0,
                                                             **sampling)["accuracy"], 4),
        "call_rate": share([c > 0 for c in calls]),
        "accuracy_with_call": share([ok for ok, c in zip(correct, calls) if c]),
        "accuracy_without_call": share([ok for ok, c in zip(correct, calls) if not c]),
        "failed_call_rate": share([f > 0 for f in failures]),
        "fraction_prompts_0_lt_p_lt_1": round(sum(0 < p < 1 for p in rates) / n, 4),
        "fraction_prompts_p_eq_0": round(sum(p == 0 for p in rates) / n, 4),
        "fraction_prompts_p_eq_1": round(sum(p == 1 for p in rates) / n, 4),
        "well_formed_rate": share([s and task.well_formed(t) for t, s in zip(texts, stopped)]),
    }


def answer_lengths(texts, stopped, correct) -> dict:
    """Length statistics of sampled answers, in tokens with ``<eos>`` (the character tokenizer: one per character).

    ``truncated_fraction``: the share that never produced ``<eos>`` (cut at the length limit);
    ``worked_fraction``: the share that wrote any working (a ``+`` before the answer).
    """
    lengths = sorted(len(t) + bool(s) for t, s in zip(texts, stopped))
    right = [len(t) + 1 for t, s, c in zip(texts, stopped, correct) if c and s]

    def quantile(q):
        return lengths[min(len(lengths) - 1, int(q * len(lengths)))]
    return {
        "length_median": statistics.median(lengths), "length_p10": quantile(0.1), "length_p90": quantile(0.9),
        "length_max": lengths[-1], "length_median_correct": statistics.median(right) if right else None,
        "truncated_fraction": round(sum(not s for s in stopped) / len(stopped), 4),
        "worked_fraction": round(sum("+" in t.split("#")[0] for t in texts) / len(texts), 4),
    }


def _command(out_dir, **options) -> str:
    """The shell command that rebuilds this model: defaults left out, the rest spelled out."""
    defaults = _option_defaults()
    flags = "".join(f" --{name.replace('_', '-')} {value}" for name, value in options.items()
                    if name in defaults and value != defaults[name])        # not --progress: no flag of the model
    if Path(out_dir).resolve().parent == ASSETS.resolve():
        out_dir = f"assets/{Path(out_dir).name}"   # as run from the repository root
    return f"python -m grpo_edu.training.model.make_model --out {out_dir}{flags}"


def _save(model, tokenizer, out_dir, summary, history) -> None:
    """Weights as safetensors, the tokenizer, and a JSON record of how they were made."""
    import tokenizers
    import torch
    import transformers

    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    (save_chat_tokenizer if getattr(tokenizer, "chat_template", None) else save_char_tokenizer)(tokenizer, out_dir)
    record = dict(summary, history=history, versions={
        "python": sys.version.split()[0], "torch": torch.__version__,
        "transformers": transformers.__version__, "tokenizers": tokenizers.__version__})
    with open(os.path.join(out_dir, "grpo_edu_model.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")


def _save_into_place(model, tokenizer, out_dir, summary, history) -> None:
    """``_save`` into a temporary sibling folder, then move each file into ``out_dir``.

    File by file (``os.replace``), so other files already in ``out_dir`` are kept.
    """
    final = Path(out_dir)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _save(model, tokenizer, tmp, summary, history)
        final.mkdir(parents=True, exist_ok=True)
        for path in tmp.iterdir():
            os.replace(path, final / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    """Command line: ``python -m grpo_edu.training.model.make_model [--out DIR] [--seed N] ...``.

    Writes ``--out`` only when the model's sampled accuracy lands in :data:`BAND`.
    """
    from grpo_edu.common import command_line

    defaults = _option_defaults()
    parser = argparse.ArgumentParser(
        prog="python -m grpo_edu.training.model.make_model",
        description="Warm up the tiny Llama on a task and save it for GRPO; nothing is written unless its "
                    f"held-out sampled accuracy lands in {BAND}.")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="output directory (default: the bundled model's folder, assets/tiny-adder, which "
                             "needs --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="let the new model replace one already in --out (the bundled one, to rebuild it in place)")
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default,
                            help=f"default: {default}")
    args = vars(command_line.parse_args(parser, argv))
    out_dir, overwrite = args.pop("out"), args.pop("overwrite")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        print(f"error: --out: {out_dir} is a file. Fix: pass a folder.", file=sys.stderr)
        return 2
    held = [name for name in ("model.safetensors", "grpo_edu_model.json") if os.path.exists(os.path.join(out_dir, name))]
    if held and not overwrite:                   # a model someone keeps: the bundled one, or a student's
        print(f"error: --out: {out_dir} already holds a model ({held[0]}). Fix: pass a new folder (and compare), or "
              "--overwrite to replace it.", file=sys.stderr)
        return 2
    blocked = unwritable_folder(out_dir)
    if blocked is not None:
        print(f"error: --out: {out_dir} cannot be written (nothing can be created in {blocked}). Fix: pass a folder "
              "you can write to.", file=sys.stderr)
        return 2
    try:
        model, tokenizer, summary, history, timing = _warm_up(out_dir, **args, progress=True)
    except ValueError as err:      # a setting checked before the warm-up: its message, not a traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    if summary["in_band"]:
        _save_into_place(model, tokenizer, out_dir, summary, history)
    summary = _finish(summary, history, timing)
    for key in ("warmup_steps", "heldout_sampled_accuracy", "heldout_greedy_accuracy",
                "fraction_prompts_0_lt_p_lt_1", "well_formed_rate", "wall_seconds"):
        print(f"{key}: {summary[key]}")
    if not summary["in_band"]:
        print(f"error: held-out sampled accuracy {summary['heldout_sampled_accuracy']} is "
              f"outside {BAND}, so nothing was written ({out_dir} is unchanged); change "
              "--label-smoothing (more smoothing, lower accuracy)", file=sys.stderr)
        return 1
    print(f"saved to {out_dir}")
    return 0


def _option_defaults() -> dict:
    """``build_tiny_model``'s keyword options and their defaults: the CLI flags."""
    return {name: p.default for name, p in inspect.signature(build_tiny_model).parameters.items()
            if p.kind is p.KEYWORD_ONLY}

if __name__ == "__main__":
    raise SystemExit(main())
