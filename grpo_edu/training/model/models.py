"""Loading a causal LM and its tokenizer: the bundled tiny model, a fetched real one, a local folder, or a hub name.

The course ships its own model (``assets/tiny-adder``), so nothing is downloaded at run
time. The very same code path loads any Hugging Face causal LM by hub name when the
machine has internet. ``trust_remote_code`` stays off unless asked for.

A name is checked before transformers sees it: a folder must hold a config, a tokenizer and
complete safetensors weights (pickle weights, ``*.bin``, are refused: unpickling can run code);
a run's output folder stands for its latest checkpoint; a symbolic link that loops or leads
nowhere is named as such; a name that looks like a path, or any name while the hub cannot be
reached, fails at once as "no such folder" instead of after a minute of download retries.
Loaded weights must be finite (a damaged file or a diverged run is named at load, not as a
sampling traceback later).
"""

import errno
import json
import os
import re
import socket
import warnings
from pathlib import Path
from urllib.parse import urlparse

from grpo_edu.common import _checks
from grpo_edu.training.model import fetch
from grpo_edu.training.trainers.config import (BUNDLED_CALC_MODEL, BUNDLED_MODEL, BUNDLED_SUMS_MODEL,
                                               BUNDLED_WORDS_MODEL)

ASSETS = (Path(__file__).resolve().parents[2] / "_bundle" / "assets").resolve()
"""The bundled models and data: ``grpo_edu/_bundle/assets``, which in a checkout is a link to the repository's
``assets/`` and in an installed wheel the copy the wheel carries (with the lessons beside it)."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "sentencepiece.bpe.model")
"""Any one of these marks a folder that holds a tokenizer."""
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
"""What a hub name looks like: ``name`` or ``owner/name``."""
PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
"""Weight files in Python's pickle format, which the course never loads."""


def _asset_model(folder, what, rebuild):
    """``assets/<folder>``, a model the course ships; a clear error naming how to rebuild it if it is missing."""
    path = ASSETS / folder
    if not (path / "config.json").exists():
        _checks.fail("model", f"{what} is missing at {path}", rebuild)
    return path


def bundled_model_dir():
    """Path of the bundled tiny model; a clear error if the checkout lacks it."""
    return _asset_model("tiny-adder", "the bundled model",
                        "run `grpo-edu make-model` to rebuild it, or install grpo_edu from a full checkout")


def two_task_model_dir():
    """Path of lesson 06's model, which half knows addition *and* subtraction (``assets/tiny-two-tasks``)."""
    return _asset_model("tiny-two-tasks", "the two-task model",
                        "rebuild it with: python -m grpo_edu.training.model.make_model --out assets/tiny-two-tasks "
                        "--task addition,subtraction --max-steps 2000 --stop-at 0.999 --check-every 500")


def sums_model_dir():
    """Path of lesson 11's model, which writes its working (``assets/tiny-sums``, the ``sums`` task)."""
    return _asset_model("tiny-sums", "the long-answer model",
                        "rebuild it with the command in assets/README.md (python -m grpo_edu.training.model.make_model "
                        "--out assets/tiny-sums --task sums …; about 4 minutes on a 2-core CPU)")


def calc_model_dir():
    """Path of lesson 15's model, which may call a calculator (``assets/tiny-calc``, the ``calc`` task)."""
    return _asset_model("tiny-calc", "the calculator model",
                        "rebuild it with the command in assets/README.md (python -m grpo_edu.training.model.make_model "
                        "--out assets/tiny-calc --task calc …; about 4 minutes on a 2-core CPU)")

def words_model_dir():
    """Path of lesson 16's model, which reads and writes words through a chat template (``assets/tiny-words``)."""
    return _asset_model("tiny-words", "the words model",
                        "rebuild it with the command in assets/README.md (python -m grpo_edu.training.model.make_model "
                        "--out assets/tiny-words --task words …; about 5 minutes on a 2-core CPU)")


def _looks_like_path(name):
    """True for names a hub cannot hold, or whose first part is a local folder (``models/tiny``)."""
    if not HUB_NAME.match(name) or name.startswith("."):
        return True
    first = name.split("/")[0]
    return "/" in name and os.path.lexists(first)     # a folder, a file or a link by that name is here


def broken_link(path):
    """Why ``path`` cannot be followed, as a phrase (a loop of symbolic links, or a link to a missing
    target, at ``path`` or on the way to it); None when it can, or when nothing is there at all."""
    try:
        os.stat(path)
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "is a loop of symbolic links (a link that leads back to itself)"
        if not isinstance(err, FileNotFoundError):
            return None
    parts = Path(path).parts
    for i in range(1, len(parts) + 1):                 # the first link on the way whose target is missing
        step = Path(*parts[:i])
        if step.is_symlink() and not step.exists():
            return (f"is a symbolic link to {os.readlink(step)}, which does not exist" if i == len(parts)
                    else f"goes through {step}, a symbolic link to {os.readlink(step)}, which does not exist")
    return None


