"""Lesson 16's clinic: the failures real text brings to GRPO, each reproduced on the words model, measured, cured.

=================  ========================================================================================
run / measurement  what is done (on ``assets/tiny-words``, the ``words`` task, the words preset), what is measured
=================  ========================================================================================
``healthy``        the preset as it is: the lesson's before → after table, and the cure of the next two
``no_template``    the prompt as the bare question (a plain string: the chat template skipped, no system turn, no
                   ``<|im_start|>assistant``): the share of answers that end, the reward, held-out accuracy
``pad_is_eos``     the loss mask built from padding with ``pad_token = eos_token``, so every ``<|im_end|>`` leaves
                   the loss (:func:`~grpo_edu.training.text.completion_mask.padding_mask`): log π(<|im_end|>)
                   after right answers, before and after (:func:`end_logprob`); :func:`end_tokens_in_the_loss`
``pad_is_eos_masked``  ``pad_is_eos`` and ``mask_truncated_completions=True`` (TRL's setting): the answers cut at
                   the cap leave the loss too, so no unpaid cut answer pushes down the token it wrote in place of
                   ``<|im_end|>``. Separates two paths by which the end token could rise with no gradient of its
                   own (lesson 16, case (b)): if it still rises, the pull came through the paid answers' tokens
                   before the end; if not, through the push-down of the alternatives (the softmax hands their
                   probability back, most of it to ``<|im_end|>``)
``newline_regex``  paid only by a format regex that wants a newline after each tag (:data:`NEWLINE_FORMAT`); its cure
                   ``format_regex`` allows none: the reward and dead groups of the run; :func:`format_match`
:func:`graders`    (a measurement) the strict grader (the tag) and the lenient one (the last number) on the same
                   sampled answers: how many right answers each marks wrong, how many wrong answers right
:func:`drift_on_samples`  (a measurement) decode-then-encode on the model's own samples: the share that changes
=================  ========================================================================================

The runs are stored in ``assets/text-clinic/`` (one JSON file each, with the command that made it);
:func:`stored` reads them. The measurements take seconds and run live in the lesson.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from grpo_edu.common import command_line
from grpo_edu.common._checks import choice, fail, positive_int, write_result_file
from grpo_edu.training.model.models import ASSETS

RUNS = ("healthy", "no_template", "pad_is_eos", "pad_is_eos_masked", "newline_regex", "format_regex")
"""The GRPO runs: the words preset as it is (``healthy``: the cure of the first two cases and the lesson's
before → after table), the three sick cases, and ``format_regex``, the cure of ``newline_regex``."""
STORED = ASSETS / "text-clinic"
STEPS = 40
"""Steps of each run: the words preset's (``tests/test_text_clinic.py`` checks they agree)."""
EVAL_PROMPTS = 100


def _words(model=None):
    """(model, tokenizer, task) of the words model. ``model``: a folder (default the bundled one), or a loaded
    ``(model, tokenizer)`` pair, which the measurements use as it is (a lesson loads it once)."""
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.task.tasks import get_task
    from grpo_edu.training.trainers.config import BUNDLED_WORDS_MODEL

    if isinstance(model, tuple):
        net, tokenizer = model
    else:
        net, tokenizer = load_model_and_tokenizer(model or BUNDLED_WORDS_MODEL)
    return net, tokenizer, get_task("words")


class BareQuestions:
    """The words task with its chat turns taken away: the trainer then sends each question as a plain string, as
    a prompt column of strings does in TRL (case ``no_template``). Everything else is the words task's."""

    messages = None                                     # no turns: ``is_chat_task`` is False

    def __init__(self, task):
        self._task = task
        self.name = task.name

    def __getattr__(self, name):
        return getattr(self._task, name)


