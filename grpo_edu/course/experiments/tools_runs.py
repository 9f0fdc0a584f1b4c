"""Lesson 15's runs: GRPO on ``tiny-calc`` with the calculator in the loop, and the settings it compares.

===================  ====================================================================================
setting              what changes (everything else as ``run``'s defaults)
===================  ====================================================================================
``outcome``          reward 1 for a right answer, else 0: the call is judged only by what it leads to
``bonus``            + :data:`BONUS` per call: pays for calling itself (a per-call bonus, unlike verl's fix
                     for call collapse in #1569, PR #4998, which adds +0.1 once to a transcript with a call;
                     a bonus larger than what a call adds to the outcome can be farmed by over-calling)
``cost``             − :data:`COST` per call: a price on each call (latency, money), which pushes the other way
``high_cost``        − :data:`HIGH_COST` per call: a price above what a call adds to the outcome (about 0.9
                     on ``tiny-calc``), so that never calling pays: collapse by design
``reply_in_loss``    the outcome reward, but the tool's reply tokens left in the loss (the mask ablation)
===================  ====================================================================================

Each run reports, on held-out prompts before and after: accuracy, call rate, accuracy with and without
a call, failed calls, the call rate on easy prompts (both terms one digit, which the model adds in its
head) and on the rest, and ``reply_logprob``: the policy's mean log-prob of the calculator's reply tokens
on fixed transcripts ``[a+b]=s#s`` (teacher forcing). That last number is how far a run has pushed the
model to write the tool's answers itself: a masked run has no gradient on those tokens.

The stored runs (seeds 0–2, on this machine's own CPU kernels and under ``ATEN_CPU_CAPABILITY=default``)
are in ``assets/tools-runs/``, each file with the command that made it; :func:`stored_runs` reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from grpo_edu.common import command_line
from grpo_edu.common._checks import choice, fail, positive_int, write_result_file
from grpo_edu.training.model.models import ASSETS

BONUS = 0.5
"""Reward per call in the ``bonus`` setting."""
COST = 0.3
"""Reward taken per call in the ``cost`` setting."""
HIGH_COST = 1.2
"""Reward taken per call in the ``high_cost`` setting: more than the outcome reward a call can add (at most 1)."""
SETTINGS = ("outcome", "bonus", "cost", "reply_in_loss", "high_cost")
PER_CALL = {"bonus": BONUS, "cost": -COST, "high_cost": -HIGH_COST}
"""The per-call reward of each setting that has one."""
STORED = ASSETS / "tools-runs"


def per_call_reward(amount):
    """A reward function paying ``amount`` per call in each completion (negative: a cost)."""
    from grpo_edu.training.task.calc import calls_in

    def call_reward(prompts, completions, **kwargs):
        return [amount * calls_in(c) for c in completions]

    call_reward.__name__ = "call_bonus" if amount >= 0 else "call_cost"
    return call_reward


def _reply_logprob(model, tokenizer, rows, task):
    """Mean log π of the calculator's reply tokens in ``[a+b]=s#s`` for ``rows`` (teacher forcing)."""
    import torch

    from grpo_edu.training.rollouts.rollout import completion_logprobs, rollout_from_text

    texts = [task.demonstration(r, True) for r in rows]
    rollout = rollout_from_text(tokenizer, [r["prompt"] for r in rows], texts)
    T = rollout.completion_ids.shape[1]
    reply = torch.zeros_like(rollout.completion_mask)                                 # (N, T)
    for i, text in enumerate(texts):
        mask = task.demonstration_mask(text)
        reply[i, :len(mask)] = torch.tensor([1 - m for m in mask])
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logprobs, _ = completion_logprobs(model, rollout.input_ids, rollout.attention_mask, T)
    model.train(was_training)
    return float((logprobs * reply).sum() / reply.sum())


def is_easy(prompt):
    """True for a prompt whose terms all have one digit (``3+5=``): the "easy" prompts of ``call_rate_easy``."""
    return all(len(term) == 1 for term in prompt.rstrip("=").split("+"))


def _measure(trainer, rows, samples):
    result = trainer.evaluate(rows, num_samples=samples)
    easy = [s[4] > 0 for s in result["samples"] if is_easy(s[0])]
    hard = [s[4] > 0 for s in result["samples"] if not is_easy(s[0])]
    out = {k: v for k, v in result.items() if k != "samples"}
    out.update(call_rate_easy=sum(easy) / len(easy) if easy else None, call_rate_hard=sum(hard) / len(hard),
               reply_logprob=_reply_logprob(trainer.model, trainer.tokenizer, rows, trainer.task))
    return out


def run(setting="outcome", *, seed=0, steps=20, batch_size=8, num_generations=8, learning_rate=1e-3,
        eval_prompts=100, eval_samples=4, model=None, progress=False):
    """One GRPO run of ``setting`` from ``model`` (default: the bundled ``tiny-calc``); returns
    ``{"before", "after", "history", ...}``."""
    choice("setting", setting, SETTINGS)
    positive_int("steps", steps)
    positive_int("eval_prompts", eval_prompts)
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.model.models import calc_model_dir, load_model_and_tokenizer
    from grpo_edu.training.task.tasks import get_task
    from grpo_edu.training.rollouts.tools import Tool
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    task = get_task("calc")
    model = model or str(calc_model_dir())
    net, tokenizer = load_model_and_tokenizer(model)
    rewards = [task.reward]
    if setting in PER_CALL:
        rewards.append(per_call_reward(PER_CALL[setting]))
    config = GRPOConfig(task="calc", batch_size=batch_size, num_generations=num_generations, max_completion_length=24,
                        total_training_steps=steps, eval_size=0, learning_rate=learning_rate, beta=0.0,
                        sampler="engine", seed=seed)
    trainer = GRPOTrainer(config, model=net, tokenizer=tokenizer, reward_funcs=rewards,
                          tool=Tool(reply_in_loss=setting == "reply_in_loss"))
    rows = task.split("heldout", eval_prompts)
    started = time.perf_counter()
    before = _measure(trainer, rows, eval_samples)
    history = []
    for _ in range(steps):
        m = trainer.step()
        history.append({k: round(m[k], 4) for k in ("reward_mean", "accuracy", "tools/call_frequency",
                                                      "tools/failure_frequency", "model_completion_length")})
        if progress:
            print(setting, seed, len(history), history[-1], file=sys.stderr, flush=True)
    after = _measure(trainer, rows, eval_samples)
    return {"setting": setting, "seed": seed, "steps": steps, "before": before, "after": after, "history": history,
            "seconds": round(time.perf_counter() - started, 1)}


