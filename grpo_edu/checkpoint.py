"""Checkpoints: everything needed to continue a run exactly, in safe formats only.

A checkpoint folder holds:

* ``model.safetensors`` + ``config.json`` + tokenizer files: the policy, loadable on its
  own by ``from_pretrained`` (so ``grpo-edu eval`` can score it);
* ``trainer_state.safetensors``: the optimizer's moment tensors and the RNG states;
* ``trainer_state.json``: the step, the run's GRPOConfig, the optimizer's hyper-parameters,
  and the metrics logged so far.

No pickle anywhere. Writing is atomic: the folder is written under a temporary name and
renamed into place, and ``latest.json`` (which names the newest checkpoint) is replaced
in one ``os.replace``. A run killed mid-write leaves the previous checkpoint and pointer intact.
"""

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from grpo_edu import _checks

LATEST = "latest.json"


def _write_json(path, data):
    tmp = Path(f"{path}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _flatten_optimizer(opt_state):
    """AdamW state_dict → (tensors for safetensors, JSON-able rest)."""
    tensors, scalars = {}, {}
    for idx, state in opt_state["state"].items():
        for key, value in state.items():
            if torch.is_tensor(value):
                tensors[f"optim.{idx}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{key}"] = value
    return tensors, {"param_groups": opt_state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors, meta):
    state = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = value
    for name, value in meta["scalars"].items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(output_dir, step, *, model, tokenizer, optimizer, rng, config, metrics, keep=2):
    """Write ``output_dir/checkpoint-{step:06d}`` atomically and point latest.json at it."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    name = f"checkpoint-{step:06d}"
    final, tmp = output_dir / name, output_dir / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    tensors, optim_meta = _flatten_optimizer(optimizer.state_dict())
    tensors.update({f"rng.{k}": v.cpu() for k, v in rng.items()})
    save_file(tensors, tmp / "trainer_state.safetensors")
    _write_json(tmp / "trainer_state.json",
                {"step": step, "config": config.to_dict(), "optimizer": optim_meta, "metrics": metrics})
    if final.exists():  # re-running the same step: the old copy goes only once the new one is complete
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_json(output_dir / LATEST, {"checkpoint": name, "step": step})
    for old in sorted(output_dir.glob("checkpoint-*"))[:-keep] if keep else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def find_checkpoint(path):
    """A checkpoint folder itself, or the newest one named by ``path/latest.json``."""
    path = Path(path)
    if (path / "trainer_state.json").exists():
        return path
    if (path / LATEST).exists():
        return path / json.loads((path / LATEST).read_text())["checkpoint"]
    _checks.fail("resume_from", f"{path} holds no checkpoint (no trainer_state.json or {LATEST})",
                 "pass a run's output_dir or one of its checkpoint-* folders")


def load_trainer_state(path):
    """(state dict from JSON, optimizer state_dict, rng tensors) of a checkpoint folder."""
    path = find_checkpoint(path)
    state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    tensors = load_file(path / "trainer_state.safetensors")
    optim = _unflatten_optimizer(tensors, state["optimizer"])
    rng = {k[len("rng."):]: v for k, v in tensors.items() if k.startswith("rng.")}
    return path, state, optim, rng
