"""GRPOConfig: every knob of a GRPO run, in one frozen dataclass.

Field names match the lessons, and TRL's ``GRPOConfig`` where TRL has the same knob (the
notation table in ``grpo_edu.core.notation`` maps the rest, and verl's names). Every field is
checked when the config is made, before any model loads; errors name the field and the fix.

The defaults are tuned for the bundled tiny model on a laptop CPU, not for an LLM: a
learning rate of 5e-6–2e-5 (seed 004's advice) suits a billion-parameter model that starts
out good at the task; the 130k-parameter bundled model learns at 3e-4, decayed linearly to 0.
"""

import warnings
from dataclasses import asdict, dataclass, fields

from grpo_edu.common import _checks

BUNDLED_MODEL = "bundled"
"""The model name that means "the tiny model in assets/tiny-adder"."""
BUNDLED_SUMS_MODEL = "bundled-sums"
"""The model name that means "lesson 11's model in assets/tiny-sums", which writes its working."""

BUNDLED_CALC_MODEL = "bundled-calc"
"""The model name that means "lesson 15's model in assets/tiny-calc", which may call a calculator."""
BUNDLED_WORDS_MODEL = "bundled-words"
"""The model name that means "lesson 16's model in assets/tiny-words": a BPE tokenizer and a chat template."""

PRESETS = {
    "sums": {"model": BUNDLED_SUMS_MODEL, "task": "sums", "max_completion_length": 42,
             "total_training_steps": 100},
    "calc": {"model": BUNDLED_CALC_MODEL, "task": "calc", "max_completion_length": 24, "batch_size": 8,
             "total_training_steps": 20, "learning_rate": 1e-3, "beta": 0.0, "eval_size": 100},
    "words": {"model": BUNDLED_WORDS_MODEL, "task": "words", "max_completion_length": 24,
              "total_training_steps": 40, "eval_size": 200},
}
"""Named starting points (``GRPOConfig.preset(name)``, ``grpo-edu train --preset NAME``): the fields that differ
from the defaults. ``sums``: long answers on ``assets/tiny-sums``; 42 new tokens hold the longest worked
solution and its ``<eos>``; the learning rate, β, G and the rest stay the defaults, measured to learn there.
``calc``: lesson 15's tool task on ``assets/tiny-calc``, with the settings of its runs
(``course/experiments/tools_runs.py``): 24 tokens hold a call, its reply and the answer; the calculator is in
the loop wherever the task is ``calc`` (``training/task/task_setup.py``)."""

TASK_PRESETS = {"sums": "sums", "calc": "calc", "words": "words"}
"""A task that needs its own model: ``grpo-edu train --task NAME`` without ``--preset`` starts from this preset
(its model, its answer length), so ``--task calc`` never trains the adder, which cannot write a call."""

CHOICES = {
    "loss_type": ("grpo", "bnpo", "dapo", "dr_grpo", "cispo", "sapo"),
    "importance_sampling_level": ("token", "sequence"),
    "scale": ("group", "batch", "none"),
    "advantage_estimator": ("grpo", "rloo", "reinforce_plus_plus_baseline", "reinforce"),
    "sampling_dtype": ("float32", "bfloat16"),
    "sampler": ("loop", "engine"),
    "off_policy_correction": ("none", "behaviour_clip", "decoupled", "token_tis", "sequence_mask"),
    "device": ("auto", "cpu", "cuda"),
    "lr_scheduler_type": ("linear", "constant"),
    "process_supervision": ("none", "exact"),
    "process_credit": ("sum", "min"),
}
"""The allowed values of the choice fields (``task`` takes a name from ``grpo_edu.training.task.tasks.TASKS``)."""

