"""Carry a grpo_edu run to TRL or verl: the same settings under their names, with the traps named.

``to_trl(config)`` → ``(kwargs, info)``: keyword arguments for ``trl.GRPOConfig`` that make TRL
take the same step as grpo_edu (same completions per optimizer update, same loss, same KL term,
same optimizer). ``to_verl(config)`` → ``(overrides, info)``: verl command-line overrides
(``key=value``) for ``python -m verl.trainer.main_ppo``. In both, ``info["why"]`` gives a one-line
reason for every setting whose name or default differs, and ``info["unmatched"]`` lists what
cannot be carried over exactly, so nothing is dropped silently.

The traps, each handled below:

* TRL's ``per_device_train_batch_size`` counts *completions* on one process; a grpo_edu step is
  ``batch_size × num_generations`` completions and one optimizer update (× μ).
* TRL counts optimizer updates as steps: ``max_steps = total_training_steps × num_iterations``.
* TRL's defaults differ: ``loss_type="dapo"``, ``beta=0``, ``use_bias_correction_kl=True`` (the
  KL term multiplied by the ratio, which changes its gradient), ``bf16=True``.
* verl counts ``data.train_batch_size`` and ``ppo_mini_batch_size`` in *prompts*, applies a
  dual clip (``clip_ratio_c = 3``) to negative advantages, clamps its k3 ("low_var_kl") to
  ±10, has no linear learning-rate decay, and its "seq-mean-token-sum-norm" divides by the
  padded response length unless ``loss_scale_factor`` is set.

``grpo-edu export trl`` and ``grpo-edu export verl`` print them for any config flags.
"""

from grpo_edu.common import _checks
from grpo_edu.training.trainers.config import GRPOConfig

ADAM_BETAS = (0.9, 0.99)
"""grpo_edu's AdamW betas (trainer.py); TRL's and verl's defaults are (0.9, 0.999)."""

VERL_LOSS_AGG = {
    "grpo": ("seq-mean-token-mean", "the paper's mean over each answer's tokens, then over answers"),
    "dapo": ("token-mean", "one mean over every token of the batch"),
    "bnpo": ("token-mean", "a mean over the batch's tokens; verl's is over the whole mini-batch, as TRL's bnpo is "
                           "only when one process takes the step in one micro-batch"),
    "dr_grpo": ("seq-mean-token-sum-norm", "token sums divided by answers × max_completion_length"),
    "cispo": ("token-mean", "one mean over every token of the batch, as TRL's cispo"),
    "sapo": ("seq-mean-token-mean", "the mean over each answer's tokens, then over answers (verl's sapo uses it always)"),
}
"""grpo_edu loss_type → verl ``actor.loss_agg_mode`` and what the two compute."""


