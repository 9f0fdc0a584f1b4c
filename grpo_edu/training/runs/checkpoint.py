"""Checkpoints: everything needed to continue a run exactly, in safe formats only.

A run's output folder holds:

* ``checkpoint-000040/`` …: one folder per saved step (below);
* ``latest.json``: names the newest checkpoint and the run that wrote it;
* ``.grpo_edu.lock``: present while a process writes there (see ``grpo_edu.training.runs.run_folder``).

A checkpoint folder holds:

* ``model.safetensors`` + ``config.json`` + tokenizer files: the policy, loadable on its
  own by ``from_pretrained`` (so ``grpo-edu eval`` can score it). A LoRA run saves its
  policy with the adapter merged in (W + (α/r)·B·A) there, and the adapter alone in
  ``adapter/`` (peft's ``adapter_config.json`` + ``adapter_model.safetensors``), which is
  what resuming reads: the merged sum cannot be split back into W, B and A;
* ``trainer_state.safetensors``: the optimizer's moment tensors and the RNG states, and a
  method's own tensors (PPO: the critic's weights and its optimizer's moments);
* ``trainer_state.json``: the step, the run's id and GRPOConfig, the method that trained it
  (``grpo``, ``ppo``, ``dpo``, …) with that method's own settings, the optimizer's
  hyper-parameters, the metrics logged so far, and the replay buffer (its samples and RNG
  state) when the run keeps one.

No pickle anywhere. Writing is atomic: the folder is written under a temporary name and
renamed into place, and ``latest.json`` is replaced in one ``os.replace``. A run killed
mid-write leaves the previous checkpoint and pointer intact.

Nothing here deletes a file this run did not write. Every run has an id; old checkpoints
are rotated only among those carrying this run's id, so ``checkpoint-best`` or an earlier
run's folders are never touched. That one folder holds one run at a time is
``grpo_edu.training.runs.run_folder``'s job. Every file read is checked first: a damaged one is named,
with the newest intact checkpoint to use instead.
"""

import errno
import json
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from grpo_edu.common import _checks

LATEST = "latest.json"
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
"""Names of the folders this module writes; ``checkpoint-best`` and the like never match."""
RNG_STATES = ("sampling", "torch_cpu")
"""The random number generators a checkpoint stores (``rng.<name>`` in trainer_state.safetensors)."""
ADAPTER = "adapter"
"""The sub-folder of a LoRA run's checkpoint that holds the adapter alone (peft's format)."""
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
TEMPORARY = re.compile(r"^\.checkpoint-\d+\.(tmp|old)-\w+$|^latest\.json\.tmp-\w+$")
"""Names of the half-written files a killed run can leave behind."""


class CheckpointError(ValueError):
    """A checkpoint or output folder that cannot be used; the message names the file and the fix."""


class CheckpointWriteError(CheckpointError, OSError):
    """Writing a checkpoint failed (disk full, permissions); the previous checkpoint is intact."""


def checkpoint_name(step):
    return f"checkpoint-{step:06d}"


def new_run_id():
    """A fresh id for a run (from os.urandom: no torch RNG is drawn)."""
    return uuid.uuid4().hex[:12]


