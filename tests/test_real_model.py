"""The library on a real model: SmolLM2-135M-Instruct, as ``grpo-edu models get smollm2`` converts it.

The engine's fast path serves it (log-probs equal the model's own forward to 1e-5 in float32, greedy answers equal
``model.generate``), a LoRA adapter through peft samples merged on that path, a LoRA run stopped and resumed from
its checkpoint equals the uninterrupted run, and one GRPO step's loss and gradients equal TRL 1.16's
``_compute_loss`` on a conversational batch rendered by the model's own chat template (the approach of
tests/test_text.py, on a pretrained model).

They need the converted model: the one in the cache (``$GRPO_EDU_CACHE/models/smollm2``), fetched here once per
machine when it is missing and PyPI can be reached; offline, or without the ``gguf`` package, they skip and say
why. Prompts are short and answers a few tokens: a forward of this 134.5 M-parameter model is the cost."""

import importlib.util

import pytest
import torch

from grpo_edu.training.model import fetch, lora
from grpo_edu.training.rollouts import engine, rollout
from grpo_edu.training.text import chat
from grpo_edu.training.text.completion_mask import completion_mask as end_mask

SYSTEM = "Answer with the number only."
QUESTIONS = [("What is 3 + 4?", "7"), ("What is 5 + 2?", "7")]


@pytest.fixture(scope="session")
def smollm2_folder():
    """The converted model's folder: cached, else fetched now (once per machine), else the test skips."""
    folder = fetch.model_folder("smollm2")
    if not (folder / fetch.MARKER).is_file():
        if importlib.util.find_spec("gguf") is None:
            pytest.skip(f"SmolLM2-135M-Instruct is not in {folder} and the gguf package that converts it is not "
                        "installed: pip install 'grpo_edu[real]', then grpo-edu models get smollm2")
        try:
            fetch.get_model("smollm2")
        except ValueError as err:
            if not str(err).startswith("download:"):
                raise                                      # a changed hash is a failure, not a reason to skip
            pytest.skip(f"SmolLM2-135M-Instruct is not in {folder} and could not be fetched (offline?): {err}")
    return folder


@pytest.fixture(scope="module")
def smollm2(smollm2_folder):
    from grpo_edu.training.model.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("smollm2")
    return model.eval(), tokenizer


def _prompts(tokenizer):
    return [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                                          tokenize=False, add_generation_prompt=True) for q, _ in QUESTIONS]


def test_the_fetched_folder_is_the_pinned_model_in_safe_files(smollm2_folder, smollm2):
    import json

    from grpo_edu.training.model.models import locate_model
    from grpo_edu.training.trainers.config import GRPOConfig

    model, tokenizer = smollm2
    record = json.loads((smollm2_folder / fetch.MARKER).read_text())
    spec = fetch.PACKAGED_MODELS["smollm2"]
    assert (record["wheel_sha256"], record["gguf_sha256"]) == (spec.wheel_sha256, spec.gguf_sha256)
    assert locate_model(GRPOConfig(model="smollm2").model) == (str(smollm2_folder), {"kind": "fetched"})
    assert sorted(p.suffix for p in smollm2_folder.iterdir() if p.suffix in (".bin", ".pt", ".pkl", ".py")) == []
    assert type(model).__name__ == "LlamaForCausalLM" and sum(p.numel() for p in model.parameters()) == 134_515_008
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size, cfg.tie_word_embeddings) == (30, 576, 49152, True)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.model_max_length == cfg.max_position_embeddings == 8192
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert rendered.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    # the de-quantized weights are the instruct model's: greedy, it answers a sum and ends its turn
    question = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], tokenize=False,
                                             add_generation_prompt=True)            # its own default system turn
    out = engine.generate(model, tokenizer, [question], max_new_tokens=12, temperature=0)
    assert "5" in out.completions[0] and out.completion_ids[0, out.lengths[0] - 1] == tokenizer.eos_token_id


