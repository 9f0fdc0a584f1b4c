"""GRPO's family as trainers: PPO with a critic, REINFORCE, rejection-sampling fine-tuning, DPO (lesson 13).

Every method here takes the same steps as :class:`~grpo_edu.training.trainers.trainer.GRPOTrainer`, on the same
prompts, with the same B·G answers sampled per step (the config's ``batch_size`` and ``num_generations``);
only what a step learns from those answers differs. Each trainer's ``step()`` reads like its algorithm box:

=============  =====================================================================================
``grpo``       Â_i = (R_i − μ_group) / σ_group, clipped surrogate (the course's GRPOTrainer, unchanged)
``reinforce``  Â_i = R_i: no baseline at all (``advantage_estimator="reinforce"``)
``ppo``        a critic V(s_t) (``training.critic``), Â_{i,t} by GAE(γ, λ) with R_i on the last token,
               the same clipped surrogate with one advantage per token, and PPO's clipped value loss
``rft``        keep the right answers, one supervised step on them, a token mean over all kept tokens
               (RAFT's and STaR's code; ``rft_normaliser="tokens"``)
``dpo``        one (right, wrong) pair per prompt from the same G answers, the DPO loss against the
               frozen start model π_ref, re-sampled from the current policy each step (online)
``dpo_offline`` the same pairs, sampled from π_ref itself at every step: the distribution of a
               dataset made once from the start model before training (offline DPO)
=============  =====================================================================================

Two controls (lesson 13's test of what made ``reinforce`` collapse on the sums model):
``reinforce_dr_grpo`` is ``reinforce`` with ``loss_type="dr_grpo"`` (a constant normaliser, N·|o|_max, in
place of each answer's own length); ``rft_answer_mean`` is ``rft`` with ``rft_normaliser="answer"``, each
answer averaged over its own tokens: DeepSeekMath's RFT (appendix A.1.2, eq. 8), whose gradient is
``reinforce``'s without the KL term.

Names follow verl and TRL: ``gamma`` γ and ``lam`` λ (verl's ``algorithm.gamma`` / ``algorithm.lam``),
``cliprange_value`` (verl's ``critic.cliprange_value``), ``beta`` and ``ref_model`` (TRL's ``DPOTrainer``).
The family's own settings sit in :class:`FamilyConfig`; the rest is the run's ``GRPOConfig``.

A family run's checkpoints record its method and the method's settings (``FamilyConfig``), and PPO's hold
the critic and its optimizer too, so each method resumes exactly like GRPO; resuming with another method,
or other settings, is refused (``GRPOTrainer._check_method``). Replay and dynamic sampling are GRPO's
(``METHOD_SETTINGS`` leaves them off). A step that has nothing to learn from (rejection sampling with no
right answer, DPO with no pair) is **skipped**: no optimizer step (Adam's momentum would still move the
weights on a zero gradient), ``metrics["skipped"]`` is True, ``loss`` is None, and a warning names the step.
"""

import copy
import dataclasses
import time
import warnings
from dataclasses import dataclass

import torch

from grpo_edu.common import _checks
from grpo_edu.core.dpo import dpo_log, dpo_loss, preference_pairs, sequence_logprobs
from grpo_edu.core.gae import explained_variance, gae_advantages, value_loss
from grpo_edu.core.rejection_sampling import NORMALISERS, select_correct, sft_loss
from grpo_edu.core.schedule import learning_rate_at
from grpo_edu.training.model.critic import Critic
from grpo_edu.training.rollouts.rollout import completion_logprobs
from grpo_edu.training.rollouts.tools import trained_mask
from grpo_edu.training.trainers.trainer import GRPOTrainer


