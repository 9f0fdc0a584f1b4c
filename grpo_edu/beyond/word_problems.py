"""Word problems with a final-number answer: the prompts and rewards of the GPU section.

Grade-school maths data sets (GSM8K and its kind) give a question in words and a reference
answer that ends in one number. A chat model answers in sentences, so its reward needs two
parts, the DeepSeek-R1 recipe in miniature:

* ``final_number_reward``: 1.0 when the *last number* of the answer equals the reference's
  (after "####" when the answer has that marker; commas and a trailing ".0" ignored);
* ``format_reward``: 1.0 when the answer ends with a line ``#### <number>``, the format the
  system prompt asks for, so the number can be found at all.

``chat_prompts`` turns rows into prompts through the tokenizer's chat template, as a chat model
expects. All of this runs on the CPU in the tests, on a tiny model of the same kind.
"""

import json
import re
from pathlib import Path

SYSTEM_PROMPT = "Solve the problem. Think step by step, then give the final answer on its own line as #### <number>."
"""The instruction the format reward checks against."""

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FINAL_LINE = re.compile(r"####\s*(-?\d[\d,]*(?:\.\d+)?)\s*$")


def final_number(text):
    """The answer's number as a canonical string ("1,234.50" → "1234.5"), or None if it has none.

    After a "####" marker the first number there counts; otherwise the last number in the text.
    """
    text = str(text)
    marker = text.rfind("####")
    if marker >= 0 and _NUMBER.search(text[marker:]):
        raw = _NUMBER.search(text[marker:]).group()
    else:
        found = _NUMBER.findall(text)
        if not found:
            return None
        raw = found[-1]
    raw = raw.replace(",", "")
    if "." in raw:
        raw = raw.rstrip("0").rstrip(".")
    return "0" if raw in ("-0", "") else raw


def final_number_reward(prompts, completions, answer, **kwargs):
    """1.0 when the completion's final number equals the reference answer's, else 0.0."""
    return [1.0 if (got := final_number(c)) is not None and got == final_number(a) else 0.0
            for c, a in zip(completions, answer)]


def format_reward(prompts, completions, **kwargs):
    """1.0 when the completion ends with a line "#### <number>", else 0.0. It says nothing about
    whether the number is right: weigh it below ``final_number_reward`` (lesson 07)."""
    return [1.0 if _FINAL_LINE.search(c.strip()) else 0.0 for c in completions]


