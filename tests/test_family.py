"""The family's trainers (``grpo_edu.training.trainers.family``): each piece of the wiring pinned to an independent
computation, bad input refused naming the field, and a short real run per method that must learn.

The math (GAE, the value loss, the DPO loss, the kept answers) has its own tests, against verl's and TRL's
code (test_gae.py, test_dpo.py, test_rejection_sampling.py); these check that the trainers feed it the right
things: γ and λ where they belong, V_old into the clip, π_ref into DPO, only the right answers into SFT.
"""

import math
import types
import warnings

import pytest
import torch

from grpo_edu.core.gae import gae_advantages
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.model.critic import Critic, hidden_size_of
from grpo_edu.training.trainers.family import (METHODS, DPOTrainer, FamilyConfig, PPOTrainer, RejectionSamplingTrainer,
                                      make_trainer)
from grpo_edu.training.rollouts.rollout import completion_logprobs
from grpo_edu.training.task.tasks import get_task

ROWS = get_task("addition").split("train", n=16)   # "12+34=": all prompts 6 characters, so no left padding


def _config(**overrides):
    settings = dict(batch_size=2, num_generations=4, total_training_steps=4, eval_size=0, max_completion_length=4,
                    learning_rate=1e-2, beta=0.0, max_grad_norm=0.0, sampler="engine")
    return GRPOConfig(**{**settings, **overrides})


def _trainer(cls, model, tok, reward=None, family=None, **overrides):
    reward = reward or (lambda prompts, completions, **kw: [float(len(c) % 2) for c in completions])
    return cls(_config(**overrides), model=model, tokenizer=tok, train_rows=ROWS, reward_funcs=[reward],
               family=family)


def _batch(t):
    rows = t.batch_for(1)
    rollout = t._sample([r["prompt"] for r in rows])
    rewards, _ = t._score(rows, rollout)
    return rows, rollout, rewards


# --- PPO with a critic ----------------------------------------------------------------------------------------
def test_the_critic_reads_the_state_before_each_completion_token(random_model, char_tokenizer):
    """V(s_t) is the head on the hidden state of the last token *before* o_t, as log π(o_t | …) is read."""
    t = _trainer(PPOTrainer, random_model, char_tokenizer)
    torch.nn.init.normal_(t.critic.head.weight)
    _, rollout, _ = _batch(t)
    T = rollout.completion_ids.shape[1]
    values = t.critic(rollout.input_ids, rollout.attention_mask, T)                       # (N, T)
    P = rollout.prompt_ids.shape[1]
    for step in range(T):
        prefix = rollout.input_ids[:, :P + step]                                          # q, o_<t
        hidden = t.critic.body(input_ids=prefix).last_hidden_state[:, -1]                 # its last state, (N, H)
        torch.testing.assert_close(values[:, step], t.critic.head(hidden).squeeze(-1), atol=1e-5, rtol=1e-5)


def test_the_critic_starts_at_zero_so_the_first_advantage_is_the_reward(random_model, char_tokenizer):
    t = _trainer(PPOTrainer, random_model, char_tokenizer, family=FamilyConfig(whiten_advantages=False))
    _, rollout, rewards = _batch(t)
    advantages, returns, old_values = t.token_advantages(rollout, rewards)
    mask = rollout.completion_mask
    assert float(old_values.abs().max()) == 0.0
    torch.testing.assert_close(advantages, rewards.reshape(-1, 1).expand_as(mask) * mask)   # Â_t = R − 0
    torch.testing.assert_close(returns, advantages)


