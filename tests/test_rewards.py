"""Reward functions: weighted sums, and errors that say whose fault a failure is."""

import math

import numpy as np
import pytest
import torch

from grpo_edu.training.task.rewards import RewardFunctionError, check_reward_output, compute_rewards

ROWS = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}]
COMPLETIONS = ["2", "3", "4", "44"]     # G = 2 per prompt


def is_right(prompts, completions, answer, **kw):
    return [float(c == a) for c, a in zip(completions, answer)]


def short(prompts, completions, **kw):
    return [-len(c) for c in completions]


def test_two_weighted_reward_functions_are_summed():
    rewards, info = compute_rewards([is_right, short], ROWS, COMPLETIONS, 2, weights=[2.0, 0.5])
    assert rewards.tolist() == [[2 - 0.5, 0 - 0.5], [2 - 0.5, 0 - 1.0]]
    assert info == {"reward/is_right": 0.5, "reward/short": -1.25}


def test_the_trainer_passes_reward_weights(random_model, char_tokenizer):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    t = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=1, eval_size=0),
                    model=random_model, tokenizer=char_tokenizer, train_rows=ROWS * 2,
                    reward_funcs=[is_right, short], reward_weights=[2.0, 0.5])
    m = t.step()
    assert m["reward_mean"] == pytest.approx(2.0 * m["reward/is_right"] + 0.5 * m["reward/short"])
    with pytest.raises(ValueError, match="^weights: has 1 entries for 2 reward functions"):
        GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=1, eval_size=0),
                    model=random_model, tokenizer=char_tokenizer, train_rows=ROWS * 2,
                    reward_funcs=[is_right, short], reward_weights=[1.0])


def test_a_signature_that_does_not_fit_the_columns_is_named():
    def needs_solution(prompts, completions, solution):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match=r"^reward function .*needs_solution: could not be called with the "
                       r"columns \['prompts', 'completions', 'answer'\]"):
        compute_rewards([needs_solution], ROWS, COMPLETIONS, 2)


def test_an_error_inside_the_function_is_shown_as_its_own():
    """A TypeError in the function's own code used to be reported as a column mismatch."""
    def buggy(prompts, completions, answer, **kw):
        return [c + 1 for c in completions]          # str + int: TypeError, the function's own bug

    with pytest.raises(RewardFunctionError) as error:
        compute_rewards([buggy], ROWS, COMPLETIONS, 2)
    message = str(error.value)
    assert message.startswith("reward function ")
    assert "buggy: raised TypeError: can only concatenate str" in message and "test_rewards.py, line" in message
    assert "could not be called" not in message
    assert isinstance(error.value.__cause__, TypeError)


@pytest.mark.parametrize("values, shown", [(["1", "0", "1", "0"], "'1' (a str) for completion 0"),
                                           ([1.0, "yes", 0.0, 1.0], "'yes' (a str) for completion 1"),
                                           ([1.0, None, 0.0, 1.0], "None (a NoneType) for completion 1"),
                                           ("1010", "a str, not a list")])
def test_rewards_must_be_numbers_not_text(values, shown):
    """Text used to be converted when it looked like a number ("1") and refused otherwise ("yes")."""
    with pytest.raises(ValueError, match=r"^reward function .*: returned ") as error:
        check_reward_output(lambda **kw: None, values, 4)
    assert shown in str(error.value) and "Fix: return" in str(error.value)


@pytest.mark.parametrize("values", [[1, 0, 1, 0], [True, False, True, False], np.array([1.0, 0, 1, 0]),
                                    torch.tensor([1.0, 0, 1, 0]), [np.float32(1), np.int64(0), torch.tensor(1.0), 0.0]])
def test_numbers_of_every_kind_are_accepted(values):
    assert check_reward_output(short, values, 4).tolist() == [1.0, 0.0, 1.0, 0.0]


