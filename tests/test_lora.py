"""LoRA through peft (grpo_edu/training/model/lora.py): bad settings refused up front, the reference is the adapter
switched off (no copy), only the adapter trains, the engine samples the adapted model, and TRL computes the
same loss on the same adapter."""

import pytest
import torch

peft = pytest.importorskip("peft", reason="LoRA needs peft: pip install -e '.[lora]'")

from grpo_edu.beyond.export import format_export, to_trl, to_verl  # noqa: E402
from grpo_edu.training import lora  # noqa: E402
from grpo_edu.training.trainers.config import GRPOConfig  # noqa: E402
from grpo_edu.training.rollouts.rollout import completion_logprobs  # noqa: E402

SMALL = dict(batch_size=2, num_generations=4, max_completion_length=4, total_training_steps=2, eval_size=0,
             sampler="engine")


def _randomise_adapter(model, seed=0):
    """B starts at 0 (the adapter adds nothing); give it values so that switching it off makes a difference."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))


@pytest.mark.parametrize("fields, name", [({"lora_rank": 0}, "lora_rank"), ({"lora_rank": -4}, "lora_rank"),
                                          ({"lora_rank": 2.5}, "lora_rank"),
                                          ({"lora_rank": 8, "lora_alpha": 0.0}, "lora_alpha"),
                                          ({"lora_rank": 8, "lora_target_modules": " "}, "lora_target_modules")])
def test_settings_that_cannot_apply_are_refused_when_the_config_is_made(fields, name):
    with pytest.raises(ValueError, match=rf"^{name}: .*Fix: "):
        GRPOConfig(**fields)


def test_a_target_module_the_model_lacks_is_refused_before_any_step():
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    with pytest.raises(ValueError, match=r"lora_target_modules: names c_attn, which LlamaForCausalLM does not have.*"
                                         r"Fix: pick from its Linear layers: down_proj, gate_proj, .*q_proj"):
        GRPOTrainer(GRPOConfig(**SMALL, lora_rank=4, lora_target_modules="q_proj,c_attn"))


def test_the_reference_is_the_policy_with_its_adapter_off():
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    trainer = GRPOTrainer(GRPOConfig(**SMALL, lora_rank=4, learning_rate=1e-2))
    assert isinstance(trainer.ref_model, lora.AdapterOff) and list(trainer.ref_model.parameters()) == []
    trainable, total = lora.trainable_fraction(trainer.model)
    assert 0 < trainable < total / 4
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    adapter = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.step()
    trainer.step()
    assert all(torch.equal(p, base[n]) for n, p in trainer.model.named_parameters() if n in base)   # frozen
    assert any(not torch.equal(p, adapter[n]) for n, p in trainer.model.named_parameters() if n in adapter)
    # π_ref after training: the untouched bundled model's log-probs, though the policy itself has moved
    fresh, tokenizer = load_model_and_tokenizer("bundled")
    rollout = trainer._sample(["12+34=", "5+5="])
    args = (rollout.input_ids, rollout.attention_mask, rollout.completion_ids.shape[1])
    ref = trainer._ref_logprobs(rollout)
    with torch.no_grad():
        expected, _ = completion_logprobs(fresh, *args)
        policy, _ = completion_logprobs(trainer.model, *args)
    mask = rollout.completion_mask.bool()
    assert torch.allclose(ref[mask], expected[mask], atol=1e-6)
    assert not torch.allclose(policy[mask], expected[mask], atol=1e-3)          # the adapter does act


@pytest.mark.parametrize("targets", ["all-linear", "q_proj,v_proj,down_proj"])
def test_the_engine_samples_the_merged_adapter_on_its_fast_path(targets):
    """A LoRA policy samples at the base model's speed: the fast path computes with W + (α/r)·B·A, as TRL merges
    the adapter before vLLM samples. The log-probs equal a teacher-forced forward of the peft model (the adapter
    beside W) to 1e-5, the model's weights are bit-equal afterwards (the merge is a copy), and the base alone
    would give other log-probs (the adapter does act)."""
    from grpo_edu.training.rollouts import engine
    from grpo_edu.training.model.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("bundled")
    model = lora.add_lora(model, rank=4, target_modules=targets)
    _randomise_adapter(model)
    with torch.no_grad():                  # ΔW entries of about 0.07 (W: 0.03); at 10 times that, rounding passes 1e-5
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(0.1)
    model.eval()
    assert engine.fast_path_refusal(model) is None
    assert isinstance(engine.decoder_for(model, 4), engine._LlamaDecoder)
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    out = engine.generate(model, tokenizer, ["12+34=", "7+8=", "99+1="], num_generations=4, max_new_tokens=6,
                          generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(p, before[name]) for name, p in model.state_dict().items())   # bit-equal
    args = (out.input_ids, out.attention_mask, out.completion_ids.shape[1])
    with torch.no_grad():
        teacher, _ = completion_logprobs(model, *args)
        with model.disable_adapter():
            base, _ = completion_logprobs(model, *args)
    mask = out.completion_mask.bool()
    torch.testing.assert_close(out.logprobs[mask], teacher[mask], atol=1e-5, rtol=0)
    assert not torch.allclose(out.logprobs[mask], base[mask], atol=1e-3)
    with model.disable_adapter():                                          # switched off: the base's weights
        off = engine.generate(model, tokenizer, ["12+34="], num_generations=4, max_new_tokens=6,
                              generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), model.disable_adapter():
        expected, _ = completion_logprobs(model, off.input_ids, off.attention_mask, off.completion_ids.shape[1])
    torch.testing.assert_close(off.logprobs[off.completion_mask.bool()], expected[off.completion_mask.bool()],
                               atol=1e-5, rtol=0)


def test_a_lora_variant_the_merge_cannot_stand_for_takes_the_transformers_path():
    """DoRA rescales W + ΔW by a learned magnitude: merged_linear's sum is not its forward, so the engine falls
    back (and its log-probs still equal the peft model's)."""
    from grpo_edu.training.rollouts import engine
    from grpo_edu.training.model.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("bundled")
    config = lora.lora_config(4, 8.0, "q_proj,v_proj")
    config.use_dora = True
    model = peft.get_peft_model(model, config).eval()
    _randomise_adapter(model)
    assert "LoRA variant" in engine.fast_path_refusal(model)
    out = engine.generate(model, tokenizer, ["12+34=", "7+8="], num_generations=3, max_new_tokens=5,
                          generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        teacher, _ = completion_logprobs(model, out.input_ids, out.attention_mask, out.completion_ids.shape[1])
    mask = out.completion_mask.bool()
    torch.testing.assert_close(out.logprobs[mask], teacher[mask], atol=1e-5, rtol=0)


@pytest.mark.parametrize("sampler", ["engine", "loop"])
def test_sampling_a_lora_model_raises_no_deprecation_warning(sampler):
    """faults-4 L29: the peft wrapper's forward takes **kwargs, so the KV cache went in as `past_key_values`,
    which transformers removes in 5.40. The wrapped model's own keyword is used now (here through a hook,
    which sends the engine to the transformers forward too)."""
    import warnings

    from grpo_edu.training.rollouts import engine, rollout
    from grpo_edu.training.model.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("bundled")
    model = lora.add_lora(model, rank=4).eval()
    handle = model.get_base_model().lm_head.register_forward_hook(lambda mod, inp, out: out)   # the fallback
    sample = engine.generate if sampler == "engine" else rollout.generate
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sample(model, tokenizer, ["12+34=", "7+8="], num_generations=2, max_new_tokens=5)
    handle.remove()


def test_to_trl_exports_the_peft_settings():
    _, info = to_trl(GRPOConfig(lora_rank=8, lora_alpha=32.0, lora_target_modules="q_proj, v_proj"))
    assert info["peft_config"] == {"r": 8, "lora_alpha": 32.0, "target_modules": ["q_proj", "v_proj"],
                                   "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM"}
    peft.LoraConfig(**info["peft_config"])                                      # peft takes them as they are
    assert "peft_config=peft.LoraConfig(r=8, lora_alpha=32.0" in format_export(to_trl(GRPOConfig(lora_rank=8,
                                                                                                 lora_alpha=32.0)), "trl")
    assert to_trl()[1]["peft_config"] is None
    _, verl = to_verl(GRPOConfig(lora_rank=8))
    assert any(field == "lora_rank" for field, _ in verl["unmatched"])


def test_trls_loss_on_the_same_adapter_equals_ours(random_model, char_tokenizer, tmp_path):
    """TRL given to_trl's peft_config: its reference (adapter off), its loss and its gradients on the adapter equal
    ours on the same adapter, on one fixed batch with the clip binding and β > 0."""
    trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    import datasets
    from trl.trainer.utils import use_adapter

    from grpo_edu.core.losses import grpo_loss

    random_model.save_pretrained(tmp_path / "model")
    char_tokenizer.save_pretrained(tmp_path / "model")
    config = GRPOConfig(batch_size=2, num_generations=4, max_completion_length=5, beta=0.04, total_training_steps=1,
                        lora_rank=4, lora_alpha=8.0)
    kwargs, info = to_trl(config)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), report_to=[], logging_steps=1, use_cpu=True, **kwargs)
    trainer = trl.GRPOTrainer(model=str(tmp_path / "model"), processing_class=char_tokenizer, args=args,
                              reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(completions)],
                              train_dataset=datasets.Dataset.from_list([{"prompt": "12+34="}] * 8),
                              peft_config=peft.LoraConfig(**info["peft_config"]))
    theirs_model = trainer.model.train()
    assert trainer.ref_model is None                                  # TRL keeps no copy either
    ours_model = lora.add_lora(random_model, config.lora_rank, config.lora_alpha, config.lora_target_modules).train()
    _randomise_adapter(theirs_model)
    ours_model.load_state_dict(theirs_model.state_dict())             # the same adapter, the same base
    torch.manual_seed(0)
    vocab = len(char_tokenizer)
    prompt_ids, completion_ids = torch.randint(4, vocab, (8, 4)), torch.randint(4, vocab, (8, 5))
    completion_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]] * 2)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    attention = torch.cat([torch.ones(8, 4, dtype=torch.long), completion_mask], 1)
    with torch.no_grad(), use_adapter(theirs_model, adapter_name=None):           # TRL's own reference pass
        their_ref, _, _ = trainer._get_per_token_logps_and_entropies(theirs_model, ids, attention, 5)
    with torch.no_grad():
        our_ref, _ = completion_logprobs(lora.reference_for(ours_model), ids, attention, 5)
    real = completion_mask.bool()                                     # TRL leaves 0 after the answer's end
    assert torch.allclose(their_ref[real], our_ref[real], atol=1e-6)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(theirs_model, ids, attention, 5)
    old = logps.detach() + 0.3 * torch.randn(8, 5)                     # ratios far from 1: the clip binds on some
    advantages = torch.randn(8)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones(8, 4, dtype=torch.long),
              "completion_ids": completion_ids, "completion_mask": completion_mask, "advantages": advantages,
              "old_per_token_logps": old, "ref_per_token_logps": their_ref, "num_items_in_batch": completion_mask.sum()}
    trainer.current_gradient_accumulation_steps = 1
    theirs = trainer._compute_loss(theirs_model, inputs)
    our_logps, _ = completion_logprobs(ours_model, ids, attention, 5)
    ours, loss_info = grpo_loss(our_logps, old, advantages, completion_mask, ref_logprobs=our_ref, beta=config.beta,
                                epsilon=config.epsilon, epsilon_high=config.epsilon, loss_type=config.loss_type)
    assert 0 < loss_info["clip_fraction"] < 1 and loss_info["kl_mean"] > 0
    assert abs(theirs.item() - ours.item()) < 1e-6, (theirs.item(), ours.item())
    adapter = [n for n, p in ours_model.named_parameters() if p.requires_grad]
    assert adapter and all("lora_" in n for n in adapter)
    g_theirs = torch.autograd.grad(theirs, [dict(theirs_model.named_parameters())[n] for n in adapter])
    g_ours = torch.autograd.grad(ours, [dict(ours_model.named_parameters())[n] for n in adapter])
    for a, b in zip(g_theirs, g_ours):
        assert torch.allclose(a, b, atol=1e-6)


