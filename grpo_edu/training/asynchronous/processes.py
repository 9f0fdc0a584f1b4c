"""Asynchronous GRPO with the sampler in a second process: one core samples while the other trains.

    trainer process                                   sampler process (``sampler_main``)
    ───────────────                                   ──────────────────────────────────
    publish weights v0 ───── weights/v000000 ────────▶ load v = t − 1 − k, draw batch t, tag it with v
    wait for batch t ◀────── batches/step-t ───────── (then batch t + 1, as soon as its version exists)
    train step t, publish weights v = t ────────────▶

Nothing is pickled: weights and batches are safetensors files in an exchange folder (``versions.py``). The
sampler draws batch t with exactly the version the one-process trainer (``lagged.py``) would use, and the same
random numbers, so the two runs are equal at the same lag; what changes is that with k ≥ 1 the sampler draws
batch t + 1 while the trainer trains on batch t. At k = 0 the two take turns (no overlap, the cost of two
processes only).

``free_running=True`` lets the sampler run as fast as it can instead of at a fixed lag, as TRL's and verl's
asynchronous trainers do: it draws batch t with the newest version published, waiting only while that version is
staler than ``max_staleness`` (t − 1 − v > max_staleness, TRL's bound; the setting is required). The lag then comes
from the two sides' speeds, so each batch's tag says which version drew it; such a run is not reproducible.

Either side waits with a timeout (``wait_s``) and checks that the other is alive: a sampler that dies ends the
run with :class:`SamplerDied` (with the sampler's own error), after a checkpoint of the steps done (``output_dir``),
and ``train(resume_from=…)`` continues it exactly; so does an exchange folder that cannot be written (a full
TMPDIR: :class:`~grpo_edu.training.asynchronous.versions.ExchangeError`). A trainer that dies makes the sampler exit
(its last periodic checkpoint resumes). The exchange folder (``grpo-async-*`` in TMPDIR, the lag's versions of the
model) is removed at the end, on SIGTERM, and, if the trainer was killed outright, by the next run's start.

``spawn`` starts the sampler by importing the user's script again: a script without an
``if __name__ == "__main__":`` guard would build a second trainer there, which is refused with that fix.
"""

import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError

from grpo_edu.common import _checks
from grpo_edu.training.asynchronous.lagged import AsyncGRPOTrainer
from grpo_edu.training.asynchronous.versions import ExchangeError, WeightBoard, load_batch, save_batch
from grpo_edu.training.trainers.config import GRPOConfig

POLL_S = 0.005
"""How often a waiting side looks for the file it waits for (5 ms: small next to a step)."""


class SamplerDied(RuntimeError):
    """The sampler process ended, or drew nothing for ``wait_s`` seconds, before the run was done."""


EXCHANGE_PREFIX = "grpo-async-"
OWNER_FILE = "owner.json"      # {"pid": the trainer process}: a folder whose owner is gone is removed
ERROR_FILE = "sampler-error.txt"
EXIT_REASONS = {3: "the trainer process it serves was gone", 4: "it waited wait_s for weights that never came",
                5: "it could not write its batch into the exchange folder (is TMPDIR full?)"}


def _batch_path(folder, step):
    return Path(folder) / "batches" / f"step-{step:06d}.safetensors"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale_exchanges(root=None):
    """Remove the exchange folders in ``root`` (TMPDIR) left by a two-process trainer that was killed (SIGKILL leaves
    no chance to clean up): those whose ``owner.json`` names a process that no longer runs. Returns their paths."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(EXCHANGE_PREFIX + "*"):
        try:
            pid = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))["pid"]
        except (OSError, ValueError, KeyError, TypeError):
            continue                                   # not ours, or its owner is writing it now
        if isinstance(pid, int) and pid != os.getpid() and not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _refuse_in_spawned_import():
    """Refuse a trainer built while ``spawn`` imports the user's script again to start the sampler process."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        message = ("TwoProcessGRPOTrainer: the script that builds this trainer was imported again to start the "
                   "sampler process (multiprocessing's spawn re-runs the main script), so it would build a second "
                   "trainer there. Fix: put the code that builds and trains the trainer under "
                   "`if __name__ == \"__main__\":` in your script")
        folder = os.environ.get("GRPO_EDU_EXCHANGE")
        if folder and Path(folder).is_dir():
            (Path(folder) / ERROR_FILE).write_text(message, encoding="utf-8")
        raise RuntimeError(message)


def sampler_main(config_json, folder, first_step, last_step, trainer_pid, wait_s, free_running=False):
    """The sampler process: draw the batches of steps ``first_step`` … ``last_step`` into ``folder``, each with
    the published version the lag asks for (``free_running``: the newest one within ``max_staleness``). Exits when
    the trainer process ``trainer_pid`` is gone."""
    try:
        _sampler_loop(config_json, folder, first_step, last_step, trainer_pid, wait_s, free_running)
    except Exception as err:                                      # the trainer reports it in SamplerDied
        try:
            (Path(folder) / ERROR_FILE).write_text(f"{type(err).__name__}: {err}", encoding="utf-8")
        except OSError:
            pass                                                  # a full disk: stderr still has it
        raise


