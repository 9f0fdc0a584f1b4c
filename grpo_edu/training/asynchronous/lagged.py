"""Asynchronous GRPO in one process: the trainer learns from batches a sampler drew k updates ago.

    for step t = 1 … total_steps:                 (the trainer holds policy version t − 1)
        1. the sampler draws batch t with version v = max(0, t − 1 − k)    (versions.draw_version)
           tagged with v and carrying its own log-probs, log μ
           a batch older than max_staleness is dropped and drawn again      (versions.draw_plan, TRL's rule)
        2. rewards, Â, as in GRPO                                           (GRPOTrainer.step)
        3. the loss, corrected for μ ≠ π_θ                                   (core.off_policy, off_policy_correction)
        4. publish the new weights as version t                             (versions.WeightBoard)

The sampler is a second copy of the model that loads the published weights it is told to, so at k = 0 the run
is synchronous GRPO (batch t drawn by version t − 1, the trainer's own weights). Each draw's random numbers come
from the seed, the step and the attempt alone (``versions.draw_seed``): the run resumes exactly, and a sampler in
another process (``processes.py``) draws the same answers.

Updates per batch: ``mini_batches`` (AReaL's ``ppo_n_minibatches``, verl's train/mini batch sizes), each on its
own share of the batch's groups. The proximal policy π_prox is the trainer's weights at the start of the batch. With
one update it is π_θ before the update, so the corrections read π_prox = sg(π_θ) without an extra forward pass (and
the clip against π_prox never binds); with several, one forward pass without gradient at the batch's start gives
log π_prox (AReaL's "recompute logprob"), and from the second update on π_θ ≠ π_prox.
"""

import copy
import warnings

import torch

from grpo_edu.common import _checks
from grpo_edu.core.off_policy import correct
from grpo_edu.training.asynchronous.versions import WeightBoard, draw_plan, draw_seed, fingerprint
from grpo_edu.training.rollouts import passes
from grpo_edu.training.rollouts.rollout import select_groups
from grpo_edu.training.trainers.trainer import GRPOTrainer


