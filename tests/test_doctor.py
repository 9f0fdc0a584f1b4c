"""grpo-edu doctor: each check broken on purpose names its fix; the shipped models match their checksums."""

import os
import shutil

import pytest

from grpo_edu.course.classroom import doctor
from grpo_edu.training.model.models import ASSETS


def test_an_old_python_is_refused_with_the_fix():
    check = doctor.check_python((3, 9, 18))
    assert not check.ok and "3.10 or newer" in check.line()
    assert doctor.check_python().ok


def test_a_missing_widget_package_names_the_pip_command(monkeypatch):
    real = doctor.importlib.import_module

    def no_widgets(name, *args):
        if name == "ipywidgets":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(doctor.importlib, "import_module", no_widgets)
    check = doctor.check_widgets()
    assert not check.ok and "fix: pip install ipywidgets" in check.line()


def test_a_missing_kernel_says_how_to_install_one(monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager

    monkeypatch.setattr(KernelSpecManager, "find_kernel_specs", lambda self: {})
    check = doctor.check_kernel()
    assert not check.ok and "ipykernel install --user" in check.fix and "no python3 kernel" in check.detail


def test_the_shipped_models_match_their_recorded_checksums_and_a_damaged_one_is_named(tmp_path):
    assert doctor.check_models().ok
    for folder in doctor.MODEL_FOLDERS:
        shutil.copytree(ASSETS / folder, tmp_path / folder)
    shutil.copy(ASSETS / doctor.CHECKSUMS, tmp_path / doctor.CHECKSUMS)
    assert doctor.check_models(tmp_path).ok
    weights = tmp_path / "tiny-sums" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF                                   # one flipped byte in the middle of the weights
    weights.write_bytes(bytes(data))
    check = doctor.check_models(tmp_path)
    assert not check.ok and "tiny-sums/model.safetensors differ" in check.detail and "reinstall" in check.fix
    (tmp_path / doctor.CHECKSUMS).unlink()
    assert "missing or unreadable" in doctor.check_models(tmp_path).detail


def test_the_speed_check_scales_the_measured_lesson_times_and_never_fails():
    same = doctor.check_speed(measure=lambda **kw: doctor.REFERENCE_STEP_MS)
    nine = round(doctor.REFERENCE_TIMES_S["09_diagnostics_clinic"])
    assert same.ok and f"09 {nine} s" in same.detail and "Over 3 minutes" not in same.detail
    factor = 200 / max(doctor.REFERENCE_TIMES_S.values())          # a machine slow enough for the longest to pass 3 min
    slow = doctor.check_speed(measure=lambda **kw: factor * doctor.REFERENCE_STEP_MS)
    over = {lesson for lesson, seconds in doctor.REFERENCE_TIMES_S.items() if factor * seconds > 180}
    under = set(doctor.REFERENCE_TIMES_S) - over
    assert over and under and slow.ok and "Over 3 minutes here" in slow.detail
    assert all(lesson in slow.detail for lesson in over) and not any(lesson in slow.detail for lesson in under)


def test_the_command_exits_1_when_a_check_would_stop_a_lesson(monkeypatch, capsys):
    from grpo_edu.cli import main

    monkeypatch.setattr(doctor, "check_kernel", lambda: doctor.Check("notebook kernel", True, "stub"))
    assert main(["doctor", "--no-speed"]) == 0
    monkeypatch.setattr(doctor, "check_widgets", lambda: doctor.Check("widgets", False, "gone", "pip install ipywidgets"))
    assert main(["doctor", "--no-speed"]) == 1
    out = capsys.readouterr().out
    assert "✗ widgets: gone\n    fix: pip install ipywidgets" in out and "something above would stop a lesson" in out


def test_the_reference_lesson_times_cover_every_lesson():
    lessons = sorted(p.stem for p in (ASSETS.parent / "lessons").glob("*.ipynb"))
    assert sorted(doctor.REFERENCE_TIMES_S) == lessons


def test_the_kernel_check_starts_a_real_kernel():
    check = doctor.check_kernel()
    assert check.ok, check.line()


@pytest.fixture
def assets_copy(tmp_path):
    """The bundled models and their CHECKSUMS.json, copied: a folder each test may break."""
    assets = tmp_path / "assets"
    for folder in doctor.MODEL_FOLDERS:
        shutil.copytree(ASSETS / folder, assets / folder)
    shutil.copy(ASSETS / doctor.CHECKSUMS, assets / doctor.CHECKSUMS)
    return assets


@pytest.mark.parametrize("text, says", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"tiny-sums/config.json": 5}', "must map each file to its SHA-256"),
    ("{}", "records no checksums"),
])
def test_a_malformed_or_empty_checksum_file_is_a_clear_failure_not_a_traceback(assets_copy, text, says):
    (assets_copy / doctor.CHECKSUMS).write_text(text, encoding="utf-8")
    check = doctor.check_models(assets_copy)
    assert not check.ok and says in check.detail and "CHECKSUMS.json" in check.detail
    assert "record_checksums" in check.fix


def test_a_checksum_file_that_leaves_out_a_model_file_fails_naming_it(assets_copy):
    import json

    recorded = json.loads((assets_copy / doctor.CHECKSUMS).read_text(encoding="utf-8"))
    del recorded["tiny-sums/model.safetensors"]
    (assets_copy / doctor.CHECKSUMS).write_text(json.dumps(recorded), encoding="utf-8")
    check = doctor.check_models(assets_copy)
    assert not check.ok and "records no checksum for tiny-sums/model.safetensors" in check.detail


