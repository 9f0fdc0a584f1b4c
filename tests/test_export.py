"""grpo_edu.beyond.export: our settings under TRL's and verl's names, accepted by them, traps named."""

import importlib.util
from pathlib import Path

import pytest

from grpo_edu.beyond.export import format_export, to_trl, to_verl, verl_command
from grpo_edu.training.trainers.config import GRPOConfig

CONFIGS = [GRPOConfig(), GRPOConfig(batch_size=4, num_generations=16, micro_batch_size=8, num_iterations=2),
           GRPOConfig(loss_type="dr_grpo", scale="none", beta=0.0, epsilon_high=0.28, lr_scheduler_type="constant"),
           GRPOConfig(loss_type="dapo", temperature=0.7, max_completion_length=256, total_training_steps=10,
                      gradient_checkpointing=True),
           # the variants (lesson 12): GSPO, CISPO, SAPO, an entropy bonus, DAPO in full, RLOO
           GRPOConfig(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
           GRPOConfig(loss_type="cispo", epsilon_high=5.0, entropy_coef=0.01),
           GRPOConfig(loss_type="sapo", sapo_temperature_neg=1.2),
           GRPOConfig(loss_type="dapo", epsilon_high=0.28, mask_truncated_completions=True, dynamic_sampling=True),
           GRPOConfig(advantage_estimator="rloo")]


def test_the_default_step_in_trl_terms():
    kwargs, info = to_trl()
    assert kwargs["per_device_train_batch_size"] == 128 and kwargs["gradient_accumulation_steps"] == 1
    assert kwargs["max_steps"] == 1500 and kwargs["beta"] == 0.04 and kwargs["loss_type"] == "grpo"
    assert kwargs["use_bias_correction_kl"] is False and kwargs["bf16"] is False and kwargs["top_k"] == 0
    assert "counts completions" in info["why"]["per_device_train_batch_size"]
    assert "'dapo'" in info["why"]["loss_type"] and "ratio" in info["why"]["use_bias_correction_kl"]


def test_processes_and_micro_batches_keep_the_completions_per_update():
    for c in CONFIGS:
        for processes in (1, 2, 4):
            kwargs, _ = to_trl(c, num_processes=processes)
            per_update = kwargs["per_device_train_batch_size"] * kwargs["gradient_accumulation_steps"] * processes
            assert per_update == c.batch_size * c.num_generations
            assert kwargs["max_steps"] == c.total_training_steps * c.num_iterations
    with pytest.raises(ValueError, match=r"^num_processes: 3 processes cannot share a step of batch_size × G = 128"):
        to_trl(num_processes=3)
    with pytest.raises(ValueError, match=r"^n_gpus: each of 8 processes takes 16 completions, which micro_batch_size "
                                         r"32 does not divide"):
        to_verl(GRPOConfig(micro_batch_size=32), n_gpus=8)


def test_what_trl_cannot_match_is_listed():
    _, info = to_trl(GRPOConfig(replay_ratio=0.2, total_training_steps=None, total_epochs=2))
    fields = [field for field, _ in info["unmatched"]]
    assert "replay_ratio" in fields and "total_epochs" in fields


def test_trl_accepts_the_exported_settings(tmp_path):
    trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    for c in CONFIGS:
        kwargs, _ = to_trl(c)
        kwargs["use_cpu"] = True
        args = trl.GRPOConfig(output_dir=str(tmp_path), report_to=[], **kwargs)
        assert args.generation_batch_size == c.batch_size * c.num_generations          # one step's completions
        assert args.scale_rewards == c.scale and args.loss_type == c.loss_type


def test_verl_counts_prompts_and_turns_off_its_extras():
    overrides, info = to_verl(GRPOConfig(loss_type="dr_grpo"), n_gpus=2)
    pairs = dict(info["pairs"])
    assert pairs["data.train_batch_size"] == 16 and pairs["actor_rollout_ref.rollout.n"] == 8
    assert pairs["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 64
    assert pairs["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-sum-norm"
    assert pairs["actor_rollout_ref.actor.loss_scale_factor"] == 4
    assert "actor_rollout_ref.actor.clip_ratio_c=1e9" in overrides and "algorithm.adv_estimator=grpo" in overrides
    assert "actor_rollout_ref.actor.use_kl_loss=true" in overrides
    assert any(field == "lr_scheduler_type" for field, _ in info["unmatched"])
    grpo = dict(to_verl(GRPOConfig(loss_type="grpo"))[1]["pairs"])
    assert grpo["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"
    assert "actor_rollout_ref.actor.loss_scale_factor" not in grpo
    text = format_export((overrides, info), "verl")
    assert "# not matched exactly:" in text and "verl counts prompts" in text


def _verl_trainer_config(name="_generated_ppo_trainer.yaml"):
    """One of verl's shipped trainer configs (default: the whole default trainer config), read from the installed
    package's YAML."""
    spec = importlib.util.find_spec("verl")          # finds the package without importing it (no torch/ray needed)
    if spec is None:
        pytest.skip("verl is not installed: pip install --no-deps verl (only its YAML is read)")
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((Path(spec.origin).parent / "trainer" / "config" / name).read_text())


def _assert_verl_has(shipped, key):
    node = shipped
    for part in key.split("."):
        assert isinstance(node, dict) and part in node, f"{key} is not in verl's ppo_trainer config"
        node = node[part]


def test_every_verl_key_is_in_verls_own_trainer_config():
    shipped = _verl_trainer_config()
    for c in CONFIGS:
        for key, _ in to_verl(c)[1]["pairs"]:
            _assert_verl_has(shipped, key)


def test_the_verl_command_uses_the_keys_verl_reads_not_its_legacy_ones():
    """verl keeps old keys in its YAML for old configs: the top-level reward keys of legacy_reward_impl.yaml (main_ppo
    reads reward.custom_reward_function; a top-level custom_reward_function is ignored there, so verl would score with
    its own GSM8K reward) and actor.grad_clip (the engine clips at actor.optim.clip_grad; its optimizer config calls
    grad_clip deprecated). None of them may be in the command."""
    legacy = _verl_trainer_config("legacy_reward_impl.yaml")
    from grpo_edu.beyond.word_problems import GPU_RUN

    keys = [line.split("=")[0] for line in verl_command(GRPOConfig(**GPU_RUN), n_gpus=4).split(" \\\n  ")[1:]]
    assert {"custom_reward_function", "reward_model"} <= set(legacy)
    assert not [k for k in keys if k.split(".")[0] in legacy], keys
    assert "actor_rollout_ref.actor.grad_clip" not in keys and "actor_rollout_ref.actor.optim.clip_grad" in keys
    assert "reward.custom_reward_function.path" in keys and "reward.custom_reward_function.name" in keys


@pytest.mark.parametrize("config", CONFIGS)
def test_verl_gets_the_log_prob_micro_batches_its_validate_config_demands(config):
    # verl's main_ppo stops at start-up unless the rollout (and, with the KL loss, the reference
    # model) has a log-prob micro-batch size (verl/utils/config.py, check_mutually_exclusive)
    pairs = dict(to_verl(config, n_gpus=2)[1]["pairs"])
    per_gpu = pairs["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    assert pairs["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == per_gpu
    assert pairs.get("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu") == (per_gpu if config.beta > 0 else None)


def test_the_whole_verl_command_uses_only_verls_keys_and_our_reward():
    shipped = _verl_trainer_config()
    from grpo_edu.beyond.word_problems import GPU_RUN, compute_score

    command = verl_command(GRPOConfig(**GPU_RUN), n_gpus=4)
    lines = command.split(" \\\n  ")
    assert lines[0] == "python3 -m verl.trainer.main_ppo"
    for key in (line.split("=")[0] for line in lines[1:]):
        _assert_verl_has(shipped, key)
    repo = Path(__file__).parents[1]
    reward_file = repo / "grpo_edu" / "beyond" / "word_problems.py"
    assert reward_file.is_file()
    assert f"reward.custom_reward_function.path={reward_file.relative_to(repo).as_posix()}" in lines
    # verl calls compute_score(data_source, solution_str, ground_truth): the course's reward, per answer
    assert compute_score("openai/gsm8k", "4 × 3 = 12\n#### 12", "12") == 1.2
    assert compute_score("openai/gsm8k", "12", "12") == 1.0 and compute_score("openai/gsm8k", "#### 13", "12") == 0.2


def test_grpo_edu_export_prints_each_setting_and_its_reason(capsys):
    from grpo_edu.cli import main

    assert main(["export", "verl", "--loss-type", "dr_grpo", "--processes", "2"]) == 0
    out = capsys.readouterr().out
    assert "actor_rollout_ref.actor.loss_scale_factor=4    # else verl divides" in out
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64" in out
    assert main(["export", "trl", "--beta", "0"]) == 0
    out = capsys.readouterr().out
    assert "beta=0.0\n" in out and "use_bias_correction_kl=False    # TRL's default True" in out


VARIANTS = [("grpo", 0.0, {}), ("bnpo", 0.0, {}), ("dr_grpo", 0.0, {}), ("dapo", 0.0, {}),
            ("grpo", 0.05, {}), ("dapo", 0.05, {}),                                       # TRL's entropy_coef
            ("grpo", 0.0, {"importance_sampling_level": "sequence", "epsilon": 0.003, "epsilon_high": 0.004}),  # GSPO
            ("dapo", 0.0, {"importance_sampling_level": "sequence", "epsilon": 0.003, "epsilon_high": 0.004}),
            ("cispo", 0.0, {"epsilon_high": 1.2}),                                        # a cap that binds here
            ("sapo", 0.0, {"sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05}),
            ("dapo", 0.0, {"importance_sampling_correction": True})]                      # truncated IS weights


@pytest.mark.parametrize("loss_type, entropy_coef, variant", VARIANTS,
                         ids=[f"{t}-{c}-{'-'.join(map(str, v.values()))}" for t, c, v in VARIANTS])
def test_trls_loss_with_the_exported_settings_equals_grpo_loss(loss_type, entropy_coef, variant, random_model,
                                                               char_tokenizer, tmp_path):
    """The premise of to_trl: on one fixed batch, TRL's own _compute_loss equals grpo_edu's grpo_loss
    (with an entropy bonus too: TRL's entropy_coef; and GSPO, CISPO and SAPO)."""
    trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    import datasets
    import torch

    from grpo_edu.core.losses import grpo_loss

    random_model.save_pretrained(tmp_path / "model")
    char_tokenizer.save_pretrained(tmp_path / "model")
    config = GRPOConfig(**{**dict(batch_size=2, num_generations=4, max_completion_length=5, beta=0.04,
                                  epsilon_high=0.28, loss_type=loss_type, total_training_steps=1,
                                  entropy_coef=entropy_coef), **variant})
    kwargs, _ = to_trl(config)
    kwargs["use_cpu"] = True
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), report_to=[], logging_steps=1, **kwargs)
    trainer = trl.GRPOTrainer(model=str(tmp_path / "model"), processing_class=char_tokenizer, args=args,
                              reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(completions)],
                              train_dataset=datasets.Dataset.from_list([{"prompt": "12+34="}] * 8))
    model = trainer.model.train()
    torch.manual_seed(0)
    vocab = len(char_tokenizer)
    prompt_ids = torch.randint(4, vocab, (8, 4))
    completion_ids = torch.randint(4, vocab, (8, 5))
    completion_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]] * 2)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(
        model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([torch.ones(8, 4, dtype=torch.long),
                                                                      completion_mask], 1), 5)
    old = logps.detach() + 0.3 * torch.randn(8, 5)          # ratios far from 1: the clip binds on some tokens
    ref = logps.detach() + 0.5 * torch.randn(8, 5)
    advantages = torch.randn(8)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones(8, 4, dtype=torch.long),
              "completion_ids": completion_ids, "completion_mask": completion_mask, "advantages": advantages,
              "old_per_token_logps": old, "ref_per_token_logps": ref,
              "num_items_in_batch": completion_mask.sum()}
    trainer.current_gradient_accumulation_steps = 1
    weights = None
    if config.importance_sampling_correction:       # TRL applies them to a vLLM sampler's answers only
        weights = (0.3 * torch.randn(8, 5)).exp().clamp(max=config.importance_sampling_cap)
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
        inputs["importance_sampling_ratio"] = weights
    theirs = trainer._compute_loss(model, inputs)
    entropy = None
    if entropy_coef:                                         # our entropy, with its gradient, from our own pass
        from grpo_edu.training.rollouts.rollout import completion_logprobs

        _, entropy = completion_logprobs(model, torch.cat([prompt_ids, completion_ids], 1),
                                         torch.cat([torch.ones(8, 4, dtype=torch.long), completion_mask], 1), 5,
                                         with_entropy=True, entropy_grad=True)
    ours, info = grpo_loss(logps, old, advantages, completion_mask, ref_logprobs=ref, beta=config.beta,
                           epsilon=config.epsilon, epsilon_high=config.epsilon_high, loss_type=loss_type,
                           max_completion_length=config.max_completion_length, entropy=entropy,
                           entropy_coef=entropy_coef, importance_sampling_level=config.importance_sampling_level,
                           sapo_temperature_pos=config.sapo_temperature_pos,
                           sapo_temperature_neg=config.sapo_temperature_neg, sampler_weights=weights)
    assert 0 < info["clip_fraction"] < 1 or loss_type == "sapo"          # SAPO has a soft gate, no clip
    assert abs(theirs.item() - ours.item()) < 1e-6, (theirs.item(), ours.item())
    g_theirs = torch.autograd.grad(theirs, list(model.parameters()), retain_graph=True, allow_unused=True)
    g_ours = torch.autograd.grad(ours, list(model.parameters()), allow_unused=True)
    for a, b in zip(g_theirs, g_ours):
        if a is not None:
            assert torch.allclose(a, b, atol=1e-6)


