"""The GRPO trainer: a thin loop that reads like DeepSeekMath's algorithm box.

    for step = 1 … total_steps:
        1. take batch_size prompts                          (schedule: epoch order, drop_last)
        2. sample G completions each with π_θold            (rollout.generate, or engine.generate)
        3. score them                                       (rewards.compute_rewards)
        4. Â = group-relative advantages                    (advantages.group_advantages; or RLOO, REINFORCE++;
                                                             per token from step rewards: process_advantages)
           with replay: add stored good answers to the batch (replay.ReplayBuffer.sample)
        5. log π_ref of the completions, if β > 0           (passes.rollout_logprobs: no padding, each prompt once)
        6. this step's learning rate                        (schedule.learning_rate_at)
           for each of num_iterations inner updates (DeepSeekMath's μ):
               for each micro-batch: loss = grpo_loss(…); backward   (gradient accumulation)
               clip the gradient; optimizer step
        7. with a buffer: offer this step's answers to it   (replay.ReplayBuffer.add)

The trainer computes no formula itself: each line above calls the module that owns it.

Counting: one *step* here is one sampled batch, so with ``num_iterations`` > 1 a step
makes that many optimizer updates. TRL counts optimizer updates as its steps instead.
With num_iterations = 1 the policy that sampled is the policy being updated, so π_θold is the detached
current log-prob (ratio exactly 1, as in TRL); with more than one the sampler's own log-probs serve
as π_θold (TRL recomputes them with an extra forward pass; on CPU in float32 the two agree
to ~1e-6).

Replay (lesson 06, ``replay_ratio`` > 0): a step trains on its N = B·G fresh completions plus
k = replay_ratio·N/(1 − replay_ratio) samples drawn from the buffer *before* this step's answers
are offered to it (so a step never replays its own answers). A replayed sample is scored on
its stored answer, tokenized again with ``<eos>`` appended, with its stored advantage. Its π_θold
is the policy at the start of this step, not the older policy that sampled it: the buffer
keeps only the four fields of the source (no log-probs), and the sampler's stale log-probs
would put most replayed tokens' ratios outside [1 − ε, 1 + ε], where clipping zeroes their
gradient. So with μ = 1 the ratio is exactly 1 and a replayed sample adds
−Â·∇log π_θ(answer): an advantage-weighted log-likelihood of the model's own past good
answers, which is closer to supervised fine-tuning on them than to on-policy RL, with an
advantage that is stale (computed under an older policy, within another group). Only
answers that ended with ``<eos>`` and tokenize back to the same tokens are offered, so a
replayed row has exactly the format of a fresh one. A buffer's rounds are steps, continuing
from the last round already in a reopened buffer file.

A step counts only once its update is done: a step stopped by an error (a reward function's)
or by Jupyter's Stop button runs again, with the same samples, at the next ``step()`` or
``train()``. ``output_dir`` belongs to one run at a time (see ``grpo_edu.training.runs.run_folder``).
"""

import contextlib
import time
import warnings

import torch

from grpo_edu.common import _checks
from grpo_edu.core.advantages import estimate_advantages, zero_std_groups
from grpo_edu.core.process_advantages import process_advantages
from grpo_edu.core.losses import TOKEN_COUNT_TYPES, grpo_loss
from grpo_edu.core.schedule import learning_rate_at
from grpo_edu.training.model import lora
from grpo_edu.training.model.chat_tokenizer import is_chat_task, render_prompts
from grpo_edu.training.model.models import load_model_and_tokenizer, pick_device
from grpo_edu.training.rollouts import engine, multi_turn, passes
from grpo_edu.training.rollouts.rollout import (
    answer_token_ids,
    check_prompts,
    completion_logprobs,
    concat_rollouts,
    finished,
    generate,
    length_stats,
    rollout_from_text,
    select_groups,
    token_lists,
)
from grpo_edu.training.rollouts.tools import Tool, tool_stats, trained_mask
from grpo_edu.training.runs import checkpoint as ckpt, run_folder
from grpo_edu.training.task.evaluation import evaluate_run
from grpo_edu.training.task.rewards import compute_rewards
from grpo_edu.training.task.sums_steps import step_rewards
from grpo_edu.training.task.tasks import get_task, load_prompts
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample
from grpo_edu.training.trainers.run_state import CheckpointedRun