def test_gamma_and_lambda_reach_gae_in_their_places(random_model, char_tokenizer):
    """With a constant critic V = 0.3, γ = 1 and λ = 0.5 a token k places before the last gets Â = λᵏ·(R − 0.3)
    (every earlier TD error is 0 when γ = 1); γ and λ swapped would give other numbers."""
    t = _trainer(PPOTrainer, random_model, char_tokenizer,
                 family=FamilyConfig(gamma=1.0, lam=0.5, whiten_advantages=False))
    torch.nn.init.constant_(t.critic.head.bias, 0.3)
    _, rollout, rewards = _batch(t)
    advantages, _, values = t.token_advantages(rollout, rewards)
    mask, R = rollout.completion_mask, rewards.reshape(-1)
    lengths = mask.sum(-1)
    for i in range(mask.shape[0]):
        for step in range(int(lengths[i])):
            k = int(lengths[i]) - 1 - step                                                # tokens after this one
            assert float(advantages[i, step]) == pytest.approx(0.5 ** k * (float(R[i]) - 0.3), abs=1e-5)
    swapped, _ = gae_advantages(R, values, mask, gamma=0.5, lam=1.0)
    assert not torch.allclose(swapped, advantages)                                        # the test can tell them apart


def test_the_value_loss_is_clipped_around_the_old_values(random_model, char_tokenizer):
    """Where V has left V_old ± ε_v away from the return, the clipped term is the larger and constant in V:
    the critic gets no gradient, and an update leaves it unchanged. Unclipped, it would move."""
    t = _trainer(PPOTrainer, random_model, char_tokenizer, family=FamilyConfig(cliprange_value=0.5),
                 max_grad_norm=1e9)                                                        # measured, never binding
    torch.nn.init.normal_(t.critic.head.weight, std=0.1)
    _, rollout, _ = _batch(t)
    T = rollout.completion_ids.shape[1]
    with torch.no_grad():
        values = t.critic(rollout.input_ids, rollout.attention_mask, T)
    before = [p.detach().clone() for p in t.critic.parameters()]
    stats = t._update_critic(rollout, old_values=values - 1.0, returns=values + 2.0, step=1)
    assert stats["value_clip_fraction"] == pytest.approx(1.0)
    assert stats["critic_grad_norm"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, t.critic.parameters()))
    # inside the clip range the critic does learn, toward the return
    stats = t._update_critic(rollout, old_values=values, returns=values + 0.2, step=1)
    assert stats["critic_grad_norm"] > 0 and stats["value_clip_fraction"] == 0.0
    after = t.critic(rollout.input_ids, rollout.attention_mask, T).detach()
    mask = rollout.completion_mask.bool()
    assert float((after - values)[mask].mean()) > 0


def test_the_policy_takes_the_token_advantages(random_model, char_tokenizer, monkeypatch):
    """The policy's update receives GAE's (N, T) advantages, not GRPO's (N,) ones."""
    t = _trainer(PPOTrainer, random_model, char_tokenizer, family=FamilyConfig(whiten_advantages=False, lam=0.5))
    torch.nn.init.constant_(t.critic.head.bias, 0.3)
    seen = {}
    update = t._update

    def spy(rollout, advantages, ref_logprobs):
        seen["advantages"], seen["rollout"] = advantages.clone(), rollout
        return update(rollout, advantages, ref_logprobs)

    monkeypatch.setattr(t, "_update", spy)
    m = t.step()
    rows = t.batch_for(1)
    R, _ = t._score(rows, seen["rollout"])
    expected, _ = gae_advantages(R.reshape(-1), torch.full(seen["advantages"].shape, 0.3),
                                 seen["rollout"].completion_mask, gamma=1.0, lam=0.5)
    torch.testing.assert_close(seen["advantages"], expected, atol=1e-5, rtol=1e-5)
    assert {"value_loss", "value_clip_fraction", "critic_grad_norm"} <= set(m)


# --- rejection sampling ---------------------------------------------------------------------------------------
def _kept_batch(t):
    """One batch of ``t``'s with the right answers kept: (rollout, rewards, keep (N,), log-probs (N, T) under the
    policy, the completion mask (N, T), the kept answers' mask (N, T))."""
    _, rollout, rewards = _batch(t)
    keep = (rewards.reshape(-1) >= 1.0)
    T, mask = rollout.completion_ids.shape[1], rollout.completion_mask
    with torch.no_grad():
        logprobs, _ = completion_logprobs(t.model, rollout.input_ids, rollout.attention_mask, T)
    return rollout, rewards, keep, logprobs, mask, mask * keep.unsqueeze(1)