def hub_unreachable():
    """Why the Hugging Face hub cannot be used now (a phrase), or None if it may be."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None                               # only the proxy can tell
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=3).close()
    except OSError as err:
        return f"{url.hostname} cannot be reached ({err.__class__.__name__})"
    return None


def _check_model_dir(path, arg="model"):
    """A local model folder must hold config.json, a tokenizer and complete safetensors weights."""
    from grpo_edu.training.runs import checkpoint as ckpt

    if not (path / "config.json").exists():
        _checks.fail(arg, f"{path} has no config.json, so it is not a model directory",
                     "point at a folder written by save_pretrained, or at a run's output_dir")
    if not any((path / name).exists() for name in TOKENIZER_FILES):
        _checks.fail(arg, f"{path} holds no tokenizer (none of {', '.join(TOKENIZER_FILES[:2])}, …)",
                     "save the tokenizer into the same folder (tokenizer.save_pretrained(path)); checkpoints "
                     "written by grpo_edu include it")
    weight_files = sorted(path.glob("*.safetensors"))
    if not weight_files:
        pickled = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_WEIGHTS)
        if pickled:
            _checks.fail(arg, f"{path} holds its weights only in pickle format ({', '.join(pickled[:3])}), which "
                         "grpo_edu never loads: unpickling a file can run any code it carries",
                         "convert it once to safetensors, in a Python session you trust with that file: "
                         "AutoModelForCausalLM.from_pretrained(path).save_pretrained(path) writes model.safetensors")
        _checks.fail(arg, f"{path} holds no weights (no *.safetensors file)",
                     "point at the folder that save_pretrained wrote the whole model into")
    for weights in weight_files:
        problem = ckpt.safetensors_problem(weights)
        if problem:
            run = path.parent if ckpt.CHECKPOINT.match(path.name) else None
            fix = (ckpt.intact_hint(run, arg) if run is not None
                   else "save the model again, or point at another copy")
            _checks.fail(arg, f"{weights} {problem}", fix)


def locate_model(name_or_path, *, arg="model"):
    """Where to load ``name_or_path`` from: ``(source, info)``.

    ``info["kind"]`` is "bundled", "fetched" (a real model converted by ``grpo-edu models get``: ``fetch.py``),
    "folder", "run" (a run's output folder: ``info["checkpoint"]`` is its latest checkpoint) or "hub". Local folders
    are checked here (see the module doc), for every model the course loads (the policy, a reward model's
    backbone, …); errors name ``arg``.
    """
    from grpo_edu.training.runs import checkpoint as ckpt

    if name_or_path == BUNDLED_MODEL:
        return str(bundled_model_dir()), {"kind": "bundled"}
    if name_or_path == BUNDLED_SUMS_MODEL:
        return str(sums_model_dir()), {"kind": "bundled"}
    if name_or_path == BUNDLED_CALC_MODEL:
        return str(calc_model_dir()), {"kind": "bundled"}
    if name_or_path == BUNDLED_WORDS_MODEL:
        return str(words_model_dir()), {"kind": "bundled"}
    if name_or_path in fetch.PACKAGED_MODELS:          # a real model, fetched once by `grpo-edu models get NAME`
        folder = fetch.fetched_folder(name_or_path)
        _check_model_dir(folder, arg)
        return str(folder), {"kind": "fetched"}
    name_or_path = str(name_or_path)
    path = Path(name_or_path).expanduser()
    broken = broken_link(path)
    if broken:
        _checks.fail(arg, f"{path} {broken}", "point it at the model folder itself (ls -l shows where a link goes)")
    if path.is_dir():
        if not (path / "config.json").exists() and ((path / ckpt.LATEST).exists() or ckpt.checkpoint_folders(path)):
            folder, _ = ckpt.find_checkpoint(path, arg=arg)
            _check_model_dir(folder, arg)
            return str(folder), {"kind": "run", "checkpoint": str(folder)}
        _check_model_dir(path, arg)
        return str(path), {"kind": "folder"}
    if path.exists():
        _checks.fail(arg, f"{path} is a file, not a model directory", "pass the folder that holds config.json")
    if _looks_like_path(name_or_path):
        _checks.fail(arg, f"no such folder {name_or_path!r} (relative paths start from {os.getcwd()})",
                     "check the path, or pass 'bundled' for the course's model")
    offline = hub_unreachable()
    if offline:
        _checks.fail(arg, f"no such folder {name_or_path!r} (relative paths start from {os.getcwd()}), and it "
                     f"cannot be a hub name now: {offline}",
                     "check the path, or pass 'bundled'; to download a hub model, connect to the internet")
    return name_or_path, {"kind": "hub"}  # a hub name such as "Qwen/Qwen2.5-0.5B-Instruct"


def resolve_model(name_or_path):
    """The folder or hub name to load ``name_or_path`` from (see :func:`locate_model`)."""
    return locate_model(name_or_path)[0]


def pick_device(device="auto"):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        _checks.fail("device", "'cuda' was asked for but torch sees no CUDA device", "use device='auto' or 'cpu'")
    return torch.device(device)


def no_hub_kernels():
    """``from_pretrained`` keywords that keep PyTorch's own layers: ``{"use_kernels": False}`` where transformers
    has hub kernels, else nothing.

    From transformers 5, a model loads with ``use_kernels`` on whenever the ``kernels`` package is installed (recent
    transformers releases depend on it): layers are wrapped to take a kernel from the Hugging Face hub, and every
    ``train()`` or ``eval()`` kernelizes the model again. The course's models are small, on a CPU, often offline: no hub kernel serves them,
    and the wrapping only costs time (about 0.4 ms per train/eval switch, which a step makes twice, against
    0.09 ms without it). The layers then compute exactly what they compute without the wrapper."""
    from transformers import PreTrainedModel

    return {"use_kernels": False} if hasattr(PreTrainedModel, "set_use_kernels") else {}


def load_kwargs():
    """The ``from_pretrained`` keywords of every model the course loads: safetensors only (a pickle is never
    opened, from a folder or the hub: unpickling can run code), and PyTorch's own layers (:func:`no_hub_kernels`)."""
    return {"use_safetensors": True, **no_hub_kernels()}


def load_tokenizer(source, *, trust_remote_code=False, arg="model"):
    """``AutoTokenizer.from_pretrained(source)``, with what stops it named: a folder whose tokenizer asks to run its
    own code (``auto_map``) without ``trust_remote_code``, and a damaged tokenizer file (cut short, not UTF-8,
    a vocabulary that does not hold its own merges), each naming the folder's tokenizer files and the fix."""
    from transformers import AutoTokenizer

    folder = Path(source)
    files = [name for name in TOKENIZER_FILES if (folder / name).is_file()] if folder.is_dir() else []
    if files and not trust_remote_code:
        try:
            config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}                          # missing or damaged: from_pretrained names it below
        if isinstance(config, dict) and config.get("auto_map"):
            _checks.fail(arg, f"{folder / 'tokenizer_config.json'} asks to run the folder's own Python code for its "
                         f"tokenizer (auto_map: {config['auto_map']!r}), which grpo_edu never runs unasked",
                         "use a tokenizer class transformers ships (drop auto_map, keep tokenizer.json), or, for "
                         "code you have read, pass trust_remote_code (--trust-remote-code)")
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except OSError:
        raise                                    # a missing folder or hub name: the callers name it
    except Exception as err:                     # JSONDecodeError, UnicodeDecodeError, the tokenizers library's own
        if not files:
            raise
        first_line = (str(err).strip().splitlines() or [""])[0]
        _checks.fail(arg, f"the tokenizer in {folder} cannot be read ({', '.join(files)}: "
                     f"{type(err).__name__}: {first_line})", "copy the model's tokenizer files again from where "
                     "they came (a cut or edited tokenizer.json is the usual cause), or save them with "
                     "tokenizer.save_pretrained")