LIMITS = {
    "learning_rate": (0.0, 0.1, "AdamW moves every weight by about the learning rate each step, so at 1 the bundled "
                      "model's weights overflow within a few steps", "LLMs take 5e-6–2e-5, the bundled models 3e-4"),
    "temperature": (0.01, 100.0, "rollouts divide the logits by τ, so a τ near 0 overflows them to ∞ and a huge one "
                    "samples uniform noise", "1.0 is usual, 0.3–1.5 the common range"),
    "sapo_temperature_pos": (0.01, 100.0, "SAPO's gate weighs the loss by 4/τ, which a τ near 0 makes ∞ (and a huge "
                             "τ overflows)", "1.0 is TRL's default"),
    "sapo_temperature_neg": (0.01, 100.0, "SAPO's gate weighs the loss by 4/τ, which a τ near 0 makes ∞ (and a huge "
                             "τ overflows)", "1.05 is TRL's default"),
    "entropy_coef": (0.0, 10.0, "the bonus −c·entropy would outweigh the policy term thousands of times and c = 1e308 "
                     "overflows the loss", "TRL and verl use 0.001–0.01; lesson 11 tries up to 1.0"),
    "beta": (0.0, 1000.0, "the KL term β·KL overflows the loss long before that", "0.04 (DeepSeekMath) or 0 (TRL)"),
    "epsilon_high": (0.0, 100.0, "the upper clip 1 + ε_high (CISPO: the cap ε_high) binds nowhere long before "
                     "that, and past float32's range (3.4e38) it breaks the loss mid-run",
                     "0.28 for DAPO's clip-higher, 5.0 for CISPO"),
    "importance_sampling_cap": (1.0, 100.0, "the cap binds nowhere long before that, and past float32's range "
                                "(3.4e38) it breaks the step mid-run (a cap below 1 would shrink even the tokens "
                                "the sampler got exactly right)",
                                "3.0 is TRL's default"),
}
"""Sane ranges of the float fields that would otherwise be accepted and fail mid-run (an overflow, or NaN weights
blamed on a damaged model): {field: (lowest, highest, why, the usual value)}. Whether 0 itself is allowed is
checked before (learning_rate, epsilon_high: no; beta, entropy_coef: yes)."""

MAX_SEED = 2 ** 32 - 1
"""The largest ``seed``: the trainer seeds a generator with seed × 1,000,003 + step, which must fit 64 bits."""

# fields that may differ when a run is resumed: they do not change what a step computes
# (a new length changes the linear schedule's learning rate from the resumed step on: the
# trainer warns when that happens; a new replay_path starts from the buffer the checkpoint holds;
# a new sampler draws from the same distribution with other random numbers)
RESUMABLE_CHANGES = ("total_training_steps", "total_epochs", "output_dir", "checkpoint_every",
                     "eval_size", "eval_every", "device", "gradient_checkpointing", "replay_path", "sampler")


def _in_range(name, value, lowest, highest, why, usual):
    """Refuse a finite value that is absurd for ``name`` (see :data:`LIMITS`), naming the range and why."""
    if not lowest <= value <= highest:
        bound = f"≤ {highest:g}" if value > highest else f"≥ {lowest:g}"
        span = f"from {lowest:g} to {highest:g}" if lowest else f"up to {highest:g}"
        _checks.fail(name, f"must be {bound}, got {value!r}: {why}", f"pass a value {span}; {usual}")