def test_rejection_sampling_imitates_only_the_right_answers(random_model, char_tokenizer):
    reward = lambda prompts, completions, **kw: [float(i % 3 == 0) for i in range(len(completions))]   # noqa: E731
    t = _trainer(RejectionSamplingTrainer, random_model, char_tokenizer, reward=reward)
    rollout, rewards, keep, logprobs, mask, kept = _kept_batch(t)
    by_hand = -float((logprobs * kept).sum() / kept.sum())                                 # NLL of the kept tokens
    stats = t._sft_update(rollout, keep)
    assert stats["loss"] == pytest.approx(by_hand, rel=1e-5)
    # and the step hands the update exactly the right answers (every third here), never the wrong ones
    seen = []
    update = t._sft_update
    t._sft_update = lambda rollout, keep: seen.append(keep.clone()) or update(rollout, keep)
    m = t.step()
    N = rewards.numel()
    assert seen[0].tolist() == [i % 3 == 0 for i in range(N)]
    assert m["kept_fraction"] == pytest.approx(sum(i % 3 == 0 for i in range(N)) / N)


def test_the_per_answer_mean_adds_up_over_micro_batches(random_model, char_tokenizer):
    """``rft_normaliser="answer"`` (DeepSeekMath's eq. 8): each kept answer over its own tokens, then 1/N, the same
    whatever the micro-batches, and not the token mean."""
    reward = lambda prompts, completions, **kw: [float(i % 3 == 0) for i in range(len(completions))]   # noqa: E731
    t = _trainer(RejectionSamplingTrainer, random_model, char_tokenizer, reward=reward,
                 family=FamilyConfig(rft_normaliser="answer"), micro_batch_size=2)
    rollout, rewards, keep, logprobs, mask, kept = _kept_batch(t)
    by_hand = -float(((logprobs * kept).sum(1) / mask.sum(1)).sum() / len(keep))        # eq. 8
    assert t._sft_update(rollout, keep)["loss"] == pytest.approx(by_hand, rel=1e-5)


def test_several_updates_per_batch_let_both_clips_act_and_the_critic_is_scored(random_model, char_tokenizer):
    """With one update the ratio is 1 and V = V_old: both clips inert. With μ = 4 (verl's ppo_epochs) they can
    bind; a lr high enough to move the policy past ε within the batch shows it. The explained variance is logged."""
    reward = lambda prompts, completions, **kw: [float(i % 2) for i in range(len(completions))]   # noqa: E731
    one = _trainer(PPOTrainer, random_model, char_tokenizer, reward=reward, num_iterations=1,
                   family=FamilyConfig(cliprange_value=0.01, critic_learning_rate=0.05))
    m = one.step()
    assert m["clip_fraction"] == 0.0 and m["value_clip_fraction"] == 0.0
    assert m["explained_variance"] == pytest.approx(0.0)                  # V = 0 at the start: a constant
    four = _trainer(PPOTrainer, random_model, char_tokenizer, reward=reward, num_iterations=4,
                    family=FamilyConfig(cliprange_value=0.01, critic_learning_rate=0.05))
    m = four.step()
    assert m["clip_fraction"] > 0 and m["value_clip_fraction"] > 0
    assert isinstance(m["explained_variance"], float)


def test_dpo_logs_trls_diagnostics(random_model, char_tokenizer, monkeypatch):
    """rewards/chosen, rewards/rejected, rewards/margins, rewards/accuracies and logps/* as TRL's DPOTrainer logs
    them, from the same numbers as the loss."""
    import grpo_edu.training.trainers.family as family_module

    t = _trainer(DPOTrainer, random_model, char_tokenizer)
    seen = []
    real = family_module.dpo_loss
    monkeypatch.setattr(family_module, "dpo_loss", lambda *a, **k: seen.append((a, real(*a, **k))) or seen[-1][1])
    t.step()
    m = t.step()                                                             # the policy has moved: rewards ≠ 0
    (chosen, rejected, *_), (_, info) = seen[-1]
    assert m["rewards/chosen"] == pytest.approx(float(info["chosen_rewards"].mean()))
    assert m["rewards/rejected"] == pytest.approx(float(info["rejected_rewards"].mean()))
    assert m["rewards/margins"] == pytest.approx(m["rewards/chosen"] - m["rewards/rejected"], abs=1e-6)
    assert m["rewards/accuracies"] == pytest.approx(float((info["chosen_rewards"] > info["rejected_rewards"]).float().mean()))
    assert m["logps/chosen"] == pytest.approx(float(chosen.detach().mean())) and m["rewards/chosen"] != 0.0
    assert m["logps/rejected"] == pytest.approx(float(rejected.detach().mean()))