def test_the_engine_serves_it_on_the_fast_path_with_the_forwards_logprobs(smollm2):
    model, tokenizer = smollm2
    assert engine.fast_path_refusal(model) is None and isinstance(engine.decoder_for(model, 8), engine._LlamaDecoder)
    out = engine.generate(model, tokenizer, _prompts(tokenizer), num_generations=2, max_new_tokens=8,
                          generator=torch.Generator().manual_seed(0), with_entropy=True)
    logprobs, entropy = rollout.completion_logprobs(model, out.input_ids, out.attention_mask,
                                                    out.completion_ids.shape[1], with_entropy=True)
    mask = out.completion_mask
    torch.testing.assert_close(out.logprobs, logprobs.detach() * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.entropy, entropy.detach() * mask, atol=1e-5, rtol=1e-5)


def test_greedy_answers_equal_model_generate(smollm2):
    model, tokenizer = smollm2
    prompts = _prompts(tokenizer)
    out = engine.generate(model, tokenizer, prompts, max_new_tokens=8, temperature=0)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    theirs = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                            eos_token_id=tokenizer.eos_token_id)[:, enc["input_ids"].shape[1]:]
    assert torch.equal(out.completion_ids, theirs)


def test_a_lora_adapter_samples_merged_on_the_fast_path(smollm2):
    """peft's LoRA on q_proj and v_proj: the engine computes with W + (α/r)·B·A; its log-probs equal the peft
    model's forward to 1e-5, and the base's differ (the adapter acts); the base weights are untouched after."""
    import copy

    base, tokenizer = smollm2
    model = lora.add_lora(copy.deepcopy(base), rank=4, target_modules="q_proj,v_proj").eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_((0.02 if "lora_B" in name else 0.3) * torch.randn(p.shape, generator=gen))
    assert engine.fast_path_refusal(model) is None
    out = engine.generate(model, tokenizer, _prompts(tokenizer), num_generations=2, max_new_tokens=6,
                          generator=torch.Generator().manual_seed(0))
    args = (out.input_ids, out.attention_mask, out.completion_ids.shape[1])
    with torch.no_grad():
        teacher, _ = rollout.completion_logprobs(model, *args)
        with model.disable_adapter():
            off, _ = rollout.completion_logprobs(model, *args)
    mask = out.completion_mask.bool()
    torch.testing.assert_close(out.logprobs[mask], teacher[mask], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out.logprobs[mask], off[mask], atol=1e-3)


def _length_reward(prompts, completions, **kwargs):
    """A reward with spread in almost every group (the answer's length in characters, mod 3): SmolLM2 scores 0 on
    the words task's tagged format, and a step with no spread moves nothing that a resume could get wrong."""
    return [float(len(c) % 3) for c in completions]


def test_a_lora_run_on_it_resumed_from_its_checkpoint_equals_the_uninterrupted_run(smollm2, tmp_path):
    """Each trainer gets a copy of the loaded model (a copy costs less than a load); the adapter is the run's."""
    import copy

    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    settings = dict(model="smollm2", task="words", batch_size=2, num_generations=2, max_completion_length=8,
                    total_training_steps=2, eval_size=0, lora_rank=4, learning_rate=1e-3, checkpoint_every=1)
    run = lambda **more: GRPOTrainer(GRPOConfig(**{**settings, **more}), model=copy.deepcopy(smollm2[0]),  # noqa: E731
                                     tokenizer=smollm2[1], reward_funcs=[_length_reward])
    whole = run(checkpoint_every=0).train(progress=False)
    stopped = run(output_dir=str(tmp_path / "run"))
    stopped.step()
    stopped.save_checkpoint()
    del stopped
    resumed = run(output_dir=str(tmp_path / "run")).train(resume_from=str(tmp_path / "run"), progress=False)
    strip = lambda history: [{k: v for k, v in row.items() if k != "seconds"} for row in history]   # noqa: E731
    assert strip(resumed) == strip(whole)
    assert min(row["grad_norm"] for row in whole) > 0                     # each step moved the adapter
    assert {"model.safetensors", "adapter"} <= {p.name for p in (tmp_path / "run" / "checkpoint-000002").iterdir()}


