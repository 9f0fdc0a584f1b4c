"""GRPO's variants in the loss: GSPO's sequence ratio, CISPO's clipped weight, SAPO's soft gate.

Each is proven equal to TRL's own ``_compute_loss`` in tests/test_export.py; here: cases by hand,
what each does where the plain clip stops, that all agree on-policy (μ = 1), and bad input."""

import math
import warnings

import numpy as np
import pytest
import torch

from grpo_edu.core.losses import grpo_loss

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


def _grad(loss, x):
    return torch.autograd.grad(loss, x)[0]


def test_gspo_uses_one_ratio_per_answer_the_exp_of_its_mean_log_ratio():
    old = torch.zeros(2, 3)
    logprobs = torch.tensor([[0.1, 0.3, 5.0], [0.0, 0.0, 0.3]], requires_grad=True)   # 5.0 is off the mask
    adv = torch.tensor([1.0, -1.0])
    loss, info = grpo_loss(logprobs, old, adv, MASK, importance_sampling_level="sequence", epsilon=0.05,
                           epsilon_high=0.15)
    s = [math.exp(0.2), math.exp(0.1)]                       # exp(mean log r): 1.2214 and 1.1052
    # answer 1: Â > 0 and s > 1 + 0.15: clipped at 1.15; answer 2: Â < 0, s > 1: not clipped, −(−1 · 1.1052)
    assert float(loss) == pytest.approx((-1.15 + s[1]) / 2, abs=1e-6)
    assert info["clip_fraction"] == pytest.approx(2 / 5)      # both tokens of answer 1
    g = _grad(loss, logprobs)
    assert torch.allclose(g[0], torch.zeros(3))                # a clipped answer: no gradient at all
    assert torch.allclose(g[1], torch.full((3,), s[1] / 3 / 2))   # s · (1/|o|) on each token, / N


def test_cispo_keeps_a_gradient_where_the_clip_would_stop_it():
    logprobs = torch.tensor([[math.log(2.0), 0.0, 0.0]], requires_grad=True)   # r = 2 on the first token
    old, adv, mask = torch.zeros(1, 3), torch.tensor([1.0]), torch.tensor([[1.0, 0.0, 0.0]])
    clipped, _ = grpo_loss(logprobs, old, adv, mask, epsilon_high=0.28)
    assert _grad(clipped, logprobs)[0, 0] == 0                  # PPO's clip: r > 1 + ε_high with Â > 0, no gradient
    cispo, info = grpo_loss(logprobs, old, adv, mask, loss_type="cispo", epsilon_high=1.5)
    assert float(cispo) == pytest.approx(-1.5 * math.log(2.0))  # −min(r, ε_max)·Â·log π, over 1 token
    assert _grad(cispo, logprobs)[0, 0] == pytest.approx(-1.5)   # the weight is capped, the gradient stays
    assert info["clip_fraction"] == 1.0


def test_sapo_gates_softly_and_asymmetrically():
    logprobs = torch.tensor([[0.0], [0.0], [math.log(1.5)], [math.log(1.5)]], requires_grad=True)
    adv, mask = torch.tensor([1.0, -1.0, 1.0, -1.0]), torch.ones(4, 1)
    loss, info = grpo_loss(logprobs, torch.zeros(4, 1), adv, mask, loss_type="sapo",
                           sapo_temperature_pos=1.0, sapo_temperature_neg=2.0)
    sig = lambda x: 1 / (1 + math.exp(-x))                       # noqa: E731
    by_hand = [-2.0, 4 / 2 * sig(0), -4 * sig(0.5), 4 / 2 * sig(2 * 0.5)]   # −σ(τ(r−1))·(4/τ)·Â
    assert float(loss) == pytest.approx(sum(by_hand) / 4, abs=1e-6)
    g = _grad(loss, logprobs)[:, 0]
    # d/dlog π of −σ(τ(r−1))(4/τ)Â = −4σ'(τ(r−1))·r·Â: at r = 1 it is −Â; away from 1 the gate σ' fades it
    # smoothly, and faster for Â ≤ 0 (τ_neg = 2), where PPO's clip would cut it to 0 at once
    dsig = lambda x: sig(x) * (1 - sig(x))                       # noqa: E731
    assert g.tolist() == pytest.approx([-1 / 4, 1 / 4, -4 * dsig(0.5) * 1.5 / 4, 4 * dsig(1.0) * 1.5 / 4])
    assert g[3] < -g[2]
    assert info["clip_fraction"] == 0.0


