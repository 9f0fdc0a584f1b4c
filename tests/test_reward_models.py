"""training/reward_models: the reward model's head and round trip, the gold judge, pairs, the trainer's loss equal to
TRL 1.16's RewardTrainer.compute_loss, the reward model inside GRPOTrainer, and the refusals (fast: a few seconds)."""

import pytest
import torch

from grpo_edu.training.model.models import sums_model_dir
from grpo_edu.training.reward_models import gold, preference_data, reward_function, reward_model, reward_trainer

PAIRS = [
    {"prompt": "3+8=", "chosen": "3+8=11#11", "rejected": "#12"},
    {"prompt": "2+5+1=", "chosen": "#8", "rejected": "2+5=7;7+1=9#9"},
    {"prompt": "4+4=", "chosen": "4+4=8#8", "rejected": "4+4=9#9", "margin": 0.0},
]


@pytest.fixture(scope="module")
def rm():
    return reward_model.make_reward_model(sums_model_dir(), seed=0)


def test_reward_model_is_one_label_and_round_trips(rm, tmp_path):
    from transformers import AutoModelForSequenceClassification
    model, tok = rm
    assert model.config.num_labels == 1 and model.score.out_features == 1
    before = reward_model.score(model, tok, ["3+8="], ["3+8=11#11"])
    model.save_pretrained(tmp_path)
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert torch.equal(reward_model.score(again, tok, ["3+8="], ["3+8=11#11"]), before)


def test_score_ignores_padding(rm):
    """A text scored alone or beside a longer one (right padding) gets the same number."""
    model, tok = rm
    alone = reward_model.score(model, tok, ["3+8="], ["#11"])
    batched = reward_model.score(model, tok, ["3+8=", "2+5+1="], ["#11", "2+5=7;7+1=8#8"])
    assert batched[0].item() == pytest.approx(alone.item(), abs=1e-5)


def test_gold_judge_by_hand():
    judge = gold.SumsGoldJudge()
    scores = judge(["3+8+5="] * 5, ["3+8=11;11+5=16#16", "#16", "3+8=11;11+5=17#17", "#15", "3+8=11;11+5=16#16;1+1"],
                   answer=["16"] * 5)
    # right+working 1.5; right direct 1.0; wrong sum, wrong working 0; wrong 0; malformed and too long −1.0
    assert scores == [1.5, 1.0, 0.0, 0.0, -1.0]
    assert judge(["3+8="], ["3+8=11#12"], answer=["11"]) == [0.5]       # right working, then a wrong answer


@pytest.mark.parametrize("margin, center", [(False, None), (True, 0.5)])
def test_our_loss_equals_trl_reward_trainer(rm, margin, center):
    """Our pair_loss on the same model and pairs equals TRL 1.16 RewardTrainer.compute_loss (a real trainer, CPU,
    bf16 off), fed by TRL's own DataCollatorForPreference."""
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer
    from trl.trainer.reward_trainer import DataCollatorForPreference
    model, tok = rm
    pairs = [{**p, "margin": 0.7 - 0.5 * i} if margin else {k: v for k, v in p.items() if k != "margin"}
             for i, p in enumerate(PAIRS)]
    args = RewardConfig(output_dir="/tmp/trl-rm-test", bf16=False, use_cpu=True, report_to=[], gradient_checkpointing=False,
                        center_rewards_coefficient=center, disable_dropout=True)
    trainer = RewardTrainer(model=model, args=args, processing_class=tok,
                            train_dataset=Dataset.from_list([{"chosen": "3+8=11#11", "rejected": "#12"}]))
    examples = [{"chosen_ids": c, "rejected_ids": r, **({"margin": p["margin"]} if margin else {})}
                for p, c, r in zip(pairs, reward_model.text_ids(tok, [p["prompt"] for p in pairs], [p["chosen"] for p in pairs]),
                                   reward_model.text_ids(tok, [p["prompt"] for p in pairs], [p["rejected"] for p in pairs]))]
    inputs = DataCollatorForPreference(pad_token_id=tok.pad_token_id)(examples)
    model.eval()
    with torch.no_grad():
        theirs = trainer.compute_loss(model, inputs)
        ours, info = reward_trainer.pair_loss(model, tok, pairs, center_rewards_coefficient=center)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5, abs=1e-6)
    assert info["accuracy"] == pytest.approx(trainer._metrics["eval"]["accuracy"][-1])
    assert info["margin"] == pytest.approx(trainer._metrics["eval"]["margin"][-1], abs=1e-5)