def _end_masked_out_trainer(*, mask_truncated=False):
    """A GRPOTrainer whose loss mask drops every end token: the mask a padding-based collator builds when
    ``pad_token = eos_token`` (case ``pad_is_eos``). ``mask_truncated``: the answers cut at the cap leave the loss
    too (TRL's ``mask_truncated_completions``; case ``pad_is_eos_masked``), judged on the rollout as sampled. (The
    config's own flag cannot do it here: it reads each answer's end off the mask, and this mask holds no end.)"""
    from grpo_edu.training.rollouts.rollout import finished
    from grpo_edu.training.text.completion_mask import padding_mask
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    class EndMaskedOut(GRPOTrainer):
        def _update(self, rollout, advantages, ref_logprobs):
            # pad = eos: what follows the end is padding, and the end itself looks like padding: both leave the
            # loss. Only the update sees this mask; the step's logged lengths and rewards stay the true ones.
            end = self.tokenizer.eos_token_id
            mask = rollout.completion_mask * padding_mask(rollout.completion_ids, end)            # (N, T)
            if mask_truncated:
                mask = mask * finished(rollout, end).unsqueeze(1).to(mask.dtype)                  # cut: no gradient
            return super()._update(dataclasses.replace(rollout, completion_mask=mask), advantages, ref_logprobs)

    return EndMaskedOut


def sample(net, tokenizer, task, rows, *, chat=True, num_samples=1, max_new_tokens=24, seed=0):
    """The model's answers to ``rows``, through the template (``chat``) or as bare questions: a Rollout, with
    ``info`` {"ended": share that wrote <|im_end|>, "accuracy": share right by the task's checker}."""
    import torch

    from grpo_edu.training.model.chat_tokenizer import render_prompts
    from grpo_edu.training.rollouts.rollout import finished, generate

    prompts = [r["prompt"] for r in (render_prompts(tokenizer, task, rows) if chat else rows)]
    rollout = generate(net, tokenizer, prompts, num_generations=num_samples, max_new_tokens=max_new_tokens,
                       generator=torch.Generator().manual_seed(seed))
    answers = [r["answer"] for r in rows for _ in range(num_samples)]
    right = [task.is_correct(c, a) for c, a in zip(rollout.completions, answers)]
    return rollout, {"ended": float(finished(rollout, tokenizer.eos_token_id).float().mean()),
                     "accuracy": sum(right) / len(right)}


def end_logprob(net, tokenizer, task, rows):
    """Mean log π(<|im_end|> | prompt, the right worked answer) over ``rows`` (teacher forcing): how sure the
    model is that a finished answer ends."""
    import torch

    from grpo_edu.training.model.chat_tokenizer import render_prompts
    from grpo_edu.training.rollouts.rollout import completion_logprobs, rollout_from_text

    worked = [d["answer"] for d in task.demonstrations("heldout")]          # the held-out split's order
    if [r["prompt"] for r in rows] != [d["prompt"] for d in task.demonstrations("heldout")[:len(rows)]]:
        fail("rows", "are not the first held-out rows of the words task", 'pass task.split("heldout", n)')
    rendered = render_prompts(tokenizer, task, rows)
    rollout = rollout_from_text(tokenizer, [r["prompt"] for r in rendered], worked[:len(rows)])
    T = rollout.completion_ids.shape[1]
    was = net.training
    net.eval()
    with torch.no_grad():
        logprobs, _ = completion_logprobs(net, rollout.input_ids, rollout.attention_mask, T)       # (N, T)
    net.train(was)
    last = rollout.completion_mask.sum(1) - 1                                                      # the end's index
    return float(logprobs.gather(1, last.unsqueeze(1)).mean())


def _measure(trainer, task, rows, *, chat, seed=0):
    rollout, info = sample(trainer.model, trainer.tokenizer, task, rows, chat=chat, num_samples=4,
                           max_new_tokens=trainer.config.max_completion_length, seed=seed)
    info["end_logprob"] = end_logprob(trainer.model, trainer.tokenizer, task, rows)
    return {k: round(v, 4) for k, v in info.items()}


KEPT = ("reward_mean", "accuracy", "truncated_fraction", "completion_length", "dead_group_fraction")