def _write_json(path, data):
    path = Path(path)
    # created exclusively under an unpredictable name: a file or link planted beforehand is never followed
    fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=1, ensure_ascii=False))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _read_json(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


# --- what a folder holds ----------------------------------------------------------------
def checkpoint_folders(folder):
    """(step, path) of every grpo_edu checkpoint folder in ``folder``, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        m = CHECKPOINT.match(path.name)
        if m and (path / "trainer_state.json").exists():
            found.append((int(m.group(1)), path))
    return sorted(found)


def run_id_of(checkpoint):
    """The run id stored in a checkpoint folder; None when unreadable or written before run ids."""
    try:
        return _read_json(Path(checkpoint) / "trainer_state.json").get("run_id")
    except (OSError, ValueError, AttributeError):
        return None


def safetensors_problem(path):
    """None if ``path`` is a complete safetensors file, else what is wrong with it (a phrase)."""
    path = Path(path)
    if not path.is_file():
        return "is missing"
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if size < 8 or n > size - 8:
                return f"is truncated ({size} bytes, too short for its own header)"
            header = json.loads(f.read(n))
    except (OSError, ValueError) as err:
        return f"is not a safetensors file ({err.__class__.__name__} reading its header)"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    expected = 8 + n + max(ends, default=0)
    if size < expected:
        return f"is truncated ({size} of {expected} bytes)"
    return None


STATE_FORM = {"step": "a whole number", "config": "an object", "optimizer": "an object with param_groups (a list) "
              "and scalars (an object)", "metrics": "an object with history and evals (lists)"}
"""What ``trainer_state.json`` must hold to resume a run (``run_id`` and ``replay`` are optional)."""


def trainer_state_problem(state):
    """None if a checkpoint's trainer_state.json (parsed) has every entry resuming reads, in the right
    form; else what is wrong (a phrase naming the entry)."""
    if not isinstance(state, dict):
        return f"is not a JSON object but {type(state).__name__}"
    missing = [key for key in STATE_FORM if key not in state]
    if missing:
        return f"lacks the {', '.join(missing)} entr{'y' if len(missing) == 1 else 'ies'} (it has {sorted(state)[:8]})"
    optimizer, metrics = state["optimizer"], state["metrics"]
    well_formed = {
        "step": isinstance(state["step"], int) and not isinstance(state["step"], bool) and state["step"] >= 0,
        "config": isinstance(state["config"], dict),
        "optimizer": isinstance(optimizer, dict) and isinstance(optimizer.get("param_groups"), list)
        and isinstance(optimizer.get("scalars"), dict),
        "metrics": isinstance(metrics, dict) and isinstance(metrics.get("history"), list)
        and isinstance(metrics.get("evals"), list),
    }
    for key, ok in well_formed.items():
        if not ok:
            return f"has its {key} entry in the wrong form (it must be {STATE_FORM[key]}): {str(state[key])[:80]}"
    odd = [key for key in optimizer["scalars"] if not re.match(r"^\d+\.\w+$", str(key))]
    if odd:
        return f"has optimizer scalars whose names are not <parameter index>.<name>: {odd[:3]}"
    method = state.get("method")
    if method is not None and not (isinstance(method, dict) and isinstance(method.get("name"), str)
                                   and isinstance(method.get("settings", {}), dict)):
        return f"has its method entry in the wrong form (an object with a name and settings): {str(method)[:80]}"
    replay = state.get("replay")
    if replay is not None and not (isinstance(replay, dict) and {"buffer", "round_offset"} <= set(replay)):
        return "has a replay entry without its buffer and round_offset"
    return None


def safetensors_names(path):
    """The tensor names in a (checked) safetensors file, read from its header alone."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return set(json.loads(f.read(n))) - {"__metadata__"}


def checkpoint_problem(folder, *, to_resume=True):
    """None if the checkpoint ``folder`` is complete, else (file, what is wrong).

    ``to_resume=False`` checks only what loading the model needs (config and weights). Resuming a LoRA run
    reads its adapter (``adapter/``) and no merged model, so an older LoRA checkpoint that holds the adapter
    alone can be resumed, though not loaded on its own.
    """
    folder = Path(folder)
    lora_run = False
    if to_resume:
        try:
            state = _read_json(folder / "trainer_state.json")
        except FileNotFoundError:
            return folder / "trainer_state.json", "is missing"
        except (OSError, ValueError) as err:
            return folder / "trainer_state.json", f"is not valid JSON ({err})"
        problem = trainer_state_problem(state)
        if problem:
            return folder / "trainer_state.json", problem
        lora_run = state["config"].get("lora_rank") is not None
    adapter = adapter_folder(folder) if lora_run else None
    if not (lora_run and adapter is not None and not (folder / "config.json").exists()):   # an older LoRA checkpoint
        try:
            _read_json(folder / "config.json")
        except FileNotFoundError:
            if adapter_folder(folder) is not None:
                return folder / "config.json", ("is missing: this checkpoint of a LoRA run holds only its adapter "
                                                "(adapter_model.safetensors), not a model to load on its own")
            return folder / "config.json", "is missing"
        except (OSError, ValueError) as err:
            return folder / "config.json", f"is not valid JSON ({err})"
        problem = safetensors_problem(folder / "model.safetensors")
        if problem:
            return folder / "model.safetensors", problem
    if to_resume:
        problem = safetensors_problem(folder / "trainer_state.safetensors")
        if problem:
            return folder / "trainer_state.safetensors", problem
        stored = safetensors_names(folder / "trainer_state.safetensors")
        missing = [f"rng.{k}" for k in RNG_STATES if f"rng.{k}" not in stored]
        if missing:
            return (folder / "trainer_state.safetensors", f"lacks {', '.join(missing)} (the random number generators' "
                    "states, without which the run cannot continue exactly)")
        if lora_run:                                   # resuming a LoRA run reads its adapter, not the merged model
            if adapter is None:
                return folder / ADAPTER / ADAPTER_FILES[0], "is missing (the LoRA adapter, which resuming reads)"
            problem = safetensors_problem(adapter / ADAPTER_FILES[1])
            if problem:
                return adapter / ADAPTER_FILES[1], problem
    return None


def adapter_folder(folder):
    """Where a LoRA checkpoint keeps its adapter (``adapter/``, or the folder itself in older runs); None if none."""
    folder = Path(folder)
    for where in (folder / ADAPTER, folder):
        if all((where / name).is_file() for name in ADAPTER_FILES):
            return where
    return None


def intact_checkpoints(folder, *, to_resume=True):
    """(step, path) of the complete checkpoints in ``folder``, newest first."""
    return [(s, p) for s, p in reversed(checkpoint_folders(folder))
            if checkpoint_problem(p, to_resume=to_resume) is None]


def intact_hint(folder, arg):
    """The "Fix:" part of a corrupt-checkpoint error: the newest intact checkpoint, if any."""
    intact = intact_checkpoints(folder, to_resume=arg == "resume_from")
    if not intact:
        lora = [p for _, p in checkpoint_folders(folder) if adapter_folder(p) is not None]
        if lora:                                       # never advise --overwrite: it would delete the run
            return (f"{folder} is a LoRA run whose checkpoints hold its adapter ({lora[-1].name}/"
                    f"{adapter_folder(lora[-1]).relative_to(lora[-1]) / ADAPTER_FILES[1]}); resume it with "
                    f"--resume {folder} and the run's flags (--lora-rank …), which writes checkpoints that "
                    "grpo-edu eval can score; --overwrite would delete it")
        return f"no intact checkpoint is left in {folder}: start a new run (another output_dir, or --overwrite)"
    flag = "--resume" if arg == "resume_from" else "--model"
    return (f"use the newest intact checkpoint, {intact[0][1]} "
            f"({flag} {intact[0][1]}, or {arg}={str(intact[0][1])!r} in Python)")


def find_checkpoint(path, *, arg="resume_from"):
    """(checkpoint folder, run folder) for a checkpoint folder or a run's output folder.

    A run folder resolves through ``latest.json``. Every file of the chosen checkpoint is
    checked (only the model's when ``arg`` is "model", to score it); a damaged one raises
    :class:`CheckpointError` naming the file and offering the newest intact checkpoint.
    """
    path = Path(path)
    if not path.is_dir():
        _checks.fail(arg, f"no folder at {path}", "pass a run's output_dir or one of its checkpoint-* folders",
                     error=CheckpointError)
    if (path / "trainer_state.json").exists():
        folder = path
        run_dir = path.parent if CHECKPOINT.match(path.name) else path
    elif (path / LATEST).exists():
        run_dir = path
        try:
            name = _read_json(path / LATEST)["checkpoint"]
            folder = path / name
        except (OSError, ValueError, KeyError, TypeError) as err:
            _checks.fail(arg, f"{path / LATEST} is damaged ({err.__class__.__name__}: {err})",
                         intact_hint(path, arg), error=CheckpointError)
        if not (isinstance(name, str) and CHECKPOINT.match(name)):   # never a path out of the run folder
            _checks.fail(arg, f"{path / LATEST} names {str(name)[:200]!r}, not one of this folder's checkpoint-NNNNNN "
                         "folders", intact_hint(path, arg), error=CheckpointError)
        if not (folder / "trainer_state.json").exists():
            _checks.fail(arg, f"{path / LATEST} names {name}, which is missing or incomplete",
                         intact_hint(path, arg), error=CheckpointError)
    elif checkpoint_folders(path):
        _checks.fail(arg, f"{path} has checkpoint folders but no {LATEST}", intact_hint(path, arg),
                     error=CheckpointError)
    else:
        _checks.fail(arg, f"{path} holds no checkpoint (no trainer_state.json or {LATEST})",
                     "pass a run's output_dir or one of its checkpoint-* folders", error=CheckpointError)
    problem = checkpoint_problem(folder, to_resume=arg == "resume_from")
    if problem:
        _checks.fail(arg, f"{problem[0]} {problem[1]}", intact_hint(run_dir, arg), error=CheckpointError)
    return folder, run_dir


# --- writing ------------------------------------------------------------------------------
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


def save_policy(model, folder):
    """``model`` as a folder ``from_pretrained`` loads. A LoRA model (peft) is saved twice: merged into its base
    weights there (a copy is merged: the model training goes on unmerged), and its adapter alone in
    ``folder/adapter``, for a resume to put back exactly. The merged copy costs one more model in memory
    while it is written."""
    import copy
    import warnings

    from grpo_edu.training.model import lora

    folder = Path(folder)
    if not lora.is_lora(model):
        model.save_pretrained(folder, safe_serialization=True)
        return
    model.save_pretrained(folder / ADAPTER, safe_serialization=True)
    with warnings.catch_warnings():                      # peft's notes on merging: not the learner's to act on
        warnings.simplefilter("ignore")
        merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(folder, safe_serialization=True)


def save_checkpoint(output_dir, step, *, model, tokenizer, optimizer, rng, config, metrics, run_id, keep=2,
                    replay=None, method=None, extra_tensors=None):
    """Write ``output_dir/checkpoint-{step:06d}`` atomically, point latest.json at it, rotate.

    ``replay``: the replay buffer's saved state (JSON data), stored in trainer_state.json.
    ``method``: ``{"name", "settings"[, "state"]}``, the method that trained the run and its own settings
    (and JSON state), stored in trainer_state.json; ``extra_tensors``: the method's tensors ({name: tensor},
    names not starting with ``optim.`` or ``rng.``), stored in trainer_state.safetensors.

    Rotation keeps the newest ``keep`` checkpoints *of this run* (same ``run_id``) up to
    ``step``; nothing else in the folder is touched. A failed write (disk full) removes its
    temporary folder and raises :class:`CheckpointWriteError` naming the intact checkpoint.
    Returns ``(path, info)``; ``info["removed"]`` lists the rotated-out folders.
    """
    output_dir = Path(output_dir)
    name = checkpoint_name(step)
    final = output_dir / name
    old = output_dir / f".{name}.old-{uuid.uuid4().hex[:12]}"
    tmp = None
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=output_dir))   # new and ours: nothing planted
        save_policy(model, tmp)
        tokenizer.save_pretrained(tmp)
        tensors, optim_meta = _flatten_optimizer(optimizer.state_dict())
        tensors.update({f"rng.{k}": v.cpu() for k, v in rng.items()})
        tensors.update({k: v.detach().cpu().contiguous() for k, v in (extra_tensors or {}).items()})
        save_file(tensors, tmp / "trainer_state.safetensors")
        _write_json(tmp / "trainer_state.json", {"step": step, "run_id": run_id, "config": config.to_dict(),
                                                 **({"method": method} if method is not None else {}),
                                                 "optimizer": optim_meta, "metrics": metrics,
                                                 **({"replay": replay} if replay is not None else {})})
        if final.exists():   # re-saving a step: the old copy goes only once the new one is complete
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        _write_json(output_dir / LATEST, {"checkpoint": name, "step": step, "run_id": run_id})
    except OSError as err:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        intact = intact_checkpoints(output_dir)
        kept = f"checkpoint {intact[0][0]} ({intact[0][1]}) is intact" if intact else "no earlier checkpoint exists"
        what = "disk full" if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)) else "could not write"
        _checks.fail("output_dir", f"{what} while writing checkpoint {step} into {output_dir} "
                     f"({err.__class__.__name__}: {err}); {kept}",
                     f"free space (or fix the permissions) there, then resume with --resume {output_dir} "
                     f"(train(resume_from={str(output_dir)!r}) in Python)", error=CheckpointWriteError)
    except BaseException:            # interrupted (Ctrl-C, Jupyter's Stop): leave no half-written folder
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, {"removed": rotate(output_dir, run_id, step, keep)}