def test_no_clipping_is_exported_to_verl_as_no_clipping():
    """grpo_edu and TRL read max_grad_norm 0 as "no clipping"; verl clips at optim.clip_grad on every update, so a
    0 there would zero every gradient."""
    pairs = dict(to_verl(GRPOConfig(max_grad_norm=0.0))[1]["pairs"])
    assert pairs["actor_rollout_ref.actor.optim.clip_grad"] == 1e9
    assert dict(to_verl(GRPOConfig(max_grad_norm=0.5))[1]["pairs"])["actor_rollout_ref.actor.optim.clip_grad"] == 0.5
    import torch

    w = torch.nn.Parameter(torch.ones(3))
    w.grad = torch.full((3,), 5.0)
    torch.nn.utils.clip_grad_norm_([w], pairs["actor_rollout_ref.actor.optim.clip_grad"])   # what verl does with it
    assert torch.equal(w.grad, torch.full((3,), 5.0))
    torch.nn.utils.clip_grad_norm_([w], 0.0)                            # what 0 would have done
    assert torch.equal(w.grad, torch.zeros(3))


ASYNC_CONFIGS = [GRPOConfig(policy_lag=2, off_policy_correction=name, lr_scheduler_type="constant")
                 for name in ("none", "behaviour_clip", "decoupled", "token_tis", "sequence_mask")]