def _completions_per_device(config, processes, arg):
    _checks.positive_int(arg, processes)
    n = config.batch_size * config.num_generations
    if n % processes:
        _checks.fail(arg, f"{processes} processes cannot share a step of batch_size × G = {n} completions equally",
                     f"use a number of processes that divides {n}")
    micro = config.micro_batch_size or n // processes
    if (n // processes) % micro:
        _checks.fail(arg, f"each of {processes} processes takes {n // processes} completions, which micro_batch_size "
                          f"{micro} does not divide", f"use a micro_batch_size that divides {n // processes}")
    return micro, n // (micro * processes)


def to_trl(config=None, *, num_processes=1):
    """Keyword arguments for ``trl.GRPOConfig`` that reproduce ``config`` (a GRPOConfig; None = the
    defaults) on ``num_processes`` processes. Returns ``(kwargs, info)``; ``info["why"]`` has a
    reason per key, ``info["unmatched"]`` what TRL cannot match. ``output_dir``, the model, the
    dataset and the reward function are the caller's (see lesson 10)."""
    c = config or GRPOConfig()
    per_device, accumulation = _completions_per_device(c, num_processes, "num_processes")
    kwargs, why = {}, {}

    def put(key, value, reason=None):
        kwargs[key] = value
        if reason:
            why[key] = reason

    put("num_generations", c.num_generations)
    put("per_device_train_batch_size", per_device,
        f"TRL counts completions per process: batch_size × G = {c.batch_size * c.num_generations} per step, "
        f"split over {num_processes} process(es)" + (f" in micro-batches of {per_device}" if c.micro_batch_size else ""))
    put("gradient_accumulation_steps", accumulation,
        "micro-batches per process that add up to one grpo_edu step (one optimizer update)")
    put("steps_per_generation", accumulation, "one generation feeds exactly one optimizer update, as in grpo_edu")
    put("num_iterations", c.num_iterations)
    if c.total_training_steps is not None:
        put("max_steps", c.total_training_steps * c.num_iterations,
            f"TRL counts optimizer updates: {c.total_training_steps} steps × num_iterations {c.num_iterations}")
    put("learning_rate", c.learning_rate)
    put("lr_scheduler_type", c.lr_scheduler_type,
        "linear: grpo_edu keeps one rate per sampled batch, TRL decays per update (the same when μ = 1)"
        if c.lr_scheduler_type == "linear" and c.num_iterations > 1 else None)
    put("warmup_steps", 0)
    put("max_grad_norm", c.max_grad_norm)
    put("optim", "adamw_torch")
    put("adam_beta1", ADAM_BETAS[0])
    put("adam_beta2", ADAM_BETAS[1], "grpo_edu's AdamW uses β₂ = 0.99; TRL's default is 0.999")
    put("weight_decay", 0.0)
    put("beta", c.beta, "TRL's default β is 0 (no reference model); grpo_edu's is DeepSeekMath's 0.04"
        if c.beta != 0 else None)
    put("use_bias_correction_kl", False,
        "TRL's default True multiplies the KL term by the ratio, which changes its gradient; grpo_edu adds the plain k3")
    put("epsilon", c.epsilon)
    put("epsilon_high", c.epsilon_high if c.epsilon_high is not None else c.epsilon)
    if c.importance_sampling_level != "token":
        put("importance_sampling_level", c.importance_sampling_level, "GSPO: one ratio per answer")
    if c.loss_type == "sapo":
        put("sapo_temperature_pos", c.sapo_temperature_pos)
        put("sapo_temperature_neg", c.sapo_temperature_neg)
    put("loss_type", c.loss_type, "TRL's default is 'dapo'; grpo_edu's is the paper's 'grpo'"
        if c.loss_type != "dapo" else None)
    put("scale_rewards", c.scale, "grpo_edu calls it scale")
    put("temperature", c.temperature)
    put("top_p", 1.0)
    put("top_k", 0, "0 = no top-k filter: grpo_edu samples from the whole softmax")
    put("max_completion_length", c.max_completion_length)
    if c.entropy_coef > 0:
        put("entropy_coef", c.entropy_coef, "the same bonus: c times the mean entropy per token, whatever the loss_type")
    put("mask_truncated_completions", c.mask_truncated_completions,
        None if c.mask_truncated_completions else "grpo_edu trains on cut-off answers too")
    put("seed", c.seed)
    put("gradient_checkpointing", c.gradient_checkpointing,
        "TRL's GRPOConfig turns it on by default: the same gradient for about a third more compute"
        if not c.gradient_checkpointing else None)
    put("bf16", False, "TRL turns bf16 on by default; grpo_edu trains in float32")
    if c.device == "cpu":
        put("use_cpu", True, "device='cpu'")
    unmatched = []
    if c.importance_sampling_correction or c.sampling_dtype != "float32":
        unmatched.append(("importance_sampling_correction / sampling_dtype",
                          "TRL corrects a vLLM sampler only (use_vllm=True): vllm_importance_sampling_correction="
                          f"{c.importance_sampling_correction}, vllm_importance_sampling_mode='token_truncate', "
                          f"vllm_importance_sampling_clip_max={c.importance_sampling_cap}"))
    if c.dynamic_sampling:
        unmatched.append(("dynamic_sampling", "TRL's GRPOTrainer does not resample dead groups (verl's "
                                              "algorithm.filter_groups does)"))
    if c.advantage_estimator != "grpo":
        rloo = (" (TRL has a separate RLOOTrainer, whose step differs too: its beta subtracts β·Σ_t log(π/π_ref) "
                "from the reward where grpo_edu keeps the KL term in the loss, and it clips one ratio per answer, "
                "exp(Σ_t log π/π_old), averaging answers without dividing by their lengths)")
        unmatched.append(("advantage_estimator", f"TRL's GRPOTrainer has only the group baseline; "
                                                 f"{c.advantage_estimator!r} is verl's algorithm.adv_estimator"
                                                 + (rloo if c.advantage_estimator == "rloo" else "")))
    if c.process_supervision != "none":
        unmatched.append(("process_supervision", "TRL's GRPOTrainer takes one reward per completion (its PRMTrainer, "
                                                 "0.13–1.13, trained a PRM but never fed GRPO step rewards); "
                                                 "GRPO+PS's per-token advantages are course-only"))
    if c.total_training_steps is None:
        unmatched.append(("total_epochs", "TRL stops at num_train_epochs over the prompts or at max_steps; set "
                                          "total_training_steps for an exact match"))
    if c.replay_ratio > 0:
        unmatched.append(("replay_ratio", "TRL has no replay buffer since GRPOWithReplayBufferTrainer was removed "
                                          "(trl PR #7132); replay cannot be carried over"))
    if c.eval_size or c.eval_every:
        unmatched.append(("eval_size / eval_every", "TRL evaluates an eval_dataset with its own loop; pass the "
                                                    "held-out prompts as eval_dataset and set eval_strategy"))
    unmatched.append(("model / task", "TRL takes the model path, a datasets.Dataset of prompts and the reward "
                                      "function as GRPOTrainer arguments"))
    info = {"why": why, "unmatched": unmatched, "peft_config": peft_settings(c)}
    if c.policy_lag:
        info["async"] = trl_async_settings(c)
        unmatched.extend(info["async"]["unmatched"])
    return kwargs, info


def trl_async_settings(config):
    """An asynchronous run (``policy_lag`` > 0) under the names of TRL's ``trl.experimental.async_grpo.AsyncGRPOConfig``
    (checked against TRL 1.16's fields): ``{"kwargs", "why", "unmatched"}``. The other settings are :func:`to_trl`'s."""
    c = config
    kwargs = {"max_staleness": c.max_staleness if c.max_staleness is not None else c.policy_lag,
              "weight_sync_steps": 1, "epsilon": c.epsilon,
              "epsilon_high": c.epsilon_high if c.epsilon_high is not None else c.epsilon}
    why = {"max_staleness": (f"TRL has no fixed lag: its sampler runs as far ahead as max_staleness lets it, and a "
                             f"sample staler than that is dropped; grpo_edu's lag k = {c.policy_lag} is the bound "
                             "reached once the sampler is faster than the trainer" if c.max_staleness is None else
                             "the same rule: a batch older than this many updates is dropped"),
           "weight_sync_steps": "grpo_edu publishes the weights after every update"}
    unmatched = []
    if c.off_policy_correction != "behaviour_clip":
        unmatched.append(("off_policy_correction", f"{c.off_policy_correction!r}: TRL's AsyncGRPOTrainer has one loss, "
                          "the PPO clip against the sampler's log-probs (grpo_edu's 'behaviour_clip'); "
                          + ("TRL's synchronous GRPOTrainer has vllm_importance_sampling_mode='"
                             + {"sequence_mask": "sequence_mask", "token_tis": "token_truncate"}[c.off_policy_correction]
                             + f"' with vllm_importance_sampling_clip_max={c.off_policy_cap or 3.0:g}, for a vLLM "
                             "sampler's mismatch, not for staleness"
                             if c.off_policy_correction in ("sequence_mask", "token_tis") else
                             "no proximal policy (AReaL's decoupled PPO) and no uncorrected variant")))
    return {"trainer": "trl.experimental.async_grpo.AsyncGRPOTrainer", "kwargs": kwargs, "why": why,
            "unmatched": unmatched}


def peft_settings(config):
    """``peft.LoraConfig`` keyword arguments of ``config``'s LoRA (None without one). TRL takes them as
    ``GRPOTrainer(peft_config=LoraConfig(**settings))``, not in its GRPOConfig, and then, as grpo_edu, uses
    the model with its adapter switched off as the reference (no ref_model copy)."""
    if config.lora_rank is None:
        return None
    from grpo_edu.training.model.lora import target_list

    return {"r": config.lora_rank, "lora_alpha": config.lora_alpha,
            "target_modules": target_list(config.lora_target_modules), "lora_dropout": 0.0, "bias": "none",
            "task_type": "CAUSAL_LM"}


def to_verl(config=None, *, n_gpus=1, model_path="MODEL_PATH"):
    """verl overrides (``key=value`` strings) for ``config`` on ``n_gpus`` GPUs of one node.
    Returns ``(overrides, info)`` like :func:`to_trl`."""
    c = config or GRPOConfig()
    per_gpu, _ = _completions_per_device(c, n_gpus, "n_gpus")
    loss_agg, agg_meaning = VERL_LOSS_AGG[c.loss_type]
    pairs, why, unmatched = [], {}, []

    def put(key, value, reason=None):
        pairs.append((key, value))
        if reason:
            why[key] = reason

    put("algorithm.adv_estimator", c.advantage_estimator, "verl's default estimator is gae (PPO with a critic)")
    put("algorithm.norm_adv_by_std_in_grpo", c.scale == "group",
        "True divides by the group σ (scale='group'); False is Dr. GRPO's no scaling")
    if c.dynamic_sampling:
        put("algorithm.filter_groups.enable", True, "DAPO's dynamic sampling: resample groups whose rewards are all equal")
        put("algorithm.filter_groups.metric", "reward", "the summed reward before any KL penalty, as grpo_edu's σ")
        put("algorithm.filter_groups.max_num_gen_batches", c.max_sampling_rounds,
            "verl stops with an error at the cap; grpo_edu trains on the live groups it found")
    put("algorithm.use_kl_in_reward", False, "the KL is a loss term (as in GRPO), not a reward penalty")
    put("data.train_batch_size", c.batch_size, "verl counts prompts, not completions")
    put("actor_rollout_ref.rollout.n", c.num_generations, "G is verl's rollout.n")
    put("actor_rollout_ref.actor.ppo_mini_batch_size", c.batch_size,
        "in prompts too: one mini-batch per step means one optimizer update per epoch, as in grpo_edu")
    put("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", per_gpu, "completions per forward/backward on one GPU")
    put("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", per_gpu,
        "completions per forward when recomputing log π_θold; verl refuses to start without it")
    if c.beta > 0:
        put("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", per_gpu,
            "the same for the reference model's forward (needed when the KL loss is on)")
    put("actor_rollout_ref.actor.ppo_epochs", c.num_iterations, "verl's name for μ (num_iterations)")
    put("actor_rollout_ref.actor.use_kl_loss", c.beta > 0)
    put("actor_rollout_ref.actor.kl_loss_coef", c.beta, "β (verl's default is 0.001)")
    put("actor_rollout_ref.actor.kl_loss_type", "low_var_kl",
        "k3, the same estimator; verl clamps it to [-10, 10] (grpo_edu does not clamp)")
    if c.loss_type == "cispo":      # verl clamps r to [1 − low, 1 + high]; TRL and grpo_edu only cap it at ε_max
        put("actor_rollout_ref.actor.clip_ratio_low", 1.0, "a lower bound of 0: CISPO caps the weight from above only")
        put("actor_rollout_ref.actor.clip_ratio_high", c.epsilon_high - 1,
            f"verl caps r at 1 + clip_ratio_high; grpo_edu and TRL at epsilon_high = {c.epsilon_high} itself")
    else:
        put("actor_rollout_ref.actor.clip_ratio_low", c.epsilon)
        put("actor_rollout_ref.actor.clip_ratio_high", c.epsilon_high if c.epsilon_high is not None else c.epsilon)
    mode = "gspo" if c.importance_sampling_level == "sequence" else {"cispo": "cispo", "sapo": "sapo"}.get(c.loss_type)
    if mode:
        put("actor_rollout_ref.actor.policy_loss.loss_mode", mode, "verl's policy loss of the same name")
        if c.importance_sampling_level == "sequence" and c.loss_type in ("cispo", "sapo"):
            unmatched.append(("importance_sampling_level", f"verl has no sequence-level {c.loss_type}; its gspo "
                                                           "loss is the clipped one"))
    if c.loss_type == "sapo":
        put("actor_rollout_ref.actor.tau_pos", c.sapo_temperature_pos)
        put("actor_rollout_ref.actor.tau_neg", c.sapo_temperature_neg)
    put("actor_rollout_ref.actor.clip_ratio_c", 1e9,
        "verl's dual clip bounds negative-advantage terms at c × |Â| (c = 3); a huge c turns it off, as in grpo_edu")
    put("actor_rollout_ref.actor.loss_agg_mode", loss_agg, f"loss_type {c.loss_type!r}: {agg_meaning}")
    if c.loss_type == "dr_grpo":
        put("actor_rollout_ref.actor.loss_scale_factor", c.max_completion_length,
            "else verl divides by the padded response length of each batch, not max_completion_length")
    put("actor_rollout_ref.actor.entropy_coeff", c.entropy_coef or 0,
        ("verl aggregates the entropy like the loss (loss_agg_mode); grpo_edu and TRL take the mean per token, "
         "the same only for token-mean" + ("" if loss_agg == "token-mean" else ": this run's bonus will differ"))
        if c.entropy_coef else "no entropy bonus in GRPO")
    # verl's engine clips at actor.optim.clip_grad (its older actor.grad_clip is still in the YAML, read by nothing)
    if c.max_grad_norm > 0:
        put("actor_rollout_ref.actor.optim.clip_grad", c.max_grad_norm)
    else:
        put("actor_rollout_ref.actor.optim.clip_grad", 1e9,
            "max_grad_norm 0 means no clipping in grpo_edu and TRL; verl clips at clip_grad on every update, "
            "so 0 would scale every gradient to 0: a huge norm turns clipping off")
    put("actor_rollout_ref.actor.optim.lr", c.learning_rate)
    put("actor_rollout_ref.actor.optim.betas", f"[{ADAM_BETAS[0]},{ADAM_BETAS[1]}]", "verl's default is (0.9, 0.999)")
    put("actor_rollout_ref.actor.optim.weight_decay", 0.0, "verl's default is 0.01; grpo_edu uses none")
    put("actor_rollout_ref.actor.optim.lr_scheduler_type", "constant")
    if c.lr_scheduler_type == "linear":
        unmatched.append(("lr_scheduler_type", "verl's FSDP optimizer has constant and cosine schedules, no linear "
                                               "decay: 'constant' is exported; train grpo_edu with "
                                               "lr_scheduler_type='constant' for an exact match"))
    put("actor_rollout_ref.rollout.temperature", c.temperature)
    put("actor_rollout_ref.rollout.top_k", -1, "-1 = no top-k filter")
    put("actor_rollout_ref.rollout.top_p", 1.0)
    put("data.max_response_length", c.max_completion_length)
    put("actor_rollout_ref.model.enable_gradient_checkpointing", c.gradient_checkpointing,
        "verl's default is true; grpo_edu's is off (the same gradient either way)")
    put("actor_rollout_ref.model.path", model_path, "a local path or hub name; verl loads it with transformers")
    put("data.seed", c.seed)
    put("trainer.n_gpus_per_node", n_gpus)
    put("trainer.nnodes", 1)
    if c.total_training_steps is not None:
        put("trainer.total_training_steps", c.total_training_steps, "verl's steps are sampled batches, as grpo_edu's")
    if c.scale == "batch":
        unmatched.append(("scale", "verl's GRPO scales by the group σ or not at all; 'batch' has no counterpart"))
    if c.replay_ratio > 0:
        unmatched.append(("replay_ratio", "verl's GRPO has no replay buffer"))
    if c.importance_sampling_correction or c.sampling_dtype != "float32":
        unmatched.append(("importance_sampling_correction / sampling_dtype",
                          "verl's algorithm.rollout_correction corrects a vLLM/SGLang sampler (token-level truncated "
                          f"IS with a cap of {c.importance_sampling_cap} is its 'tis' preset)"))
    if c.mask_truncated_completions:
        unmatched.append(("mask_truncated_completions", "verl has no switch that drops cut answers from the loss; "
                                                        "its DAPO recipe shapes their reward instead "
                                                        "(reward_model.overlong_buffer: the soft overlong punishment)"))
    if c.lora_rank is not None:
        unmatched.append(("lora_rank", f"not exported to verl: its LoRA settings are actor_rollout_ref.model.lora_rank="
                                       f"{c.lora_rank}, lora_alpha={c.lora_alpha:g} and target_modules "
                                       f"({c.lora_target_modules}); check them against your verl version"))
    if c.process_supervision != "none":
        unmatched.append(("process_supervision", "verl's GRPO advantage takes one score per response; step rewards "
                                                 "need a custom advantage estimator (algorithm.adv_estimator)"))
    unmatched.append(("task / rewards", "verl reads prompts from parquet files (data.train_files) and scores them "
                                        "with a reward function it imports (reward.custom_reward_function.path)"))
    if c.policy_lag:
        verl_async_settings(c, put, unmatched)
    overrides = [f"{k}={_verl_value(v)}" for k, v in pairs]
    return overrides, {"why": why, "unmatched": unmatched, "pairs": pairs}


VERL_CORRECTIONS = {
    "behaviour_clip": {"bypass_mode": True, "loss_type": "ppo_clip", "rollout_is": None},
    "decoupled": {"bypass_mode": False, "rollout_is": "token"},
    "token_tis": {"bypass_mode": False, "rollout_is": "token"},
}
"""grpo_edu's off_policy_correction → verl's ``algorithm.rollout_correction`` keys (``rollout_correction.yaml``)."""

VERL_ASYNC_KEYS = ("async_training.trigger_parameter_sync_step", "actor_rollout_ref.actor.use_rollout_log_probs")
"""Keys only in verl's fully asynchronous trainer config (``experimental/fully_async_policy/config/``)."""


def verl_async_settings(config, put, unmatched):
    """An asynchronous run (``policy_lag`` > 0) under verl's names: the rollout correction (the main trainer config)
    and the fully asynchronous trainer's keys; what has no counterpart goes to ``unmatched`` with the reason."""
    c = config
    put("actor_rollout_ref.actor.use_rollout_log_probs", True,
        "π_old is the sampler's log-probs, as grpo_edu's batches carry them (fully_async trainer)")
    put("async_training.trigger_parameter_sync_step", 1, "grpo_edu publishes the weights after every update")
    unmatched.append(("policy_lag", f"verl's fully_async bounds staleness by async_training.staleness_threshold, a "
                      f"fraction of stale samples (0.1 by default), not a lag in updates; lag k = {c.policy_lag} "
                      + ("is verl's one-step-off-policy trainer" if c.policy_lag == 1 else "has no exact counterpart")))
    if c.max_staleness is not None:
        unmatched.append(("max_staleness", "verl drops nothing by age; TRL's AsyncGRPOTrainer does (max_staleness)"))
    keys = VERL_CORRECTIONS.get(c.off_policy_correction)
    if keys is None:
        unmatched.append(("off_policy_correction", {
            "none": "verl always clips against π_old (bypass_mode or not): there is no uncorrected loss",
            "sequence_mask": "TRL's sequence_mask (drop an answer whose Π_t π_old/μ > C); verl's nearest is "
                             "rejection sampling, rollout_rs='seq_sum_k1' with a 'lower_upper' rollout_rs_threshold: "
                             "check its bounds against rollout_corr_helper.py before relying on it"}[c.off_policy_correction]))
        return
    for key, value in keys.items():
        put(f"algorithm.rollout_correction.{key}", value)
    if c.off_policy_correction == "behaviour_clip":
        return
    cap = c.off_policy_cap or 2.0
    put("algorithm.rollout_correction.rollout_is_threshold", cap,
        "verl truncates the weight π_old/μ at this cap (TIS); AReaL's behav_imp_weight_cap filters instead"
        if c.off_policy_correction == "decoupled" else "verl's default cap, 2.0")
    if c.off_policy_correction == "decoupled":
        unmatched.append(("off_policy_correction", "'decoupled' filters tokens above the cap (AReaL's "
                          "behav_imp_weight_cap); verl's decoupled mode truncates them (token TIS)"))


def verl_command(config=None, *, n_gpus=8, model_path="Qwen/Qwen2.5-0.5B-Instruct",
                 train_files="$HOME/data/gsm8k/train.parquet", val_files="$HOME/data/gsm8k/test.parquet",
                 rollout_engine="vllm", reward_file="grpo_edu/beyond/word_problems.py"):
    """The whole verl command (a string) for ``config`` on one node of ``n_gpus`` GPUs: ``to_verl``'s
    overrides, the data files (verl's ``examples/data_preprocess/gsm8k.py`` writes them), the rollout
    engine, and the course's word-problem reward (``grpo_edu.beyond.word_problems.compute_score``; the path is
    relative to the repository root, where the command runs). verl's
    ``main_ppo`` starts a local Ray cluster itself; for several nodes, ``ray start`` on each first and
    raise ``trainer.nnodes``."""
    overrides, _ = to_verl(config, n_gpus=n_gpus, model_path=model_path)
    extra = [f"data.train_files={train_files}", f"data.val_files={val_files}",
             f"actor_rollout_ref.rollout.name={rollout_engine}",
             f"reward.custom_reward_function.path={reward_file}",
             "reward.custom_reward_function.name=compute_score", "trainer.logger=[console]"]
    return "python3 -m verl.trainer.main_ppo \\\n  " + " \\\n  ".join(overrides + extra)


def _verl_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) >= 1e6:
        mantissa, exponent = f"{v:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return str(v)