def load_model_and_tokenizer(name_or_path=BUNDLED_MODEL, *, device="cpu", trust_remote_code=False):
    """Load (model, tokenizer) in float32 on ``device``, with a pad token set."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one tqdm bar (the trainer's) is enough
    source = resolve_model(name_or_path)
    if trust_remote_code:
        warnings.warn(f"trust_remote_code: on, so loading {name_or_path!r} runs any Python code its folder or hub "
                      "repository ships (modeling_*.py, tokenizer code) with your permissions; use it only for a "
                      "model whose code you have read or whose author you trust", stacklevel=2)
    try:
        tokenizer = load_tokenizer(source, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=trust_remote_code, **load_kwargs())
    except OSError as err:
        first_line = (str(err).strip().splitlines() or [""])[0]   # whole, not cut mid-URL
        _checks.fail("model", f"could not load {name_or_path!r} ({err.__class__.__name__}: {first_line})",
                     "pass a local model directory, or a hub name on a machine with internet")
    if len(tokenizer) == 0:
        _checks.fail("model", f"{source} gave an empty tokenizer", "save the model's tokenizer into that folder")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    check_finite_weights(model, source)
    model.to(device)
    return model, tokenizer


def check_finite_weights(model, source="the model", arg="model"):
    """Refuse a model any of whose weights is NaN or ±∞ (a damaged file, or a run that diverged)."""
    import torch

    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            bad = int((~torch.isfinite(param)).sum())
            _checks.fail(arg, f"{source} has NaN or infinite weights ({bad} of {param.numel()} in {name}): "
                         "its file is damaged, or it was saved from a run that diverged",
                         "load an earlier checkpoint of the run, or the bundled model ('bundled')")