def test_a_batch_with_no_right_answer_is_skipped_and_logged_never_a_zero_loss_step(random_model, char_tokenizer):
    zero = lambda prompts, completions, **kw: [0.0] * len(completions)                    # noqa: E731
    t = _trainer(RejectionSamplingTrainer, random_model, char_tokenizer, reward=zero)
    before = [p.detach().clone() for p in t.model.parameters()]
    with pytest.warns(UserWarning, match="step 1: rejection sampling kept no answer"):
        m = t.step()
    assert m["skipped"] is True and m["loss"] is None and m["kept_fraction"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, t.model.parameters()))
    assert t.step_count == 1                                                               # the run goes on


# --- DPO --------------------------------------------------------------------------------------------------------
def test_dpo_starts_at_log_two_because_the_policy_is_its_reference(random_model, char_tokenizer):
    """At the first update π_θ = π_ref, so every log-ratio is 0 and the loss is log 2 whatever β; dropping
    the reference (log π_ref = 0) would give −log σ(β·(log π(y_w) − log π(y_l))) instead."""
    reward = lambda prompts, completions, **kw: [float(i % 2 == 0) for i in range(len(completions))]   # noqa: E731
    t = _trainer(DPOTrainer, random_model, char_tokenizer, reward=reward, family=FamilyConfig(beta=0.5))
    assert t.ref_model is not None and t.ref_model is not t.model
    assert not any(p.requires_grad for p in t.ref_model.parameters())
    m = t.step()
    assert m["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert m["pair_fraction"] == 1.0
    # the reference stays the start model: on a batch's pairs, an update takes the loss below log 2
    _, rollout, rewards = _batch(t)
    pairs = torch.tensor([[i, i + 1] for i in range(0, rewards.numel(), 4)])             # (right, wrong) per prompt
    first, second = t._dpo_update(rollout, pairs)["loss"], t._dpo_update(rollout, pairs)["loss"]
    assert second < first


def test_offline_dpo_samples_from_the_reference_and_online_from_the_policy(random_model, char_tokenizer,
                                                                           monkeypatch):
    from grpo_edu.training.trainers import trainer as trainer_module

    real = trainer_module.generate
    for offline in (False, True):
        t = DPOTrainer(_config(sampler="loop"), model=random_model, tokenizer=char_tokenizer, train_rows=ROWS,
                       reward_funcs=[lambda prompts, completions, **kw: [float(i % 2) for i in range(len(completions))]],
                       offline=offline)
        used = []
        monkeypatch.setattr(trainer_module, "generate", lambda model, *a, **k: used.append(model) or real(model, *a, **k))
        t.step()
        assert used == [t.ref_model if offline else t.model]
        assert t.model.training and not t.ref_model.training


def test_dpo_with_no_pair_skips_the_step(random_model, char_tokenizer):
    t = _trainer(DPOTrainer, random_model, char_tokenizer, reward=lambda prompts, completions, **kw: [1.0] * len(completions))
    with pytest.warns(UserWarning, match="DPO found no pair"):
        m = t.step()
    assert m["skipped"] is True and m["loss"] is None and m["pair_fraction"] == 0.0


# --- the table of methods, and bad input ----------------------------------------------------------------------
def test_each_method_gets_its_trainer_and_reinforce_has_no_baseline(random_model, char_tokenizer):
    kinds = {}
    for name in METHODS:
        t = make_trainer(name, _config(), model=random_model, tokenizer=char_tokenizer, train_rows=ROWS)
        kinds[name] = type(t).__name__
        if name == "reinforce":
            assert t.config.advantage_estimator == "reinforce"
        if name == "reinforce_dr_grpo":                                                 # lesson 13's controls
            assert (t.config.advantage_estimator, t.config.loss_type) == ("reinforce", "dr_grpo")
        if name in ("rft", "rft_answer_mean"):
            assert t.family.rft_normaliser == ("answer" if name == "rft_answer_mean" else "tokens")
    assert kinds == {"grpo": "GRPOTrainer", "reinforce": "GRPOTrainer", "ppo": "PPOTrainer",
                     "rft": "RejectionSamplingTrainer", "dpo": "DPOTrainer", "dpo_offline": "DPOTrainer",
                     "reinforce_dr_grpo": "GRPOTrainer", "rft_answer_mean": "RejectionSamplingTrainer"}
    kept = make_trainer("rft_answer_mean", _config(), family=FamilyConfig(max_per_prompt=1), model=random_model,
                        tokenizer=char_tokenizer, train_rows=ROWS).family
    assert (kept.rft_normaliser, kept.max_per_prompt) == ("answer", 1)             # the caller's settings stay


def test_each_methods_progress_bar_names_the_method(random_model, char_tokenizer):
    names = {name: make_trainer(name, _config(), model=random_model, tokenizer=char_tokenizer,
                                train_rows=ROWS).run_name() for name in METHODS}
    assert names == {"grpo": "GRPO", "reinforce": "GRPO (advantage_estimator=reinforce)", "ppo": "PPO",
                     "rft": "rejection sampling", "dpo": "DPO", "dpo_offline": "offline DPO",
                     "reinforce_dr_grpo": "GRPO (loss_type=dr_grpo, advantage_estimator=reinforce)",
                     "rft_answer_mean": "rejection sampling (rft_normaliser=answer: DeepSeekMath's eq. 8)"}


@pytest.mark.parametrize("kwargs, field", [
    ({"gamma": 1.5}, "gamma"), ({"gamma": -0.1}, "gamma"), ({"lam": 2.0}, "lam"), ({"lam": float("nan")}, "lam"),
    ({"beta": 0.0}, "beta"), ({"beta": -0.1}, "beta"), ({"cliprange_value": 0.0}, "cliprange_value"),
    ({"critic_learning_rate": 5.0}, "critic_learning_rate"), ({"max_per_prompt": 0}, "max_per_prompt"),
    ({"rft_normaliser": "mean"}, "rft_normaliser"),
])
def test_bad_settings_are_refused_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}: .*Fix: "):
        FamilyConfig(**kwargs)