# --- against TRL 1.16 -------------------------------------------------------------------------------
ROWS = chat.conversational_rows([{"question": q, "answer": a} for q, a in QUESTIONS], system=SYSTEM)


def _reward(prompts, completions, answer, **kwargs):
    """A reward with spread in every group: the answer's length in characters, mod 3."""
    return [float(len(chat.completion_text(c)) % 3) for c in completions]


@pytest.fixture(scope="module")
def trl_step(smollm2, tmp_path_factory):
    """TRL's GRPOTrainer on SmolLM2 with its own chat template: one step's inputs as TRL builds them, and its loss
    and gradients (computed once: a backward pass through this model is the expensive part)."""
    import copy

    trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    import datasets
    from transformers import AutoTokenizer

    from grpo_edu.beyond.export import to_trl
    from grpo_edu.training.trainers.config import GRPOConfig

    tok = AutoTokenizer.from_pretrained(smollm2[0].name_or_path)
    config = GRPOConfig(batch_size=2, num_generations=4, max_completion_length=8, beta=0.0, loss_type="dapo",
                        total_training_steps=1)
    kwargs, _ = to_trl(config)
    # SmolLM2 answers a sum in a sentence: TRL's sampler is nudged to end within 8 tokens (the loss is unchanged)
    args = trl.GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), report_to=[], logging_steps=1,
                          use_cpu=True, generation_kwargs={"sequence_bias": {(tok.eos_token_id,): 8.0}}, **kwargs)
    trainer = trl.GRPOTrainer(model=copy.deepcopy(smollm2[0]), processing_class=tok, args=args, reward_funcs=[_reward],
                              train_dataset=datasets.Dataset.from_list(ROWS * 4))
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(0)
    model = trainer.model.train()
    inputs = trainer._generate_and_score_completions([ROWS[0]] * 4 + [ROWS[1]] * 4)
    theirs = trainer._compute_loss(model, inputs)
    return trainer, model, tok, inputs, (theirs, torch.autograd.grad(theirs, list(model.parameters())))


def _our_loss(model, tok, inputs, bug=None):
    """One GRPO step's loss by grpo_edu on TRL's sampled answers: our rendered prompt ids, our completion mask
    (end token kept), our advantages, our log-prob pass and grpo_loss."""
    from grpo_edu.core.advantages import group_advantages
    from grpo_edu.core.losses import grpo_loss

    prompt_rows = [ROWS[0]] * 4 + [ROWS[1]] * 4
    if bug == "the default system turn":          # the template's own system prompt instead of the row's
        prompt_rows = [{"prompt": row["prompt"][1:]} for row in prompt_rows]
    prompts = [chat.render_prompt(tok, row["prompt"])[0] for row in prompt_rows]
    width = max(map(len, prompts))
    prompt_ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])          # (N, P)
    prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    completion_ids = inputs["completion_ids"]                                                        # (N, T)
    mask, _ = end_mask(completion_ids, tok.eos_token_id)                                             # (N, T)
    if bug == "end token masked out":
        mask = mask * (completion_ids != tok.eos_token_id)
    texts = tok.batch_decode(completion_ids * mask + tok.pad_token_id * (1 - mask), skip_special_tokens=True)
    rewards = torch.tensor(_reward(None, chat.trl_completions(texts), None)).view(2, 4)             # (B, G)
    advantages = group_advantages(rewards).reshape(-1)                                               # Â, (N,)
    T = completion_ids.shape[1]
    ids = torch.cat([prompt_ids, completion_ids], 1)                                                 # (N, P + T)
    logps, _ = rollout.completion_logprobs(model, ids, torch.cat([prompt_mask, mask], 1), T)
    loss, _ = grpo_loss(logps, logps.detach(), advantages, mask, loss_type="dapo", beta=0.0)
    return loss, advantages, mask