def trl_dataset_rows(task, rows):
    """``rows`` (``{"prompt", "answer"}``) in the form TRL's ``GRPOTrainer`` reads: for a chat task (``words``)
    the *conversational* form, ``prompt`` a list of ``{"role", "content"}`` turns (the task's system turn, then the
    question), which TRL renders with the model's chat template itself; for the others the standard form, ``prompt``
    the text. ``answer`` stays a column, which TRL hands the reward functions as a keyword of that name."""
    from grpo_edu.training.model.chat_tokenizer import is_chat_task

    chat = is_chat_task(task)
    return [{"prompt": task.messages(r["prompt"]) if chat else r["prompt"],
             **({"answer": r["answer"]} if "answer" in r else {})} for r in rows]     # a row without one: no column


def write_trl_dataset(task, rows, path, *, overwrite=False):
    """:func:`trl_dataset_rows` as a JSON-lines file (``datasets.load_dataset("json", data_files=path)`` reads
    it back); returns the number of rows written. An existing file is refused unless ``overwrite`` (then it is
    replaced whole or not at all)."""
    import json

    from grpo_edu.common import _checks

    problem = _checks.output_file_problem(path, overwrite=overwrite, flag="overwrite=True")
    if problem:
        _checks.fail("path", *problem)
    out = trl_dataset_rows(task, rows)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in out)
    _checks.write_result_file(path, text, overwrite=overwrite)
    return len(out)


def format_export(result, target):
    """Readable text: each setting with its reason, then what cannot be matched."""
    values, info = result
    lines = [f"# grpo_edu → {target}"]
    if target == "trl":
        lines += [f"{k}={v!r}" + (f"    # {info['why'][k]}" if k in info["why"] else "") for k, v in values.items()]
    else:
        lines += [f"{o}" + (f"    # {info['why'][o.split('=')[0]]}" if o.split("=")[0] in info["why"] else "")
                  for o in values]
    if info.get("peft_config"):
        settings = ", ".join(f"{k}={v!r}" for k, v in info["peft_config"].items())
        lines += ["", f"# LoRA: GRPOTrainer(..., peft_config=peft.LoraConfig({settings}))"]
    if info.get("async"):
        settings = info["async"]
        lines += ["", f"# asynchronous: {settings['trainer']}(args=AsyncGRPOConfig(..., these too)):"]
        lines += [f"{k}={v!r}" + (f"    # {settings['why'][k]}" if k in settings["why"] else "")
                  for k, v in settings["kwargs"].items()]
    lines += ["", "# not matched exactly:"] + [f"#   {field}: {reason}" for field, reason in info["unmatched"]]
    return "\n".join(lines)