def test_a_value_head_on_a_model_whose_hidden_size_cannot_be_read_is_refused(random_model):
    assert hidden_size_of(random_model) == 32
    faceless = types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=19))
    with pytest.raises(ValueError, match=r"^model: SimpleNamespace's hidden size cannot be read.*Fix: "):
        Critic(faceless)


def test_an_unknown_method_is_refused(random_model, char_tokenizer):
    with pytest.raises(ValueError, match="^method: "):
        make_trainer("ppo2", _config(), model=random_model, tokenizer=char_tokenizer, train_rows=ROWS)
    # resuming each method exactly, and refusing another method's run: tests/test_cli_methods.py


# --- a short real run per method: it must learn ----------------------------------------------------------------
RUN = {"grpo": (20, 0.05), "reinforce": (20, 0.05), "ppo": (20, 0.05), "rft": (20, 0.05), "dpo": (60, 0.05),
       "dpo_offline": (60, 0.05)}
"""method → (steps, the held-out accuracy it must gain). Measured on seed 0, both kernel sets: +13 to +15.5 points
after 20 steps for the policy-gradient methods and rejection sampling; DPO's pairs teach more slowly (after 20
steps online DPO had −2.5 points and offline −6.5; after 60, +22.5 and +14: ``assets/family``), so they get 60."""