@dataclass(frozen=True)
class FamilyConfig:
    """The settings of the family's methods that GRPO has no field for (see each field's docstring)."""

    gamma: float = 1.0
    """γ: PPO's discount over the completion's tokens (verl's ``algorithm.gamma``, default 1.0). In [0, 1]."""
    lam: float = 1.0
    """λ: GAE's trade-off, 1 = the Monte-Carlo return minus V, 0 = one-step TD (verl's ``algorithm.lam``, 1.0;
    TRL's PPO 0.95). In [0, 1]. With γ = λ = 1, Â_t = R − V(s_t): REINFORCE with a learned baseline."""
    whiten_advantages: bool = True
    """Standardise PPO's token advantages over the batch, as verl always does for GAE."""
    cliprange_value: float = 0.5
    """ε_v: how far one batch may move the critic's value from V_old (verl 0.5; TRL's PPO 0.2)."""
    critic_learning_rate: float = 1e-3
    """The critic's AdamW step size at the first step (it decays with the policy's schedule). verl gives the
    critic a rate about 10× the actor's; the bundled models' policy takes 3e-4."""
    beta: float = 0.1
    """β: DPO's temperature, how far from π_ref the policy may go (TRL's ``DPOConfig.beta``, default 0.1). > 0."""
    threshold: float = 1.0
    """Rejection sampling keeps the answers with reward ≥ this (a right answer, with a 0/1 reward)."""
    max_per_prompt: int | None = None
    """Rejection sampling keeps at most this many right answers per prompt (RAFT: 1); None keeps them all."""
    rft_normaliser: str = "tokens"
    """Rejection sampling's loss: "tokens", a token mean over all kept tokens (RAFT's and STaR's code, any SFT
    trainer); "answer", each kept answer over its own tokens, then 1/N over all N answers: DeepSeekMath's RFT
    (eq. 8), whose gradient is REINFORCE's with GRPO's per-answer mean (``core.rejection_sampling``)."""

    def __post_init__(self):
        for name, meaning in (("gamma", "the discount γ"), ("lam", "the GAE λ")):
            value = getattr(self, name)
            if not (_checks.is_finite_number(value) and 0 <= value <= 1):
                _checks.fail(name, f"must be a number in [0, 1], got {value!r}",
                             f"pass {meaning} between 0 and 1 (verl's default is 1.0; PPO papers use 0.95–0.99)")
        _checks.positive_float("beta", self.beta, fix="pass a DPO temperature β > 0 (TRL's default is 0.1)")
        _checks.positive_float("cliprange_value", self.cliprange_value,
                               fix="pass the value clip range ε_v > 0 (verl: 0.5, TRL's PPO: 0.2)")
        _checks.positive_float("critic_learning_rate", self.critic_learning_rate,
                               fix="pass the critic's step size, e.g. 1e-3 for the bundled models")
        if self.critic_learning_rate > 0.1:
            _checks.fail("critic_learning_rate", f"must be ≤ 0.1, got {self.critic_learning_rate!r}: AdamW moves "
                         "every weight by about the rate each step, so the critic's values overflow",
                         "pass 1e-3 for the bundled models")
        _checks.finite_float("threshold", self.threshold, fix="pass the smallest reward that counts as right, e.g. 1.0")
        if self.rft_normaliser not in NORMALISERS:
            _checks.fail("rft_normaliser", f"unknown value {self.rft_normaliser!r}",
                         "pass 'tokens' (RAFT, STaR: a token mean) or 'answer' (DeepSeekMath's RFT, eq. 8)")
        if self.max_per_prompt is not None:
            _checks.positive_int("max_per_prompt", self.max_per_prompt,
                                 fix="pass how many right answers to keep per prompt (RAFT: 1), or None for all")


def _skipped(trainer, step, why):
    """The update of a step with nothing to learn from: no optimizer step, logged, never a silent zero loss."""
    warnings.warn(f"step {step}: {why}, so the step was skipped (no optimizer step); metrics['skipped'] is True",
                  stacklevel=3)
    return {"loss": None, "clip_fraction": 0.0, "kl": None, "ratio_mean": 1.0, "entropy": None, "grad_norm": 0.0,
            "skipped": True}