def stored_runs(folder=STORED):
    """Every stored run, from each JSON file in ``folder``, with the file's ``kernels`` on each."""
    runs = []
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        runs += [dict(r, kernels=record["kernels"]) for r in record["runs"]]
    if not runs:
        fail("folder", f"{folder} holds no stored runs", "make them with python -m grpo_edu.course.experiments.tools_runs")
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.experiments.tools_runs",
                                     description="Lesson 15's GRPO runs with the calculator; writes one JSON file.")
    parser.add_argument("--settings", nargs="+", default=["outcome"], choices=SETTINGS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", required=True, help="the file to write (an existing one is refused unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="let --json replace an existing file")
    args = command_line.parse_args(parser, argv)
    command_line.check_output(parser, "--json", args.json, overwrite=args.overwrite)     # before any run
    kernels = os.environ.get("ATEN_CPU_CAPABILITY") or "native"
    runs = [run(s, seed=seed, steps=args.steps, progress=True) for s in args.settings for seed in args.seeds]
    command = "python -m grpo_edu.course.experiments.tools_runs " + " ".join(sys.argv[1:] if argv is None else argv)
    if kernels != "native":
        command = f"ATEN_CPU_CAPABILITY={kernels} " + command
    written = write_result_file(args.json, json.dumps({"command": "OMP_NUM_THREADS=1 " + command, "kernels": kernels,
                                                       "runs": runs}, indent=1) + "\n",
                               overwrite=args.overwrite)
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def token_table(tokenizer, rollout, row):
    """One completion of ``rollout`` drawn token by token: each token with ``M`` (the model wrote it,
    tool mask 1) or ``T`` (the tool's reply, tool mask 0) under it, and the sampler's log-prob of each."""
    n = int(rollout.lengths[row])
    ids = rollout.completion_ids[row, :n].tolist()
    mask = rollout.tool_mask[row, :n].tolist()
    tokens = [tokenizer.convert_ids_to_tokens(i).replace("<eos>", "⏎") for i in ids]
    logps = [f"{lp:.1f}" if m else "—" for lp, m in zip(rollout.logprobs[row, :n].tolist(), mask)]
    width = max(len(t) for t in tokens + logps) + 1
    lines = ["token    " + "".join(t.rjust(width) for t in tokens),
             "written  " + "".join(("M" if m else "T").rjust(width) for m in mask),
             "log π    " + "".join(lp.rjust(width) for lp in logps)]
    return "\n".join(lines)


def runs_table(runs, setting, keys=("accuracy", "call_rate", "failed_call_rate", "reply_logprob")):
    """The stored runs of ``setting`` as text, one line per run: each key before → after."""
    chosen = [r for r in runs if r["setting"] == setting]
    if not chosen:
        fail("setting", f"no stored run has setting {setting!r}", f"use one of {sorted({r['setting'] for r in runs})}")
    head = f"{'kernels':8} {'seed':>4}  " + "  ".join(f"{k:>22}" for k in keys)
    rows = [f"{r['kernels']:8} {r['seed']:>4}  " + "  ".join(
        f"{r['before'][k]:>9.3f} → {r['after'][k]:<9.3f}".rjust(22) for k in keys) for r in chosen]
    return "\n".join([f"setting: {setting} (before → after {chosen[0]['steps']} GRPO steps)", head, *rows])


def after(runs, setting, key, *, kernels=None):
    """The list of ``key`` after training over the stored runs of ``setting`` (optionally one kernel set)."""
    return [r["after"][key] for r in runs if r["setting"] == setting and (kernels is None or r["kernels"] == kernels)]


def change(runs, setting, key, *, kernels=None):
    """The list of after − before of ``key`` over the stored runs of ``setting``."""
    return [r["after"][key] - r["before"][key] for r in runs
            if r["setting"] == setting and (kernels is None or r["kernels"] == kernels)]


def call_rates_table(runs, settings, *, kernels="native"):
    """When does the model call? The call rate on easy prompts (every term one digit: :func:`is_easy`) and on
    the rest, before → after, one line per stored run of each of ``settings`` on ``kernels``."""
    head = f"{'setting':13} {'seed':>4}  {'easy prompts':>18}  {'the rest':>18}"
    lines = [head]
    for setting in settings:
        chosen = [r for r in runs if r["setting"] == setting and r["kernels"] == kernels]
        if not chosen:
            fail("settings", f"no stored run has setting {setting!r} on {kernels} kernels",
                 f"use one of {sorted({r['setting'] for r in runs})}")
        for r in chosen:
            pairs = [f"{r['before'][k]:.3f} → {r['after'][k]:.3f}" for k in ("call_rate_easy", "call_rate_hard")]
            lines.append(f"{setting:13} {r['seed']:>4}  {pairs[0]:>18}  {pairs[1]:>18}")
    return "\n".join(lines)
