"""Loading models: every way a name or folder can be wrong fails at once, naming the fix."""

import json
import shutil

import pytest

from grpo_edu.training.model import models
from grpo_edu.training.model.models import load_model_and_tokenizer, locate_model

ASSET = models.ASSETS / "tiny-adder"


@pytest.fixture
def no_hub(monkeypatch):
    """Fail the test if transformers is asked to load anything: the error must come first."""
    import transformers

    def forbidden(*args, **kwargs):
        raise AssertionError("transformers was asked to load a model")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", forbidden)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", forbidden)


@pytest.mark.parametrize("name", ["./my-model", "../models/tiny", "~/no/such/model", "a/b/c", "my model",
                                  "C:\\models\\tiny"])
def test_names_that_look_like_paths_fail_at_once(no_hub, name):
    with pytest.raises(ValueError, match=r"^model: no such folder ") as error:
        locate_model(name)
    assert repr(name) in str(error.value)


def test_a_mistyped_relative_path_is_not_sent_to_the_hub(no_hub, tmp_path, monkeypatch):
    """'models/tiny' where ./models exists is a path; with the hub reachable it used to be
    tried as a hub name for ~50 s and end with a message cut off mid-URL."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    monkeypatch.setattr(models, "hub_unreachable", lambda: None)   # as if online
    with pytest.raises(ValueError, match=rf"^model: no such folder 'models/tiny' \(relative paths start from "
                       rf"{tmp_path}\)"):
        locate_model("models/tiny")


def test_any_name_fails_at_once_while_offline(no_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"^model: no such folder 'my-model' .*cannot be a hub name now: "
                       r"HF_HUB_OFFLINE is set"):
        locate_model("my-model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)

    def unreachable(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(models.socket, "create_connection", unreachable)
    with pytest.raises(ValueError, match=r"cannot be a hub name now: huggingface\.co cannot be reached \(OSError\)"):
        locate_model("Qwen/Qwen2.5-0.5B-Instruct")


def test_a_hub_error_is_shown_whole(monkeypatch):
    import transformers

    url = "https://huggingface.co/docs/transformers/installation#offline-mode"

    def offline(*args, **kwargs):
        raise OSError(f"We couldn't connect to 'https://huggingface.co'. See {url}.\nSecond line of detail")

    monkeypatch.setattr(models, "hub_unreachable", lambda: None)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    with pytest.raises(ValueError, match=r"^model: could not load 'someone/some-model' \(OSError: .*See "
                       + url.replace(".", r"\.") + r"\.\)\. Fix: "):
        load_model_and_tokenizer("someone/some-model")


def test_folders_that_are_not_complete_models_are_refused(no_hub, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"^model: .*empty has no config\.json"):
        locate_model(str(empty))
    no_tok = tmp_path / "no_tokenizer"
    no_tok.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(ASSET / name, no_tok / name)
    with pytest.raises(ValueError, match=r"^model: .*no_tokenizer holds no tokenizer \(none of tokenizer\.json"):
        locate_model(str(no_tok))
    cut = tmp_path / "cut"
    shutil.copytree(ASSET, cut)
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[:1000])
    with pytest.raises(ValueError, match=r"^model: .*cut/model\.safetensors is truncated"):
        locate_model(str(cut))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"^model: .*file is a file, not a model directory"):
        locate_model(str(tmp_path / "file"))


def test_a_runs_output_folder_stands_for_its_latest_checkpoint(tmp_path):
    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(ASSET, run / f"checkpoint-00000{step}")
        (run / f"checkpoint-00000{step}" / "trainer_state.json").write_text("{}")
    (run / "latest.json").write_text(json.dumps({"checkpoint": "checkpoint-000002", "step": 2}))
    assert locate_model(str(run)) == (str(run / "checkpoint-000002"), {"kind": "run",
                                                                        "checkpoint": str(run / "checkpoint-000002")})
    model, tok = load_model_and_tokenizer(str(run))
    assert tok("12+34=")["input_ids"][0] == tok.bos_token_id
    data = (run / "checkpoint-000002" / "model.safetensors").read_bytes()
    (run / "checkpoint-000002" / "model.safetensors").write_bytes(data[:-10])
    (run / "checkpoint-000002" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"^model: .*checkpoint-000002/model\.safetensors is truncated"):
        locate_model(str(run / "checkpoint-000002"))


def test_bundled_and_hub_names_pass_through(monkeypatch):
    assert locate_model("bundled") == (str(ASSET), {"kind": "bundled"})
    monkeypatch.setattr(models, "hub_unreachable", lambda: None)
    assert locate_model("Qwen/Qwen2.5-0.5B-Instruct") == ("Qwen/Qwen2.5-0.5B-Instruct", {"kind": "hub"})


def test_a_latest_json_that_points_out_of_the_run_folder_is_refused(tmp_path):
    outside = tmp_path / "outside" / "ckpt"
    shutil.copytree(ASSET, outside)
    (outside / "trainer_state.json").write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    for target in ("../outside/ckpt", str(outside)):
        (run / "latest.json").write_text(json.dumps({"checkpoint": target, "step": 2}))
        with pytest.raises(ValueError, match=r"^model: .*latest\.json names '.*ckpt', not one of this folder's "
                                             "checkpoint-NNNNNN folders"):
            locate_model(str(run))


def test_trust_remote_code_says_what_it_allows():
    with pytest.warns(UserWarning, match=r"^trust_remote_code: on, so loading .* runs any Python code"):
        load_model_and_tokenizer(str(ASSET), trust_remote_code=True)


# --- nothing lost, second pass: links, pickle and damaged weights are named before any work ----

def test_a_symlink_loop_or_a_dangling_link_is_named_not_tried_as_a_hub_name(no_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(models, "hub_unreachable", lambda: None)   # as if online: it must not matter
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(ValueError, match=r"^model: a is a loop of symbolic links .*Fix: point it at the model folder"):
        locate_model("a")
    (tmp_path / "gone").symlink_to(tmp_path / "deleted-model")
    with pytest.raises(ValueError, match=r"^model: gone is a symbolic link to .*deleted-model, which does not exist"):
        locate_model("gone")
    with pytest.raises(ValueError, match=r"^model: gone/checkpoint-000010 goes through gone, a symbolic link to "
                                         r".*deleted-model, which does not exist"):
        locate_model("gone/checkpoint-000010")


def test_a_folder_with_pickle_weights_only_is_refused_without_unpickling(no_hub, tmp_path):
    import torch

    folder = tmp_path / "pickled"
    shutil.copytree(ASSET, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    torch.save({"x": torch.zeros(1)}, folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"^model: .*pickled holds its weights only in pickle format "
                                         r"\(pytorch_model\.bin\), which grpo_edu never loads.*Fix: convert it once"):
        locate_model(str(folder))
    (folder / "pytorch_model.bin").unlink()
    with pytest.raises(ValueError, match=r"^model: .*pickled holds no weights \(no \*\.safetensors file\)"):
        locate_model(str(folder))


def test_the_loader_asks_transformers_for_safetensors_only(monkeypatch):
    import transformers

    seen = {}
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    load_model_and_tokenizer("bundled")
    assert seen["use_safetensors"] is True and seen["trust_remote_code"] is False


def test_a_loaded_model_runs_pytorchs_own_layers_and_switching_modes_does_not_kernelize_it(monkeypatch):
    """transformers 5 loads a model with hub kernels on whenever the kernels package is installed, and kernelizes it
    again at every train()/eval() switch, which a step makes twice: the course's models keep PyTorch's own layers."""
    import transformers

    if not hasattr(transformers.PreTrainedModel, "set_use_kernels"):
        pytest.skip("this transformers has no hub kernels")
    kernelized = []
    real = transformers.PreTrainedModel.set_use_kernels
    monkeypatch.setattr(transformers.PreTrainedModel, "set_use_kernels",
                        lambda self, use, *a, **kw: (kernelized.append(use), real(self, use, *a, **kw))[1])
    model, _ = load_model_and_tokenizer("bundled")
    assert model.use_kernels is False
    kernelized.clear()
    model.eval()
    model.train()
    assert kernelized == []


def _damaged_copy(tmp_path, value):
    """A copy of the bundled model whose first embedding row is ``value``."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "damaged"
    shutil.copytree(ASSET, folder)
    weights = load_file(folder / "model.safetensors")
    name = next(k for k in weights if "embed" in k)
    weights[name][0] = value
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder, name