class _FamilyTrainer(GRPOTrainer):
    """What the family's trainers share: their settings, a step that logs like GRPO's, and what a checkpoint
    records of the method (its name, its FamilyConfig, PPO's critic)."""

    def __init__(self, config=None, *, family=None, **kwargs):
        self.family = family if family is not None else FamilyConfig()
        if not isinstance(self.family, FamilyConfig):
            _checks.fail("family", f"must be a FamilyConfig, got {type(self.family).__name__}",
                         "pass family=FamilyConfig(…) (grpo_edu.training.trainers.family)")
        super().__init__(config, **kwargs)

    def _finish(self, step, t0, rows, rollout, rewards, reward_info, update):
        """Count the step and log it as GRPOTrainer.step does (same keys), plus the method's own."""
        self.step_count = step
        metrics = self._metrics(rows, rollout, rewards, update)
        extra = {k: v for k, v in update.items() if k not in metrics and k != "skipped"}
        metrics.update(reward_info, **extra, skipped=bool(update.get("skipped", False)),
                       seconds=time.perf_counter() - t0)
        self.history.append(metrics)
        for callback in self.callbacks:
            callback(metrics)
        return metrics

    def _mask(self, rollout):
        """The tokens this method learns from, (N, T): GRPO's rule (``tools.trained_mask``), so a tool's reply
        tokens enter no method's loss: not SFT's NLL, not DPO's log π(y), not the critic's value loss."""
        return trained_mask(rollout, self.tool)

    def _clip_and_step(self, optimizer, parameters):
        """Clip the gradient (max_grad_norm) and take one optimizer step; returns the norm before clipping."""
        norm = 0.0
        if self.config.max_grad_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(parameters, self.config.max_grad_norm, foreach=True))
        optimizer.step()
        self._updates_done += 1
        return norm

    # --- what a checkpoint records of the method (GRPOTrainer.save_checkpoint / load_checkpoint) -------------
    @property
    def method_name(self):
        """The method's name in :data:`METHODS`, as a checkpoint records it."""
        if isinstance(self, PPOTrainer):
            return "ppo"
        if isinstance(self, RejectionSamplingTrainer):
            return "rft"
        return "dpo_offline" if getattr(self, "offline", False) else "dpo"

    def method_settings(self):
        """The FamilyConfig this run trains with: a resume must match it."""
        return dataclasses.asdict(self.family)

    def _method_state(self):
        """PPO's critic: its weights (``critic.*``) and its optimizer's state (``critic_optim.*``); others: none."""
        from grpo_edu.training.runs.checkpoint import flatten_optimizer

        if getattr(self, "critic", None) is None:
            return {}, {}
        tensors, meta = flatten_optimizer(self.critic_optimizer, "critic_optim")
        tensors.update({f"critic.{k}": v for k, v in self.critic.state_dict().items()})
        return {"critic_optimizer": meta}, tensors

    def _restore_method_state(self, state, tensors, folder):
        from grpo_edu.training.runs.checkpoint import CheckpointError, unflatten_optimizer

        if getattr(self, "critic", None) is None:
            return
        weights = {k[len("critic."):]: v.to(self.device) for k, v in tensors.items() if k.startswith("critic.")}
        if not weights or not state or "critic_optimizer" not in state:
            _checks.fail("resume_from", f"{folder} holds no critic (a PPO checkpoint written before critics were "
                         "saved)", "start the PPO run again, in another output_dir", error=CheckpointError)
        self.critic.load_state_dict(weights, strict=True)
        self.critic_optimizer.load_state_dict(unflatten_optimizer(tensors, state["critic_optimizer"], "critic_optim"))