@dataclass(frozen=True)
class GRPOConfig:
    """Settings of one GRPO run (see each field's docstring)."""

    model: str = BUNDLED_MODEL
    """A local model directory, a run's output folder (its latest checkpoint), a Hugging Face hub name
    (needs internet), "bundled", or "smollm2" (a real model: SmolLM2-135M-Instruct, fetched once with
    `grpo-edu models get smollm2`)."""
    task: str = "addition"
    """Verifiable task giving the prompts and the reward (``grpo_edu.training.task.tasks.TASKS``)."""
    dataset: str | None = None
    """Optional prompt file (.json/.jsonl/.csv with "prompt" and "answer") instead of the task's train split."""

    batch_size: int = 16
    """B: prompts per step. Seed advice: at least 2–4, 8+ when memory allows."""
    num_generations: int = 8
    """G: completions per prompt (group size). Seed advice: 4–8; ≥ 8 for low-entropy instruct models."""
    total_training_steps: int | None = 1500
    """Hard stop, in steps (one step = sample, score, update). Usually reached first."""
    total_epochs: int | None = None
    """Back-stop, in passes over the prompts; the run stops at whichever limit comes first."""
    micro_batch_size: int | None = None
    """Completions per forward/backward pass (gradient accumulation); None = the whole step at once."""
    gradient_checkpointing: bool = False
    """Keep only each layer's input in the forward pass and recompute the rest during backward: the
    activations' memory shrinks to about one layer's worth, for roughly a third more compute. The
    gradient is the same. A memory knob for big models (lesson 10); the bundled model needs none."""
    num_iterations: int = 1
    """Optimizer updates per sampled batch (DeepSeekMath's inner loop, which the paper writes μ; the course keeps
    μ for the group mean and uses this name). 1 = strictly on-policy: the policy updated is the one that sampled."""

    learning_rate: float = 3e-4
    """AdamW step size at the first step. About 1e-6 for full fine-tuning of an LLM (DeepSeekMath, TRL's default);
    5e-6–2e-5 (seed 004), or higher, for LoRA adapters; the 130k-parameter bundled model
    takes 3e-4 (2e-3 makes it collapse within 30 steps: lesson 05)."""
    lr_scheduler_type: str = "linear"
    """How the learning rate changes over the run: "linear" (to 0 at the end, TRL's default) or "constant"."""
    max_grad_norm: float = 1.0
    """Gradient clipping (global L2 norm); 0 turns it off."""
    beta: float = 0.04
    """β: weight of the KL(π_θ ‖ π_ref) penalty. 0 skips the reference model. TRL default 0.0, DeepSeekMath 0.04."""
    epsilon: float = 0.2
    """ε: clip range of the ratio r (lower side, and upper side unless epsilon_high is set); 0 < ε < 1."""
    epsilon_high: float | None = None
    """ε_high: upper clip range (DAPO's clip-higher uses 0.28; below epsilon warns); None = epsilon."""
    entropy_coef: float = 0.0
    """c: weight of an entropy bonus, −c·(mean entropy per token) in the loss (TRL's ``entropy_coef``; verl's
    ``entropy_coeff`` aggregates it like the loss). Not in GRPO's paper; it slows the entropy collapse of lesson 11.
    0 = off."""
    temperature: float = 1.0
    """Sampling temperature τ for rollouts (also divides the logits in the loss, as TRL does)."""
    max_completion_length: int = 4
    """Most new tokens per completion (|o| ≤ this); a completion cut here without <eos> is truncated.
    4 fits every addition answer (up to 3 digits, then <eos>)."""
    mask_truncated_completions: bool = False
    """Leave completions cut at max_completion_length (no <eos>) out of the loss (TRL's name; DAPO's overlong
    filtering). They still count in their group's mean and σ. Off: a cut answer scores as wrong and is pushed down."""
    loss_type: str = "grpo"
    """How per-token losses are averaged: "grpo", "bnpo", "dapo" or "dr_grpo" (see grpo_edu.core.losses); or a
    variant's policy term: "cispo" (MiniMax-M1: a clipped, stop-gradient weight; needs epsilon_high ≥ 1, e.g. 5.0)
    or "sapo" (a soft gate in place of the clip; see sapo_temperature_*). TRL's names."""
    importance_sampling_level: str = "token"
    """"token": a ratio per token (GRPO); "sequence": one ratio per answer, the exp of its tokens' mean log-ratio,
    clipped as a whole (GSPO, arXiv:2507.18071; TRL's name). The GSPO paper clips it at ε ≈ 3e-4 / 4e-4."""
    sapo_temperature_pos: float = 1.0
    """τ_pos: SAPO's gate temperature for tokens with Â > 0 (TRL's name and default)."""
    sapo_temperature_neg: float = 1.05
    """τ_neg: SAPO's gate temperature for tokens with Â ≤ 0 (TRL's name and default)."""
    scale: str = "group"
    """Advantage scaling: "group" (σ per group), "batch" (σ of the batch) or "none" (Dr. GRPO)."""
    advantage_estimator: str = "grpo"
    """How rewards become Â (verl's ``algorithm.adv_estimator``): "grpo" (group mean and σ, see ``scale``), "rloo"
    (each answer against the mean of the other G − 1) or "reinforce_plus_plus_baseline" (group mean, then whitened
    over the batch's tokens), or "reinforce" (the reward itself, no baseline: lesson 13). See grpo_edu.core.advantages."""
    process_supervision: str = "none"
    """DeepSeekMath's GRPO with process supervision (§4.1.3): "exact" rewards every step of the sums task's working
    with the exact checker (1 right, 0 wrong: ``training/task/sums_steps.py``), normalises the step rewards over the
    group, and gives each token the sum of the normalised rewards of the steps that end at or after it
    (``core/process_advantages.py``, lesson 17b). "none": outcome supervision, one Â per answer. Course-only:
    TRL and verl have no process-supervised GRPO."""
    process_credit: str = "sum"
    """Process supervision only: how a token gathers the steps ahead of it, "sum" (DeepSeekMath) or "min" (PURE's
    min-form credit, arXiv:2504.15275: the worst step ahead)."""
    seed: int = 0
    """Seeds data order, sampling and the reference copy: same seed, same run (on CPU)."""

    sampling_dtype: str = "float32"
    """Precision of the sampler: "bfloat16" samples under bf16 autocast while the update stays float32, so the
    sampler is no longer exactly π_θold (as vLLM in bf16 is not the trainer). The step logs the mismatch
    (``sampler_ratio_*``). On CUDA both run in bf16 autocast already."""
    sampler: str = "engine"
    """Who samples the rollouts and the held-out answers: "engine" (``engine.generate``: a preallocated KV
    cache, finished answers leave the batch, as vLLM does; about twice as fast on lesson 11's model) or "loop"
    (``rollout.generate``, the loop lesson 05 reads). The same distribution, other random numbers: a seed gives
    other answers with each (greedy answers are equal). Course-only (TRL and verl sample with their own
    engines)."""
    importance_sampling_correction: bool = False
    """Weigh each token's policy term by min(π_θold / π_sampler, importance_sampling_cap): truncated importance
    sampling (TRL's ``vllm_importance_sampling_correction`` in "token_truncate" mode; verl's rollout correction)."""
    importance_sampling_cap: float = 3.0
    """C: the cap of those weights (TRL's ``vllm_importance_sampling_clip_max``, default 3.0)."""
    policy_lag: int = 0
    """k: how many updates the sampler lags behind the trainer (the asynchronous trainer,
    ``grpo_edu.training.asynchronous``): step t trains on answers drawn by policy version t − 1 − k. 0 = synchronous."""
    max_staleness: int | None = None
    """Drop a batch drawn more than this many updates ago and draw it again from newer weights (TRL's
    ``max_staleness``, 4 there); None keeps every batch (AReaL's and verl's bounded lag). Asynchronous trainer only."""
    off_policy_correction: str = "behaviour_clip"
    """How the asynchronous trainer corrects for answers an older policy μ drew (grpo_edu.core.off_policy): "none",
    "behaviour_clip" (PPO's clip against μ: TRL's AsyncGRPO, verl's bypass mode), "decoupled" (AReaL), "token_tis"
    (verl) or "sequence_mask" (TRL's vLLM default)."""
    off_policy_cap: float | None = None
    """C: the cap of the correction's weights π_prox/μ (above 1); None = its source's (token_tis 2.0 as verl,
    sequence_mask 3.0 as TRL, decoupled: no filter as AReaL by default)."""
    mini_batches: int = 1
    """Optimizer updates per sampled batch, each on its own 1/mini_batches of the batch's groups, in one pass
    (AReaL's ``ppo_n_minibatches``, default 4; verl's ``train_batch_size / ppo_mini_batch_size``, 1024/256). From
    the second update on π_θ has moved away from π_prox, the weights at the batch's start, so the clip against
    π_prox binds. Asynchronous trainer only (lesson 18); batch_size must be a multiple of it. 1 = one update."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop the step's groups whose rewards are all equal (σ = 0, no signal) and sample
    more prompts until batch_size live groups are found, or max_sampling_rounds is reached (verl's
    ``algorithm.filter_groups``; TRL has none). The extra generation is logged (``sampled_groups``)."""
    max_sampling_rounds: int = 3
    """Dynamic sampling: sampling rounds of batch_size prompts per step at most, the first included (verl's
    ``max_num_gen_batches``, where ≤ 0 means no cap: here a cap is required). Short of batch_size live groups
    then, the step trains on the live groups it found."""

    replay_ratio: float = 0.0
    """Share of each step's training samples replayed from the buffer (lesson 06): 0.3 = 7 new : 3 replayed
    (the source's default; 0.1–0.5 advised). 0 = no replay, and training is exactly what it is without a buffer."""
    replay_capacity: int = 10_000
    """Most samples the replay buffer holds (the lowest advantage, then the oldest, leave first)."""
    replay_path: str | None = None
    """Buffer file (.jsonl or .sqlite/.db) that outlives the run; None keeps the buffer in memory. With a path
    the buffer is filled even at replay_ratio 0, so one run can fill it for a later run to replay."""
    replay_top_fraction: float = 0.5
    """Of each step's completions, only the top fraction by advantage may enter the buffer (source: 0.3–0.5)."""
    replay_min_advantage: float = 0.0
    """Only completions with advantage above this may enter the buffer (source: Â > 0)."""
    replay_min_reward: float | None = None
    """Only completions with reward at least this may enter the buffer (the source's "close to full score");
    None = no threshold. Needed under a composite reward, where an all-wrong group still has answers with
    Â > 0 (lesson 07): e.g. 1.0 when a right answer alone scores 1."""
    replay_refresh_every: int = 0
    """Every this many steps drop buffer samples older than replay_max_age steps (source: 10–20); 0 = never."""
    replay_max_age: int | None = None
    """Age in steps beyond which a refresh drops a sample; needed when replay_refresh_every > 0."""
    replay_refresh_keep_advantage: float | None = None
    """A refresh keeps old samples whose advantage is at least this (the source drops the *low-advantage* old
    samples); None = a refresh drops every sample older than replay_max_age."""

    eval_size: int = 500
    """Held-out prompts scored before and after training (sampling at temperature 1); 0 skips."""
    eval_every: int = 0
    """Also score the held-out prompts every this many steps; 0 = only before and after."""
    checkpoint_every: int = 0
    """Write a checkpoint every this many steps (and at the end); 0 = never. Needs output_dir."""
    output_dir: str | None = None
    """Where checkpoints and the final model go (a folder of this run's own); None saves nothing.
    ``grpo-edu train`` defaults to runs/<timestamp>/, and a resumed run to the folder it resumes."""
    device: str = "auto"
    """"auto" (CUDA when present, else CPU), "cpu" or "cuda". On CUDA the forward passes run in bf16 autocast."""
    trust_remote_code: bool = False
    """Allow a hub model to run its own Python code. Off: only turn on for code you have read."""
    lora_rank: int | None = None
    """r: train a LoRA adapter of this rank through peft instead of every weight (lesson 14); None = full
    fine-tuning. With LoRA, π_ref is the policy with its adapter switched off: no second copy (TRL's peft_config)."""
    lora_alpha: float = 16.0
    """α: the adapter's update is scaled by α / r (peft's lora_alpha; usually 2 × lora_rank). From 1e-3 to 1e4:
    at 1e30 every gradient overflows and clipping zeroes every update (``lora.ALPHA_RANGE``)."""
    lora_target_modules: str = "all-linear"
    """Which Linear layers get an adapter: names separated by commas ("q_proj,v_proj"), or "all-linear"."""

    def __post_init__(self):
        for name in ("batch_size", "num_generations", "num_iterations", "max_completion_length"):
            _checks.positive_int(name, getattr(self, name), minimum=2 if name == "num_generations" else 1)
        for name in ("learning_rate", "epsilon", "temperature", "sapo_temperature_pos", "sapo_temperature_neg",
                     "importance_sampling_cap"):
            _checks.positive_float(name, getattr(self, name))
        for name in ("beta", "max_grad_norm", "entropy_coef"):
            _checks.positive_float(name, getattr(self, name), allow_zero=True)
        from grpo_edu.training.model.lora import check_alpha, check_settings

        check_alpha(self.lora_alpha)                  # NaN or 1e30 is an error with LoRA off too
        for name, limits in LIMITS.items():
            if name not in ("epsilon_high", "importance_sampling_cap"):   # these two are checked below, in context
                _in_range(name, getattr(self, name), *limits)
        if self.epsilon >= 1:
            _checks.fail("epsilon", f"must be below 1, got {self.epsilon!r}: the lower clip bound 1 − ε would be ≤ 0",
                         "pass a clip range in (0, 1), usually 0.2")
        if self.epsilon_high is not None:
            _checks.positive_float("epsilon_high", self.epsilon_high)
            _in_range("epsilon_high", self.epsilon_high, *LIMITS["epsilon_high"])
            if self.epsilon_high < self.epsilon and self.loss_type != "sapo":
                warnings.warn(f"epsilon_high: {self.epsilon_high} is below epsilon {self.epsilon}, so the upper clip "
                              "is tighter than the lower one; DAPO's clip-higher uses epsilon_high > epsilon "
                              "(0.28 with 0.2)", stacklevel=3)
        for name in ("gradient_checkpointing", "trust_remote_code", "mask_truncated_completions", "dynamic_sampling",
                     "importance_sampling_correction"):
            if not isinstance(getattr(self, name), bool):
                _checks.fail(name, f"must be True or False, got {getattr(self, name)!r}", f"pass {name}=True or False")
        for name in ("seed", "eval_size", "eval_every", "checkpoint_every"):
            _checks.positive_int(name, getattr(self, name), minimum=0)
        if self.seed > MAX_SEED:                   # seed × 1,000,003 + step must fit torch's 64-bit generator seed
            _checks.fail("seed", f"must be ≤ {MAX_SEED} (2**32 − 1), got {self.seed}: the run derives each step's "
                         "generator seed from it, and a larger one overflows torch's 64-bit seed mid-run",
                         "pass a seed from 0 to 4294967295, e.g. 0")
        for name, allowed in CHOICES.items():
            _checks.choice(name, getattr(self, name), allowed)
        self._check_variant()
        self._check_replay()
        self._check_asynchronous()
        self._check_process()
        if self.lora_rank is not None:                # a bad rank or module list fails now; the model's names at load
            check_settings(self.lora_rank, self.lora_alpha, self.lora_target_modules)
        if self.checkpoint_every and not self.output_dir:
            _checks.fail("output_dir", "is not set but checkpoint_every asks for checkpoints",
                         "pass output_dir=… (a folder), or checkpoint_every=0")
        # batch_size, G, the stop conditions and micro-batching are checked by the schedule
        # itself; the real dataset size is checked again once the prompts are loaded.
        self.schedule(dataset_size=self.batch_size)

    def _check_process(self):
        """Process supervision: the sums task's exact checker, on the synchronous trainer's own advantages."""
        if self.process_supervision == "none":
            if self.process_credit != "sum":
                _checks.fail("process_credit", f"is {self.process_credit!r} but process_supervision is 'none', so it "
                             "would change nothing", "set process_supervision='exact' too, or leave process_credit")
            return
        clashes = [name for name, on in (("task", self.task != "sums"),
                                         ("advantage_estimator", self.advantage_estimator != "grpo"),
                                         ("replay_ratio", self.replay_ratio > 0), ("replay_path", self.replay_path),
                                         ("dynamic_sampling", self.dynamic_sampling), ("policy_lag", self.policy_lag))
                   if on]
        if clashes:
            _checks.fail("process_supervision", f"is {self.process_supervision!r}, which needs task='sums' (the task "
                         "whose steps a program can check) and GRPO's own group advantages of a synchronous, fresh "
                         f"batch; these settings clash: {', '.join(clashes)}",
                         "use task='sums' (--preset sums) with advantage_estimator='grpo' and no replay, dynamic "
                         "sampling or policy_lag; or process_supervision='none'")

    def _check_asynchronous(self):
        """policy_lag, max_staleness and the correction's cap (the asynchronous trainer's settings)."""
        _checks.positive_int("policy_lag", self.policy_lag, minimum=0,
                             fix="pass a lag of 0 (synchronous) or more updates, e.g. 1 (verl's one-step-off-policy)")
        if self.max_staleness is not None:
            _checks.positive_int("max_staleness", self.max_staleness, minimum=0,
                                 fix="pass how many updates old a batch may be (TRL's default 4; 0 keeps only "
                                     "on-policy batches), or None to keep every batch")
        _checks.positive_int("mini_batches", self.mini_batches,
                             fix="pass how many optimizer updates to split each batch into: 1, or e.g. 4 (AReaL's)")
        if self.batch_size % self.mini_batches:
            _checks.fail("mini_batches", f"is {self.mini_batches}, which does not divide batch_size "
                         f"{self.batch_size}: each update takes whole groups, the same number each",
                         f"pass a divisor of {self.batch_size}, or change batch_size")
        if self.off_policy_cap is not None:
            from grpo_edu.core.off_policy import _check_cap

            _check_cap("off_policy_cap", self.off_policy_cap, f"off_policy_correction={self.off_policy_correction!r}")
        if self.policy_lag and (self.num_iterations != 1 or self.replay_ratio or self.dynamic_sampling
                                or self.importance_sampling_correction):
            _checks.fail("policy_lag", f"is {self.policy_lag}, and the asynchronous trainer takes one update per batch "
                         "without replay, dynamic sampling or importance_sampling_correction (its own "
                         "off_policy_correction does that work)", "set num_iterations=1, replay_ratio=0, "
                         "dynamic_sampling=False and importance_sampling_correction=False, or policy_lag=0")

    @property
    def uses_replay_buffer(self):
        """True when the run keeps a replay buffer: it replays from it, or fills a file for a later run."""
        return self.replay_ratio > 0 or self.replay_path is not None

    def _check_variant(self):
        from grpo_edu.core.losses import check_cispo_cap

        check_cispo_cap(self.loss_type, self.epsilon_high)
        if self.importance_sampling_cap < 1:
            _checks.fail("importance_sampling_cap", f"is {self.importance_sampling_cap!r}, below 1: the weights "
                         "min(π_θold / π_sampler, cap) would shrink even the tokens the sampler got exactly right "
                         "(weight 1)", "pass a cap ≥ 1 (3.0 is TRL's default)")
        _in_range("importance_sampling_cap", self.importance_sampling_cap, *LIMITS["importance_sampling_cap"])
        self._warn_unused()
        if self.importance_sampling_correction and self.replay_ratio > 0:
            _checks.fail("importance_sampling_correction", "cannot weigh replayed answers: no sampler of this step "
                         "gave their log-probs", "use it with replay_ratio=0")
        _checks.positive_int("max_sampling_rounds", self.max_sampling_rounds,
                             fix="pass a cap of 1 or more (3 is usual; 1 only filters): without one a task whose "
                                 "groups are all dead would sample forever")
        if self.advantage_estimator != "grpo" and self.scale != "group":
            _checks.fail("scale", f"is {self.scale!r}, but advantage_estimator={self.advantage_estimator!r} has its own "
                         "normalisation and ignores scale", "leave scale at 'group', or use advantage_estimator='grpo'")
        if self.importance_sampling_level == "sequence" and self.epsilon >= 0.01:
            warnings.warn(f"epsilon: {self.epsilon} clips GSPO's sequence ratio, a geometric mean over every token, "
                          "which moves far less than one token's ratio; the GSPO paper clips at 3e-4 (epsilon) and "
                          "4e-4 (epsilon_high), and at 0.2 the clip will rarely bind", stacklevel=4)

    def _warn_unused(self):
        """Settings that do nothing with the others given: said once, since the run is still the one asked for."""
        default = {f.name: f.default for f in fields(self)}
        unused = []
        if self.max_sampling_rounds != default["max_sampling_rounds"] and not self.dynamic_sampling:
            unused.append(f"max_sampling_rounds={self.max_sampling_rounds} caps dynamic sampling's rounds, but "
                          "dynamic_sampling is off; pass dynamic_sampling=True, or leave max_sampling_rounds out")
        if self.importance_sampling_correction and self.sampling_dtype == "float32":
            unused.append("importance_sampling_correction weighs the tokens of a sampler that is not the trainer, but "
                          "with sampling_dtype='float32' the sampler is the trainer: every weight is about 1 and the "
                          "correction costs an extra forward pass; pass sampling_dtype='bfloat16' (a sampler that "
                          "differs, as vLLM in bf16 does), or leave importance_sampling_correction off")
        if (self.importance_sampling_cap != default["importance_sampling_cap"]
                and not self.importance_sampling_correction):
            unused.append(f"importance_sampling_cap={self.importance_sampling_cap:g} caps the sampler weights, but "
                          "importance_sampling_correction is off; turn it on, or leave importance_sampling_cap out")
        if self.loss_type == "sapo" and self.epsilon_high is not None:
            unused.append(f"epsilon_high={self.epsilon_high:g} is ignored by loss_type='sapo', whose soft gate "
                          "replaces the clip (sapo_temperature_pos/neg set its width); leave epsilon_high out")
        for name in ("sapo_temperature_pos", "sapo_temperature_neg"):
            if getattr(self, name) != default[name] and self.loss_type != "sapo":
                unused.append(f"{name}={getattr(self, name):g} sets SAPO's gate, but loss_type is "
                              f"{self.loss_type!r}; pass loss_type='sapo', or leave {name} out")
        if self.lora_rank is None:
            for name in ("lora_alpha", "lora_target_modules"):
                if getattr(self, name) != default[name]:
                    unused.append(f"{name}={getattr(self, name)!r} sets the LoRA adapter, but lora_rank is None: "
                                  "this run fine-tunes every weight; pass lora_rank (e.g. 8) to train an adapter, "
                                  f"or leave {name} out")
        if (_checks.is_finite_number(self.off_policy_cap) and self.off_policy_cap > 1
                and self.off_policy_correction in ("none", "behaviour_clip")):
            unused.append(f"off_policy_cap={self.off_policy_cap:g} caps the weights π_prox/μ, but "
                          f"off_policy_correction={self.off_policy_correction!r} weighs no token; pass a correction "
                          "with weights ('decoupled', 'token_tis' or 'sequence_mask'), or leave off_policy_cap out")
        for text in unused:
            warnings.warn(text, stacklevel=5)

    def unused_without_lag(self):
        """The asynchronous settings that do nothing when the sampler never lags (policy_lag 0 and no free-running
        sampler): the texts of the warnings the trainers give."""
        out = []
        if self.max_staleness is not None:
            out.append(f"max_staleness={self.max_staleness} drops batches staler than that, but with policy_lag=0 "
                       "every batch is drawn by the trainer's own weights (staleness 0): it does nothing")
        if self.off_policy_correction != "behaviour_clip" or self.off_policy_cap is not None:
            out.append(f"off_policy_correction={self.off_policy_correction!r}"
                       + ("" if self.off_policy_cap is None else f" with off_policy_cap={self.off_policy_cap:g}")
                       + " corrects for a sampler that lags, but with policy_lag=0 the sampler is the trainer "
                       "(π_prox/μ = 1): it does nothing")
        return [f"{text}. Fix: set policy_lag ≥ 1 (or TwoProcessGRPOTrainer(free_running=True)), or leave it out"
                for text in out]

    def _check_replay(self):
        from grpo_edu.training.trainers.replay import check_path, check_replay_ratio, warn_unadvised_ratio

        check_replay_ratio(self.replay_ratio)
        warn_unadvised_ratio(self.replay_ratio, stacklevel=4)
        _checks.positive_int("replay_capacity", self.replay_capacity)
        if not (_checks.is_finite_number(self.replay_top_fraction) and 0 < self.replay_top_fraction <= 1):
            _checks.fail("replay_top_fraction", f"must be in (0, 1], got {self.replay_top_fraction!r}",
                         "pass e.g. 0.5 (the source: 0.3–0.5)")
        _checks.finite_float("replay_min_advantage", self.replay_min_advantage, fix="pass e.g. 0.0 (the source: Â > 0)")
        if self.replay_min_reward is not None:
            _checks.finite_float("replay_min_reward", self.replay_min_reward,
                                 fix="pass e.g. 1.0 (a right answer's reward), or None for no threshold")
        _checks.positive_int("replay_refresh_every", self.replay_refresh_every, minimum=0)
        if self.replay_max_age is not None:
            _checks.positive_int("replay_max_age", self.replay_max_age, minimum=0)
        if self.replay_refresh_keep_advantage is not None:
            _checks.finite_float("replay_refresh_keep_advantage", self.replay_refresh_keep_advantage,
                                 fix="pass e.g. 1.0 (old samples with Â ≥ 1 stay), or None to drop every old sample")
        if self.replay_refresh_every and self.replay_max_age is None:
            _checks.fail("replay_max_age", "is not set but replay_refresh_every asks for refreshes",
                         "pass replay_max_age=… (in steps, e.g. 100), or replay_refresh_every=0")
        if self.replay_path is not None:
            check_path(self.replay_path, arg="replay_path")

    def schedule(self, dataset_size):
        """The run's :class:`~grpo_edu.core.schedule.TrainingSchedule` for ``dataset_size`` prompts."""
        from grpo_edu.core.schedule import TrainingSchedule

        return TrainingSchedule(dataset_size=dataset_size, batch_size=self.batch_size,
                                num_generations=self.num_generations, total_epochs=self.total_epochs,
                                total_training_steps=self.total_training_steps,
                                micro_batch_size=self.micro_batch_size)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def preset(cls, name, **overrides):
        """The config of the preset ``name`` (:data:`PRESETS`), with ``overrides`` on top."""
        if name not in PRESETS:
            _checks.fail("preset", f"unknown preset {name!r}", f"use one of {', '.join(sorted(PRESETS))}")
        return cls(**{**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, data):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            _checks.fail("config", f"unknown fields {unknown}", f"use only {sorted(known)}")
        return cls(**data)

    def incompatible_with(self, other):
        """Fields (name, self's value, other's value) that forbid resuming ``other``'s run with this config."""
        return [(f.name, getattr(self, f.name), getattr(other, f.name)) for f in fields(self)
                if f.name not in RESUMABLE_CHANGES and getattr(self, f.name) != getattr(other, f.name)]