def unchanged_reason(history):
    """Why no step of ``history`` changed the model, as a phrase; None when some step did (or cannot be told).

    Read from the logged gradient norms (measured before clipping, so only when ``max_grad_norm`` > 0): a norm
    of ∞ or NaN at every step means clipping scaled every update to 0 (or to NaN), and a norm of 0 at every
    step means there was no gradient at all (every group's rewards equal, and no KL to pull)."""
    norms = [row.get("grad_norm") for row in history]
    if not norms or any(n is None for n in norms):
        return None
    if all(n != n or n in (float("inf"), float("-inf")) for n in norms):
        return (f"the gradient norm was ∞ or NaN at every one of the {len(norms)} steps, so clipping scaled each "
                "update to 0: the weights ended where they started (a setting that overflows the loss or its "
                "gradient, e.g. a huge lora_alpha or learning_rate)")
    if all(n == 0 for n in norms):
        return (f"the gradient was 0 at every one of the {len(norms)} steps: every group's answers scored the same "
                "(no advantage) and nothing else pulled, so no update moved the weights (a task the model never or "
                "always gets right: lesson 03's σ = 0 groups)")
    return None


def no_signal_fix(history, num_generations):
    """What to change when no step had a gradient (every group's answers scored alike, σ = 0): a fix, as a phrase.

    Not an error: the run did what it was asked on a task that gave it nothing to learn from. A model that never
    scored anything needs prompts it sometimes gets right; otherwise a larger G makes a group that holds both a
    better and a worse answer likelier (lesson 03)."""
    if all(row.get("reward_mean") == 0 for row in history):
        return ("the model scored 0 on every answer: train on prompts it sometimes gets right (an easier task or "
                "dataset, or a model warmed up on this one), or draw more answers per prompt (--num-generations, "
                f"now {num_generations}) so that one of them is right")
    return (f"draw more answers per prompt (--num-generations, now {num_generations}), so that a group more often "
            "holds a better and a worse answer, or train on prompts the model gets right only sometimes")