def chat_prompts(tokenizer, rows, *, system=SYSTEM_PROMPT):
    """Rows {"question", "answer"} → rows {"prompt", "answer"} with the prompt written through the
    tokenizer's chat template (a system turn, the user's question, and the assistant's turn opened)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer: it has no chat_template. Fix: use a chat (instruct) model, or set "
                         "tokenizer.chat_template to the model's template.")
    from grpo_edu.training.model.chat_tokenizer import render_chat

    for i, row in enumerate(rows):
        if "question" not in row or "answer" not in row:
            raise ValueError(f"rows: row {i} lacks 'question' or 'answer'. Fix: give every row both.")
    texts = render_chat(tokenizer, [[{"role": "system", "content": system}, {"role": "user", "content": row["question"]}]
                                    for row in rows], add_generation_prompt=True)      # bounded in time and size
    return [{"prompt": text, "answer": str(row["answer"])} for row, text in zip(rows, texts)]


# --- the GPU section's run, and its CPU rehearsal --------------------------------------------
SAMPLE = Path(__file__).resolve().parents[2] / "tests" / "data" / "word_problems.jsonl"
"""Eight word problems written for the course: the CPU rehearsal trains on them (GSM8K needs internet)."""

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
"""A minimal chat template (system, user, assistant turns) for the tiny rehearsal model."""

GPU_RUN = dict(batch_size=8, num_generations=8, max_completion_length=256, micro_batch_size=16,
               gradient_checkpointing=True, learning_rate=1e-6, lr_scheduler_type="constant", beta=0.04,
               total_training_steps=100)
"""The GPU section's settings for a 0.5B chat model: 64 answers of up to 256 tokens per step, in
micro-batches of 16 with gradient checkpointing (the memory knobs), a learning rate for a 0.5B model,
held constant (verl has no linear decay, so its command matches this run exactly)."""

CPU_REHEARSAL = dict(batch_size=2, num_generations=4, max_completion_length=24, micro_batch_size=4,
                     gradient_checkpointing=True, total_training_steps=2)
"""The same code path at a size the CPU runs in seconds (the tiny random model learns nothing)."""


class WordProblems:
    """The checker for word problems, in the shape of a ``grpo_edu.training.task.tasks`` task: pass it to
    ``GRPOTrainer(task=…)`` so the run's "accuracy" compares final numbers. Its rows come from a
    data set (GSM8K, or ``SAMPLE``), so it has no split of its own."""

    name = "word_problems"

    def is_correct(self, completion, answer):
        got = final_number(completion)
        return got is not None and got == final_number(answer)

    def reward(self, prompts, completions, answer, **kwargs):
        return final_number_reward(prompts, completions, answer)

    def split(self, split, n=None):
        return []


def read_word_problems(path=SAMPLE):
    """Rows {"question", "answer"} from a JSON-lines file."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def tiny_chat_model(folder, *, seed=0):
    """Save a tiny random Qwen2 (the architecture of Qwen2.5) to ``folder``, with a character
    tokenizer over printable ASCII that has a chat template. It stands in for a real chat model
    where none can be downloaded: the same classes, template handling and code path, 22k parameters."""
    import string

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpo_edu.training.model.tokenizer import build_char_tokenizer, save_char_tokenizer

    tok = build_char_tokenizer("".join(c for c in string.printable if c not in "\t\r\x0b\x0c"))
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                                         max_position_embeddings=512, tie_word_embeddings=True,
                                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id))
    model.save_pretrained(folder)
    save_char_tokenizer(tok, folder)
    return str(folder)


def word_problem_trainer(model, questions, *, eval_questions=(), format_weight=0.2, **settings):
    """A ``GRPOTrainer`` for word problems: ``model`` (a folder or hub name) and its tokenizer are
    loaded, ``questions`` (rows {"question", "answer"}) become chat-template prompts, and the reward
    is ``final_number_reward + format_weight × format_reward``. ``settings`` are GRPOConfig fields
    (``GPU_RUN`` or ``CPU_REHEARSAL``); ``eval_questions`` are scored before and after."""
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.model.models import load_model_and_tokenizer, pick_device
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    eval_size = len(eval_questions)
    config = GRPOConfig(model=str(model), **{"eval_size": eval_size, **settings})
    loaded, tokenizer = load_model_and_tokenizer(config.model, device=pick_device(config.device),
                                                 trust_remote_code=config.trust_remote_code)
    return GRPOTrainer(config, model=loaded, tokenizer=tokenizer, train_rows=chat_prompts(tokenizer, questions),
                       eval_rows=chat_prompts(tokenizer, eval_questions) if eval_size else None,
                       reward_funcs=[final_number_reward, format_reward], reward_weights=[1.0, format_weight],
                       task=WordProblems())


def generated_tokens_per_second(trainer):
    """Completion tokens sampled per second of training, over the run so far (each step's mean
    completion length × its answers, over the steps' wall time)."""
    n = trainer.schedule.completions_per_step
    tokens = sum(m["completion_length"] * n for m in trainer.history)
    return tokens / sum(m["seconds"] for m in trainer.history)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *, format_weight=0.2):
    """The same reward in verl's signature (``reward.custom_reward_function.name=compute_score``): the
    final number's 0/1 plus ``format_weight`` × the format's 0/1 for one answer."""
    return (final_number_reward(None, [solution_str], [ground_truth])[0]
            + format_weight * format_reward(None, [solution_str])[0])
