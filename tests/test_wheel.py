"""The course as a package: the wheel carries the lessons and the bundled models, installs offline from a
folder of wheels (`pip install --no-index --find-links DIR`), and runs from outside the repository."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    (path,) = out.glob("grpo_edu-*.whl")
    return path


def test_the_wheel_carries_every_lesson_the_models_and_their_checksums(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    lessons = sorted(p.name for p in (ROOT / "lessons").glob("*.ipynb"))
    assert {f"grpo_edu/_bundle/lessons/{name}" for name in lessons} <= names
    recorded = json.loads((ROOT / "assets" / "CHECKSUMS.json").read_text())
    assert {f"grpo_edu/_bundle/assets/{name}" for name in recorded} <= names
    assert "grpo_edu/_bundle/assets/CHECKSUMS.json" in names
    assert not any(n.startswith(("tests/", "lessons/", "assets/")) for n in names)   # only inside the package


def test_installed_offline_from_a_folder_of_wheels_it_runs_outside_the_repository(wheel, tmp_path):
    target = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheel.parent),
                          "--no-deps", "--target", str(target), "grpo-edu"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    script = ("import grpo_edu, json; from grpo_edu.training.model.models import ASSETS; "
              "from grpo_edu.course.classroom.doctor import check_models; from grpo_edu.cli import main; "
              "code = main(['lessons', 'mine']); "
              "print(json.dumps({'package': grpo_edu.__file__, 'assets': str(ASSETS), 'models': check_models().ok, "
              "'code': code}))")
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["package"].startswith(str(target)) and got["assets"].startswith(str(target))
    assert got["models"] is True and got["code"] == 0
    assert sorted(p.name for p in (tmp_path / "mine").glob("*.ipynb")) == sorted(
        p.name for p in (ROOT / "lessons").glob("*.ipynb"))