@pytest.mark.parametrize("variant, same_as", [
    (dict(importance_sampling_level="sequence"), dict()),                     # GSPO = GRPO
    (dict(importance_sampling_level="sequence", loss_type="dapo"), dict(loss_type="dapo")),
    (dict(loss_type="sapo"), dict()),                                         # SAPO = GRPO
    (dict(loss_type="cispo", epsilon_high=5.0), dict(loss_type="dapo")),      # CISPO = DAPO
])
def test_on_policy_every_variant_has_the_gradient_of_the_loss_it_builds_on(variant, same_as):
    torch.manual_seed(0)
    logprobs = torch.randn(6, 4, requires_grad=True)
    mask = (torch.rand(6, 4) > 0.3).float()
    mask[:, 0] = 1
    adv = torch.randn(6)
    ours, _ = grpo_loss(logprobs, logprobs.detach(), adv, mask, **variant)
    base, _ = grpo_loss(logprobs, logprobs.detach(), adv, mask, **same_as)
    assert torch.allclose(_grad(ours, logprobs), _grad(base, logprobs), atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(loss_type="cispo"), r"^epsilon_high: is None, but loss_type='cispo' caps the weight"),
    (dict(loss_type="cispo", epsilon_high=0.28), r"^epsilon_high: is 0.28, .*pass epsilon_high=5.0"),
    (dict(loss_type="sapo", sapo_temperature_neg=0.0), r"^sapo_temperature_neg: "),
    (dict(importance_sampling_level="word"), r"^importance_sampling_level: "),
    (dict(loss_type="ppo"), r"^loss_type: "),
])
def test_variant_settings_that_cannot_work_are_refused_up_front(kwargs, match):
    from grpo_edu import GRPOConfig

    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_gspo_with_a_token_sized_clip_range_warns():
    from grpo_edu import GRPOConfig

    with pytest.warns(UserWarning, match="the GSPO paper clips at 3e-4"):
        GRPOConfig(importance_sampling_level="sequence")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GRPOConfig(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)


@pytest.mark.parametrize("variant", [dict(loss_type="cispo", epsilon_high=5.0),
                                     dict(loss_type="sapo", sapo_temperature_neg=1.2),
                                     dict(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)])
def test_the_trainer_hands_each_variant_to_the_loss(monkeypatch, random_model, char_tokenizer, variant):
    from grpo_edu import GRPOConfig, GRPOTrainer
    from grpo_edu.training.trainers import trainer as trainer_module

    seen = []
    real = trainer_module.grpo_loss
    monkeypatch.setattr(trainer_module, "grpo_loss", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                     total_training_steps=1, num_iterations=2, **variant),
                          model=random_model, tokenizer=char_tokenizer)
    metrics = trainer.step()
    assert math.isfinite(metrics["loss"]) and len(seen) == 2                  # μ = 2 updates
    for key, value in variant.items():
        assert seen[0][key] == value
    assert (seen[0]["num_active_tokens"] is not None) == (variant.get("loss_type") == "cispo")


# --- advantage estimators: RLOO and REINFORCE++, against verl's own code ------------------------------

