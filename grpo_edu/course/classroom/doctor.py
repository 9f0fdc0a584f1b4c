"""``grpo-edu doctor``: will the lessons run on this machine, and how long will each take?

The check a student runs before class and an instructor runs on a JupyterHub image. Each item is
✓ or ✗ with the fix; the command exits 1 when anything would stop a lesson. The items:

* Python's version (the course needs 3.10 or newer);
* PyTorch's version and build (CPU, CUDA with its GPU, or Apple's MPS);
* ipywidgets and JupyterLab's widget support (the lessons' sliders);
* a notebook kernel starts and runs a line (lessons are notebooks): its kernel.json is read first, so a broken
  one is named, and a kernel that never answers is stopped after ``KERNEL_TIMEOUT_S``;
* the lessons are there (an install without its ``lessons/`` has nothing to run);
* the bundled models load, and their weights match the checksums recorded in ``assets/CHECKSUMS.json``;
* 20 training steps of the bench's floor (the bare passes of a step), timed: this machine's bench step, and from
  it each lesson's expected time (docs/lesson-times.md, scaled), against the 3-minute budget. Speed never fails
  the check.
"""

import hashlib
import importlib
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CHECKSUMS = "CHECKSUMS.json"
"""The file under ``assets/`` that records each bundled model file's SHA-256."""

MODEL_FOLDERS = ("tiny-adder", "tiny-sums", "tiny-two-tasks", "tiny-calc", "tiny-words")
CHECKED_FILES = ("model.safetensors", "config.json", "tokenizer.json")

REFERENCE_STEP_MS = 23.2
REFERENCE_TIMES_S = {
    "00_watch_grpo_learn": 9.7, "01_batch_step_epoch": 2.1, "02_group_advantage": 3.7, "03_zero_sigma": 2.3,
    "04_clipped_loss": 2.2, "04b_kl_and_loss_types": 3.6, "05_toy_grpo": 31.7, "06_data_replay": 23.0,
    "07_reward_design": 13.3, "08_full_grpo_run": 25.7, "09_diagnostics_clinic": 22.1, "09b_diagnostics_clinic_2": 23.5,
    "10_graduation": 28.2, "11_long_answers": 35.1, "12_variants": 21.7, "13_family": 6.8,
    "14_cost_of_a_step": 17.9, "15_tools": 3.6, "16_real_text": 5.4, "17_learned_rewards": 6.8,
    "17b_process_rewards": 5.0, "18_sampling_and_training_apart": 5.2,
}
"""Each lesson's time under the README's test command in a clean clone's ``.ci/run`` on the project's 2-core CPU
(``CI=true bash .ci/run``: bench step 24.4 ms before the run and 23.7 ms after, so each time is scaled by 23.2 / 24.05
to REFERENCE_STEP_MS; docs/lesson-times.md holds the same run's table). A machine whose step is s ms takes about
s / REFERENCE_STEP_MS times as long."""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self):
        mark = "✓" if self.ok else "✗"
        return f"{mark} {self.name}: {self.detail}" + ("" if self.ok or not self.fix else f"\n    fix: {self.fix}")


def check_python(version_info=None):
    v = version_info or sys.version_info
    ok = (v[0], v[1]) >= (3, 10)
    return Check("Python", ok, f"{v[0]}.{v[1]}.{v[2]}", "install Python 3.10 or newer and reinstall the course")


def check_torch():
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return Check("PyTorch", False, "not installed", "pip install torch==2.13.0 (the CPU build the README uses)")
    if torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}"
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        build = "Apple MPS"
    else:
        build = f"CPU ({torch.backends.cpu.get_cpu_capability()} kernels)"
    return Check("PyTorch", True, f"{torch.__version__}, {build}")


def check_widgets():
    missing = []
    versions = []
    for name in ("ipywidgets", "jupyterlab_widgets"):
        try:
            versions.append(f"{name} {importlib.import_module(name).__version__}")
        except ImportError:
            missing.append(name)
    if missing:
        return Check("widgets", False, f"{', '.join(missing)} missing: the lessons' sliders will not show",
                     f"pip install {' '.join(missing)}")
    return Check("widgets", True, ", ".join(versions))


KERNEL_TIMEOUT_S = 60
"""How long the kernel check waits for the python3 kernel to start and to run a cell (a cold first start of a
kernel on a slow laptop takes tens of seconds)."""


def kernel_spec_problem(folder):
    """Why the kernel spec in ``folder`` (its ``kernel.json``) cannot start a kernel, in words, or None: the file
    is read here first, so that a broken one is named (jupyter_client's own errors name no file)."""
    path = Path(folder) / "kernel.json"
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        return f"{path} cannot be read ({type(err).__name__}: {getattr(err, 'strerror', None) or err})"
    except ValueError as err:
        return f"{path} is not valid JSON ({err})"
    if not isinstance(spec, dict):
        return f"{path} must hold a JSON object, but holds a {type(spec).__name__}"
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv:
        return f"{path}'s argv (the command that starts the kernel) is {'empty' if argv == [] else 'missing'}"
    if not all(isinstance(a, str) and a for a in argv):
        return f"{path}'s argv must be a list of non-empty strings (the command that starts the kernel), got {argv!r}"
    return None


