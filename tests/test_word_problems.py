"""grpo_edu.beyond.word_problems: the GPU section's code path, run on the CPU with a tiny chat model.

The GPU section trains a real chat model on word problems: prompts through the chat template,
a final-number reward and a format reward, answers of many tokens. Every piece of that path is
exercised here on a tiny random Qwen2 (the same architecture family as Qwen2.5) whose tokenizer
has a chat template, on the word problems in tests/data.
"""

import pytest

from grpo_edu.beyond.word_problems import (
    CPU_REHEARSAL,
    GPU_RUN,
    WordProblems,
    chat_prompts,
    final_number,
    final_number_reward,
    format_reward,
    generated_tokens_per_second,
    read_word_problems,
    tiny_chat_model,
    word_problem_trainer,
)


@pytest.mark.parametrize("text, number", [("so she has 12 pencils.\n#### 12", "12"), ("The answer is 1,234.", "1234"),
                                          ("3.50 dollars", "3.5"), ("It is -4 degrees", "-4"), ("#### 7 apples, not 9", "7"),
                                          ("no number here", None), ("2.0", "2")])
def test_final_number(text, number):
    assert final_number(text) == number


def test_the_rewards_pay_the_right_number_and_the_format_separately():
    completions = ["4 × 3 = 12\n#### 12", "12", "#### 13", "I think 12 or 13"]
    assert final_number_reward(None, completions, answer=["12"] * 4) == [1.0, 1.0, 0.0, 0.0]
    assert format_reward(None, completions) == [1.0, 0.0, 1.0, 0.0]


def test_chat_prompts_need_a_template():
    from grpo_edu.training.model.tokenizer import build_char_tokenizer

    with pytest.raises(ValueError, match="^tokenizer: it has no chat_template"):
        chat_prompts(build_char_tokenizer(), [{"question": "1+1?", "answer": "2"}])


def test_the_checker_compares_final_numbers():
    task = WordProblems()
    assert task.is_correct("3 + 4 = 7\n#### 7", "#### 7") and task.is_correct("so 1,200 in all", "1200")
    assert not task.is_correct("#### 8", "7") and not task.is_correct("no idea", "7")
    assert task.split("heldout", 5) == []


def test_a_task_without_held_out_prompts_needs_eval_rows_or_no_eval(tmp_path):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    rows = [{"prompt": "1+1=", "answer": "2"}] * 4
    with pytest.raises(ValueError, match="^eval_rows: the task 'word_problems' has no held-out prompts of its own, "
                                         "but eval_size is 500"):
        GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2), train_rows=rows, task=WordProblems())


def test_the_gpu_sections_code_path_runs_on_a_tiny_chat_model(tmp_path):
    """Lesson 10's GPU section, at CPU size: the same function, a tiny Qwen2 with a chat template."""
    import torch

    folder = tiny_chat_model(tmp_path / "model")
    questions = read_word_problems()
    assert len(questions) == 8
    trainer = word_problem_trainer(folder, questions[:6], eval_questions=questions[6:], device="cpu",
                                   **CPU_REHEARSAL)
    assert type(trainer.model).__name__ == "Qwen2ForCausalLM" and trainer.config.trust_remote_code is False
    prompt = trainer.train_rows[0]["prompt"]
    assert prompt.startswith("<|system|>\nSolve the problem.") and prompt.endswith("<|assistant|>\n")
    assert trainer.config.gradient_checkpointing and trainer.config.micro_batch_size == 4
    history = trainer.train(progress=False)
    assert len(history) == 2 and [e["step"] for e in trainer.evals] == [0, 2]
    for m in history:
        assert {"reward/final_number_reward", "reward/format_reward"} <= set(m)
        assert torch.isfinite(torch.tensor(m["loss"])) and 0 < m["completion_length"] <= 24
    assert generated_tokens_per_second(trainer) > 0
    # the GPU settings are the same code path with bigger numbers, and a valid config
    from grpo_edu.training.trainers.config import GRPOConfig

    GRPOConfig(**GPU_RUN)
    assert set(CPU_REHEARSAL) <= set(GPU_RUN)