def _sampler_loop(config_json, folder, first_step, last_step, trainer_pid, wait_s, free_running):
    torch.set_num_threads(1)                                      # one core each
    config = GRPOConfig.from_dict({**json.loads(config_json), "output_dir": None, "checkpoint_every": 0,
                                   "eval_size": 0})
    with warnings.catch_warnings():                               # the trainer process gave them already
        warnings.simplefilter("ignore")
        sampler = AsyncGRPOTrainer(config)
    board = WeightBoard(folder)
    (Path(folder) / "batches").mkdir(exist_ok=True)

    def trainer_alive():
        if os.getppid() != trainer_pid:
            print(f"sampler: the trainer process {trainer_pid} ended; the sampler stops too", file=sys.stderr)
            sys.exit(3)

    def wait(found, what):
        deadline = time.monotonic() + wait_s
        while (result := found()) is None:
            trainer_alive()
            if time.monotonic() > deadline:
                print(f"sampler: no weights of {what} within wait_s = {wait_s} s; stopping", file=sys.stderr)
                sys.exit(4)
            time.sleep(POLL_S)
        return result

    def published(version):
        return wait(lambda: board.load(version) if board.has(version) else None, f"version {version}")

    def newest(oldest):                     # free-running: the newest version, once it is at least ``oldest``
        def found():
            versions = board.versions()
            return versions[-1] if versions and versions[-1] >= oldest else None
        return wait(found, f"version {oldest} or newer")

    for step in range(first_step, last_step + 1):
        trainer_alive()
        prompts = [row["prompt"] for row in sampler.batch_for(step)]
        started = time.time()
        plan = None
        if free_running:                    # staleness t − 1 − v may not pass max_staleness: v ≥ t − 1 − S
            plan = [newest(max(0, step - 1 - config.max_staleness))]
        rollout, tags = sampler.draw(step, prompts, weights=published, plan=plan)
        try:
            save_batch(_batch_path(folder, step), rollout,
                       {**tags, "draw_started": started, "draw_ended": time.time()})
        except (OSError, SafetensorError) as err:
            print(f"sampler: cannot write step {step}'s batch into {folder}: {err}", file=sys.stderr)
            sys.exit(5)