def check_kernel(timeout=KERNEL_TIMEOUT_S):
    """A python3 kernel is installed, its kernel.json is sound, it starts within ``timeout`` seconds and runs
    ``1 + 1``. A kernel that never answers is stopped at ``timeout`` and named with the command it ran."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import start_new_kernel
    except ImportError:
        return Check("notebook kernel", False, "jupyter_client missing", "pip install jupyter")
    fix = f"{sys.executable} -m pip install ipykernel && {sys.executable} -m ipykernel install --user"
    folder = KernelSpecManager().find_kernel_specs().get("python3")
    if folder is None:
        return Check("notebook kernel", False, "no python3 kernel is installed", fix)
    problem = kernel_spec_problem(folder)
    if problem:                                 # found before --user's, so installing again would not replace it
        return Check("notebook kernel", False, f"the python3 kernel cannot start: {problem}",
                     f"repair that file, or remove its folder (rm -r {shlex.quote(str(folder))}) and run {fix}: "
                     "a kernel in that folder is found before the one ipykernel installs")
    command = " ".join(json.loads((Path(folder) / "kernel.json").read_text(encoding="utf-8"))["argv"])
    start = time.monotonic()
    try:
        manager, client = start_new_kernel(kernel_name="python3", startup_timeout=timeout)
        try:
            reply = client.execute_interactive("1 + 1", timeout=timeout, output_hook=lambda msg: None)
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    except Exception as err:                                   # noqa: BLE001 - any failure means no kernel
        if time.monotonic() - start >= timeout:
            return Check("notebook kernel", False, f"the python3 kernel did not answer within {timeout} s, so it was "
                         f"stopped (its command, from {Path(folder) / 'kernel.json'}: {command})",
                         f"run that command yourself to see where it hangs, or reinstall the kernel: {fix}")
        return Check("notebook kernel", False, f"the python3 kernel did not start ({type(err).__name__}: {err}; its "
                     f"command, from {Path(folder) / 'kernel.json'}: {command})", fix)
    ok = reply["content"]["status"] == "ok"
    return Check("notebook kernel", ok, "python3 starts and runs a cell" if ok else "python3 failed to run a cell", fix)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_checksums(assets=None):
    """Write ``assets/CHECKSUMS.json`` from the bundled models as they are now (after rebuilding one)."""
    from grpo_edu.training.model.models import ASSETS

    assets = assets or ASSETS
    sums = {f"{folder}/{name}": sha256(assets / folder / name) for folder in MODEL_FOLDERS for name in CHECKED_FILES}
    (assets / CHECKSUMS).write_text(json.dumps(sums, indent=1) + "\n", encoding="utf-8")
    return sums


def _read_checksums(path):
    """{file: SHA-256} from ``CHECKSUMS.json``, or the problem with it in words (a str)."""
    if path.exists() and _regular_file_inside(path.parent, path.name) is None:
        return f"{path} is not a regular file inside {path.parent} (so it was not read)"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return f"{path} is missing or unreadable ({type(err).__name__})"
    try:
        recorded = json.loads(text)
    except ValueError as err:
        return f"{path} is not valid JSON ({err})"
    if not isinstance(recorded, dict):
        return f"{path} must be a JSON object {{file: SHA-256}}, but holds a {type(recorded).__name__}"
    wrong = [name for name, digest in recorded.items() if not (isinstance(digest, str) and len(digest) == 64)]
    if wrong:
        return f"{path} must map each file to its SHA-256 (64 hex digits), but {wrong[0]} is {recorded[wrong[0]]!r}"
    if not recorded:
        return f"{path} records no checksums, so nothing would be checked"
    return recorded


def _regular_file_inside(assets, name):
    """``assets / name`` when it is a regular file inside ``assets`` (links resolved), else None: an entry naming a
    device, a folder or a file elsewhere is never opened (hashing /dev/zero would never end)."""
    import os
    import stat

    path = (assets / name).resolve()
    if assets.resolve() not in path.parents:
        return None
    try:
        return path if stat.S_ISREG(os.stat(path).st_mode) else None
    except OSError:
        return None


def check_models(assets=None):
    """Every bundled model file matches its recorded SHA-256, and every model loads."""
    from grpo_edu.training.model.models import ASSETS, load_model_and_tokenizer

    assets = assets or ASSETS
    fix = "reinstall the course (README); if you rebuilt a model on purpose, record it with " \
          "python -c 'from grpo_edu.course.classroom.doctor import record_checksums; record_checksums()'"
    recorded = _read_checksums(assets / CHECKSUMS)
    if isinstance(recorded, str):
        return Check("bundled models", False, recorded, fix)
    unrecorded = [f"{folder}/{name}" for folder in MODEL_FOLDERS for name in CHECKED_FILES
                  if f"{folder}/{name}" not in recorded]
    if unrecorded:
        return Check("bundled models", False, f"{assets / CHECKSUMS} records no checksum for "
                                              f"{', '.join(unrecorded)}", fix)
    outside = [name for name in recorded if _regular_file_inside(assets, name) is None
               and (assets / name).exists()]
    if outside:
        return Check("bundled models", False, f"{assets / CHECKSUMS} names {', '.join(outside)}, which is not a file "
                                              f"inside {assets} (so it was not read)", fix)
    bad = [name for name, digest in recorded.items()
           if _regular_file_inside(assets, name) is None or sha256(assets / name) != digest]
    if bad:
        return Check("bundled models", False, f"{', '.join(bad)} differ from the recorded checksums (damaged or "
                                              "changed)", fix)
    for folder in MODEL_FOLDERS:
        try:
            load_model_and_tokenizer(str(assets / folder))
        except Exception as err:                               # noqa: BLE001 - report, do not crash
            return Check("bundled models", False, f"{folder} does not load ({type(err).__name__}: {err})", fix)
    return Check("bundled models", True, f"{len(MODEL_FOLDERS)} models load; {len(recorded)} files match their checksums")


def check_lessons(folder=None):
    """The course's lesson notebooks are there (an install without them has nothing to run)."""
    from pathlib import Path

    from grpo_edu.course.classroom.copy_lessons import lessons_dir

    folder = Path(folder) if folder is not None else lessons_dir()
    fix = "reinstall the course (README), then copy the lessons into a folder of your own with grpo-edu lessons DIR"
    if not folder.is_dir():
        return Check("lessons", False, f"no lessons folder at {folder}", fix)
    notebooks = sorted(folder.glob("[0-9][0-9]*_*.ipynb"))
    if not notebooks:
        return Check("lessons", False, f"{folder} holds no lesson notebooks", fix)
    return Check("lessons", True, f"{len(notebooks)} lessons in {folder}")