def _verl_functions(*names):
    """verl's functions of these names, taken from its installed source (core_algos.py and torch_functional.py)
    and run in a namespace with only torch: verl itself needs Ray to import, which the tests do not install."""
    import ast
    import importlib.util
    import types
    from collections import defaultdict
    from pathlib import Path

    import numpy as np

    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed (pip install --no-deps verl)")
    root = Path(spec.origin).parent
    namespace = {"torch": torch, "np": np, "defaultdict": defaultdict, "Optional": __import__("typing").Optional}
    helpers = types.SimpleNamespace()
    for path, wanted, into in ((root / "utils" / "torch_functional.py", ("masked_sum", "masked_mean", "masked_var", "masked_whiten"),
                                helpers), (root / "trainer" / "ppo" / "core_algos.py", names, None)):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in wanted:
                node.decorator_list = []
                code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec",   # annotations unread
                               flags=__import__("__future__").annotations.compiler_flag, dont_inherit=True)
                exec(code, namespace)                                      # noqa: S102 (verl's own source)
                if into is not None:
                    setattr(into, node.name, namespace[node.name])
    namespace["verl_F"] = helpers
    return [namespace[n] for n in names]


def _verl_inputs(rewards, lengths):
    B, G = rewards.shape
    T = int(lengths.max())
    mask = (torch.arange(T)[None, :] < lengths.reshape(-1, 1)).float()            # (N, T)
    token_rewards = torch.zeros(B * G, T)
    token_rewards[torch.arange(B * G), lengths.reshape(-1) - 1] = rewards.reshape(-1)   # the score on the last token
    index = np.repeat(np.arange(B), G)
    return token_rewards, mask, index


def test_rloo_by_hand_and_as_verl_computes_it():
    from grpo_edu.core.advantages import rloo_advantages

    assert np.allclose(rloo_advantages([[1.0, 0.0, 0.0, 1.0]]), [[2 / 3, -2 / 3, -2 / 3, 2 / 3]])   # 1 − (1/3)
    assert rloo_advantages([[0.5, 0.5, 0.5]]).tolist() == [[0.0, 0.0, 0.0]]
    (verl_rloo,) = _verl_functions("compute_rloo_outcome_advantage")
    torch.manual_seed(0)
    rewards, lengths = torch.rand(3, 4).round(decimals=1), torch.randint(1, 6, (3, 4))
    token_rewards, mask, index = _verl_inputs(rewards, lengths)
    theirs, _ = verl_rloo(token_rewards, mask, index)
    ours = torch.as_tensor(rloo_advantages(rewards.double().numpy())).reshape(-1, 1).float() * mask
    assert torch.allclose(theirs, ours, atol=1e-6)


def test_reinforce_pp_whitens_the_group_centred_rewards_over_the_batchs_tokens_as_verl_does():
    from grpo_edu.core.advantages import reinforce_pp_advantages

    adv = np.asarray(reinforce_pp_advantages([[1.0, 0.0], [1.0, 1.0]]))    # c = ±0.5 and 0, 0
    assert np.allclose(adv, [[0.5 / math.sqrt(1 / 6 + 1e-8), -0.5 / math.sqrt(1 / 6 + 1e-8)], [0, 0]])
    (verl_rpp,) = _verl_functions("compute_reinforce_plus_plus_baseline_outcome_advantage")
    torch.manual_seed(1)
    rewards, lengths = torch.rand(3, 4).round(decimals=1), torch.randint(1, 6, (3, 4))
    token_rewards, mask, index = _verl_inputs(rewards, lengths)
    theirs, _ = verl_rpp(token_rewards, mask, index)
    ours = torch.as_tensor(reinforce_pp_advantages(rewards.double().numpy(), lengths.numpy())).reshape(-1, 1).float()
    assert torch.allclose(theirs, ours * mask, atol=1e-5)
    unweighted = torch.as_tensor(reinforce_pp_advantages(rewards.double().numpy())).reshape(-1, 1).float()
    assert not torch.allclose(theirs, unweighted * mask, atol=1e-3)        # the token weights matter