def _same(theirs, ours, params):
    """TRL's (loss, gradients) against our loss: the values to 1e-5, then every parameter's gradient."""
    loss, g_theirs = theirs
    if abs(loss.item() - ours.item()) > 1e-5:
        return False
    g_ours = torch.autograd.grad(ours, params)
    return all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_theirs, g_ours))


def test_one_grpo_steps_loss_and_gradients_equal_trls_on_smollm2_with_its_template(trl_step):
    trainer, model, tok, inputs, theirs = trl_step
    theirs_prompts, _, _ = trainer._tokenize_prompts([row["prompt"] for row in ROWS])
    assert [list(t) for t in theirs_prompts] == [chat.render_prompt(tok, row["prompt"])[0] for row in ROWS]
    ended = (inputs["completion_ids"] == tok.eos_token_id).any(1)
    assert 0 < int(ended.sum()) < 8                             # answers that ended and answers cut at T
    ours, advantages, mask = _our_loss(model, tok, inputs)
    assert torch.equal(mask, inputs["completion_mask"].long())  # TRL's mask: up to and including <|im_end|>
    assert torch.allclose(advantages, inputs["advantages"], atol=1e-6)
    assert _same(theirs, ours, list(model.parameters()))


@pytest.mark.parametrize("bug", ["end token masked out", "the default system turn"])
def test_the_trl_comparison_on_smollm2_turns_red_on_each_deliberate_bug(bug, trl_step):
    trainer, model, tok, inputs, theirs = trl_step
    ours, _, _ = _our_loss(model, tok, inputs, bug=bug)
    assert not _same(theirs, ours, list(model.parameters()))


# --- the candidate tasks' ruler (grpo_edu/beyond/real_model.py), by hand: no model needed -----------------------
def test_the_candidate_grader_and_group_statistics_by_hand():
    from grpo_edu.beyond import real_model

    assert real_model.is_correct(" 'A'.", "a") and real_model.is_correct("7", "7")
    assert not real_model.is_correct("The answer is 7.", "7") and not real_model.is_correct("77", "7")
    lenient = [("6 + 6 = 12", "12", "number", True), ("7 is less than 12", "7", "number", False),
               ("The first letter of the word 'zebra' is 'z'.", "z", "letter", True), ("Zea.", "z", "letter", False),
               ("A word, 'b'? No: 'a'.", "a", "letter", True), ("57 is an odd number.", "odd", "parity", True),
               ("Even? No, odd; it is even", "odd", "parity", False)]
    assert [real_model.is_correct(text, answer, kind) for text, answer, kind, _ in lenient] == [r[3] for r in lenient]
    stats, info = real_model.group_stats([[True, False, False, False], [False] * 4, [True] * 4], 4)
    assert info["counts"] == [1, 0, 4]
    assert stats["pass@1"] == pytest.approx((0.25 + 0 + 1) / 3) and stats["pass@4"] == pytest.approx(2 / 3)
    assert stats["mixed"] == pytest.approx(1 / 3)                      # only the first group carries a gradient
    per_prompt = torch.tensor([0.25, 0.0, 1.0])
    assert stats["pass@1_se"] == pytest.approx(float(per_prompt.std() / 3 ** 0.5))
    first = real_model.rows(real_model.CANDIDATES["first letter"], 5, seed=1)
    assert first == real_model.rows(real_model.CANDIDATES["first letter"], 5, seed=1)
    assert all(row["answer"] == row["prompt"].split("'")[1][0] for row in first)


def test_measure_samples_through_the_chat_template_and_grades_each_answer(smollm2):
    from grpo_edu.beyond import real_model

    model, tokenizer = smollm2
    stats, info = real_model.measure(model, tokenizer, real_model.CANDIDATES["first letter"], prompts=2, samples=2,
                                     max_new_tokens=4)
    assert len(info["answers"]) == 4 and sum(info["counts"]) == sum(ok for _, _, ok in info["answers"])
    assert all(ok == real_model.is_correct(text, q.split("'")[1][0], "letter") for q, text, ok in info["answers"])
    assert 0 <= stats["strict pass@1"] <= stats["pass@1"] <= stats["pass@2"] <= 1
