"""Versioned weights and batches: what passes between the trainer and the sampler.

The trainer *publishes* its weights after every update under a version number v (v = the updates made so far,
TRL's ``model_version``); the sampler loads the version it is told to use and tags the batch it draws with it.
Staleness of a batch trained at step t (the trainer then holds version t − 1) is (t − 1) − v.

Both travel as safetensors files (no pickle): ``weights/v000003.safetensors`` and
``batches/step-000004.safetensors``, the batch's text (prompts, completions) and tags in the file's JSON metadata.
Each file is written under a temporary name and renamed, so a reader never sees half a file.
"""

import hashlib
import json
import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from grpo_edu.common import _checks
from grpo_edu.training.rollouts.rollout import Rollout

_WEIGHTS_NAME = re.compile(r"v(\d{6,})\.safetensors")


def draw_version(step, lag):
    """The policy version that draws step ``step``'s batch (steps from 1) with a lag of k = ``lag`` updates:
    max(0, t − 1 − k). At k = 0 it is t − 1, the trainer's own weights: synchronous GRPO."""
    return max(0, step - 1 - lag)


def draw_plan(step, lag, max_staleness):
    """The versions that draw step ``step``'s batch, in order: the last one's batch is trained on, the others are
    dropped for staleness > ``max_staleness`` (TRL's rule, ``staleness > max_staleness`` → "dropping stale sample")
    and drawn again from the newest version allowed, t − 1 − max_staleness. None keeps every batch."""
    first = draw_version(step, lag)
    if max_staleness is None or (step - 1) - first <= max_staleness:
        return [first]
    return [first, draw_version(step, max_staleness)]


def draw_seed(seed, step, attempt):
    """The sampler's random numbers for one draw: from the run's seed, the step and the attempt alone, so that a
    resumed run and a run whose sampler is another process draw exactly the same answers."""
    return seed * 1_000_003 + step * 16 + attempt + 7


class WeightBoard:
    """The trainer's published weights, by version: kept in memory, or as files in ``folder`` (another process
    reads them there). ``publish(v, model)``, ``load(v)`` → state dict, ``forget_before(v)``."""

    def __init__(self, folder=None):
        self.folder = None if folder is None else Path(folder) / "weights"
        self._memory = {}
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, version):
        return self.folder / f"v{version:06d}.safetensors"

    def publish(self, version, model):
        """Publish ``model``'s weights as ``version`` (copies: tied tensors are stored apart, as safetensors needs)."""
        state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
        if self.folder is None:
            self._memory[version] = state
            return
        tmp = self.folder / f".v{version:06d}.tmp"
        save_file(state, str(tmp), metadata={"version": str(version)})
        os.replace(tmp, self.path(version))

    def has(self, version):
        return version in self._memory if self.folder is None else self.path(version).exists()

    def load(self, version):
        """Version ``version``'s state dict. From a file, the version written in the file's metadata must be
        ``version``: a file renamed or copied over another version's is refused, not used under the wrong number."""
        if self.folder is None:
            return self._memory[version]
        path = self.path(version)
        try:
            with safe_open(str(path), framework="pt") as f:
                stored = (f.metadata() or {}).get("version")
            state = load_file(str(path))
        except (SafetensorError, OSError) as err:
            _checks.fail("version", f"{path} cannot be read as version {version}'s weights ({err})",
                         "start the run again, or resume it from its last checkpoint", error=ExchangeError)
        if stored != str(version):
            _checks.fail("version", f"{path} holds the weights of version {stored!r}, not {version} (its metadata says "
                         "so): a file renamed or copied over another version's", "start the run again, or resume it "
                         "from its last checkpoint; never rename the exchange folder's files", error=ExchangeError)
        return state

    def versions(self):
        """The versions published, oldest first (files whose name is not ``v<number>.safetensors`` are skipped)."""
        if self.folder is None:
            return sorted(self._memory)
        return sorted(int(m.group(1)) for p in self.folder.glob("v*.safetensors")
                      if (m := _WEIGHTS_NAME.fullmatch(p.name)))

    def forget_before(self, version):
        """Drop the versions older than ``version`` (no batch will be drawn from them any more)."""
        for v in [v for v in self.versions() if v < version]:
            if self.folder is None:
                del self._memory[v]
            else:
                self.path(v).unlink(missing_ok=True)


class ExchangeError(ValueError):
    """A file of the exchange between the trainer and the sampler is damaged, holds another version, or cannot be
    written (a full disk)."""


def fingerprint(state):
    """A short hash of a state dict's names, dtypes, shapes and values: saved beside a checkpoint's versions, so that
    weights moved to another version's place are found on resume."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


_TENSORS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs")


def save_batch(path, rollout, tags):
    """Write a drawn batch: its tensors, and its text and ``tags`` (JSON: version, step, dropped, …) as metadata."""
    path = Path(path)
    meta = {"prompts": rollout.prompts, "completions": rollout.completions,
            "num_generations": rollout.num_generations, "tags": tags}
    tensors = {name: getattr(rollout, name).detach().cpu().contiguous() for name in _TENSORS}
    tmp = path.with_name("." + path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"batch": json.dumps(meta)})
    os.replace(tmp, path)


def load_batch(path, device="cpu"):
    """The batch :func:`save_batch` wrote: ``(rollout, tags)``."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {})["batch"])
        tensors = load_file(str(path), device=str(device))
        rollout = Rollout(prompts=meta["prompts"], num_generations=meta["num_generations"],
                          completions=meta["completions"], **{name: tensors[name] for name in _TENSORS})
        return rollout, meta["tags"]
    except (SafetensorError, OSError, ValueError, KeyError, TypeError) as err:
        _checks.fail("batch", f"{path} is not a batch the sampler wrote ({type(err).__name__}: {err})",
                     "start the run again, or resume it from its last checkpoint", error=ExchangeError)