def test_the_trainer_uses_the_chosen_estimator(monkeypatch, random_model, char_tokenizer):
    from grpo_edu import GRPOConfig, GRPOTrainer
    from grpo_edu.training.trainers import trainer as trainer_module

    seen = []
    real = trainer_module.grpo_loss
    monkeypatch.setattr(trainer_module, "grpo_loss", lambda lp, old, adv, *a, **kw: seen.append(adv) or real(lp, old, adv, *a, **kw))
    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                     total_training_steps=1, advantage_estimator="rloo"),
                          model=random_model, tokenizer=char_tokenizer,
                          reward_funcs=[lambda prompts, completions, **kw: [float(len(c)) for c in completions]])
    rewards = []
    sample = trainer._sample
    trainer._sample = lambda prompts: rewards.append(sample(prompts)) or rewards[-1]
    trainer.step()
    lengths = torch.tensor([float(len(c)) for c in rewards[0].completions]).view(4, 4)
    from grpo_edu.core.advantages import rloo_advantages

    assert torch.allclose(seen[0].cpu(), torch.as_tensor(rloo_advantages(lengths)).reshape(-1))


def test_an_estimator_with_its_own_normalisation_refuses_a_scale():
    from grpo_edu import GRPOConfig

    with pytest.raises(ValueError, match=r"^scale: is 'none', but advantage_estimator='rloo' has its own"):
        GRPOConfig(advantage_estimator="rloo", scale="none")
    with pytest.raises(ValueError, match=r"^advantage_estimator: "):
        GRPOConfig(advantage_estimator="gae")


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_on_policy_grpo_is_reinforce_with_a_group_baseline(loss_type):
    from grpo_edu.core.advantages import group_advantages
    from grpo_edu.core.losses import reinforce_loss

    torch.manual_seed(2)
    logprobs = torch.randn(8, 5, requires_grad=True)
    mask = (torch.rand(8, 5) > 0.3).float()
    mask[:, 0] = 1
    adv = group_advantages(torch.randint(0, 2, (2, 4)).float()).reshape(-1)
    grpo, _ = grpo_loss(logprobs, logprobs.detach(), adv, mask, loss_type=loss_type, max_completion_length=5)
    plain, _ = reinforce_loss(logprobs, adv, mask, loss_type=loss_type, max_completion_length=5)
    g_plain = _grad(plain, logprobs)
    assert torch.allclose(_grad(grpo, logprobs), g_plain, atol=1e-6)
    # off-policy (μ > 1, after an update) they part: the clip and the ratio now act
    old = logprobs.detach() - 0.5 * torch.sign(adv).unsqueeze(1)                  # every token moved 0.5 the right way
    moved, _ = grpo_loss(logprobs, old, adv, mask, loss_type=loss_type, max_completion_length=5)
    assert not torch.allclose(_grad(moved, logprobs), g_plain, atol=1e-3)


# --- dynamic sampling (DAPO; verl's filter_groups) -----------------------------------------------------

def _odd_prompts_live(prompts, completions, **kw):
    """Live only on prompts that start with an odd digit: there the reward is the answer's length parity."""
    return [float(len(c) % 2) if p[0] in "13579" else 0.0 for p, c in zip(prompts, completions)]


def _dynamic_trainer(model, tok, reward, **overrides):
    from grpo_edu import GRPOConfig, GRPOTrainer

    config = GRPOConfig(**{**dict(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                  total_training_steps=2, dynamic_sampling=True, max_sampling_rounds=10), **overrides})
    return GRPOTrainer(config, model=model, tokenizer=tok, reward_funcs=[reward])


def test_dynamic_sampling_trains_on_live_groups_only_and_counts_the_extra_generation(monkeypatch, random_model,
                                                                                     char_tokenizer):
    from grpo_edu.training.trainers import trainer as trainer_module

    seen = []
    real = trainer_module.grpo_loss
    monkeypatch.setattr(trainer_module, "grpo_loss", lambda lp, old, adv, *a, **kw: seen.append(adv) or real(lp, old, adv, *a, **kw))
    trainer = _dynamic_trainer(random_model, char_tokenizer, _odd_prompts_live)
    sampled, trained = [], []
    sample, update = trainer._sample, trainer._update
    trainer._sample = lambda prompts: sampled.append(prompts) or sample(prompts)
    trainer._update = lambda batch, *a: trained.append(batch.prompts) or update(batch, *a)
    metrics = trainer.step()
    groups = seen[0].view(4, 4)
    assert metrics["live_groups_kept"] == 4 and (groups.abs().sum(dim=1) > 0).all()    # every group trains
    assert len(trained[0]) == 4 and all(p[0] in "13579" for p in trained[0])          # only live prompts
    assert any(p[0] not in "13579" for p in sampled[0])                                # the first batch had dead ones
    assert metrics["sampling_rounds"] == len(sampled) >= 2
    assert metrics["sampled_groups"] == 4 * len(sampled)