def test_a_lora_steps_memory_has_no_reference_copy_and_moments_for_the_adapter_only():
    from grpo_edu.beyond.step_cost import memory_parts
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    trainer = GRPOTrainer(GRPOConfig(**SMALL, lora_rank=4))
    trainer.step()
    parts = memory_parts(trainer, trainer._sample(["12+34=", "5+5="]))
    trainable, total = lora.trainable_fraction(trainer.model)
    assert parts["reference"] == 0 and parts["weights"] == 4 * total
    assert parts["gradients"] == 4 * trainable and parts["optimizer"] == 2 * 4 * trainable


# --- a LoRA run's folder: scored, resumed exactly, exported (faults-4 L13, L13b, L14, L16) ------------------------
def _lora_run(tmp_path, folder, steps, stop_after=None):
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = GRPOConfig(**{**SMALL, "total_training_steps": steps}, lora_rank=4, checkpoint_every=1,
                        output_dir=str(tmp_path / folder))
    trainer = GRPOTrainer(config)
    if stop_after is None:
        return trainer, trainer.train(progress=False)
    for _ in range(stop_after):
        trainer.step()
    trainer.save_checkpoint()
    return trainer, trainer.history


def test_a_lora_checkpoint_holds_the_merged_model_and_the_adapter(tmp_path):
    from grpo_edu.training.model.models import load_model_and_tokenizer

    trainer, _ = _lora_run(tmp_path, "run", 2)
    folder = tmp_path / "run" / "checkpoint-000002"
    assert {"config.json", "model.safetensors", "adapter"} <= {p.name for p in folder.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (folder / "adapter").iterdir()}
    merged, tokenizer = load_model_and_tokenizer(str(folder))            # a plain model, as eval and TRL load it
    assert not lora.is_lora(merged)
    ids = tokenizer(["12+34=", "56+7="], padding=True, return_tensors="pt")
    trainer.model.eval()
    with torch.no_grad():
        assert torch.allclose(merged(**ids).logits, trainer.model(**ids).logits, atol=1e-5)