@pytest.mark.parametrize("entry", ["/dev/zero", "../../../../../../../../dev/zero", "tiny-sums", "link",
                                   "../elsewhere.bin", "fifo"])
def test_a_checksum_entry_that_is_not_a_file_inside_assets_is_refused_without_reading_it(assets_copy, entry):
    import json
    import os

    if entry == "link":
        os.symlink("/dev/zero", assets_copy / "link")             # inside assets, pointing out of it
    if entry == "fifo":
        os.mkfifo(assets_copy / "fifo")                           # inside assets: opening it waits for a writer
    (assets_copy.parent / "elsewhere.bin").write_bytes(b"a regular file, but not the course's")
    recorded = json.loads((assets_copy / doctor.CHECKSUMS).read_text(encoding="utf-8"))
    recorded[entry] = "0" * 64
    (assets_copy / doctor.CHECKSUMS).write_text(json.dumps(recorded), encoding="utf-8")
    check = doctor.check_models(assets_copy)                      # before the fix: /dev/zero was hashed forever
    assert not check.ok and entry in check.detail and "not a file inside" in check.detail


def test_a_checksum_file_that_is_a_device_is_not_read(assets_copy):
    import os

    (assets_copy / doctor.CHECKSUMS).unlink()
    os.symlink("/dev/zero", assets_copy / doctor.CHECKSUMS)      # read_text would fill the memory, then fail
    check = doctor.check_models(assets_copy)
    assert not check.ok and "is not a regular file" in check.detail


def test_no_lessons_folder_is_not_ready(tmp_path, monkeypatch, capsys):
    check = doctor.check_lessons(tmp_path / "nowhere")
    assert not check.ok and "no lessons folder" in check.detail and "grpo-edu lessons" in check.fix
    (tmp_path / "empty").mkdir()
    assert not doctor.check_lessons(tmp_path / "empty").ok
    shipped = len(list((ASSETS.parent / "lessons").glob("[0-9][0-9]*_*.ipynb")))
    assert doctor.check_lessons().ok and f"{shipped} lessons" in doctor.check_lessons().detail
    monkeypatch.setattr(doctor, "check_kernel", lambda: doctor.Check("notebook kernel", True, "stub"))
    monkeypatch.setattr(doctor, "check_lessons", lambda: doctor.Check("lessons", False, "no lessons folder", "x"))
    from grpo_edu.cli import main

    assert main(["doctor", "--no-speed"]) == 1
    out = capsys.readouterr().out
    assert "✗ lessons: no lessons folder" in out and "ready for the lessons" not in out


def _kernel_on_path(tmp_path, monkeypatch, kernel_json):
    """A python3 kernel spec of ``kernel_json`` (text) first on JUPYTER_PATH, as a student's broken install."""
    folder = tmp_path / "kernels" / "python3"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(kernel_json, encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    return folder


@pytest.mark.parametrize("kernel_json, says", [
    ('{"argv": ["python", "-m", "ipykernel_launcher", "-f", ', "kernel.json is not valid JSON"),      # D02
    ('{"argv": [], "display_name": "Python 3", "language": "python"}', "kernel.json's argv (the command that "
                                                                       "starts the kernel) is empty"),   # D08
    ('{"argv": ["python", 3], "language": "python"}', "kernel.json's argv must be a list of non-empty strings"),
])
def test_a_broken_kernel_spec_is_named_with_its_file_and_fix(tmp_path, monkeypatch, kernel_json, says):
    folder = _kernel_on_path(tmp_path, monkeypatch, kernel_json)
    check = doctor.check_kernel()
    assert not check.ok and f"{folder / 'kernel.json'}" in check.detail and says in check.detail
    assert f"rm -r {folder}" in check.fix and "ipykernel install --user" in check.fix


def _processes_with(marker):

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc to find the kernel's process")
def test_a_kernel_that_never_answers_is_stopped_at_the_timeout_and_named(tmp_path, monkeypatch, capsys):
    """D04: a kernel that starts but never connects gave 60 silent seconds and jupyter_client's words only."""
    import json
    import sys
    import time

    from grpo_edu.cli import main

    marker = f"grpo-edu-D04-{tmp_path.name}"
    folder = _kernel_on_path(tmp_path, monkeypatch, json.dumps(
        {"argv": [sys.executable, "-c", f"import time; time.sleep(1001)  # {marker}"], "language": "python"}))
    start = time.monotonic()
    check = doctor.check_kernel(timeout=3)
    assert time.monotonic() - start < 30
    assert not check.ok and "did not answer within 3 s, so it was stopped" in check.detail
    assert str(folder / "kernel.json") in check.detail and "time.sleep(1001)" in check.detail
    time.sleep(0.5)
    assert _processes_with(marker) == []                                  # no kernel left behind
    monkeypatch.setattr(doctor, "KERNEL_TIMEOUT_S", 3)
    monkeypatch.setattr(doctor, "check_kernel", lambda: doctor.Check("notebook kernel", False, "stub"))
    monkeypatch.setattr(doctor, "check_models", lambda: doctor.Check("bundled models", True, "stub"))
    assert main(["doctor", "--no-speed"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[4] == "… starting a python3 kernel (waits at most 3 s)" and out[3].startswith("✓ lessons")