@pytest.mark.parametrize("method", list(RUN))          # the controls run on the sums model (assets/family-sums)
def test_a_short_run_on_the_adder_raises_the_held_out_accuracy(method):
    """From the bundled adder (about half right at the start), 16 prompts × 8 answers per step, scored on 200
    held-out prompts before and after."""
    steps, gain = RUN[method]
    config = GRPOConfig(batch_size=16, num_generations=8, total_training_steps=steps, eval_size=200,
                        sampler="engine", seed=0)
    t = make_trainer(method, config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.train(progress=False)
    assert t.evals[-1]["accuracy"] - t.evals[0]["accuracy"] >= gain, t.evals


# --- grpo-edu family: bad arguments are refused before any run ------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--seeds", "-1"], "--seeds: -1 is negative"),
    (["--seeds", "0", "0"], "--seeds: 0 is given twice"),
    (["--methods", "ppo", "ppo"], "--methods: ppo is given twice"),
    (["--steps", "0"], "--steps: is 0"),
    (["--resamples", "1"], "--resamples: is 1"),
    (["--num-iterations", "0"], "--num-iterations: is 0"),
    (["--overwrite"], "--overwrite: replaces the --json file, but no --json is given"),
    (["--methods", "ppo2"], "invalid choice: 'ppo2'"),
])
def test_the_family_command_refuses_bad_arguments_naming_them(argv, message, capsys, monkeypatch):
    from grpo_edu.cli import main
    from grpo_edu.course import family as course_family

    monkeypatch.setattr(course_family, "comparison", lambda *a, **k: pytest.fail("ran before checking its arguments"))
    with pytest.raises(SystemExit) as exit_:
        main(["family", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_an_existing_json_file_is_refused_before_the_runs(tmp_path, capsys, monkeypatch):
    from grpo_edu.cli import main
    from grpo_edu.course import family as course_family

    monkeypatch.setattr(course_family, "comparison", lambda *a, **k: pytest.fail("ran before checking its arguments"))
    target = tmp_path / "runs.json"
    target.write_text("{}")
    with pytest.raises(SystemExit):
        main(["family", "--json", str(target)])
    assert "--json: " in capsys.readouterr().err and target.read_text() == "{}"


# --- the stored comparison lesson 13 reads ---------------------------------------------------------------------
def test_paired_intervals_by_hand():
    """Two methods, three seeds: s = √((0.01 + 0 + 0.01 + 0) / 4), df = 4, Bonferroni over 2: t_{1−0.05/4, 4}."""
    from grpo_edu.course import family as course_family
    from grpo_edu.course.experiments.variants import t_quantile

    diffs = {"a": {0: 0.1, 1: 0.2, 2: 0.3}, "b": {0: -0.1, 1: -0.1, 2: -0.1}}
    rows, info = course_family.paired_intervals(diffs)
    assert info["spread"] == pytest.approx(0.005 ** 0.5) and info["df"] == 4 and info["comparisons"] == 2
    assert info["t"] == pytest.approx(t_quantile(1 - 0.05 / 4, 4)) and info["t"] == pytest.approx(3.495, abs=1e-3)
    half = info["t"] * 0.005 ** 0.5 / 3 ** 0.5                                      # 0.1427
    assert info["half_widths"]["a"] == pytest.approx(half)
    assert info["verdicts"] == {"a": "ahead", "b": "unresolved"}                   # 0.2 > 0.143; |−0.1| < 0.143
    assert [r["± (points)"] for r in rows] == ["14.3", "14.3"]
    assert course_family.paired_intervals(diffs, alpha=0.5)[1]["verdicts"]["b"] == "behind"


def test_tokens_to_target_by_hand():
    from grpo_edu.course.experiments.family import tokens_to_target

    history = [{"step": i + 1, "accuracy": a, "completion_length": 3.0} for i, a in enumerate([0.5, 0.6, 0.8, 0.9, 0.7])]
    assert tokens_to_target(history, 10, target=0.75, window=2) == (4, 4 * 3.0 * 10)       # (0.8 + 0.9) / 2 ≥ 0.75
    assert tokens_to_target(history, 10, target=0.95, window=2) == (None, None)


def test_the_stored_runs_hold_every_method_seed_and_kernel_set():
    from grpo_edu.course import family as course_family
    from grpo_edu.course import variants

    runs, info = course_family.stored_runs()
    assert list(runs) == list(course_family.ORDER)
    for name, rows in runs.items():
        assert sorted((r["seed"], r["kernels"]) for r in rows) == sorted(
            (s, k) for s in (0, 1, 2) for k in ("AVX512", "DEFAULT")), name
        assert all(len(r["curve"]) == course_family.COMMON["total_training_steps"] for r in rows)
    assert set(variants.paired_differences(runs)) == set(course_family.ORDER) - {"grpo"}
    assert {len(seeds) for seeds in info["gradient_noise"].values()} == {3}
    assert set(info["step_cost"]) == {"AVX512", "DEFAULT"}
    assert [row["method"] for row in course_family.noise_rows(info)] == list(course_family.ORDER)


def test_an_empty_folder_is_refused_naming_the_command(tmp_path):
    from grpo_edu.course import family as course_family

    with pytest.raises(ValueError, match="^folder: .*grpo-edu family --seeds 0 1 2 --json FILE"):
        course_family.stored_runs(tmp_path)


# --- micro-batches, LoRA, and settings a method has no use for ---------------------------------------------------
def test_dpo_with_micro_batches_takes_the_whole_batchs_step_with_smaller_forwards(random_model, char_tokenizer,
                                                                                   monkeypatch):
    """micro_batch_size = 2: every forward of the update holds one pair (2 answers), and the weights after the
    step equal those of the whole batch in one pass (the pair mean split by each micro-batch's share)."""
    import copy

    import grpo_edu.training.trainers.family as family

    rows_seen, forward = [], family.completion_logprobs

    def spy(model, input_ids, *args, **kwargs):
        rows_seen.append(input_ids.shape[0])
        return forward(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(family, "completion_logprobs", spy)
    after = {}
    for micro in (None, 2):
        rows_seen.clear()
        t = _trainer(DPOTrainer, copy.deepcopy(random_model), char_tokenizer, micro_batch_size=micro,
                     num_iterations=2)
        m = t.step()
        assert not m["skipped"] and m["pair_fraction"] > 0.5
        after[micro] = [m["loss"], m["reward_margin"]] + [p.detach().clone() for p in t.model.parameters()]
        if micro:
            assert max(rows_seen) == 2 and len(rows_seen) > 3, rows_seen
        else:
            assert max(rows_seen) > 2
    assert after[2][:2] == pytest.approx(after[None][:2], rel=1e-5)        # the loss and margin the step logged
    for whole, split in zip(after[None][2:], after[2][2:]):
        torch.testing.assert_close(split, whole, atol=1e-6, rtol=1e-5)


def test_ppo_with_lora_trains_the_adapter_and_a_full_critic(random_model, char_tokenizer):
    t = _trainer(PPOTrainer, random_model, char_tokenizer, lora_rank=4)
    before = {n: p.detach().clone() for n, p in t.model.named_parameters() if p.requires_grad}
    m = t.step()
    assert math.isfinite(m["value_loss"]) and math.isfinite(m["loss"])
    assert all(n.count("lora_") for n in before)                          # only the adapter trains in the policy
    assert any(not torch.equal(p, before[n]) for n, p in t.model.named_parameters() if n in before)
    assert type(t.critic.body).__name__ == "LlamaModel" and not any("lora" in n for n, _ in t.critic.named_parameters())


@pytest.mark.parametrize("method", ["grpo", "reinforce"])
def test_a_family_config_given_to_grpo_or_reinforce_is_refused(method, random_model, char_tokenizer):
    with pytest.raises(ValueError, match=f"^family: has no setting {method} uses.*Fix: "):
        make_trainer(method, _config(), family=FamilyConfig(beta=0.5), model=random_model, tokenizer=char_tokenizer,
                     train_rows=ROWS)