class PPOTrainer(_FamilyTrainer):
    """PPO with a critic: GRPO's loop with the group baseline replaced by a learned value model.

        for step = 1 … total_steps:
            1. B prompts, G answers each, rewards R        (as GRPO)
            2. V_old(s_t) = critic(answers)                 (no gradient)
            3. Â_{i,t}, returns R_t = GAE(R, V_old; γ, λ)   (core.gae.gae_advantages, R on the last token)
            4. the policy's clipped loss with Â_{i,t}      (GRPOTrainer._update: the same code as GRPO)
            5. the critic's clipped value loss on R_t       (core.gae.value_loss), its own optimizer

    ``num_iterations`` (GRPOConfig; verl's ``ppo_epochs``) updates each model on every batch. With one, the ratio
    is 1 and V = V_old on the only update, so neither the ratio clip nor the value clip can act: a one-update
    actor-critic. From the second update on both can; the step logs ``clip_fraction`` and
    ``value_clip_fraction`` (means over the step's updates) and the critic's ``explained_variance``
    (``core.gae.explained_variance`` of V_old against the returns, verl's ``critic/vf_explained_var``).
    """

    method = "PPO"

    def __init__(self, config=None, *, family=None, **kwargs):
        super().__init__(config, family=family, **kwargs)
        self.critic = Critic(self.model).to(self.device)
        self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=self.family.critic_learning_rate,
                                                  betas=(0.9, 0.99), weight_decay=0.0, foreach=True)

    def step(self):
        c, t0, step = self.config, time.perf_counter(), self.step_count + 1
        with self._rerun_if_interrupted():
            rows = self.batch_for(step)                                                  # 1. B prompts
            rollout = self._sample([row["prompt"] for row in rows])                      #    G answers each
            rewards, reward_info = self._score(rows, rollout)                            #    R, (B, G)
            advantages, returns, old_values = self.token_advantages(rollout, rewards)   # 2–3. (N, T) each
            ref_logprobs = self._ref_logprobs(rollout)
            self._set_learning_rate(step)
            update = self._update(rollout, advantages.to(self.device), ref_logprobs)     # 4. the policy
            update.update(self._update_critic(rollout, old_values, returns, step))       # 5. the critic
            update["explained_variance"], _ = explained_variance(old_values, returns, rollout.completion_mask)
        return self._finish(step, t0, rows, rollout, rewards, reward_info, update)

    def token_advantages(self, rollout, rewards):
        """Â_{i,t} by GAE over the critic's current values: (advantages, returns, old_values), each (N, T)."""
        f = self.family
        mask = self._mask(rollout)                                                       # (N, T), no tool reply
        with torch.no_grad():
            old_values = self.critic(rollout.input_ids, rollout.attention_mask, mask.shape[1])   # V_old(s_t), (N, T)
        advantages, info = gae_advantages(rewards.reshape(-1).to(old_values.dtype).cpu(), old_values.cpu(),
                                          mask.cpu(), gamma=f.gamma, lam=f.lam,
                                          whiten=f.whiten_advantages and mask.sum() > 1)
        return advantages, info["returns"].to(self.device), old_values

    def _update_critic(self, rollout, old_values, returns, step):
        """``num_iterations`` steps of the critic's AdamW on the clipped value loss (micro-batched like the policy)."""
        c = self.config
        lr = learning_rate_at(step, self.schedule.total_steps, self.family.critic_learning_rate, c.lr_scheduler_type)
        for group in self.critic_optimizer.param_groups:
            group["lr"] = lr
        mask = self._mask(rollout)                                                       # (N, T), no tool reply
        N, T = mask.shape
        mb = c.micro_batch_size or N
        stats = {"value_loss": 0.0, "value_clip_fraction": 0.0, "value_mean": 0.0, "critic_grad_norm": 0.0}
        for _ in range(c.num_iterations):
            self.critic_optimizer.zero_grad(set_to_none=True)
            for s in range(0, N, mb):
                rows = slice(s, s + mb)
                values = self.critic(rollout.input_ids[rows], rollout.attention_mask[rows], T)   # V(s_t), (mb, T)
                loss, info = value_loss(values, old_values[rows], returns[rows], mask[rows],
                                        cliprange_value=self.family.cliprange_value)
                share = values.shape[0] / N
                (loss * share).backward()
                stats["value_loss"] += float(loss.detach()) * share / c.num_iterations
                stats["value_clip_fraction"] += info["clip_fraction"] * share / c.num_iterations
                stats["value_mean"] += info["value_mean"] * share / c.num_iterations
            stats["critic_grad_norm"] = self._clip_and_step(self.critic_optimizer, self.critic.parameters())
        return stats


