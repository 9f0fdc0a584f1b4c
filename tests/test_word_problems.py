"""grpo_edu.word_problems: the GPU section's code path, run on the CPU with a tiny chat model.

The GPU section trains a real chat model on word problems: prompts through the chat template,
a final-number reward and a format reward, answers of many tokens. Every piece of that path is
exercised here on a tiny random Qwen2 (the same architecture family as Qwen2.5) whose tokenizer
has a chat template, on the word problems in tests/data.
"""

import json
import string
from pathlib import Path

import pytest

from grpo_edu.word_problems import chat_prompts, final_number, final_number_reward, format_reward

DATA = Path(__file__).parent / "data" / "word_problems.jsonl"
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


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
    from grpo_edu.tokenizer import build_char_tokenizer

    with pytest.raises(ValueError, match="^tokenizer: it has no chat_template"):
        chat_prompts(build_char_tokenizer(), [{"question": "1+1?", "answer": "2"}])


def test_a_tiny_chat_model_trains_on_word_problems_with_both_rewards(tmp_path):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpo_edu.config import GRPOConfig
    from grpo_edu.tokenizer import build_char_tokenizer, save_char_tokenizer
    from grpo_edu.trainer import GRPOTrainer

    tok = build_char_tokenizer("".join(c for c in string.printable if c not in "\t\r\x0b\x0c"))
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                                         max_position_embeddings=512, tie_word_embeddings=True,
                                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id))
    model.save_pretrained(tmp_path / "model")
    save_char_tokenizer(tok, tmp_path / "model")

    rows = chat_prompts(tok, [json.loads(line) for line in DATA.read_text().splitlines()])
    assert rows[0]["prompt"].startswith("<|system|>\nSolve the problem.") and rows[0]["prompt"].endswith("<|assistant|>\n")
    dataset = tmp_path / "train.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))

    config = GRPOConfig(model=str(tmp_path / "model"), dataset=str(dataset), batch_size=2, num_generations=4,
                        max_completion_length=24, micro_batch_size=4, total_training_steps=2, eval_size=0)
    trainer = GRPOTrainer(config, reward_funcs=[final_number_reward, format_reward], reward_weights=[1.0, 0.2])
    history = trainer.train(progress=False)
    assert len(history) == 2 and trainer.config.trust_remote_code is False
    for m in history:
        assert {"reward/final_number_reward", "reward/format_reward"} <= set(m)
        assert torch.isfinite(torch.tensor(m["loss"])) and 0 < m["completion_length"] <= 24