def run(case, *, seed=0, steps=STEPS, model=None, progress=False):
    """One run of :data:`RUNS` from the words model (``model``: a folder; default the bundled one), the words
    preset otherwise. Returns a dict with ``before``/``after`` measures on :data:`EVAL_PROMPTS` held-out prompts
    (4 answers each: the share that ended, accuracy; and :func:`end_logprob`), the run's ``history`` and
    ``findings`` (the names ``diagnose`` gives it)."""
    choice("case", case, RUNS)
    positive_int("steps", steps)
    from grpo_edu.beyond.diagnose import diagnose
    from grpo_edu.training.text.format_reward import FORMAT, NEWLINE_FORMAT, format_reward
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    net, tokenizer, task = _words(model)
    config = GRPOConfig.preset("words", model=model or "bundled-words", total_training_steps=steps, eval_size=0,
                               seed=seed)
    trainer_class, kwargs, chat = GRPOTrainer, {}, True
    if case == "no_template":
        kwargs["task"], chat = BareQuestions(task), False
    if case in ("pad_is_eos", "pad_is_eos_masked"):
        trainer_class = _end_masked_out_trainer(mask_truncated=case == "pad_is_eos_masked")
    if case in ("newline_regex", "format_regex"):
        kwargs["reward_funcs"] = [format_reward(FORMAT if case == "format_regex" else NEWLINE_FORMAT)]
    trainer = trainer_class(config, model=net, tokenizer=tokenizer, **kwargs)
    rows = task.split("heldout", EVAL_PROMPTS)
    started = time.perf_counter()
    before = _measure(trainer, task, rows, chat=chat)
    history = []
    for _ in range(steps):
        m = trainer.step()
        history.append({k: round(m[k], 4) for k in KEPT if m.get(k) is not None})
        if progress:
            print(case, seed, len(history), history[-1], file=sys.stderr, flush=True)
    after = _measure(trainer, task, rows, chat=chat)
    findings = [f.name for f in diagnose([dict(h, step=i + 1) for i, h in enumerate(history)],
                                         config=config)]
    return {"case": case, "seed": seed, "steps": steps, "before": before, "after": after,
            "history": history, "findings": findings, "seconds": round(time.perf_counter() - started, 1)}


def end_tokens_in_the_loss(model=None, *, seed=0):
    """One step's batch of the words preset sampled once, its loss mask built both ways: ``{"right": end tokens
    the right mask keeps, "pad_is_eos": those the padding mask keeps, "answers": answers, "ended": answers that
    ended}``. A measurement, seconds."""
    from grpo_edu.training.text.completion_mask import completion_mask, padding_mask

    net, tokenizer, task = _words(model)
    rollout, _ = sample(net, tokenizer, task, task.split("train", 16), num_samples=8, seed=seed)
    end = tokenizer.eos_token_id
    right, info = completion_mask(rollout.completion_ids, end)
    wrong = right * padding_mask(rollout.completion_ids, end)
    is_end = (rollout.completion_ids == end).long()
    return {"right": int((right * is_end).sum()), "pad_is_eos": int((wrong * is_end).sum()),
            "answers": len(rollout.completions), "ended": int(info["ended"].sum())}


def graders(model=None, *, prompts=200, seed=0):
    """Case ``graders``: one sampled answer to each of ``prompts`` held-out questions, graded strict and lenient
    and against a careful reading (:func:`~grpo_edu.training.text.extraction.grader_disagreement`). Returns
    ``(counts, info)`` with ``info["accuracy"]`` under each grade, ``info["examples"]``: one answer per kind of
    mistake, and ``info["cut"]``, ``info["cut_paid"]``: the answers cut at the cap, and how many of them the words
    task's own reward (the training reward: the last ``<answer>`` tag) pays."""
    from grpo_edu.training.rollouts.rollout import finished
    from grpo_edu.training.text.extraction import grader_disagreement

    net, tokenizer, task = _words(model)
    rows = task.split("heldout", prompts)
    rollout, _ = sample(net, tokenizer, task, rows, seed=seed)
    ended = finished(rollout, tokenizer.eos_token_id).tolist()
    texts, answers = rollout.completions, [r["answer"] for r in rows]
    counts, info = grader_disagreement(texts, answers, ended)
    examples = {}
    for grade, marks in info["marks"].items():
        for t, m, ok in zip(texts, marks, info["truth"]):
            if m != ok:
                examples.setdefault(f"{grade}: {'right marked wrong' if ok else 'wrong marked right'}", t)
    accuracy = {g: sum(m) / len(m) for g, m in info["marks"].items()}
    accuracy["careful"] = sum(info["truth"]) / len(texts)
    cut = [not e for e in ended]
    paid = sum(c and task.is_correct(t, a) for c, t, a in zip(cut, texts, answers))
    return counts, {"accuracy": accuracy, "examples": examples, "disagree": info["disagree"], "answers": len(texts),
                    "cut": sum(cut), "cut_paid": paid}