def expected_lesson_times(step_ms):
    """{lesson: expected seconds on a machine whose bench step is ``step_ms``}."""
    return {lesson: seconds * step_ms / REFERENCE_STEP_MS for lesson, seconds in REFERENCE_TIMES_S.items()}


def check_speed(steps=20, measure=None):
    """``steps`` training steps of the bench's floor, timed (one thread, as each test worker has); never fails."""
    from grpo_edu.beyond.bench import step_ms
    from grpo_edu.course.testing.lesson_times import LESSON_BUDGET_S

    ms = (measure or step_ms)(rounds=1, steps=steps, warmup=2)
    times = expected_lesson_times(ms)
    slow = [lesson for lesson, s in times.items() if s > LESSON_BUDGET_S]
    detail = (f"bench step {ms:.1f} ms ({steps} steps of the floor, one thread); expected lesson times: "
              + ", ".join(f"{lesson[:2] if lesson[2] == '_' else lesson[:3]} {s:.0f} s" for lesson, s in times.items()))
    if slow:
        detail += f". Over 3 minutes here: {', '.join(slow)} (plan extra time for them)"
    return Check("speed", True, detail)


def doctor(*, kernel=True, speed=True, say=None):
    """Run every check: ``(checks, info)``; ``info["ok"]`` is False when anything would stop a lesson. With
    ``say`` (e.g. ``print``), each check's line is said as soon as it is known, and a line before the kernel
    check says how long it may wait, so no wait is silent."""
    checks = []

    def run(check, *args):
        checks.append(check(*args))
        if say:
            say(checks[-1].line())

    for check in (check_python, check_torch, check_widgets, check_lessons):
        run(check)
    if kernel:
        if say:
            say(f"… starting a python3 kernel (waits at most {KERNEL_TIMEOUT_S} s)")
        run(check_kernel)
    if checks[1].ok:
        run(check_models)
        if speed:
            run(check_speed)
    return checks, {"ok": all(c.ok for c in checks)}


def main(argv=None):
    import argparse

    from grpo_edu.common import command_line

    parser = argparse.ArgumentParser(prog="grpo-edu doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-speed", action="store_true", help="skip the timed 20-step run")
    args = command_line.parse_args(parser, argv)
    checks, info = doctor(speed=not args.no_speed, say=lambda line: print(line, flush=True))
    print("ready for the lessons" if info["ok"] else "something above would stop a lesson: apply its fix and run "
                                                     "grpo-edu doctor again")
    return 0 if info["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