class GRPOTrainer(CheckpointedRun):
    """Train a causal LM with GRPO. ``train()`` runs the whole schedule; ``step()`` one step.

    Everything is optional but the config: by default the bundled model, the config's task
    (its train split as prompts, its checker as the reward) and its held-out split.
    ``reward_weights`` weigh several reward functions (TRL's ``reward_weights``; default 1 each).
    ``callbacks`` are called with each step's metrics dict (e.g. to draw live curves);
    ``eval_callbacks`` with each held-out evaluation, ``{"step", "accuracy"}``, as soon as it is measured.
    ``task``: an object with ``split``, ``is_correct`` and ``reward`` in place of the config's named
    task, for prompts of your own (``grpo_edu.beyond.word_problems.WordProblems``).
    """

    method = "GRPO"   # the progress bar's name; the family's trainers (training/trainers/family.py) name their own
    asynchronous = False   # the asynchronous trainer (training/asynchronous/) samples with a lagging copy

    def __init__(self, config=None, *, model=None, tokenizer=None, train_rows=None, eval_rows=None,
                 reward_funcs=None, reward_weights=None, callbacks=(), eval_callbacks=(), task=None,
                 tool=None):
        self.config = config = config or GRPOConfig()
        if config.policy_lag and not self.asynchronous:
            _checks.fail("policy_lag", f"is {config.policy_lag}, but {type(self).__name__} samples with the policy it "
                         "trains (synchronous), so there is no lag to apply",
                         "use grpo_edu.training.asynchronous.AsyncGRPOTrainer for a lagging sampler, or policy_lag=0")
        if not self.asynchronous:
            if config.mini_batches != 1:
                _checks.fail("mini_batches", f"is {config.mini_batches}, but {type(self).__name__} makes "
                             "num_iterations updates on the whole batch", "use grpo_edu.training.asynchronous."
                             "AsyncGRPOTrainer (or grpo-edu train --two-process), or mini_batches=1")
            for text in config.unused_without_lag():          # asynchronous settings a synchronous run ignores
                warnings.warn(text, stacklevel=2)
        self.task = task if task is not None else get_task(config.task)   # its checker scores "accuracy"
        source = train_rows if train_rows is not None else (config.dataset or self.task.split("train"))
        self.train_rows = load_prompts(source)                         # checks every row has a prompt
        self.eval_rows = self._checked_eval_rows(eval_rows)
        self.schedule = config.schedule(len(self.train_rows))          # checks batch_size ≤ dataset size
        shortest = getattr(self.task, "min_completion_tokens", 0)         # a task whose answers have a format
        if config.max_completion_length < shortest:
            _checks.fail("max_completion_length", f"is {config.max_completion_length}, but no answer to task "
                         f"{self.task.name!r} fits in fewer than {shortest} tokens (its format, then <eos>), so every "
                         "reward would be 0", f"give it at least {shortest}; {self.task.max_answer_chars + 1} holds "
                         "the longest answer")
        self.reward_funcs = list(reward_funcs) if reward_funcs is not None else [self.task.reward]
        self.reward_weights = reward_weights
        self.callbacks = list(callbacks)
        self.eval_callbacks = list(eval_callbacks)
        # preflight: call every reward function once on placeholder completions, so a function
        # that returns the wrong count or NaN fails now, before a model is even loaded
        compute_rewards(self.reward_funcs, self.batch_for(1), [""] * self.schedule.completions_per_step,
                        config.num_generations, weights=reward_weights,
                        completion_ids=[[]] * self.schedule.completions_per_step)
        if config.output_dir:
            run_folder.check_output_dir(config.output_dir)             # a file there fails now, not at the end
        self.run_id = ckpt.new_run_id()    # marks this run's checkpoints and its replay samples
        self.replay_buffer, self._round_offset = None, 0
        if config.uses_replay_buffer:                                  # a bad or busy buffer file fails now, unchanged
            self.replay_buffer = ReplayBuffer(config.replay_capacity, path=config.replay_path,
                                              min_advantage=config.replay_min_advantage,
                                              min_reward=config.replay_min_reward,
                                              top_fraction=config.replay_top_fraction, seed=config.seed,
                                              writer=self.run_id)
            self._round_offset = self.replay_buffer.last_round()       # rounds continue a reopened file's

        self.device = pick_device(config.device)
        if model is None:
            model, tokenizer = load_model_and_tokenizer(config.model, device=self.device,
                                                        trust_remote_code=config.trust_remote_code)
        elif tokenizer is None:
            _checks.fail("tokenizer", "a model was passed without its tokenizer", "pass tokenizer=… too")
        if config.lora_rank is not None:                               # LoRA: only an adapter trains (lora.py)
            with torch.random.fork_rng(devices=[]):                    # A's random start from the seed alone:
                torch.manual_seed(config.seed)                         # same seed, same run, in any process
                model = lora.add_lora(model, config.lora_rank, config.lora_alpha, config.lora_target_modules)
        self.model, self.tokenizer = model.to(self.device), tokenizer
        if is_chat_task(self.task):       # words: each question written through the chat template (a bad one fails now)
            self.train_rows = render_prompts(tokenizer, self.task, self.train_rows)
            self.eval_rows = render_prompts(tokenizer, self.task, self.eval_rows)
        if config.gradient_checkpointing:                              # recompute activations in backward
            if not getattr(model, "supports_gradient_checkpointing", False):
                _checks.fail("gradient_checkpointing", f"{type(model).__name__} does not support it",
                             "use a transformers model that does (most do), or set gradient_checkpointing=False")
            if hasattr(model, "activation_checkpointing_enable"):      # transformers ≥ 5.x's name for it
                model.activation_checkpointing_enable({"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._check_prompts_fit()                                      # unreadable or too long prompts fail now
        self.tool = self._checked_tool(tool)                           # a syntax the tokenizer cannot write fails now
        self.model.train()
        # π_ref: a frozen copy of the starting policy, only needed for the KL term (LoRA: the adapter switched off)
        self.ref_model = lora.reference_for(model) if config.beta > 0 else None
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.learning_rate,
                                           betas=(0.9, 0.99), weight_decay=0.0, foreach=True)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.step_count = 0
        self.history = []      # one metrics dict per step
        self.evals = []        # {"step", "accuracy"} per evaluation
        self._lock = None                  # the output_dir lock token while writing
        self._saved = None                 # (step, number of evals) of the last checkpoint written or loaded
        self._resumed_dir = None           # the run folder resumed from, if any
        self._updates_done = 0             # optimizer updates made by the step in progress

    def _check_prompts_fit(self):
        """Refuse prompts with characters the tokenizer cannot encode, or longer than the model's context."""
        c = self.config
        context = getattr(self.model.config, "max_position_embeddings", None)
        checked = {"the train prompts": self.train_rows, "the held-out prompts": self.eval_rows if c.eval_size else []}
        for where, rows in checked.items():
            if rows:
                check_prompts(self.tokenizer, [r["prompt"] for r in rows], max_new_tokens=c.max_completion_length,
                              context=context, where=where)

    def _checked_tool(self, tool):
        """A tool for multi-turn rollouts (``tools.Tool``), checked against the tokenizer; None without one."""
        if tool is None:
            return None
        if not isinstance(tool, Tool):
            _checks.fail("tool", f"is a {type(tool).__name__}, not a grpo_edu Tool",
                         "wrap the function: Tool(function=my_tool, call_start='[', call_end=']')")
        c = self.config
        if c.replay_ratio or c.dynamic_sampling:
            _checks.fail("tool", "cannot be combined with replay or dynamic sampling yet (their rows carry no "
                         "tool mask)", "set replay_ratio=0 and dynamic_sampling=False, or train without the tool")
        tool.check_tokenizer(self.tokenizer)
        return tool

    def _checked_eval_rows(self, eval_rows):
        if eval_rows is None:
            rows = self.task.split("heldout", self.config.eval_size or None)
            if self.config.eval_size and not rows:
                _checks.fail("eval_rows", f"the task {getattr(self.task, 'name', '')!r} has no held-out prompts of its "
                                          f"own, but eval_size is {self.config.eval_size}",
                             "pass eval_rows=[{'prompt': …, 'answer': …}, …], or set eval_size=0")
            return rows
        rows = load_prompts(eval_rows)
        if self.config.eval_size and any("answer" not in r for r in rows):
            _checks.fail("eval_rows", "some rows have no 'answer', so they cannot be scored",
                         "give every held-out row an 'answer', or set eval_size=0")
        return rows

    # --- data ----------------------------------------------------------------------------
    def batch_for(self, step):
        """The batch_size rows of ``step`` (from 1): a seeded shuffle per epoch, last partial batch dropped."""
        epoch = self.schedule.epoch_of(step)
        order = torch.randperm(len(self.train_rows),
                               generator=torch.Generator().manual_seed(self.config.seed * 100_003 + epoch))
        start = ((step - 1) % self.schedule.steps_per_epoch) * self.config.batch_size
        return [self.train_rows[i] for i in order[start:start + self.config.batch_size].tolist()]

    # --- one step ------------------------------------------------------------------------
    def step(self):
        """Run one GRPO step (the algorithm box in the module docstring); return its metrics."""
        c = self.config
        t0 = time.perf_counter()
        step = self.step_count + 1
        with self._rerun_if_interrupted():                                               # a failed step is not counted
            rows = self.batch_for(step)                                                  # 1. B prompts
            rollout = self._sample([row["prompt"] for row in rows])                      # 2. G completions each
            rewards, reward_info = self._score(rows, rollout)                            # 3. R, (B, G)
            dynamic = None
            if c.dynamic_sampling:                                                       #    DAPO: live groups only
                rows, rollout, rewards, reward_info, dynamic = self._live_groups(step, rows, rollout, rewards)
            advantages = estimate_advantages(rewards, estimator=c.advantage_estimator, scale=c.scale,
                                             lengths=rollout.lengths.view_as(rewards).cpu()).reshape(-1)   # 4. Â, (N,)
            if c.process_supervision != "none":                                          #    or per token from
                advantages = self._process_advantages(rows, rollout)                     #    step rewards, (N, T)
            batch, batch_advantages = self._with_replayed(rollout, advantages)           #    + replayed rows
            ref_logprobs = self._ref_logprobs(batch)                                     # 5. log π_ref, (N', T)
            self._set_learning_rate(step)                                                # 6. lr of this step,
            update = self._update(batch, batch_advantages.to(self.device), ref_logprobs)  #    then the updates
            replay = self._offer_to_buffer(step, rollout, rewards, advantages)           # 7. into the buffer
        self.step_count = step

        metrics = self._metrics(rows, rollout, rewards, update)
        if replay is not None:
            metrics.update(replay_share=(batch.completion_ids.shape[0] - rollout.completion_ids.shape[0])
                           / batch.completion_ids.shape[0], **replay)
        metrics.update(reward_info, **(dynamic or {}), seconds=time.perf_counter() - t0)
        self.history.append(metrics)
        for callback in self.callbacks:
            callback(metrics)
        return metrics

    def _set_learning_rate(self, step):
        """The optimizer's rate for ``step``: ``schedule.learning_rate_at`` (linear decay to 0 by default)."""
        lr = learning_rate_at(step, self.schedule.total_steps, self.config.learning_rate,
                              self.config.lr_scheduler_type)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    @contextlib.contextmanager
    def _rerun_if_interrupted(self):
        """On an error or a Stop (KeyboardInterrupt), rewind the sampler so that the next
        ``step()`` runs the same step again with the same draws."""
        sampler_state = self.generator.get_state()
        buffer_rng = self.replay_buffer.rng.getstate() if self.replay_buffer is not None else None
        self._updates_done = 0
        try:
            yield
        except BaseException:
            self.generator.set_state(sampler_state)
            if buffer_rng is not None:
                self.replay_buffer.rng.setstate(buffer_rng)
            self.optimizer.zero_grad(set_to_none=True)
            if self._updates_done:
                warnings.warn(f"step {self.step_count + 1} was interrupted after {self._updates_done} of its "
                              f"{self.config.num_iterations} optimizer updates; those stay applied, and the "
                              "next step() samples this step again from the updated policy", stacklevel=3)
            raise

    def _sample(self, prompts, model=None, generator=None):
        """G completions per prompt from the current policy π_θold (no gradient); ``model`` and ``generator``:
        another copy of the policy and its random numbers (the asynchronous trainer's sampler)."""
        c = self.config
        model = self.model if model is None else model
        model.eval()
        with self._autocast(sampling=True):
            sample = engine.generate if c.sampler == "engine" else generate
            if self.tool is not None:                                  # multi-turn: the model may call the tool
                sample = lambda *args, **kw: multi_turn.generate_with_tools(*args, self.tool, **kw)   # noqa: E731
            rollout = sample(model, self.tokenizer, prompts, num_generations=c.num_generations,
                             max_new_tokens=c.max_completion_length, temperature=c.temperature,
                             generator=self.generator if generator is None else generator)
        self.model.train()
        return rollout

    @property
    def _pad_id(self):
        """The token that pads completions when rollouts are joined (the tokenizer's pad, else <eos>)."""
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id

    def _score(self, rows, rollout):
        """R for the rollout's completions, (B, G), and each reward function's mean."""
        return compute_rewards(self.reward_funcs, rows, rollout.completions, self.config.num_generations,
                               weights=self.reward_weights, completion_ids=token_lists(rollout))

    # --- dynamic sampling (DAPO) -------------------------------------------------------------
    def _live_groups(self, step, rows, rollout, rewards):
        """Keep the groups with σ > 0; sample more prompts (seeded per step) until batch_size are live or
        ``max_sampling_rounds`` rounds are done. Returns the kept rows, rollout, rewards, reward info and
        the step's dynamic-sampling metrics. With no live group at all the step keeps its first batch
        (every Â is 0: only the KL term acts), as with dynamic sampling off."""
        c = self.config
        B = c.batch_size
        draw = torch.Generator().manual_seed(c.seed * 1_000_003 + step)            # the extra prompts of this step
        pad = self._pad_id
        kept_rows, kept, rounds = [], None, 1
        batch_rows, batch, batch_rewards = rows, rollout, rewards
        while True:
            live = (~zero_std_groups(batch_rewards)).nonzero().flatten().tolist()[:B - len(kept_rows)]
            if live:
                part = select_groups(batch, live)
                kept = part if kept is None else concat_rollouts(kept, part, pad_token_id=pad)
                kept_rows += [batch_rows[b] for b in live]
            if len(kept_rows) == B or rounds == c.max_sampling_rounds:
                break
            picks = torch.randint(len(self.train_rows), (B,), generator=draw).tolist()
            batch_rows = [self.train_rows[i] for i in picks]
            batch = self._sample([r["prompt"] for r in batch_rows])
            batch_rewards, _ = self._score(batch_rows, batch)
            rounds += 1
        metrics = {"sampling_rounds": rounds, "sampled_groups": rounds * B, "live_groups_kept": len(kept_rows)}
        if not kept_rows:
            return rows, rollout, rewards, self._score(rows, rollout)[1], metrics
        rewards, info = self._score(kept_rows, kept)
        return kept_rows, kept, rewards, info, metrics

    # --- replay ----------------------------------------------------------------------------
    def _process_advantages(self, rows, rollout):
        """Â_{i,t} of process supervision (DeepSeekMath §4.1.3): each step's exact reward, normalised in its group,
        summed (or, PURE, the minimum) over the steps that end at or after token t. (N, T); the last step ends at
        the completion's last token (<eos> included), so every trained token has a step ahead of it."""
        probe = "12+3=15;15+4=19#19"
        if len(self.tokenizer(probe, add_special_tokens=False)["input_ids"]) != len(probe):
            _checks.fail("process_supervision", "needs a model whose tokenizer writes one token per character (the "
                         "bundled sums model's), so that a step's last character is its last token",
                         "train the sums task from model='bundled-sums' (--preset sums), or process_supervision='none'")
        G, T = rollout.num_generations, rollout.completion_ids.shape[1]
        lengths = rollout.lengths.tolist()
        advantages = torch.zeros(len(lengths), T)                                       # (N, T)
        for b, row in enumerate(rows):
            group = range(b * G, (b + 1) * G)
            rewards, ends = [], []
            for i in group:
                step_r, char_ends = step_rewards(row["prompt"], rollout.completions[i])   # r_i^index(j), chars
                rewards.append(step_r)                                                   # char k is token k here
                ends.append([min(e, lengths[i]) - 1 for e in char_ends[:-1]] + [lengths[i] - 1])   # index(j)
            adv, _ = process_advantages(rewards, ends, [lengths[i] for i in group], form=self.config.process_credit)
            advantages[b * G:(b + 1) * G, :adv.shape[1]] = torch.from_numpy(adv)
        return advantages

    def _with_replayed(self, rollout, advantages):
        """The step's training rows: the fresh ``rollout`` plus replayed samples, and their advantages.

        k = replay_ratio·N/(1 − replay_ratio) samples (fewer while the buffer holds fewer) are
        drawn before this step's answers are offered. π_θold of a replayed row is the policy at
        the start of this step (the module docstring says why): with μ = 1 the loss takes the
        detached current log-probs anyway; with μ > 1 they are computed here, once, before any update.
        """
        c = self.config
        if not c.replay_ratio:
            return rollout, advantages
        N = rollout.completion_ids.shape[0]
        replayed = self.replay_buffer.sample(self.replay_buffer.replay_count(N, c.replay_ratio))
        if not replayed:
            return rollout, advantages
        extra = rollout_from_text(self.tokenizer, [s.question for s in replayed], [s.answer for s in replayed],
                                  device=self.device)
        if c.num_iterations > 1:
            with torch.no_grad(), self._autocast():
                extra.logprobs, _ = completion_logprobs(self.model, extra.input_ids, extra.attention_mask,
                                                        extra.completion_ids.shape[1], temperature=c.temperature)
            extra.logprobs = extra.logprobs * extra.completion_mask
        pad = self._pad_id
        batch = concat_rollouts(rollout, extra, pad_token_id=pad)
        stored = torch.tensor([s.advantage for s in replayed], dtype=advantages.dtype, device=advantages.device)
        return batch, torch.cat([advantages, stored])                                   # (N + k,)

    def _offer_to_buffer(self, step, rollout, rewards, advantages):
        """Offer this step's finished answers to the buffer (it admits the good ones); refresh it when due.

        Returns the step's replay metrics, or None without a buffer.
        """
        c, buffer = self.config, self.replay_buffer
        if buffer is None:
            return None
        eos, G = self.tokenizer.eos_token_id, rollout.num_generations
        rewards, advantages = rewards.reshape(-1).tolist(), advantages.tolist()
        sampled = [ids[:n] for ids, n in zip(rollout.completion_ids.tolist(), rollout.lengths.tolist())]
        finished = [i for i, ids in enumerate(sampled) if ids and ids[-1] == eos]   # not cut at the length limit
        again = answer_token_ids(self.tokenizer, [rollout.completions[i] for i in finished])
        offered = [ReplaySample(rollout.prompts[i // G], rollout.completions[i], advantages[i], rewards[i])
                   for i, ids in zip(finished, again) if ids == sampled[i][:-1]]   # replays as the same tokens
        round_ = self._round_offset + step
        admitted = buffer.add(offered, round=round_)
        dropped = 0
        if c.replay_refresh_every and step % c.replay_refresh_every == 0:
            dropped = buffer.refresh(round_, c.replay_max_age, c.replay_refresh_keep_advantage)
        return {"replay_buffer_size": len(buffer), "replay_admitted": admitted, "replay_dropped": dropped}

    def _ref_logprobs(self, rollout):
        """log π_ref of every completion token, (N, T); None when β = 0 (no reference model)."""
        if self.ref_model is None:
            return None
        with torch.no_grad(), self._autocast():
            logprobs, _ = passes.rollout_logprobs(self.ref_model, rollout, temperature=self.config.temperature)
        return logprobs

    def _update(self, rollout, advantages, ref_logprobs):
        """``num_iterations`` optimizer updates on one rollout, each accumulating gradients over micro-batches.

        Each micro-batch's loss is weighted so that the accumulated gradient equals that of
        the whole step in one pass: by its share of sequences, or (for "dapo") through one
        token count for the whole step. That is exact for "grpo", "dapo" and "dr_grpo"; "bnpo"
        normalises each micro-batch by its own token count (as TRL does), so its gradient
        depends on how the step is split. Returns token-weighted means of the loss's info.
        """
        c = self.config
        N, T = rollout.completion_ids.shape
        train_mask = trained_mask(rollout, self.tool)                                 # (N, T): no tool reply
        if c.mask_truncated_completions:                                              # cut answers: no gradient
            train_mask = train_mask * finished(rollout, self.tokenizer.eos_token_id).unsqueeze(1).to(train_mask.dtype)
        step_tokens = train_mask.sum()
        trainer_old, sampler = self._sampler_gap(rollout, train_mask)                # π_θold in float32, if needed
        mb = c.micro_batch_size or N
        stats = {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0, "ratio_mean": 0.0, "entropy": 0.0,
                 "grad_norm": 0.0}
        for _ in range(c.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for s in range(0, N, mb):
                rows = slice(s, s + mb)
                mask = train_mask[rows]                                               # (mb, T)
                with self._autocast():
                    logprobs, entropy = passes.rollout_logprobs(self.model, rollout, rows, temperature=c.temperature,
                                                                with_entropy=True, entropy_grad=c.entropy_coef > 0)
                old, sampler_weights, extra = self._policy_reference(logprobs, rollout, rows, mask, trainer_old)
                loss, info = grpo_loss(
                    logprobs, old, advantages[rows], mask,
                    ref_logprobs=None if ref_logprobs is None else ref_logprobs[rows], beta=c.beta,
                    epsilon=c.epsilon, epsilon_high=c.epsilon_high, loss_type=c.loss_type,
                    max_completion_length=c.max_completion_length if c.loss_type == "dr_grpo" else None,
                    num_active_tokens=step_tokens if c.loss_type in TOKEN_COUNT_TYPES else None,
                    entropy=entropy, entropy_coef=c.entropy_coef, importance_sampling_level=c.importance_sampling_level,
                    sapo_temperature_pos=c.sapo_temperature_pos, sapo_temperature_neg=c.sapo_temperature_neg,
                    sampler_weights=sampler_weights)
                weight = 1.0 if c.loss_type in TOKEN_COUNT_TYPES else mask.shape[0] / N
                (loss * weight).backward()                                            # accumulate
                token_share = info["num_active_tokens"] / max(float(step_tokens), 1.0) / c.num_iterations
                stats["loss"] += float(loss.detach()) * weight / c.num_iterations
                stats["clip_fraction"] += info["clip_fraction"] * token_share
                stats["kl"] += info["kl_mean"] * token_share
                stats["ratio_mean"] += info["ratio_mean"] * token_share
                stats["entropy"] += float((entropy.detach() * mask).sum()) / max(float(step_tokens), 1.0) / c.num_iterations
                for key, value in extra.items():                                      # the correction's statistics
                    stats[key] = stats.get(key, 0.0) + value * token_share
            if c.max_grad_norm > 0:
                stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm,
                                                                            foreach=True))
            self.optimizer.step()
            self._updates_done += 1
        stats.update(sampler)
        return stats

    def _policy_reference(self, logprobs, rollout, rows, mask, trainer_old):
        """π_θold of the ratio for micro-batch ``rows``, (mb, T), the per-token weights of the policy term (or None),
        and statistics to log ({} here; the asynchronous trainer's off-policy correction adds its own)."""
        c = self.config
        # π_θold: with one iteration the policy being updated (ratio exactly 1); with more than one the
        # sampler's log-probs, or the trainer's own recomputation when the sampler is not the trainer
        if c.num_iterations == 1:
            old = logprobs.detach()
        else:
            old = rollout.logprobs[rows] if trainer_old is None else trainer_old[rows]
        sampler_weights = None
        if c.importance_sampling_correction:                                          # min(π_θold/π_sampler, C)
            sampler_weights = (trainer_old[rows] - rollout.logprobs[rows]).exp().clamp(max=c.importance_sampling_cap)
        return old, sampler_weights, {}

    def _sampler_gap(self, rollout, mask):
        """When the sampler is not the trainer (``sampling_dtype="bfloat16"``, or a correction is asked for):
        log π_θold recomputed by the trainer in float32, (N, T), and how far the sampler was from it,
        π_θold / π_sampler per token (mean, max; 1 when they agree). Otherwise (None, {})."""
        c = self.config
        if c.sampling_dtype == "float32" and not c.importance_sampling_correction:
            return None, {}
        with torch.no_grad(), self._autocast():
            trainer_old, _ = completion_logprobs(self.model, rollout.input_ids, rollout.attention_mask,
                                                 rollout.completion_ids.shape[1], temperature=c.temperature)
        gap = (trainer_old - rollout.logprobs).exp()                                  # π_θold / π_sampler, (N, T)
        real = mask.bool()
        return trainer_old, {"sampler_ratio_mean": float(gap[real].mean()), "sampler_ratio_max": float(gap[real].max()),
                             "sampler_truncated_fraction": float((gap[real] > c.importance_sampling_cap).float().mean())}

    def _metrics(self, rows, rollout, rewards, update):
        """The per-step log line: rewards, accuracy, dead groups, and the update's statistics."""
        G = self.config.num_generations
        answers = [row.get("answer") for row in rows for _ in range(G)]
        correct = [self.task.is_correct(text, a) for text, a in zip(rollout.completions, answers) if a is not None]
        lengths = length_stats(rollout, self.tokenizer.eos_token_id,
                               correct if len(correct) == len(answers) else None)
        return {
            "step": self.step_count,
            "epoch": self.schedule.epoch_of(self.step_count),
            "loss": update["loss"],
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "accuracy": sum(correct) / len(correct) if correct else None,
            "dead_group_fraction": float(zero_std_groups(rewards).float().mean()),
            "clip_fraction": update["clip_fraction"],
            "kl": update["kl"] if self.ref_model is not None else None,   # not measured without π_ref
            "ratio_mean": update["ratio_mean"],
            "entropy": update["entropy"],
            **lengths,                                    # mean/min/max length, right and wrong; truncated share
            "grad_norm": update["grad_norm"],
            **{k: v for k, v in update.items() if k.startswith("sampler_")},   # a sampler that is not the trainer
            **(tool_stats(rollout) if rollout.tool_calls is not None else {}),  # tools/call_frequency, …
        }

    # --- the whole run -------------------------------------------------------------------
    def evaluate(self, rows=None, **kwargs):
        """Held-out accuracy (sampling at temperature 1 unless told otherwise; ``evaluation.evaluate_run``)."""
        with self._autocast():
            if self.tool is not None:                  # with the tool in the loop, as the run samples
                kwargs = {"max_new_tokens": self.config.max_completion_length, "seed": self.config.seed, **kwargs}
                return multi_turn.evaluate_with_tools(self.model, self.tokenizer, self.eval_rows if rows is None
                                                      else rows, self.task, self.tool, **kwargs)
            return evaluate_run(self.model, self.tokenizer, self.eval_rows if rows is None else rows, self.task,
                                self.config, **kwargs)

    def _record_eval(self):
        if self.config.eval_size and self.eval_rows:
            record = {"step": self.step_count, "accuracy": self.evaluate()["accuracy"]}
            self.evals.append(record)
            for callback in self.eval_callbacks:
                callback(record)
            return record["accuracy"]
        return None

    def run_name(self):
        """What this run trains, as its progress bar names it: the method, then each setting that makes it one
        of GRPO's variants (lesson 12), e.g. ``"GRPO (loss_type=dapo, dynamic sampling)"``."""
        c = self.config
        changes = [f"loss_type={c.loss_type}"] if c.loss_type != "grpo" else []
        if c.importance_sampling_level != "token":
            changes.append(f"{c.importance_sampling_level}-level ratio")
        if c.advantage_estimator != "grpo":
            changes.append(f"advantage_estimator={c.advantage_estimator}")
        if c.dynamic_sampling:
            changes.append("dynamic sampling")
        if c.importance_sampling_correction:
            changes.append("truncated IS")
        return self.method + (f" ({', '.join(changes)})" if changes else "")

    def train(self, *, resume_from=None, overwrite=False, progress=True):
        """Run until the schedule ends; returns the list of per-step metrics.

        ``resume_from``: an output_dir or checkpoint folder; the run continues exactly where
        it stopped (on CPU, the metrics equal an uninterrupted run's), and saves into that
        run's folder unless ``output_dir`` says otherwise. ``overwrite``: let this run
        replace another run's checkpoints in ``output_dir`` (only that run's
        ``checkpoint-*`` folders and ``latest.json`` are removed). Without either, a folder
        that holds another run is refused. Calling ``train()`` again after an interruption
        continues this run.
        """
        from grpo_edu.common.progress import progress_bar

        if resume_from is not None and overwrite:
            _checks.fail("overwrite", "cannot be combined with resume_from",
                         "resume a run (it keeps its checkpoints), or overwrite it to start afresh, not both")
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        c = self.config                                  # resuming may have set output_dir
        with self._writing(overwrite=overwrite):
            if resume_from is None and not self.evals:
                self._record_eval()
            bar = progress_bar(self.schedule.total_steps, initial=self.step_count, disable=not progress,
                               desc=self.run_name())
            try:
                while self.step_count < self.schedule.total_steps:
                    m = self.step()
                    bar.update(1)
                    bar.set_postfix(reward=f"{m['reward_mean']:.2f}", refresh=False)
                    if c.eval_every and self.step_count % c.eval_every == 0:
                        self._record_eval()
                    last = self.step_count == self.schedule.total_steps   # the last one is saved below
                    if c.checkpoint_every and self.step_count % c.checkpoint_every == 0 and not last:
                        self.save_checkpoint()
            finally:
                bar.close()
            if not self.evals or self.evals[-1]["step"] != self.step_count:
                self._record_eval()
            if c.output_dir and self._saved != (self.step_count, len(self.evals)):
                self.save_checkpoint()               # the final checkpoint includes the final evaluation
        return self.history

    def _autocast(self, sampling=False):
        """bf16 autocast on CUDA; on the CPU float32, except the sampler when ``sampling_dtype="bfloat16"``."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.autocast("cpu", dtype=torch.bfloat16,
                              enabled=sampling and self.config.sampling_dtype == "bfloat16")