def test_a_lora_run_resumed_after_a_stop_equals_the_uninterrupted_run(tmp_path):
    import hashlib

    from grpo_edu.training.trainers.trainer import GRPOTrainer

    _, whole = _lora_run(tmp_path, "a", 3)
    _lora_run(tmp_path, "b", 3, stop_after=2)
    config = GRPOConfig(**{**SMALL, "total_training_steps": 3}, lora_rank=4, checkpoint_every=1,
                        output_dir=str(tmp_path / "b"))
    resumed = GRPOTrainer(config).train(resume_from=str(tmp_path / "b"), progress=False)
    strip = lambda history: [{k: v for k, v in row.items() if k != "seconds"} for row in history]   # noqa: E731
    assert strip(resumed) == strip(whole)
    for name in ("adapter/adapter_model.safetensors", "model.safetensors", "trainer_state.safetensors"):
        shas = {hashlib.sha256((tmp_path / run / "checkpoint-000003" / name).read_bytes()).hexdigest() for run in "ab"}
        assert len(shas) == 1, name
    with pytest.raises(ValueError, match=r"^resume_from: .* is a LoRA run \(lora_rank 4\): pass its LoRA settings"):
        GRPOTrainer(GRPOConfig(**{**SMALL, "total_training_steps": 4})).train(resume_from=str(tmp_path / "b"),
                                                                               progress=False)


