"""The character tokenizer and the bundled tiny model (assets/tiny-adder)."""

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from grpo_edu.training.task.evaluation import evaluate_accuracy, sample_completions, success_rates  # noqa: E402
from grpo_edu.training.model.make_model import BAND, build_tiny_model, main  # noqa: E402
from grpo_edu.training.task.tasks import get_task  # noqa: E402
from grpo_edu.training.model.tokenizer import CHARS, SPECIAL_TOKENS, build_char_tokenizer, save_char_tokenizer  # noqa: E402

ASSET = Path(__file__).resolve().parents[1] / "assets" / "tiny-adder"
TASK = get_task("addition")


# --- tokenizer --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_special_token_ids_and_padding_side(tok):
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert len(tok) == len(SPECIAL_TOKENS) + len(CHARS)
    assert tok.padding_side == "left"


def test_every_character_is_one_token_and_round_trips(tok):
    ids = tok(CHARS, add_special_tokens=False)["input_ids"]
    assert ids == list(range(len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + len(CHARS)))
    assert tok.decode(ids) == CHARS  # no spaces inserted, the space character kept
    for ch in CHARS:
        assert tok.decode(tok(ch, add_special_tokens=False)["input_ids"]) == ch


def test_bos_first_nothing_appended_and_special_tokens_skipped(tok):
    ids = tok("12+34=")["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == 7 and tok.eos_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True) == "12+34="
    assert tok.decode(ids + tok("46", add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                      skip_special_tokens=True) == "12+34=46"
    assert tok("x")["input_ids"] == [tok.bos_token_id, tok.unk_token_id]  # unknown characters


def test_batches_are_left_padded(tok):
    batch = tok(["1+1=", "12+34="], padding=True)
    assert batch["input_ids"][0][:2] == [tok.pad_token_id] * 2
    assert batch["attention_mask"] == [[0, 0, 1, 1, 1, 1, 1], [1] * 7]


def test_saved_tokenizer_loads_with_auto_tokenizer(tok, tmp_path):
    from transformers import AutoTokenizer

    save_char_tokenizer(tok, tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == \
        "PreTrainedTokenizerFast"
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("12+34=")["input_ids"] == tok("12+34=")["input_ids"]
    assert loaded.padding_side == "left" and loaded.pad_token_id == 0
    assert loaded.decode(loaded(CHARS)["input_ids"], skip_special_tokens=True) == CHARS


# --- the bundled model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(ASSET), AutoTokenizer.from_pretrained(ASSET)


def test_bundled_model_is_small_and_safetensors_only():
    files = {p.name: p.stat().st_size for p in ASSET.iterdir()}
    assert "model.safetensors" in files and not any(n.endswith((".bin", ".pt", ".pkl")) for n in files)
    assert sum(files.values()) < 5 * 2**20


def test_bundled_model_loads_offline_as_a_plain_llama(bundled):
    model, tokenizer = bundled
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == len(tokenizer) and model.config.tie_word_embeddings
    assert tokenizer("12+34=")["input_ids"] == build_char_tokenizer()("12+34=")["input_ids"]


def test_bundled_model_is_sometimes_right_when_sampling(bundled):
    model, tokenizer = bundled
    rows = TASK.split("heldout", n=200)
    sampled = evaluate_accuracy(model, tokenizer, rows, TASK, temperature=1.0, seed=0)
    assert BAND[0] <= sampled <= BAND[1]
    greedy = evaluate_accuracy(model, tokenizer, rows, TASK, temperature=0)
    assert greedy > sampled  # its most likely answer is usually right: room for GRPO to sharpen


def test_bundled_model_knows_the_answer_format(bundled):
    """Its most likely answer is well formed; label smoothing makes some samples stray."""
    model, tokenizer = bundled
    prompts = [r["prompt"] for r in TASK.split("heldout", n=100)]

    def well_formed(**sampling):
        texts, stopped = sample_completions(model, tokenizer, prompts, **sampling)
        return sum(s and t.isdigit() and len(t) <= 3 for t, s in zip(texts, stopped)) / len(texts)

    assert well_formed(temperature=0) > 0.95
    assert 0.5 < well_formed(num_samples=4, seed=1) < 0.95


def test_recorded_numbers_are_reproducible(bundled):
    """grpo_edu_model.json's accuracy is what its own recipe measures (provenance)."""
    model, tokenizer = bundled
    record = json.loads((ASSET / "grpo_edu_model.json").read_text())
    assert record["command"].startswith("python -m grpo_edu.training.model.make_model --out assets/tiny-adder")
    assert record["in_band"] and record["seed"] == 0
    rates = success_rates(model, tokenizer, TASK.split("heldout"), TASK, temperature=1.0,
                          num_samples=record["eval_samples_per_prompt"], seed=0)
    assert sum(rates) / len(rates) == pytest.approx(record["heldout_sampled_accuracy"], abs=0.01)
    spread = sum(0 < p < 1 for p in rates) / len(rates)
    assert spread == pytest.approx(record["fraction_prompts_0_lt_p_lt_1"], abs=0.02)
    assert spread > 0.8  # most prompts give GRPO a group with σ > 0


# --- building -----------------------------------------------------------------------------


def test_build_is_deterministic(tmp_path):
    options = dict(seed=3, max_steps=4, check_every=2, eval_samples=1)
    first = build_tiny_model(tmp_path / "a", **options)
    second = build_tiny_model(tmp_path / "b", **options)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == \
        (tmp_path / "b" / "model.safetensors").read_bytes()
    assert first["warmup_steps"] == second["warmup_steps"] == 4
    assert first["history"] == second["history"] and not first["in_band"]


def test_main_writes_nothing_when_the_accuracy_misses_the_band(tmp_path, capsys):
    """A failed rebuild used to save first and check after, overwriting the model in --out."""
    out = tmp_path / "m"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"the good model")
    code = main(["--out", str(out), "--overwrite", "--max-steps", "2", "--check-every", "1", "--eval-samples", "1"])
    assert code == 1
    err = capsys.readouterr().err
    assert "outside" in err and "nothing was written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]                 # no temporary folder left
    assert [p.name for p in out.iterdir()] == ["model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == b"the good model"


def test_main_moves_a_model_in_the_band_into_place(tmp_path, monkeypatch, capsys, random_model, char_tokenizer):
    import grpo_edu.training.model.make_model as make_model

    def warm_up(out_dir, **options):
        summary = {"in_band": True, "heldout_sampled_accuracy": 0.4, "warmup_steps": 1, "heldout_greedy_accuracy": 0.9,
                   "fraction_prompts_0_lt_p_lt_1": 0.9, "well_formed_rate": 0.9,
                   "command": make_model._command(out_dir, **options)}
        return random_model, char_tokenizer, summary, [], {"started": 0.0, "train_seconds": 1.0}

    monkeypatch.setattr(make_model, "_warm_up", warm_up)
    out = tmp_path / "m"
    out.mkdir()
    (out / "README.md").write_text("kept")
    assert main(["--out", str(out), "--seed", "3"]) == 0
    assert {p.name for p in out.iterdir()} >= {"README.md", "model.safetensors", "config.json", "tokenizer.json",
                                               "grpo_edu_model.json"}
    record = json.loads((out / "grpo_edu_model.json").read_text())
    assert record["command"] == f"python -m grpo_edu.training.model.make_model --out {out} --seed 3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert "saved to" in capsys.readouterr().out


def test_main_defaults_to_the_bundled_folder_wherever_it_runs(tmp_path, monkeypatch):
    import grpo_edu.training.model.make_model as make_model

    seen = {}

    def stop(out_dir, **options):
        seen["out"] = out_dir
        raise SystemExit(0)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(make_model, "_warm_up", stop)
    with pytest.raises(SystemExit):
        main(["--overwrite"])                                     # it holds the bundled model: refused without
    assert Path(seen["out"]) == ASSET                             # not ./assets/tiny-adder under the current folder
    assert make_model._command(ASSET) == "python -m grpo_edu.training.model.make_model --out assets/tiny-adder"


@pytest.mark.parametrize("kwargs, name", [(dict(stop_at=1.5), "stop_at"), (dict(task="nope"), "task"),
                                          (dict(lr=0), "lr"), (dict(max_steps=0), "max_steps")])
def test_build_checks_arguments_before_any_work(tmp_path, kwargs, name):
    with pytest.raises(ValueError, match=name):
        build_tiny_model(tmp_path / "x", **kwargs)
    assert not (tmp_path / "x").exists()


def test_sampling_checks_arguments_and_leaves_the_rng_alone(bundled):
    import torch

    model, tokenizer = bundled
    with pytest.raises(ValueError, match="temperature"):
        sample_completions(model, tokenizer, ["1+1="], temperature=-1.0)
    with pytest.raises(ValueError, match="rows"):
        evaluate_accuracy(model, tokenizer, [], TASK)
    state = torch.random.get_rng_state()
    sample_completions(model, tokenizer, ["12+34="], num_samples=3, seed=5)
    assert torch.equal(state, torch.random.get_rng_state())


def test_device_defaults_to_cpu_and_is_checked_before_any_work(tmp_path):
    import inspect

    import torch

    assert inspect.signature(build_tiny_model).parameters["device"].default == "cpu"
    with pytest.raises(ValueError, match="^device"):
        build_tiny_model(tmp_path / "x", device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="^device: 'cuda'"):
            build_tiny_model(tmp_path / "y", device="cuda")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