def test_wrong_count_and_nan_are_named():
    with pytest.raises(ValueError, match="returned 3 rewards for 4 completions"):
        check_reward_output(short, [1.0] * 3, 4)
    with pytest.raises(ValueError, match=r"returned NaN or infinity \(first at completion 2\)"):
        check_reward_output(short, [1.0, 1.0, math.inf, 0.0], 4)


def test_rows_with_different_columns_are_refused():
    with pytest.raises(ValueError, match=r"^rows: row 1 has the columns \['prompt'\] but row 0 has "
                       r"\['answer', 'prompt'\]"):
        compute_rewards([short], [ROWS[0], {"prompt": "3+3="}], COMPLETIONS, 2)


# --- building blocks (lesson 07) --------------------------------------------------------------
def test_building_blocks_by_hand():
    from grpo_edu.training.task.rewards import brevity_reward, correctness, digit_credit, format_reward

    completions = ["46", " 46 ", "47", "146", "4", "x6", "-5", "1234", ""]
    answers = ["46"] * len(completions)
    assert correctness(None, completions, answers) == [1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert format_reward(3)(None, completions) == [1, 1, 1, 1, 1, 0, 1, 0, 0]
    assert brevity_reward(4)(None, ["", "4", "46", "146", "1234", "12345"]) == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert digit_credit(None, completions, answers) == pytest.approx(
        [1, 1, 0.5, 2 / 3, 0, 0.5, 0, 0, 0])   # "x6": units right; "1234" vs "  46": 3≠4, 4≠6, so 0 of 4
    with pytest.raises(ValueError, match="^max_digits: "):
        format_reward(0)
    with pytest.raises(ValueError, match="^max_length: "):
        brevity_reward(-1)


def test_term_count_reward_counts_every_occurrence_and_is_unbounded_without_a_cap():
    from grpo_edu.training.task.rewards import term_count_reward

    terms = term_count_reward(["policy", "KL"])                          # the guide's count × 0.1
    texts = ["", "policy", "the policy and KL", "KL KL KL policy", "policy " * 50]
    assert terms(None, texts) == pytest.approx([0.0, 0.1, 0.2, 0.4, 5.0])   # 50 repeats: 5.0, no ceiling
    capped = term_count_reward(["policy", "KL"], cap=3)
    assert capped(None, texts) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.3])
    assert term_count_reward(list("0123456789"), per_term=0.5)(None, ["46", "4646"]) == [1.0, 2.0]
    for kwargs, name in ((dict(terms="policy"), "terms"), (dict(terms=[]), "terms"), (dict(terms=[""]), "terms"),
                         (dict(terms=["a"], per_term=float("nan")), "per_term"), (dict(terms=["a"], cap=0), "cap")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            term_count_reward(**kwargs)


def test_combine_is_the_weighted_sum_and_names_each_component():
    from grpo_edu.training.task.rewards import brevity_reward, combine, correctness, format_reward

    c = combine(correct=(correctness, 0.6), fmt=(format_reward(3), 0.2), short=(brevity_reward(4), 0.2))
    prompts, completions, answer = ["1+1="] * 3, ["2", "22", "x"], ["2"] * 3
    parts = c.components(prompts, completions, answer=answer)
    assert parts == {"correct": [1, 0, 0], "fmt": [1, 1, 0], "short": [0.75, 0.5, 0.75]}
    assert c(prompts, completions, answer=answer) == pytest.approx([0.6 + 0.2 + 0.15, 0.2 + 0.1, 0.15])
    rewards, info = compute_rewards(c.reward_funcs, [{"prompt": "1+1=", "answer": "2"}], completions, 3,
                                    weights=c.reward_weights)
    assert rewards.tolist()[0] == pytest.approx([0.95, 0.3, 0.15])
    assert set(info) == {"reward/correct", "reward/fmt", "reward/short"}
    with pytest.raises(ValueError, match="^components: is empty"):
        combine()
    with pytest.raises(ValueError, match="^bad: must be a \\(function, weight\\) pair"):
        combine(bad=correctness)
    with pytest.raises(ValueError, match="^w: has the weight 'x'"):
        combine(w=(correctness, "x"))
