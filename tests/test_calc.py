"""The calc task (lesson 15): sums a calculator helps with, its demonstrations with the tool's reply
left out of the warm-up loss, and its scoring with the calculator in the loop."""

import pytest

from grpo_edu.training.task.calc import calls_in
from grpo_edu.training.task.tasks import get_task

TASK = get_task("calc")


def test_the_splits_are_fixed_disjoint_and_mix_easy_and_hard_sums():
    heldout, train = TASK.split("heldout"), TASK.split("train")
    assert len(heldout) == 500 and len(train) == 20_000
    assert not {r["prompt"] for r in heldout} & {r["prompt"] for r in train}
    assert TASK.split("heldout", 5) == heldout[:5]
    for row in heldout + train:
        a, b = map(int, row["prompt"].rstrip("=").split("+"))
        assert 1 <= a <= 999 and 1 <= b <= 999 and row["answer"] == str(a + b)
    lengths = {len(r["prompt"]) for r in heldout}
    assert min(lengths) == 4 and max(lengths) == 8           # "3+4=" … "123+456="


def test_a_demonstration_with_a_call_masks_exactly_the_calculators_reply():
    row = {"prompt": "347+85=", "answer": "432"}
    worked, direct = TASK.demonstration(row, True), TASK.demonstration(row, False)
    assert (worked, direct) == ("[347+85]=432#432", "#432")
    mask = TASK.demonstration_mask(worked)
    assert "".join(c for c, m in zip(worked, mask) if not m) == "=432"
    assert TASK.demonstration_mask(direct) == [1] * 4
    assert "".join(c for c, m in zip("[1+]=?#3", TASK.demonstration_mask("[1+]=?#3")) if not m) == "=?"
    for text in (worked, direct):
        assert TASK.well_formed(text) and TASK.is_correct(text, "432")
    assert not TASK.is_correct("[347+85]=432", "432")        # the reply is not an answer: "#" must follow
    assert not TASK.well_formed("[347+85]=432#432#4") and calls_in(worked) == 1 and calls_in(direct) == 0
    assert TASK.max_answer_chars == len("[999+999]=1998#1998")


def test_the_warm_up_labels_leave_the_reply_out():
    from grpo_edu.training.model.make_model import _demonstrations, encode_for_warmup, task_chars
    from grpo_edu.training.model.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(task_chars([TASK]))
    rows = _demonstrations(TASK, 0.5, seed=0)[:64]
    assert 10 < sum(calls_in(r["answer"]) for r in rows) < 54
    input_ids, labels = encode_for_warmup(tokenizer, rows)
    for ids, target, row in zip(input_ids.tolist(), labels.tolist(), rows):
        learned = tokenizer.decode([t for t in target if t != -100], skip_special_tokens=False)
        reply = "=" + row["answer"].rsplit("#", 1)[1] if calls_in(row["answer"]) else ""
        assert learned == row["answer"].replace(reply, "", 1) + "<eos>"


def test_the_trainer_samples_and_scores_calc_with_the_calculator(random_model):
    """A step on the calc task with the tool, and its held-out evaluation with the tool in the loop."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.model.make_model import task_chars
    from grpo_edu.training.model.tokenizer import build_char_tokenizer
    from grpo_edu.training.rollouts.tools import Tool
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    tok = build_char_tokenizer(task_chars([TASK]))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
                                         max_position_embeddings=48, tie_word_embeddings=True,
                                         bos_token_id=1, eos_token_id=2, pad_token_id=0))
    config = GRPOConfig(task="calc", batch_size=2, num_generations=4, max_completion_length=20,
                        total_training_steps=1, eval_size=8, sampler="engine")
    trainer = GRPOTrainer(config, model=model, tokenizer=tok, tool=Tool())
    metrics = trainer.step()
    assert {"tools/call_frequency", "tools/failure_frequency", "model_completion_length"} <= set(metrics)
    result = trainer.evaluate(num_samples=2)
    assert set(result) >= {"accuracy", "call_rate", "accuracy_with_call", "failed_call_rate"}
    assert len(result["samples"]) == 16
    assert result["call_rate"] == pytest.approx(sum(s[4] > 0 for s in result["samples"]) / 16)
