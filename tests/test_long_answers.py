"""Lesson 11's pieces: the length bias read off the gradient, the entropy bonus, pass@k,
the soft overlong punishment, the R1-Zero format reward and the masking of cut answers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_edu.core.losses import grpo_loss, token_push
from grpo_edu.training.task.evaluation import pass_at_k, pass_at_k_curve
from grpo_edu.training.task.rewards import compute_rewards, soft_overlong_punishment
from grpo_edu.training.task.sums import format_reward

# two completions of one group: a short right one (2 tokens) and a long wrong one (4 tokens)
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
ADV = torch.tensor([1.0, -1.0])


def test_the_push_on_each_token_by_hand():
    push, info = token_push(ADV, MASK, loss_type="grpo")
    # grpo: Â_i / (N·|o_i|): 1/(2·2) on the short answer, −1/(2·4) on the long one
    assert push.tolist() == [[0.25, 0.25, 0.0, 0.0], [-0.125] * 4]
    assert info["per_sequence"].tolist() == [0.5, -0.5]       # each answer gets the same total, whatever its length
    push, info = token_push(ADV, MASK, loss_type="dr_grpo", max_completion_length=8)
    assert push.tolist() == [[1 / 16, 1 / 16, 0.0, 0.0], [-1 / 16] * 4]    # Â / (N·T_max): every token alike
    assert info["per_sequence"].tolist() == [0.125, -0.25]   # so a longer answer gets a bigger total
    push, _ = token_push(ADV, MASK, loss_type="dapo")
    assert push.tolist() == [[1 / 6, 1 / 6, 0.0, 0.0], [-1 / 6] * 4]     # Â / (all 6 tokens of the step)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=6), st.integers(0, 2 ** 16))
def test_under_grpo_a_token_is_pushed_in_inverse_proportion_to_its_answers_length(lengths, seed):
    T = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    adv = torch.randn(len(lengths), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    push, info = token_push(adv, mask, loss_type="grpo")
    n = torch.tensor(lengths, dtype=torch.float64)
    assert torch.allclose(push[:, 0], adv / (len(lengths) * n))
    assert torch.allclose(info["per_sequence"], adv / len(lengths))
    dr, _ = token_push(adv, mask, loss_type="dr_grpo", max_completion_length=T)
    assert torch.allclose(dr[:, 0], adv / (len(lengths) * T))      # no length in it


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_the_entropy_bonus_subtracts_c_times_the_mean_entropy_per_token_whatever_the_loss_type(loss_type):
    logprobs = torch.zeros(2, 4, requires_grad=True)
    entropy = torch.tensor([[0.5, 0.3, 9.0, 9.0], [0.2, 0.2, 0.2, 0.2]], requires_grad=True)   # 9s: off the mask
    plain, _ = grpo_loss(logprobs, logprobs.detach(), ADV, MASK, loss_type=loss_type, max_completion_length=4)
    bonus, _ = grpo_loss(logprobs, logprobs.detach(), ADV, MASK, loss_type=loss_type, max_completion_length=4,
                         entropy=entropy, entropy_coef=0.1)
    # TRL's entropy_coef: the mean over the 6 active tokens, (0.5 + 0.3 + 4 · 0.2) / 6
    assert float((plain - bonus).detach()) == pytest.approx(0.1 * 1.6 / 6)
    bonus.backward()
    assert torch.allclose(entropy.grad, torch.tensor([[-0.1 / 6] * 2 + [0.0, 0.0], [-0.1 / 6] * 4]))
    # split over micro-batches with the step's token count (dapo's num_active_tokens), the parts add up
    if loss_type == "dapo":
        parts = [grpo_loss(logprobs[i:i + 1], logprobs[i:i + 1].detach(), ADV[i:i + 1], MASK[i:i + 1],
                           loss_type="dapo", num_active_tokens=6, entropy=entropy[i:i + 1], entropy_coef=0.1)[0]
                 for i in range(2)]
        assert float(sum(parts)) == pytest.approx(float(bonus))
    with pytest.raises(ValueError, match="^entropy: is None but entropy_coef = 0.1"):
        grpo_loss(logprobs, logprobs.detach(), ADV, MASK, entropy_coef=0.1)
    with pytest.raises(ValueError, match="^entropy_coef: "):
        grpo_loss(logprobs, logprobs.detach(), ADV, MASK, entropy=entropy, entropy_coef=-1.0)


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 2)[0] == pytest.approx(0.5)             # 1 − C(3,2)/C(4,2) = 1 − 3/6
    assert pass_at_k(16, 4, 1)[0] == pytest.approx(0.25)           # k = 1 is the share right
    assert pass_at_k(16, 1, 16)[0] == 1.0 and pass_at_k(16, 0, 16)[0] == 0.0
    assert pass_at_k(5, 2, 4)[0] == 1.0                              # any 4 of 5 include one of the 2 right
    # the naive 1 − (1 − c/n)^k is biased low: 1 − 0.75² = 0.4375 < 0.5
    assert 1 - (1 - 1 / 4) ** 2 < pass_at_k(4, 1, 2)[0]
    curve, info = pass_at_k_curve([0, 1, 16], 16, [1, 16])
    assert curve[1] == pytest.approx((0 + 1 / 16 + 1) / 3) and curve[16] == pytest.approx(2 / 3)
    assert info["solved_by_any"] == pytest.approx(2 / 3)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 20).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_rises_with_k_from_c_over_n_to_whether_any_is_right(nc):
    n, c = nc
    values = [pass_at_k(n, c, k)[0] for k in range(1, n + 1)]
    assert values[0] == pytest.approx(c / n)
    assert values[-1] == (1.0 if c else 0.0)
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("args, match", [((4, 1, 5), "^k: is 5, more than the 4 samples"),
                                         ((4, 5, 2), "^num_correct: is 5, more than the 4"),
                                         ((4, 1, 0), "^k: must be an integer ≥ 1")])
def test_pass_at_k_refuses_what_it_cannot_estimate(args, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(*args)


def test_the_soft_overlong_punishment_by_hand_and_through_compute_rewards():
    punish = soft_overlong_punishment(10, 4)                       # L_max = 10, L_cache = 4: the ramp starts after 6
    ids = [[7] * n for n in (5, 6, 7, 9, 10, 11)]
    assert punish(completion_ids=ids) == [0.0, 0.0, -0.25, -0.75, -1.0, -1.0]
    rows = [{"prompt": "1+1=", "answer": "2"}]

    def no_ids(prompts, completions, answer):                     # takes no ids: it is not given them
        return [1.0] * len(completions)

    rewards, info = compute_rewards([no_ids, punish], rows, ["a", "b"], 2, completion_ids=[[1] * 6, [1] * 9])
    assert rewards.tolist() == [[1.0, 0.25]]
    assert info["reward/overlong(max=10,cache=4)"] == pytest.approx(-0.375)
    with pytest.raises(ValueError, match="^cache_length: is 10, not below max_completion_length 10"):
        soft_overlong_punishment(10, 10)
    with pytest.raises(ValueError, match="^completion_ids: has 1 entries, expected B·G = 2"):
        compute_rewards([punish], rows, ["a", "b"], 2, completion_ids=[[1]])


def test_the_format_reward_pays_for_the_format_not_the_answer():
    completions = ["3+8=11;11+5=16#16", "#99", "3+8=11;11+5=16", "3+8=11#", "3+8=12#12", " #5 "]
    assert format_reward(["3+8+5="] * 6, completions) == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def _captured_losses(monkeypatch):
    """Record what the trainer hands grpo_loss (mask, entropy, coefficient, token count)."""
    from grpo_edu.training.trainers import trainer as trainer_module

    calls = []

    def spy(logprobs, old, adv, mask, **kw):
        calls.append({"mask": mask.clone(), **kw})
        return grpo_loss(logprobs, old, adv, mask, **kw)
    monkeypatch.setattr(trainer_module, "grpo_loss", spy)
    return calls


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_masking_cut_answers_takes_them_out_of_the_loss_only(monkeypatch, random_model, char_tokenizer, loss_type):
    from grpo_edu import GRPOConfig, GRPOTrainer
    from grpo_edu.training.rollouts.rollout import finished

    calls = _captured_losses(monkeypatch)
    seen = []
    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                     total_training_steps=1, mask_truncated_completions=True, loss_type=loss_type),
                          model=random_model, tokenizer=char_tokenizer)
    sample = trainer._sample
    trainer._sample = lambda prompts: seen.append(sample(prompts)) or seen[-1]
    trainer.step()
    rollout, mask = seen[0], calls[0]["mask"]
    ended = finished(rollout, char_tokenizer.eos_token_id)
    assert 0 < int(ended.sum()) < len(ended), "the random model should both end and be cut in this step"
    assert torch.equal(mask, rollout.completion_mask * ended.unsqueeze(1))       # cut rows: all zeros
    if loss_type == "dapo":                                                       # the normaliser counts kept tokens
        assert calls[0]["num_active_tokens"] == mask.sum()


def test_the_entropy_bonus_reaches_the_loss_with_its_gradient(monkeypatch, random_model, char_tokenizer):
    from grpo_edu import GRPOConfig, GRPOTrainer

    calls = _captured_losses(monkeypatch)
    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                     total_training_steps=1, entropy_coef=0.01),
                          model=random_model, tokenizer=char_tokenizer)
    trainer.step()
    assert calls[0]["entropy_coef"] == 0.01 and calls[0]["entropy"].requires_grad


@pytest.mark.parametrize("kwargs, match", [(dict(entropy_coef=-0.1), "^entropy_coef: "),
                                           (dict(entropy_coef=math.nan), "^entropy_coef: "),
                                           (dict(mask_truncated_completions="yes"),
                                            "^mask_truncated_completions: must be True or False")])
def test_the_new_fields_are_checked_up_front(kwargs, match):
    from grpo_edu import GRPOConfig

    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_the_new_fields_travel_to_trl_and_verl():
    from grpo_edu import GRPOConfig
    from grpo_edu.beyond.export import to_trl, to_verl

    c = GRPOConfig(mask_truncated_completions=True, entropy_coef=0.002)
    kwargs, info = to_trl(c)
    assert kwargs["mask_truncated_completions"] is True and kwargs["entropy_coef"] == 0.002
    overrides, info = to_verl(c)
    assert "actor_rollout_ref.actor.entropy_coeff=0.002" in overrides
    assert "this run's bonus will differ" in info["why"]["actor_rollout_ref.actor.entropy_coeff"]   # grpo's agg
    assert "mask_truncated_completions" in dict(info["unmatched"])
    _, info = to_verl(GRPOConfig(entropy_coef=0.002, loss_type="dapo"))
    assert "will differ" not in info["why"]["actor_rollout_ref.actor.entropy_coeff"]


def test_clip_higher_changes_nothing_while_num_iterations_is_1():
    # lesson 11 says a run with epsilon_high=0.28 is "the same run to the last digit": r = 1 on every
    # token when the policy that sampled is the one being updated, so no clip ever binds
    from grpo_edu import GRPOConfig, GRPOTrainer

    def run(**kwargs):
        trainer = GRPOTrainer(GRPOConfig.preset("sums", batch_size=4, total_training_steps=2, eval_size=0, seed=0,
                                                **kwargs))
        trainer.train()
        return trainer

    plain, higher = run(), run(epsilon_high=0.28)
    strip = lambda history: [{k: v for k, v in m.items() if k != "seconds"} for m in history]   # wall time differs
    assert len(plain.history) == 2 and strip(plain.history) == strip(higher.history)
    for (name, a), (_, b) in zip(plain.model.named_parameters(), higher.model.named_parameters()):
        assert torch.equal(a, b), name