def test_training_learns_the_pairs(rm):
    model, tok = reward_model.make_reward_model(sums_model_dir(), seed=1)
    pairs = [p for p in PAIRS if "margin" not in p]
    model, history = reward_trainer.train_reward_model(model, tok, pairs, epochs=15, batch_size=2, learning_rate=1e-3)
    assert history[-1]["loss"] < history[0]["loss"]
    assert reward_trainer.pair_accuracy(model, tok, pairs)[0] == 1.0


def test_sample_pairs_are_gold_ordered():
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.task.tasks import get_task
    policy, tok = load_model_and_tokenizer(str(sums_model_dir()))
    judge = gold.SumsGoldJudge()
    rows = get_task("sums").split("heldout", 6)
    pairs, info = preference_data.sample_pairs(policy, tok, rows, judge, num_generations=4, seed=0, with_margin=True)
    assert info["pairs"] + info["tied_rows"] == 6 and pairs
    answers = {r["prompt"]: r["answer"] for r in rows}
    for p in pairs:
        c, r = judge([p["prompt"]] * 2, [p["chosen"], p["rejected"]], answer=[answers[p["prompt"]]] * 2)
        assert c > r and p["margin"] == pytest.approx(c - r)


def test_reward_model_drives_grpo(rm):
    """GRPOTrainer takes the reward model as a reward function (TRL's reward_funcs=[model]), gold logged at weight 0."""
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer
    model, tok = rm
    proxy = reward_function.RewardModelReward(model, tok, name="proxy")
    config = GRPOConfig.preset("sums", batch_size=2, num_generations=4, total_training_steps=1, eval_size=0)
    trainer = GRPOTrainer(config, reward_funcs=[proxy, gold.SumsGoldJudge()], reward_weights=[1.0, 0.0])
    metrics = trainer.step()
    assert "reward/proxy" in metrics and "reward/gold" in metrics
    assert metrics["reward_mean"] == pytest.approx(metrics["reward/proxy"], abs=1e-5)


def test_ensemble_min_and_mean(rm):
    model, tok = rm
    other, _ = reward_model.make_reward_model(sums_model_dir(), seed=5)
    a = reward_function.RewardModelReward(model, tok)(["3+8="], ["#11"])[0]
    b = reward_function.RewardModelReward(other, tok)(["3+8="], ["#11"])[0]
    assert reward_function.RewardModelReward([model, other], tok, combine="min")(["3+8="], ["#11"])[0] == pytest.approx(min(a, b))
    assert reward_function.RewardModelReward([model, other], tok)(["3+8="], ["#11"])[0] == pytest.approx((a + b) / 2)


def test_refusals_name_the_field(rm):
    from transformers import AutoModelForSequenceClassification
    model, tok = rm
    with pytest.raises(ValueError, match=r"pairs\[0\].rejected"):
        preference_data.check_pairs([{"prompt": "3+8=", "chosen": "#11", "rejected": "#11"}])
    with pytest.raises(ValueError, match="pairs: is empty"):
        reward_trainer.train_reward_model(model, tok, [])
    two = AutoModelForSequenceClassification.from_pretrained(str(sums_model_dir()), num_labels=2)
    with pytest.raises(ValueError, match="reward_model: has 2 outputs"):
        reward_trainer.train_reward_model(two, tok, PAIRS)
    with pytest.raises(ValueError, match="models\\[0\\]: has 2 outputs"):
        reward_function.RewardModelReward(two, tok)
    with pytest.raises(ValueError, match="gold: returned 'good'"):
        gold.gold_scores(lambda prompts, completions, answer: ["good"], ["3+8="], ["#11"], ["11"])
    with pytest.raises(ValueError, match="gold: returned"):
        gold.gold_scores(lambda prompts, completions, answer: float("nan"), ["3+8="], ["#11"], ["11"])
