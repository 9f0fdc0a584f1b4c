"""grpo-edu doctor: each check broken on purpose names its fix; the shipped models match their checksums."""

import shutil

import pytest

from grpo_edu.course import doctor
from grpo_edu.training.models import ASSETS


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
    slow = doctor.check_speed(measure=lambda **kw: 4 * doctor.REFERENCE_STEP_MS)
    assert slow.ok and "Over 3 minutes here" in slow.detail and "09_diagnostics_clinic" in slow.detail


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