class AsyncGRPOTrainer(GRPOTrainer):
    """GRPO with a sampler that lags ``config.policy_lag`` updates behind the trainer (see the module doc).

    Takes GRPOTrainer's arguments. Each step's metrics add ``policy_version`` (the version that drew the batch),
    ``staleness``, ``dropped_batches``, ``samples_drawn`` (answers sampled so far, dropped ones included) and the
    correction's statistics (``log_ratio_std``: σ of log π_θ/μ, ``kl_behaviour``, ``masked_fraction``, …).
    """

    asynchronous = True
    free_running = False      # TwoProcessGRPOTrainer(free_running=True): the lag comes from the two sides' speeds

    def __init__(self, config=None, *, tool=None, **kwargs):
        if tool is not None:
            _checks.fail("tool", "is not supported by the asynchronous trainer yet (its batches carry no tool mask)",
                         "train tools with GRPOTrainer")
        super().__init__(config, **kwargs)
        if not self.config.policy_lag and not self.free_running:
            for text in self.config.unused_without_lag():        # settings a sampler that never lags ignores
                warnings.warn(text, stacklevel=2)
        self._proximal = None                                     # log π_prox of the mini-batch being trained
        # (the config refuses a lag with num_iterations > 1, replay, dynamic sampling or the sampler IS weights)
        self.sampler_model = copy.deepcopy(self.model).eval().requires_grad_(False)   # the sampler's copy
        self.board = WeightBoard()
        self.board.publish(0, self.model)                                             # version 0: the start
        self.samples_drawn = 0
        self._draw_tags = {}

    # --- 1. the sampler draws batch t -------------------------------------------------------
    def _sample(self, prompts, model=None, generator=None):
        if model is not None:                                      # another copy was named: sample with it
            return super()._sample(prompts, model, generator)
        step = self.step_count + 1
        rollout, tags = self.draw(step, prompts)
        self._draw_tags = tags
        return rollout

    def draw(self, step, prompts, weights=None, plan=None):
        """Batch ``step``'s answers as the sampler draws them: ``(rollout, tags)``. ``weights``: version → state
        dict (default: this trainer's board). Drops and redraws a batch staler than ``max_staleness``. ``plan``: the
        versions to draw with (the last one kept) in place of the lag's (a free-running sampler names its own)."""
        c = self.config
        weights = weights or self.board.load
        plan = plan or draw_plan(step, c.policy_lag, c.max_staleness)
        for attempt, version in enumerate(plan):
            self.sampler_model.load_state_dict(weights(version))
            generator = torch.Generator(device=self.device).manual_seed(draw_seed(c.seed, step, attempt))
            rollout = super()._sample(prompts, self.sampler_model, generator)
        self.sampler_model.eval()
        tags = {"step": step, "policy_version": plan[-1], "staleness": step - 1 - plan[-1],
                "dropped_batches": len(plan) - 1, "samples": len(plan) * rollout.completion_ids.shape[0]}
        return rollout, tags

    # --- 3. the updates on one batch, and the corrected loss ------------------------------------
    def _update(self, rollout, advantages, ref_logprobs):
        """``mini_batches`` optimizer updates, one per share of the groups (GRPOTrainer's update on each), all
        against log π_prox from the weights at the batch's start. Returns the updates' statistics, weighted by
        their tokens (grad_norm: the mean of the updates')."""
        n = self.config.mini_batches
        if n == 1 and self.config.num_iterations == 1:            # π_prox = sg(π_θ): no extra pass needed
            return super()._update(rollout, advantages, ref_logprobs)
        with torch.no_grad(), self._autocast():                                      # log π_prox, (N, T)
            proximal, _ = passes.rollout_logprobs(self.model, rollout, temperature=self.config.temperature)
        B, G = len(rollout.prompts), rollout.num_generations
        share = B // n
        totals, tokens = {}, 0.0
        for j in range(n):
            groups = list(range(j * share, (j + 1) * share))
            rows = slice(j * share * G, (j + 1) * share * G)
            part = select_groups(rollout, groups)
            self._proximal = proximal[rows]
            try:
                stats = super()._update(part, advantages[rows],
                                        None if ref_logprobs is None else ref_logprobs[rows])
            finally:
                self._proximal = None
            weight = float(part.completion_mask.sum())
            tokens += weight
            for key, value in stats.items():
                w = 1.0 if key == "grad_norm" else weight
                totals[key] = totals.get(key, 0.0) + value * w
        return {k: v / (n if k == "grad_norm" else max(tokens, 1.0)) for k, v in totals.items()}

    def _policy_reference(self, logprobs, rollout, rows, mask, trainer_old):
        c = self.config
        proximal = logprobs.detach() if self._proximal is None else self._proximal[rows]   # π_prox: the batch's start
        (old, weights), info = correct(c.off_policy_correction, logprobs, proximal, rollout.logprobs[rows], mask,
                                       cap=c.off_policy_cap)
        if weights is not None:
            weights = weights.expand_as(logprobs)                  # (mb, T)
        keep = ("log_ratio_std", "log_ratio_p05", "log_ratio_p95", "kl_behaviour", "masked_fraction",
                "truncated_fraction", "weight_mean")
        return old, weights, {k: info[k] for k in keep}

    # --- 4. publish, and the step's log line ----------------------------------------------------
    def step(self):
        metrics = super().step()
        self._publish(self.step_count)
        self.board.forget_before(self._oldest_needed())
        return metrics

    def _publish(self, version):
        self.board.publish(version, self.model)

    def _oldest_needed(self):
        """The oldest version a later draw can still ask for: batch t + 1 is drawn by t − k at the oldest."""
        return max(0, self.step_count - self.config.policy_lag)

    def _metrics(self, rows, rollout, rewards, update):
        metrics = super()._metrics(rows, rollout, rewards, update)
        self.samples_drawn += self._draw_tags.get("samples", 0)
        metrics.update({k: v for k, v in self._draw_tags.items() if k not in ("step", "samples")},
                       samples_drawn=self.samples_drawn)
        for key in ("log_ratio_std", "log_ratio_p05", "log_ratio_p95", "kl_behaviour", "masked_fraction",
                    "truncated_fraction", "weight_mean"):
            metrics[key] = update.get(key)
        return metrics

    def run_name(self):
        c = self.config
        return f"async GRPO (lag {c.policy_lag}, {c.off_policy_correction})"

    # --- checkpoints: the versions a later draw still needs -------------------------------------
    def _method_state(self):
        versions = [v for v in self.board.versions() if v >= self._oldest_needed()]
        states = {v: self.board.load(v) for v in versions}
        tensors = {f"v{v}/{name}": t for v, state in states.items() for name, t in state.items()}
        return {"versions": versions, "samples_drawn": self.samples_drawn,
                "fingerprints": {str(v): fingerprint(state) for v, state in states.items()}}, tensors

    def _restore_method_state(self, state, tensors, folder):
        def damaged(problem):
            _checks.fail("resume_from", f"{folder}: {problem} (a damaged or edited checkpoint)",
                         "resume from another checkpoint of the run, or start it again")

        if not state or "versions" not in state:
            _checks.fail("resume_from", f"{folder} was not saved by the asynchronous trainer (no published weights)",
                         "resume it with GRPOTrainer, or start a new asynchronous run")
        versions = state["versions"]
        if (not isinstance(versions, list) or not versions or not all(type(v) is int and v >= 0 for v in versions)
                or versions != list(range(versions[0], versions[0] + len(versions)))):
            damaged(f"its published versions {versions!r} are not a run of consecutive versions")
        if not isinstance(state.get("samples_drawn"), int):
            damaged("it does not say how many answers were drawn (samples_drawn)")
        board = WeightBoard()
        for v in versions:
            prefix = f"v{v}/"
            board._memory[v] = {k[len(prefix):]: t for k, t in tensors.items() if k.startswith(prefix)}
            if set(board._memory[v]) != set(self.model.state_dict()):
                damaged(f"version {v}'s weights are missing or incomplete in trainer_state.safetensors")
            saved = state.get("fingerprints", {}).get(str(v))      # checkpoints from before fingerprints: none
            if saved is not None and saved != fingerprint(board._memory[v]):
                damaged(f"the weights stored as version {v} are not the ones saved as version {v} (their "
                        "fingerprint differs)")
        if fingerprint(board._memory[versions[-1]]) != fingerprint(self.model.state_dict()):
            damaged(f"the newest version, {versions[-1]}, is not the checkpoint's model")
        self.board = board
        self.samples_drawn = state["samples_drawn"]