class TwoProcessGRPOTrainer(AsyncGRPOTrainer):
    """:class:`AsyncGRPOTrainer` with its sampler in a second process (see the module doc).

    ``wait_s``: how long the trainer waits for a batch (and the sampler for weights) before it gives up; the
    sampler's first batch includes its start (importing torch, loading the model). The model comes from
    ``config.model``: the sampler process loads it there, so a ``model=`` object cannot be passed.
    """

    def __init__(self, config=None, *, wait_s=300.0, free_running=False, **kwargs):
        _refuse_in_spawned_import()
        if not isinstance(free_running, bool):
            _checks.fail("free_running", f"must be True or False, got {free_running!r}",
                         "pass free_running=True (the sampler runs ahead) or False (a fixed lag)")
        self.free_running = free_running                          # read by AsyncGRPOTrainer's checks
        if kwargs.get("model") is not None or kwargs.get("train_rows") is not None:
            _checks.fail("model" if kwargs.get("model") is not None else "train_rows", "cannot reach the sampler "
                         "process, which builds its own copy from the config", "name the model and prompts in the "
                         "config (model=…, task=… or dataset=…), or use AsyncGRPOTrainer in one process")
        _checks.positive_float("wait_s", wait_s, fix="pass a timeout in seconds, e.g. 300 (TRL's heartbeat)")
        super().__init__(config, **kwargs)
        if free_running and self.config.max_staleness is None:
            _checks.fail("max_staleness", "is None, and a free-running sampler needs a bound on how far ahead it may "
                         "draw", "set max_staleness (TRL's default is 4), or free_running=False for a fixed lag")
        self.wait_s = wait_s
        self.process = None
        self.exchange = None
        self.timeline = []          # (step, drawn by version, draw start, draw end, train start, train end)

    def _start_sampler(self):
        clean_stale_exchanges()                                   # left by a trainer killed outright
        self.exchange = Path(tempfile.mkdtemp(prefix=EXCHANGE_PREFIX))
        try:
            (self.exchange / OWNER_FILE).write_text(json.dumps({"pid": os.getpid()}), encoding="utf-8")
            board = WeightBoard(self.exchange)
            for v in self.board.versions():                      # what the sampler may need, as files
                self._write_version(board, v)
        except (OSError, SafetensorError) as err:
            shutil.rmtree(self.exchange, ignore_errors=True)
            self.exchange = None
            raise self._exchange_full(err) from None
        self.board = board
        context = multiprocessing.get_context("spawn")
        process = context.Process(
            target=sampler_main, daemon=True,
            args=(json.dumps(self.config.to_dict()), str(self.exchange), self.step_count + 1,
                  self.schedule.total_steps, os.getpid(), self.wait_s, self.free_running))
        previous = os.environ.get("GRPO_EDU_EXCHANGE")
        os.environ["GRPO_EDU_EXCHANGE"] = str(self.exchange)     # where a refused re-import says why
        try:
            process.start()
        finally:
            if previous is None:
                os.environ.pop("GRPO_EDU_EXCHANGE", None)
            else:
                os.environ["GRPO_EDU_EXCHANGE"] = previous
        self.process = process

    def _exchange_full(self, err):
        return ExchangeError(f"exchange: the folder {self.exchange or tempfile.gettempdir()} could not take the "
                             f"published weights ({err}). Fix: free space in TMPDIR, or point TMPDIR at a disk with "
                             "room for lag + 2 copies of the model, then resume")

    def _publish(self, version):
        if self.exchange is None:
            return super()._publish(version)
        try:
            super()._publish(version)
        except (OSError, SafetensorError) as err:
            error = self._exchange_full(err)
            self._stop_sampler()                                  # the versions written so far, into memory
            self.board.publish(version, self.model)               # and this one, so a checkpoint can keep it
            raise error from None

    def _sampler_error(self):
        """What the sampler process said before it ended (its error, or its exit code's meaning)."""
        path = None if self.exchange is None else self.exchange / ERROR_FILE
        if path is not None and path.exists():
            return path.read_text(encoding="utf-8")
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"killed by signal {-code}"
        return EXIT_REASONS.get(code, "its error is on stderr above")

    def _oldest_needed(self):
        if self.free_running:                # batch t + 1 may be drawn by version t − max_staleness at the oldest
            return max(0, self.step_count - self.config.max_staleness)
        return super()._oldest_needed()

    def _write_version(self, board, version):
        self.sampler_model.load_state_dict(self.board.load(version))
        board.publish(version, self.sampler_model)

    def _stop_sampler(self):
        if self.process is not None:
            if self.process.is_alive():
                self.process.terminate()
            self.process.join(timeout=10)
            self.process = None
        if self.exchange is not None:
            memory = WeightBoard()                                # keep the versions a checkpoint needs
            for v in self.board.versions():
                memory._memory[v] = self.board.load(v)
            self.board = memory
            shutil.rmtree(self.exchange, ignore_errors=True)
            self.exchange = None

    def _sample(self, prompts, model=None, generator=None):
        if model is not None:
            return super()._sample(prompts, model, generator)
        if self.process is None:
            self._start_sampler()
        step = self.step_count + 1
        path = _batch_path(self.exchange, step)
        deadline = time.monotonic() + self.wait_s
        while not path.exists():
            if not self.process.is_alive():
                raise SamplerDied(f"the sampler process ended (exit code {self.process.exitcode}) before it drew "
                                  f"step {step}'s batch ({self._sampler_error()})")
            if time.monotonic() > deadline:
                raise SamplerDied(f"the sampler process drew nothing for step {step} within wait_s = {self.wait_s} s")
            time.sleep(POLL_S)
        rollout, tags = load_batch(path, self.device)
        path.unlink()
        self._draw_tags = tags
        self._train_started = time.time()
        return rollout

    def step(self):
        metrics = super().step()
        tags = self._draw_tags
        self.timeline.append({"step": metrics["step"], "policy_version": tags["policy_version"],
                              "draw_started": tags["draw_started"], "draw_ended": tags["draw_ended"],
                              "train_started": self._train_started, "train_ended": time.time()})
        return metrics

    def _metrics(self, rows, rollout, rewards, update):
        metrics = super()._metrics(rows, rollout, rewards, update)
        for key in ("draw_started", "draw_ended"):
            metrics.pop(key, None)
        return metrics

    def train(self, *, resume_from=None, overwrite=False, progress=True):
        """GRPOTrainer.train with the sampler process started at the first step and stopped at the end. A sampler
        that dies raises :class:`SamplerDied` after saving the steps done (with ``output_dir``)."""
        _refuse_in_spawned_import()
        previous = self._handle_sigterm()
        try:
            return super().train(resume_from=resume_from, overwrite=overwrite, progress=progress)
        except (SamplerDied, ExchangeError) as err:
            self._stop_sampler()
            saved = ""
            if self.config.output_dir and self.step_count:
                path = self.save_checkpoint()
                saved = (f"; the {self.step_count} steps done are saved in {path}: continue with "
                         f"train(resume_from={str(self.config.output_dir)!r})")
            raise type(err)(f"{err}{saved}") from None
        finally:
            self._stop_sampler()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    @staticmethod
    def _handle_sigterm():
        """While training, SIGTERM (``kill PID``) ends the run as Ctrl-C does, so the exchange folder and the
        output_dir's lock are removed on the way out. Returns the handler to put back (None off the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def stop(signum, frame):
            raise SystemExit(128 + signum)

        return signal.signal(signal.SIGTERM, stop)