def test_the_async_settings_use_verls_own_keys():
    """The rollout correction's keys are in verl's default trainer config; the fully asynchronous trainer's in its
    own shipped YAML (experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml)."""
    from grpo_edu.beyond.export import VERL_ASYNC_KEYS

    shipped = _verl_trainer_config()
    yaml = pytest.importorskip("yaml")
    folder = Path(importlib.util.find_spec("verl").origin).parent / "experimental" / "fully_async_policy" / "config"
    fully_async = yaml.safe_load((folder / "fully_async_ppo_trainer.yaml").read_text())
    for c in ASYNC_CONFIGS:
        pairs, unmatched = to_verl(c)[1]["pairs"], dict(to_verl(c)[1]["unmatched"])
        for key, _ in pairs:
            _assert_verl_has(fully_async if key in VERL_ASYNC_KEYS else shipped, key)
        assert "policy_lag" in unmatched and "staleness_threshold" in unmatched["policy_lag"]
    pairs = dict(to_verl(ASYNC_CONFIGS[1])[1]["pairs"])
    assert pairs["algorithm.rollout_correction.bypass_mode"] is True and pairs[
        "algorithm.rollout_correction.loss_type"] == "ppo_clip"
    pairs = dict(to_verl(ASYNC_CONFIGS[3])[1]["pairs"])
    assert pairs["algorithm.rollout_correction.rollout_is"] == "token" and pairs[
        "algorithm.rollout_correction.rollout_is_threshold"] == 2.0
    assert "algorithm.rollout_correction.bypass_mode" not in dict(to_verl(GRPOConfig())[1]["pairs"])


def test_the_async_settings_use_trls_async_config_names():
    import dataclasses

    from trl.experimental.async_grpo import AsyncGRPOConfig

    names = {f.name for f in dataclasses.fields(AsyncGRPOConfig)}
    for c in ASYNC_CONFIGS:
        settings = to_trl(c)[1]["async"]
        assert set(settings["kwargs"]) <= names and set(settings["why"]) <= set(settings["kwargs"])
    assert to_trl(ASYNC_CONFIGS[1])[1]["async"]["kwargs"]["max_staleness"] == 2
    assert to_trl(ASYNC_CONFIGS[1])[1]["async"]["unmatched"] == []
    assert "token_truncate" in dict(to_trl(ASYNC_CONFIGS[3])[1]["async"]["unmatched"])["off_policy_correction"]
    assert "async" not in to_trl(GRPOConfig())[1]