def test_dynamic_sampling_stops_at_its_cap_and_then_trains_on_what_it_has(random_model, char_tokenizer):
    def dead(prompts, completions, **kw):
        return [0.5] * len(completions)
    trainer = _dynamic_trainer(random_model, char_tokenizer, dead, max_sampling_rounds=3)
    metrics = trainer.step()
    assert (metrics["sampling_rounds"], metrics["sampled_groups"], metrics["live_groups_kept"]) == (3, 12, 0)
    assert math.isfinite(metrics["loss"]) and metrics["dead_group_fraction"] == 1.0


def test_dynamic_sampling_needs_a_cap_and_is_off_by_default():
    from grpo_edu import GRPOConfig

    with pytest.raises(ValueError, match=r"^max_sampling_rounds: must be an integer ≥ 1, got 0\. Fix: pass a cap"):
        GRPOConfig(dynamic_sampling=True, max_sampling_rounds=0)
    assert GRPOConfig().dynamic_sampling is False


# --- a sampler that is not the trainer: truncated importance sampling ---------------------------------

def test_sampler_weights_multiply_the_policy_term_and_not_the_kl():
    logprobs = torch.zeros(1, 2, requires_grad=True)
    ref = torch.full((1, 2), -0.5)
    weights = torch.tensor([[2.0, 0.5]])
    plain, _ = grpo_loss(logprobs, logprobs.detach(), torch.tensor([1.0]), torch.ones(1, 2), ref_logprobs=ref, beta=0.1)
    weighted, _ = grpo_loss(logprobs, logprobs.detach(), torch.tensor([1.0]), torch.ones(1, 2), ref_logprobs=ref,
                            beta=0.1, sampler_weights=weights)
    kl = math.exp(-0.5) + 0.5 - 1                                  # k3 per token
    assert float(plain) == pytest.approx(-1 + 0.1 * kl) and float(weighted) == pytest.approx(-(2 + 0.5) / 2 + 0.1 * kl)


def test_a_bf16_sampler_is_not_the_trainer_and_the_correction_weighs_it(monkeypatch, random_model, char_tokenizer):
    from grpo_edu import GRPOConfig, GRPOTrainer
    from grpo_edu.training.trainers import trainer as trainer_module

    plain = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                   total_training_steps=1), model=random_model, tokenizer=char_tokenizer).step()
    assert not any(k.startswith("sampler_") for k in plain)         # float32 sampling: nothing to log
    seen = []
    real = trainer_module.grpo_loss
    monkeypatch.setattr(trainer_module, "grpo_loss", lambda lp, old, *a, **kw: seen.append((old, kw)) or real(lp, old, *a, **kw))
    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                     total_training_steps=1, sampling_dtype="bfloat16", num_iterations=2,
                                     importance_sampling_correction=True, importance_sampling_cap=1.01),
                          model=random_model, tokenizer=char_tokenizer)
    rollouts = []
    sample = trainer._sample
    trainer._sample = lambda prompts: rollouts.append(sample(prompts)) or rollouts[-1]
    metrics = trainer.step()
    assert metrics["sampler_ratio_max"] > 1.0                       # bf16 sampling is not the float32 policy
    old, kw = seen[0]
    w = kw["sampler_weights"]
    mask = rollouts[0].completion_mask.bool()
    assert float(w[mask].max()) <= 1.01 and not torch.allclose(w[mask], torch.ones_like(w[mask]))
    assert not torch.allclose(old[mask], rollouts[0].logprobs[mask])   # π_θold: the trainer's own float32 pass
    assert torch.allclose(w, (old - rollouts[0].logprobs).exp().clamp(max=1.01))