def test_grpo_edu_scores_and_exports_a_lora_run(tmp_path, capsys, monkeypatch):
    from grpo_edu.cli import main

    monkeypatch.chdir(tmp_path)
    tiny = ["--batch-size", "2", "--num-generations", "4", "--eval-size", "0", "--no-progress", "--lora-rank", "4"]
    assert main(["train", *tiny, "--total-training-steps", "2", "--checkpoint-every", "1", "--output-dir", "lrun"]) == 0
    capsys.readouterr()
    assert main(["eval", "--model", "lrun", "--n", "8"]) == 0
    out = capsys.readouterr().out
    assert "scoring its latest checkpoint, lrun/checkpoint-000002 (the LoRA run's adapter merged" in out
    assert "accuracy" in out
    assert main(["export", "verl", "--model", "lrun", "--lora-rank", "4"]) == 0
    captured = capsys.readouterr()
    assert "actor_rollout_ref.model.path=lrun/checkpoint-000002" in captured.out
    assert "the adapter alone, for peft, is in lrun/checkpoint-000002/adapter" in captured.err


def test_an_adapter_only_checkpoint_is_named_a_lora_run_and_resumed_never_sent_to_overwrite(tmp_path, capsys,
                                                                                              monkeypatch):
    """Checkpoints as grpo_edu wrote them before merged LoRA checkpoints: the adapter alone."""
    import shutil

    from grpo_edu.cli import main

    monkeypatch.chdir(tmp_path)
    _lora_run(tmp_path, "old", 2)
    for folder in (tmp_path / "old").glob("checkpoint-*"):
        for name in ("config.json", "model.safetensors", "generation_config.json"):
            (folder / name).unlink()
        for path in (folder / "adapter").iterdir():
            shutil.move(str(path), folder / path.name)
        (folder / "adapter").rmdir()
    assert main(["eval", "--model", "old", "--n", "4"]) == 2
    err = capsys.readouterr().err
    assert "holds only its adapter" in err and "old is a LoRA run" in err and "resume it with --resume old" in err
    assert "start a new run" not in err
    tiny = ["--batch-size", "2", "--num-generations", "4", "--eval-size", "0", "--no-progress", "--lora-rank", "4",
            "--total-training-steps", "3", "--checkpoint-every", "1"]
    assert main(["train", *tiny, "--resume", "old"]) == 0                  # resumed: a checkpoint eval can score
    assert main(["eval", "--model", "old", "--n", "4"]) == 0