def test_weights_that_are_not_finite_are_named_at_load(tmp_path):
    folder, name = _damaged_copy(tmp_path, float("nan"))
    with pytest.raises(ValueError, match=rf"^model: .*damaged has NaN or infinite weights \(\d+ of \d+ in {name}\): "
                                         r"its file is damaged.*Fix: load an earlier checkpoint"):
        load_model_and_tokenizer(str(folder))


def test_weights_that_overflow_stop_sampling_with_a_clear_error_and_leave_no_folder(tmp_path):
    """Finite garbage (here 1e30 in the embedding) overflows in the forward pass; sampling used to die in
    torch.multinomial with a traceback, after the run had made its output folder."""
    from grpo_edu import GRPOConfig, GRPOTrainer

    folder, _ = _damaged_copy(tmp_path, 1e30)
    kept = tmp_path / "kept"
    kept.mkdir()
    for out in (tmp_path / "new-run", kept):
        trainer = GRPOTrainer(GRPOConfig(model=str(folder), total_training_steps=2, eval_size=8,
                                         output_dir=str(out)))   # loads: every weight is finite
        with pytest.raises(ValueError, match=r"^model: its output holds NaN or ∞ at completion token 1, so nothing "
                                             r"can be sampled.*Fix: load an earlier checkpoint"):
            trainer.train(progress=False)
    assert not (tmp_path / "new-run").exists()                        # made by the run, left empty: removed
    assert kept.is_dir() and not any(kept.iterdir())                  # a folder the user made stays