def drift_on_samples(model=None, *, prompts=200, num_samples=4, seed=0):
    """Case ``drift``: the model's own answers (ids, up to and including the end token), decoded and encoded
    again. Returns ``(share, info)`` of :func:`~grpo_edu.training.text.drift.drift`, with ``info["answers"]``."""
    from grpo_edu.training.rollouts.rollout import token_lists
    from grpo_edu.training.text.drift import drift

    net, tokenizer, task = _words(model)
    rollout, _ = sample(net, tokenizer, task, task.split("heldout", prompts), num_samples=num_samples, seed=seed)
    samples = token_lists(rollout)
    share, info = drift(tokenizer, samples)
    return share, dict(info, answers=len(samples))


def format_match(model=None, *, prompts=100, seed=0):
    """Case ``newline_regex``'s measurement: the share of the model's own answers each regex matches whole."""
    from grpo_edu.training.text.format_reward import FORMAT, NEWLINE_FORMAT, match_share

    net, tokenizer, task = _words(model)
    rollout, _ = sample(net, tokenizer, task, task.split("heldout", prompts), num_samples=4, seed=seed)
    return {"FORMAT": match_share(FORMAT, rollout.completions),
            "NEWLINE_FORMAT": match_share(NEWLINE_FORMAT, rollout.completions)}


def measurements(model=None, *, seed=0):
    """Every measurement of the clinic at its full size, for storing (:data:`MEASURED`): the end tokens in one
    step's loss, the regexes on 400 answers, both graders on one answer to each of the 500 held-out questions,
    and drift on 800 answers."""
    loaded = _words(model)[:2]
    counts, info = graders(loaded, prompts=500, seed=seed)
    share, moved = drift_on_samples(loaded, prompts=200, num_samples=4, seed=seed)
    return {"seed": seed, "end_tokens": end_tokens_in_the_loss(loaded, seed=seed),
            "format_match": format_match(loaded, prompts=100, seed=seed),
            "graders": {"counts": counts, "accuracy": info["accuracy"], "disagree": info["disagree"],
                        "answers": info["answers"], "examples": info["examples"], "cut": info["cut"],
                        "cut_paid": info["cut_paid"]},
            "drift": {"share": share, "token_share": moved["token_share"], "answers": moved["answers"],
                      "changed": len(moved["changed"]), "broken_bytes": len(moved["broken_bytes"]),
                      "non_canonical": len(moved["non_canonical"])}}


MEASURED = STORED / "measurements.json"
"""The stored :func:`measurements`, with the command that made them."""


def stored_measurements(path=MEASURED):
    """The stored measurements (a dict, with its file's ``command``)."""
    if not Path(path).is_file():
        fail("path", f"{path} does not exist", "make it with python -m grpo_edu.course.experiments.text_clinic "
             "--case measurements --json assets/text-clinic/measurements.json")
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    return dict(record["measurements"], command=record["command"])


def stored(folder=STORED):
    """Every stored run: {(case, seed): run}, each with its file's ``command``."""
    runs = {}
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for r in record.get("runs", ()):                 # measurements.json holds no runs
            runs[r["case"], r["seed"]] = dict(r, command=record["command"])
    if not runs:
        fail("folder", f"{folder} holds no stored runs",
             "make them with python -m grpo_edu.course.experiments.text_clinic --case CASE --json FILE")
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.text_clinic",
                                     description="Lesson 16's clinic runs (each case and its cure); writes one JSON.")
    parser.add_argument("--case", required=True, choices=(*RUNS, "measurements"))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--model", default=None, help="a words model folder (default: the bundled one)")
    parser.add_argument("--json", required=True, help="the file to write (an existing one is refused unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="let --json replace an existing file")
    args = command_line.parse_args(parser, argv)
    command_line.check_output(parser, "--json", args.json, overwrite=args.overwrite)     # before any run
    import torch

    torch.set_num_threads(1)
    command = "python -m grpo_edu.course.experiments.text_clinic " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.case == "measurements":
        body = {"measurements": measurements(args.model, seed=args.seeds[0])}
    else:
        body = {"runs": [run(args.case, seed=seed, steps=args.steps, model=args.model, progress=True)
                         for seed in args.seeds]}
    written = write_result_file(args.json, json.dumps({"command": "OMP_NUM_THREADS=1 " + command, **body},
                                                      indent=1, ensure_ascii=False) + "\n",
                               overwrite=args.overwrite)
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