@pytest.mark.parametrize("kwargs, match", [
    (dict(importance_sampling_correction=True, replay_ratio=0.3), r"^importance_sampling_correction: cannot weigh"),
    (dict(importance_sampling_cap=0.0), r"^importance_sampling_cap: "),
    (dict(sampling_dtype="float16"), r"^sampling_dtype: "),
])
def test_sampler_settings_that_cannot_work_are_refused(kwargs, match):
    from grpo_edu import GRPOConfig

    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_each_variant_travels_to_trl_and_verl_or_is_named_as_unmatched():
    from grpo_edu import GRPOConfig
    from grpo_edu.beyond.export import to_trl, to_verl

    gspo = GRPOConfig(importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)
    assert to_trl(gspo)[0]["importance_sampling_level"] == "sequence"
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=gspo" in to_verl(gspo)[0]
    cispo = GRPOConfig(loss_type="cispo", epsilon_high=5.0)
    assert to_trl(cispo)[0]["loss_type"] == "cispo"
    overrides = to_verl(cispo)[0]                                  # verl caps r at 1 + clip_ratio_high
    assert {"actor_rollout_ref.actor.policy_loss.loss_mode=cispo", "actor_rollout_ref.actor.clip_ratio_high=4.0",
            "actor_rollout_ref.actor.clip_ratio_low=1.0"} <= set(overrides)
    sapo = GRPOConfig(loss_type="sapo", sapo_temperature_neg=1.2)
    assert to_trl(sapo)[0]["sapo_temperature_neg"] == 1.2
    assert {"actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.tau_neg=1.2"} <= set(to_verl(sapo)[0])
    rloo = GRPOConfig(advantage_estimator="rloo")
    assert "advantage_estimator" in dict(to_trl(rloo)[1]["unmatched"])
    assert "algorithm.adv_estimator=rloo" in to_verl(rloo)[0]
    dapo = GRPOConfig(dynamic_sampling=True, max_sampling_rounds=4)
    assert "dynamic_sampling" in dict(to_trl(dapo)[1]["unmatched"])
    assert {"algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=4"} <= set(to_verl(dapo)[0])
    tis = GRPOConfig(sampling_dtype="bfloat16", importance_sampling_correction=True)
    assert "vllm_importance_sampling_mode='token_truncate'" in dict(to_trl(tis)[1]["unmatched"])[
        "importance_sampling_correction / sampling_dtype"]