class RejectionSamplingTrainer(_FamilyTrainer):
    """Rejection-sampling fine-tuning (RAFT, expert iteration, STaR) on the same samples GRPO draws.

        for step = 1 … total_steps:
            1. B prompts, G answers each, rewards R        (as GRPO)
            2. keep the answers with R ≥ threshold          (core.rejection_sampling.select_correct)
            3. one supervised step on the kept answers      (sft_loss: their NLL, by rft_normaliser)
               nothing kept → the step is skipped and logged
    """

    method = "rejection sampling"

    def run_name(self):
        per_answer = self.family.rft_normaliser == "answer"
        return super().run_name() + (" (rft_normaliser=answer: DeepSeekMath's eq. 8)" if per_answer else "")

    def step(self):
        t0, step = time.perf_counter(), self.step_count + 1
        with self._rerun_if_interrupted():
            rows = self.batch_for(step)
            rollout = self._sample([row["prompt"] for row in rows])
            rewards, reward_info = self._score(rows, rollout)                            # R, (B, G)
            keep, kept = select_correct(rewards, threshold=self.family.threshold,
                                        max_per_prompt=self.family.max_per_prompt)       # (B, G) bool
            if kept["skip"]:
                update = _skipped(self, step, "rejection sampling kept no answer (none was right)")
            else:
                self._set_learning_rate(step)
                update = self._sft_update(rollout, keep.reshape(-1).to(self.device))
            update["kept_fraction"] = kept["kept_fraction"]
        return self._finish(step, t0, rows, rollout, rewards, reward_info, update)

    def _sft_update(self, rollout, keep):
        """``num_iterations`` AdamW steps on the kept answers' NLL, micro-batched: a token mean over all kept tokens,
        or each answer over its own tokens and then 1/N (``FamilyConfig.rft_normaliser``)."""
        c = self.config
        mask = self._mask(rollout)                                                       # (N, T), no tool reply
        N, T = mask.shape
        total = float((mask * keep.unsqueeze(1)).sum())                                  # kept tokens in the step
        mb = c.micro_batch_size or N
        stats = {"loss": 0.0, "clip_fraction": 0.0, "kl": None, "ratio_mean": 1.0, "entropy": 0.0, "grad_norm": 0.0}
        for _ in range(c.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for s in range(0, N, mb):
                rows = slice(s, s + mb)
                logprobs, entropy = completion_logprobs(self.model, rollout.input_ids[rows],
                                                        rollout.attention_mask[rows], T,
                                                        temperature=c.temperature, with_entropy=True)
                normaliser = self.family.rft_normaliser
                loss, info = sft_loss(logprobs, mask[rows], keep[rows], normaliser=normaliser)
                # its part of the step's mean: of the kept tokens ("tokens") or of the N answers ("answer")
                share = info["num_tokens"] / total if normaliser == "tokens" else logprobs.shape[0] / N
                (loss * share).backward()
                stats["loss"] += float(loss.detach()) * share / c.num_iterations
                stats["entropy"] += float((entropy * mask[rows]).sum()) / float(mask.sum()) / c.num_iterations
            stats["grad_norm"] = self._clip_and_step(self.optimizer, self.model.parameters())
        return stats


class DPOTrainer(_FamilyTrainer):
    """DPO on pairs the model makes itself: a right and a wrong answer to one prompt, from the same G answers.

        for step = 1 … total_steps:
            1. B prompts, G answers each, rewards R        (online: from π_θ; offline: from π_ref)
            2. one (chosen, rejected) pair per prompt whose answers differ in reward   (core.dpo.preference_pairs)
            3. the DPO loss against the frozen start model π_ref (TRL's ``ref_model``)  (core.dpo.dpo_loss)
               no pair in the batch → the step is skipped and logged

    ``offline=True`` samples every step's answers from π_ref: the same prompts and budget as the online
    run, and the pairs a dataset made once from the start model would hold.
    """

    method = "DPO"

    def run_name(self):
        return ("offline " if self.offline else "") + super().run_name()

    def __init__(self, config=None, *, family=None, offline=False, **kwargs):
        super().__init__(config, family=family, **kwargs)
        self.offline = bool(offline)
        if self.ref_model is None:                                   # GRPOConfig.beta = 0: DPO still needs π_ref
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)

    def _sample(self, prompts):
        """Online: G answers from the current policy. Offline: from π_ref, the start model."""
        if not self.offline:
            return super()._sample(prompts)
        policy, self.model = self.model, self.ref_model
        try:
            return super()._sample(prompts)
        finally:
            self.ref_model.eval()
            self.model = policy

    def _ref_logprobs(self, rollout):
        with torch.no_grad(), self._autocast():
            logprobs, _ = completion_logprobs(self.ref_model, rollout.input_ids, rollout.attention_mask,
                                              rollout.completion_ids.shape[1], temperature=self.config.temperature)
        return logprobs

    def step(self):
        t0, step = time.perf_counter(), self.step_count + 1
        with self._rerun_if_interrupted():
            rows = self.batch_for(step)
            rollout = self._sample([row["prompt"] for row in rows])
            rewards, reward_info = self._score(rows, rollout)                            # R, (B, G)
            pairs, paired = preference_pairs(rewards)                                    # (P, 2) flat indices
            if paired["num_pairs"] == 0:
                update = _skipped(self, step, "DPO found no pair (every prompt's answers were all right or all "
                                              "wrong)")
            else:
                self._set_learning_rate(step)
                update = self._dpo_update(rollout, pairs.to(self.device))
            update["pair_fraction"] = paired["pair_fraction"]
        return self._finish(step, t0, rows, rollout, rewards, reward_info, update)

    def _dpo_update(self, rollout, pairs):
        """``num_iterations`` AdamW steps on the DPO loss of the P pairs, micro-batched by pairs: a chunk of k pairs
        adds its mean loss × k / P, so the gradient is that of the P pairs at once. A pair's two answers meet in one
        loss, so a forward holds max(1, ``micro_batch_size`` // 2) pairs."""
        c = self.config
        P = pairs.shape[0]
        chosen_rejected = pairs.reshape(-1)                                              # y_w, y_l, y_w, … (2P,)
        input_ids = rollout.input_ids[chosen_rejected]                                   # (2P, P+T)
        attention = rollout.attention_mask[chosen_rejected]
        mask = self._mask(rollout)[chosen_rejected]                                      # (2P, T), no tool reply
        T = mask.shape[1]
        k = max(1, (c.micro_batch_size or 2 * P) // 2)                                   # pairs per forward
        chunks = [slice(2 * s, 2 * min(s + k, P)) for s in range(0, P, k)]              # rows of k pairs each
        with torch.no_grad():
            ref_seq = torch.cat([sequence_logprobs(completion_logprobs(self.ref_model, input_ids[rows], attention[rows],
                                 T, temperature=c.temperature)[0], mask[rows]) for rows in chunks]).view(-1, 2)
        stats = {"loss": 0.0, "clip_fraction": 0.0, "kl": None, "ratio_mean": 1.0, "entropy": 0.0, "grad_norm": 0.0,
                 "reward_margin": 0.0, "reward_accuracy": 0.0}
        for _ in range(c.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            seqs, chosen, rejected = [], [], []                                          # for TRL's DPO log
            for rows in chunks:
                logprobs, entropy = completion_logprobs(self.model, input_ids[rows], attention[rows], T,
                                                        temperature=c.temperature, with_entropy=True)
                seq = sequence_logprobs(logprobs, mask[rows]).view(-1, 2)                # log π(y_w), π(y_l), (k, 2)
                ref = ref_seq[rows.start // 2:rows.stop // 2]                            # the same under π_ref
                loss, info = dpo_loss(seq[:, 0], seq[:, 1], ref[:, 0], ref[:, 1], beta=self.family.beta)
                share = seq.shape[0] / P                                                 # its part of the pair mean
                (loss * share).backward()
                info["loss"] = float(loss.detach())
                for key in ("loss", "reward_margin", "reward_accuracy"):
                    stats[key] += info[key] * share / c.num_iterations
                stats["entropy"] += float((entropy * mask[rows]).sum() / mask.sum()) / c.num_iterations
                seqs.append(seq.detach())
                chosen.append(info["chosen_rewards"])
                rejected.append(info["rejected_rewards"])
            stats.update(dpo_log(torch.cat(seqs), torch.cat(chosen), torch.cat(rejected)))
            stats["grad_norm"] = self._clip_and_step(self.optimizer, self.model.parameters())
        return stats



METHODS = {
    "grpo": (GRPOTrainer, {}),
    "reinforce": (GRPOTrainer, {"advantage_estimator": "reinforce"}),
    "ppo": (PPOTrainer, {}),
    "rft": (RejectionSamplingTrainer, {"beta": 0.0}),
    "dpo": (DPOTrainer, {"beta": 0.0}),
    "dpo_offline": (DPOTrainer, {"beta": 0.0}),
    "reinforce_dr_grpo": (GRPOTrainer, {"advantage_estimator": "reinforce", "loss_type": "dr_grpo"}),
    "rft_answer_mean": (RejectionSamplingTrainer, {"beta": 0.0}),
}
"""method → (its trainer, the ``GRPOConfig`` fields it changes). Rejection sampling and DPO have no KL term
(``beta`` = 0: SFT has none, DPO's anchor is its own β and π_ref); the policy-gradient methods keep the run's.
The last two are lesson 13's controls (the module doc)."""

FAMILY_CHANGES = {"rft_answer_mean": {"rft_normaliser": "answer"}}
"""method → the :class:`FamilyConfig` fields it changes (on the one passed, or the defaults)."""


def make_trainer(method, config, *, family=None, **kwargs):
    """The trainer of ``method`` (:data:`METHODS`) for ``config`` (a ``GRPOConfig``), with ``family``'s settings."""
    _checks.choice("method", method, tuple(METHODS))
    cls, changes = METHODS[method]
    config = dataclasses.replace(config, **changes)
    if cls is GRPOTrainer:
        if family is not None:                          # its settings would be ignored without a word
            _checks.fail("family", f"has no setting {method} uses (FamilyConfig's γ, λ, the critic's rate, β and "
                         "the threshold belong to ppo, rft, dpo and dpo_offline)",
                         f"drop family=… for {method} (its settings are the GRPOConfig's), or pick a method that "
                         "uses them")
        return GRPOTrainer(config, **kwargs)
    if cls is DPOTrainer:
        kwargs["offline"] = method == "dpo_offline"
    if method in FAMILY_CHANGES:
        family = dataclasses.replace(family if family is not None else FamilyConfig(), **FAMILY_CHANGES[method])
    return cls(config, family=family, **kwargs)