def rotate(output_dir, run_id, step, keep):
    """Delete this run's checkpoints before ``step`` beyond the newest ``keep`` (``step``'s included)."""
    if not keep:
        return []
    ours = [(s, p) for s, p in checkpoint_folders(output_dir) if s < step and run_id_of(p) == run_id]
    doomed = ours[:max(len(ours) - (keep - 1), 0)]
    for _, path in doomed:
        remove_path(path, ignore_errors=True)
    return [p for _, p in doomed]


def remove_path(path, ignore_errors=False):
    """Delete a file, a folder, or a symbolic link: only the link, never what it points to (which may lie
    outside the run folder)."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=ignore_errors)


# --- reading ------------------------------------------------------------------------------
def flatten_optimizer(optimizer, prefix):
    """A second optimizer's state (PPO's critic) as ``(tensors named prefix.<index>.<name>, JSON rest)``."""
    tensors, meta = _flatten_optimizer(optimizer.state_dict())
    return {prefix + k[len("optim"):]: v for k, v in tensors.items()}, meta


def unflatten_optimizer(tensors, meta, prefix):
    """The state_dict that :func:`flatten_optimizer` stored under ``prefix``."""
    return _unflatten_optimizer({"optim" + k[len(prefix):]: v for k, v in tensors.items()
                                 if k.startswith(prefix + ".")}, meta)


def method_of(state):
    """The method that trained a checkpoint (``grpo``, ``ppo``, …), from its trainer_state.json (parsed).

    A checkpoint written before the method was stored is read from its metrics: PPO logs ``value_loss``,
    rejection sampling ``kept_fraction``, DPO ``pair_fraction``; GRPO none of them."""
    if isinstance(state.get("method"), dict):
        return state["method"]["name"]
    logged = {key for row in state["metrics"]["history"] if isinstance(row, dict) for key in row}
    for key, method in (("value_loss", "ppo"), ("kept_fraction", "rft"), ("pair_fraction", "dpo")):
        if key in logged:
            return method
    return "reinforce" if state["config"].get("advantage_estimator") == "reinforce" else "grpo"


def load_trainer_state(path):
    """(folder, run folder, state dict from JSON, optimizer state_dict, rng tensors) of a checkpoint;
    a method's own tensors (PPO's critic) are in ``state["tensors"]``."""
    folder, run_dir = find_checkpoint(path)
    state = _read_json(folder / "trainer_state.json")
    try:
        tensors = load_file(folder / "trainer_state.safetensors")
        optim = _unflatten_optimizer(tensors, state["optimizer"])
    except Exception as err:   # safetensors raises its own error types
        _checks.fail("resume_from", f"{folder / 'trainer_state.safetensors'} cannot be read "
                     f"({err.__class__.__name__}: {err})", intact_hint(run_dir, "resume_from"), error=CheckpointError)
    rng = {k[len("rng."):]: v for k, v in tensors.items() if k.startswith("rng.")}
    state["tensors"] = {k: v for k, v in tensors.items() if not k.startswith(("rng.", "optim."))}
    return folder, run_dir, state, optim, rng
