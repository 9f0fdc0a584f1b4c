"""A GRPO run's folder: saving a checkpoint, and resuming from one exactly.

``GRPOTrainer`` takes these methods from :class:`CheckpointedRun`, so that ``trainer.py`` reads like the
algorithm box and this file holds the bookkeeping around it: the output folder's lock and claim, what a
checkpoint holds (the policy, or a LoRA run's merged model and adapter; the optimizer; the run's history,
evaluations and random state; the method and its settings; the replay buffer), and the checks that refuse a
checkpoint of another run or another method before anything is loaded. The files themselves are written and
read by ``training.checkpoint``; the folder's lock by ``training.run_folder``.
"""

import contextlib
import dataclasses
import warnings
from pathlib import Path

import torch

from grpo_edu.common import _checks
from grpo_edu.training.runs import checkpoint as ckpt, run_folder
from grpo_edu.training.model import lora
from grpo_edu.training.trainers.config import GRPOConfig


class CheckpointedRun:
    """The checkpoint methods of :class:`~grpo_edu.training.trainers.trainer.GRPOTrainer` (a mixin: it reads the trainer's
    ``config``, ``model``, ``optimizer``, ``history`` and the rest)."""

    # --- checkpoints ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self, overwrite=False):
        """Hold output_dir's lock, and make sure the folder is this run's, while writing into it."""
        folder = self.config.output_dir
        if not folder or self._lock is not None:
            yield
            return
        run_folder.check_output_dir(folder)
        created = not Path(folder).exists()              # a run that fails before saving leaves no empty folder
        token, info = run_folder.acquire_lock(folder)
        if info["took_over"]:
            warnings.warn(f"output_dir: {info['took_over']}", stacklevel=4)
        self._lock = token
        try:
            resuming = self._resumed_dir is not None and Path(folder).resolve() == self._resumed_dir.resolve()
            claimed = run_folder.claim_output_dir(folder, self.run_id, overwrite=overwrite, resuming=resuming)
            if claimed["removed"]:
                warnings.warn(f"output_dir: overwrite removed the earlier run's "
                              f"{', '.join(p.name for p in claimed['removed'])} from {folder}", stacklevel=4)
            yield
        finally:
            self._lock = None
            run_folder.release_lock(folder, token)
            if created:
                run_folder.remove_if_empty(folder)

    def save_checkpoint(self):
        """Write a checkpoint of the run so far into output_dir (taking its lock); returns its path."""
        if not self.config.output_dir:
            _checks.fail("output_dir", "is not set, so there is nowhere to save",
                         "make the trainer with GRPOConfig(output_dir=…)")
        rng = {"sampling": self.generator.get_state(), "torch_cpu": torch.get_rng_state()}
        method_state, method_tensors = self._method_state()
        method = {"name": self.method_name, "settings": self.method_settings(),
                  **({"state": method_state} if method_state else {})}
        with self._writing():
            path, _ = ckpt.save_checkpoint(self.config.output_dir, self.step_count, model=self.model,
                                           tokenizer=self.tokenizer, optimizer=self.optimizer, rng=rng,
                                           config=self.config, run_id=self.run_id,
                                           metrics={"history": self.history, "evals": self.evals},
                                           replay=self._replay_state(), method=method,
                                           extra_tensors=method_tensors)
        self._saved = (self.step_count, len(self.evals))
        return path

    # --- the method, as a checkpoint records it (training/trainers/family.py's trainers add their own) ----------
    @property
    def method_name(self):
        """The method's name in ``family.METHODS``, stored in each checkpoint: "grpo", or "reinforce" when
        ``advantage_estimator="reinforce"`` (no baseline)."""
        return "reinforce" if self.config.advantage_estimator == "reinforce" else "grpo"

    def method_settings(self):
        """The method's own settings beyond GRPOConfig (JSON), which a resume must match; GRPO has none."""
        return {}

    def _method_state(self):
        """(JSON state, {name: tensor}) a method keeps beyond the policy and its optimizer; GRPO keeps none."""
        return {}, {}

    def _restore_method_state(self, state, tensors, folder):
        """Put back what :meth:`_method_state` saved; GRPO has nothing to put back."""

    def _check_method(self, state, folder):
        """Refuse to resume a run that another method trained, or the same method with other settings."""
        stored = ckpt.method_of(state)
        if stored != self.method_name:
            _checks.fail("resume_from", f"{folder} is a run of method {stored!r}, and this run's method is "
                         f"{self.method_name!r}: resuming would continue it as another algorithm",
                         f"resume it with its own method (grpo-edu train --method {stored} --resume …, or "
                         f"make_trainer({stored!r}, …) in Python), or start a new run in another output_dir",
                         error=ckpt.CheckpointError)
        saved = state.get("method", {}).get("settings", {}) if isinstance(state.get("method"), dict) else {}
        mine = self.method_settings()
        clashes = [(k, saved[k], mine[k]) for k in sorted(saved) if k in mine and saved[k] != mine[k]]
        if clashes:
            listed = "; ".join(f"{k}: checkpoint {b!r}, now {a!r}" for k, b, a in clashes)
            _checks.fail("resume_from", f"{folder} was trained by {stored} with other settings ({listed})",
                         "resume with the checkpoint's settings, or start a new run in another output_dir")

    def _load_policy(self, folder):
        """The checkpoint's policy into ``self.model``: its weights, or for a LoRA run its adapter alone."""
        from safetensors.torch import load_file

        if lora.is_lora(self.model):                       # the base is config.model's; the adapter is the run's
            adapter = ckpt.adapter_folder(folder)
            weights = load_file(adapter / ckpt.ADAPTER_FILES[1], device=str(self.device))
            result = lora.load_adapter_weights(self.model, weights)
            if result["unexpected"] or result["missing"]:
                raise ValueError(f"resume_from: {adapter} holds an adapter of another shape or other modules "
                                 f"(missing {result['missing'][:3]}, unexpected {result['unexpected'][:3]}). "
                                 "Fix: resume with the run's own --lora-rank and --lora-target-modules.")
            return
        weights = load_file(folder / "model.safetensors", device=str(self.device))
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        if unexpected or [k for k in missing if "lm_head" not in k]:   # tied lm_head is not stored
            raise ValueError(f"resume_from: {folder} holds weights of another model "
                             f"(missing {missing[:3]}, unexpected {unexpected[:3]}). Fix: resume with the same model.")
        self.model.tie_weights()

    def _replay_state(self):
        if self.replay_buffer is None:
            return None
        return {"buffer": self.replay_buffer.state(), "round_offset": self._round_offset}

    def _restore_replay(self, saved, folder):
        """Put the buffer back as it was at the checkpoint: a file written past it is rolled back."""
        if self.replay_buffer is None:
            return
        if saved is None:
            _checks.fail("resume_from", f"{folder} was saved without a replay buffer",
                         "resume with the checkpoint's replay settings")
        self.replay_buffer.writer = self.run_id                 # the resumed run's own samples may be rolled back
        removed = self.replay_buffer.load_state(saved["buffer"], arg="replay_path")
        self._round_offset = saved["round_offset"]
        if removed and self.config.replay_path:
            warnings.warn(f"replay_path: {self.config.replay_path} held {removed} samples that the checkpoint's "
                          f"buffer does not (added after step {self.step_count}); the file now holds the checkpoint's "
                          "buffer, and the resumed steps add their samples again", stacklevel=3)

    def load_checkpoint(self, path):
        """Restore weights, optimizer, RNG states and logs; refuse an incompatible config.

        Without an output_dir in the config, the run saves into the folder it resumed.
        """
        folder, run_dir, state, optim, rng = ckpt.load_trainer_state(path)
        self._check_method(state, folder)                # before the config: another method's run is named as such
        try:
            saved = GRPOConfig.from_dict(state["config"])
        except (ValueError, TypeError) as err:          # the file's config, not the caller's, is at fault
            _checks.fail("resume_from", f"{folder / 'trainer_state.json'} holds a config this grpo_edu cannot read "
                         f"({err})", "resume it with the grpo_edu version that wrote it, or start a new run",
                         error=ckpt.CheckpointError)
        clashes = self.config.incompatible_with(saved)
        if clashes:
            listed = "; ".join(f"{k}: checkpoint {b!r}, now {a!r}" for k, a, b in clashes)
            lora_run = (f"{folder} is a LoRA run (lora_rank {saved.lora_rank}): pass its LoRA settings. "
                        if saved.lora_rank is not None and self.config.lora_rank != saved.lora_rank else "")
            raise ValueError(f"resume_from: {lora_run}{folder} was made with an incompatible config ({listed}). "
                             f"Fix: resume with the checkpoint's values, or start a new run in another output_dir.")
        old_total = saved.schedule(len(self.train_rows)).total_steps
        if self.config.lr_scheduler_type == "linear" and old_total != self.schedule.total_steps:
            warnings.warn(f"resume_from: the run was planned for {old_total} steps and now has "
                          f"{self.schedule.total_steps}; the linear learning-rate schedule follows the new "
                          "length from here on, so the run will differ from one planned that way from the start",
                          stacklevel=2)
        self._load_policy(folder)
        self.optimizer.load_state_dict(optim)
        self._restore_method_state(state.get("method", {}).get("state"), state["tensors"], folder)
        self.generator.set_state(rng["sampling"].to(self.generator.get_state().device))
        torch.set_rng_state(rng["torch_cpu"])
        self.step_count = state["step"]
        self.run_id = state.get("run_id") or self.run_id
        self._restore_replay(state.get("replay"), folder)
        self.history = state["metrics"]["history"]
        self.evals = state["metrics"]["evals"]
        self._resumed_dir = run_dir
        self._saved = (self.step_count, len(self.evals))
        if not self.config.output_dir:
            self.config = dataclasses.replace(self.config, output_dir=str(run_dir))
            warnings.warn(f"output_dir: not set, so this resumed run saves into {run_dir}, the folder it "
                          "resumed from", stacklevel=3)
        return folder