def test_gspos_sequence_ratio_by_hand():
    from grpo_edu.core.losses import sequence_ratio

    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 9.0]], dtype=torch.float64)
    old = torch.tensor([[-1.5, -1.0, -3.3], [-1.0, -0.2, -9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    s, info = sequence_ratio(logprobs, old, mask)
    # answer 0: log-ratios 0.5, −1, 0.3 → mean −0.0667; answer 1: 0.5, −0.3 (the pad is out) → mean 0.1
    assert s.tolist() == pytest.approx([math.exp(-0.2 / 3), math.exp(0.1)], abs=1e-12)
    assert info["log_ratio"].tolist() == pytest.approx([-0.2 / 3, 0.1], abs=1e-12)


def test_the_push_off_policy_shows_each_variants_clip_cap_and_gate():
    from grpo_edu.core.losses import token_push

    r = torch.tensor([[0.5], [1.1], [1.5], [6.0]], dtype=torch.float64)        # four one-token answers
    mask = torch.ones(4, 1)
    up, down = torch.ones(4), -torch.ones(4)
    grpo_up, _ = token_push(up, mask, ratio=r)
    assert (grpo_up[:, 0] * 4).tolist() == pytest.approx([0.5, 1.1, 0.0, 0.0])        # r·Â inside, 0 past 1 + ε
    grpo_down, _ = token_push(down, mask, ratio=r)
    assert (grpo_down[:, 0] * 4).tolist() == pytest.approx([0.0, -1.1, -1.5, -6.0])   # 0 below 1 − ε for Â < 0
    cispo, _ = token_push(up, mask, ratio=r, loss_type="cispo", epsilon_high=5.0)
    assert (cispo[:, 0] * 4).tolist() == pytest.approx([0.5, 1.1, 1.5, 5.0])         # min(r, ε_max): never 0
    sapo, _ = token_push(up, mask, ratio=r, loss_type="sapo")
    gate = torch.sigmoid(r[:, 0] - 1)
    assert (sapo[:, 0] * 4).tolist() == pytest.approx((4 * gate * (1 - gate) * r[:, 0]).tolist())
    on_policy = [token_push(up, mask, ratio=torch.ones(4, 1), **kw)[0] for kw in
                 ({}, {"loss_type": "sapo"}, {"loss_type": "cispo", "epsilon_high": 5.0})]
    assert all(torch.allclose(p, on_policy[0]) for p in on_policy)                     # r = 1: one gradient


def test_lesson_12s_map_names_grpo_edus_own_fields_and_the_race_runs_them():
    """The map's fourth column must hold GRPOConfig's field names (TRL's scale_rewards or verl's adv_estimator
    there would raise TypeError), and every setting of the race must be a valid config."""
    import dataclasses
    import json
    import re
    from pathlib import Path

    from grpo_edu import GRPOConfig
    from grpo_edu.course.experiments.variants import COMMON, VARIANTS

    cells = json.loads((Path(__file__).parents[1] / "lessons" / "12_variants.ipynb").read_text(encoding="utf-8"))["cells"]
    text = next("".join(c["source"]) for c in cells if "grpo_edu's `GRPOConfig` field" in "".join(c["source"]))
    table = text[text.index("| variant |"):].split("\n\n")[0].splitlines()   # the map: header, rule, 10 rows
    header, _, *rows = table
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    column = header.split(" | ").index("grpo_edu's `GRPOConfig` field")
    named = [re.findall(r"`(\w+)(?:=[^`]*)?`", row.split(" | ")[column]) for row in rows]
    assert len(named) == 10 and all(names for names in named[:-1])            # nanochat's row names a function
    for names in named[:-1]:
        assert set(names) <= fields, set(names) - fields
    assert not {"scale_rewards", "adv_estimator", "filter_groups"} & {n for names in named for n in names}
    for name, settings in VARIANTS.items():
        GRPOConfig.preset("sums", **{**COMMON, **settings})                       # refused up front if wrong


def test_a_variants_progress_bar_names_what_it_changes_in_grpo(monkeypatch, random_model, char_tokenizer):
    from grpo_edu.common import progress
    from grpo_edu.course.experiments import variants
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    expected = {"grpo": "GRPO", "dr_grpo": "GRPO (loss_type=dr_grpo)", "dapo": "GRPO (loss_type=dapo, dynamic sampling)",
                "gspo": "GRPO (sequence-level ratio)", "cispo": "GRPO (loss_type=cispo)",
                "rloo": "GRPO (advantage_estimator=rloo)"}
    for name, label in expected.items():
        config = GRPOConfig.preset("sums", **{**variants.COMMON, **variants.VARIANTS[name], "max_completion_length": 16})
        assert GRPOTrainer(config, model=random_model, tokenizer=char_tokenizer).run_name() == label, name
    bars = []
    real = progress.progress_bar
    monkeypatch.setattr(progress, "progress_bar", lambda *a, desc, **k: bars.append(desc) or real(*a, desc=desc, **k))
    GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=1, eval_size=0, max_completion_length=3,
                           sampling_dtype="bfloat16", importance_sampling_correction=True),
                model=random_model, tokenizer=char_tokenizer).train(progress=False)
    assert bars == ["GRPO (truncated IS)"]
