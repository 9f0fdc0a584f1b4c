"""Loading a causal LM and its tokenizer: the bundled tiny model, a local folder, or a hub name.

The course ships its own model (``assets/tiny-adder``), so nothing is downloaded at run
time. The very same code path loads any Hugging Face causal LM by hub name when the
machine has internet. ``trust_remote_code`` stays off unless asked for.
"""

from pathlib import Path

from grpo_edu import _checks
from grpo_edu.config import BUNDLED_MODEL

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def bundled_model_dir():
    """Path of the bundled tiny model; a clear error if the checkout lacks it."""
    path = ASSETS / "tiny-adder"
    if not (path / "config.json").exists():
        _checks.fail("model", f"the bundled model is missing at {path}",
                     "run `grpo-edu make-model` to rebuild it, or install grpo_edu from a full checkout")
    return path


def resolve_model(name_or_path):
    """Map "bundled" to the bundled directory; check that a local path exists."""
    if name_or_path == BUNDLED_MODEL:
        return str(bundled_model_dir())
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            _checks.fail("model", f"{path} has no config.json, so it is not a model directory",
                         "point at a folder written by save_pretrained")
        return str(path)
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or "\\" in name_or_path
    if looks_local:
        _checks.fail("model", f"the path {name_or_path!r} does not exist",
                     "check the path, or pass 'bundled' for the course's model")
    return name_or_path  # a hub name such as "Qwen/Qwen2.5-0.5B-Instruct"


def pick_device(device="auto"):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        _checks.fail("device", "'cuda' was asked for but torch sees no CUDA device", "use device='auto' or 'cpu'")
    return torch.device(device)


def load_model_and_tokenizer(name_or_path=BUNDLED_MODEL, *, device="cpu", trust_remote_code=False):
    """Load (model, tokenizer) in float32 on ``device``, with a pad token set."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one tqdm bar (the trainer's) is enough
    source = resolve_model(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=trust_remote_code)
    except OSError as err:
        _checks.fail("model", f"could not load {name_or_path!r} ({err.__class__.__name__}: {str(err)[:200]})",
                     "pass a local model directory, or a hub name on a machine with internet")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    return model, tokenizer
