"""Every grpo-edu command refuses bad input before any work, by the name the user typed, and loses nothing.

The cases a review of the commands found getting through: an empty value read as "not given", a plot written
over an existing file or through a link, tracebacks instead of one line, a .py file run as a lesson.
"""

import argparse
import os

import pytest

from grpo_edu.cli import main
from grpo_edu.common import command_line
from grpo_edu.training.model.models import ASSETS

STATE = ASSETS / "trl-runs" / "healthy" / "trainer_state.json"      # a real TRL log diagnose reads


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv, name", [
    (["train", "--output-dir", ""], "--output-dir"),          # was: a whole run into the default folder
    (["train", "--dataset", " "], "--dataset"),               # was: the task's own prompts
    (["export", "trl", "--dataset", ""], "--dataset"),
    (["diagnose", ""], "FILE"),
    (["lessons", ""], "FOLDER"),                              # was: 17 notebooks written into the current folder
    (["check-answers", "x", "--csv", ""], "--csv"),
    (["bench", "--json", ""], "--json"),                      # a command with a parser of its own
    (["variants", "--json", "", "--overwrite"], "--json"),
    (["family", "--json", ""], "--json"),
    (["site", "--out", ""], "--out"),
])
def test_an_empty_value_is_refused_by_name_before_any_work(argv, name, capsys, in_tmp):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"argument {name}: is empty. Fix: give it a value" in capsys.readouterr().err
    assert list(in_tmp.iterdir()) == []                        # nothing written, no run folder


def test_parse_args_reads_the_chosen_subcommand_and_leaves_a_default_alone():
    parser = argparse.ArgumentParser(prog="p")
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("one")
    one.add_argument("--name", default="")
    one.add_argument("--out")
    one.add_argument("paths", nargs="*")
    assert command_line.parse_args(parser, ["one", "--name", ""]).name == ""      # its own default: fine
    assert command_line.parse_args(parser, ["one", "a", "b"]).paths == ["a", "b"]
    for argv in (["one", "--out", ""], ["one", "a", " "]):
        with pytest.raises(SystemExit):
            command_line.parse_args(parser, argv)


def test_diagnose_never_writes_its_plot_over_a_file_or_through_a_link(in_tmp, capsys):
    precious = in_tmp / "precious.txt"
    precious.write_text("a student's notes\n")
    (in_tmp / "link.png").symlink_to(precious)
    (in_tmp / "old.png").write_bytes(b"an older plot")
    for argv, problem in ((["--plot", "link.png"], "link.png is a link"),
                          (["--plot", "old.png"], "--plot: old.png already exists"),
                          (["--plot", "out.xyz"], "--plot: matplotlib cannot write a .xyz file")):
        assert main(["diagnose", str(STATE), *argv]) == 2
        captured = capsys.readouterr()
        assert problem in captured.err and captured.out == ""            # refused before any finding is printed
    assert precious.read_text() == "a student's notes\n" and (in_tmp / "old.png").read_bytes() == b"an older plot"
    assert main(["diagnose", str(STATE), "--plot", "old.png", "--overwrite"]) == 0
    assert (in_tmp / "old.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, message", [
    (["--lr", "0"], "error: lr: must be a finite number > 0, got 0.0. Fix:"),
    (["--task", "multiply"], "error: task: unknown task 'multiply'. Fix:"),
    (["--out", "/proc/no-folder-can-be-made-here"], "error: --out: /proc/no-folder-can-be-made-here cannot be written"),
])
def test_make_model_refuses_a_bad_setting_in_one_line(argv, message, capsys, tmp_path):
    out = [] if "--out" in argv else ["--out", str(tmp_path / "new")]      # not the bundled folder: it holds a model
    assert main(["make-model", *argv, *out]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_make_model_never_replaces_a_model_unasked(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "grpo_edu_model.json").write_text("{}")
    for argv in ([], ["--out", str(tmp_path / "mine")]):          # the bundled model (the default --out), a student's
        assert main(["make-model", *argv]) == 2
        err = capsys.readouterr().err
        assert "already holds a model" in err and "or --overwrite to replace it" in err
    assert (tmp_path / "mine" / "grpo_edu_model.json").read_text() == "{}"


def test_lessons_names_a_folder_that_cannot_be_made(capsys):
    assert main(["lessons", "x" * 300]) == 2
    assert "grpo-edu lessons: error: FOLDER: " in capsys.readouterr().err
    assert main(["lessons", "my lessons"]) == 0
    assert "Open them with: jupyter lab 'my lessons'" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [(["--show", "-1"], "--show: is -1"), (["--seed", "-1"], "--seed: is -1")])
def test_eval_refuses_a_negative_count_or_seed(argv, message, capsys):
    assert main(["eval", *argv]) == 2
    assert message in capsys.readouterr().err


def test_check_answers_says_when_a_folder_holds_no_notebook(in_tmp, capsys):
    (in_tmp / "class").mkdir()
    assert main(["check-answers", "class"]) == 2
    assert "notebooks: no .ipynb file in class" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_pipe_is_named_as_one_not_as_a_missing_file(in_tmp, capsys):
    os.mkfifo(in_tmp / "pipe.jsonl")
    assert main(["replay", "pipe.jsonl"]) == 2
    assert "pipe.jsonl is not a regular file" in capsys.readouterr().err
    assert main(["diagnose", "pipe.jsonl"]) == 2
    assert "FILE: pipe.jsonl is not a regular file" in capsys.readouterr().err


def test_errors_name_the_flag_typed_not_the_librarys_argument(capsys):
    assert main(["eval", "--samples", "0"]) == 2
    assert "grpo-edu eval: error: --samples: must be an integer ≥ 1" in capsys.readouterr().err
    assert main(["export", "verl", "--processes", "0"]) == 2
    assert "grpo-edu export: error: --processes: " in capsys.readouterr().err


def test_export_uses_the_model_named_and_says_which_flags_it_cannot_carry(capsys):
    assert main(["export", "verl", "--model", "Qwen/Qwen2.5-0.5B-Instruct"]) == 0
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct" in capsys.readouterr().out
    assert main(["export", "trl", "--device", "cpu"]) == 0
    assert "note: --device changes nothing in trl's settings" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["bench", "--steps", "1", "--warmup", "0", "--rounds", "1", "--no-trl", "--json", "/proc/grpo_edu_probe.json"],
    ["family", "--methods", "rft", "--steps", "1", "--json", "/proc/grpo_edu_probe.json"],
    ["variants", "--steps", "1", "--json", "/proc/grpo_edu_probe.json"],
    ["diagnose", str(STATE), "--plot", "/proc/grpo_edu_probe.png"],
    ["check-answers", str(ASSETS.parent / "lessons" / "01_batch_step_epoch.ipynb"), "--csv", "/proc/grpo_edu.csv"],
    ["train", "--total-training-steps", "1", "--metrics-out", "/proc/grpo_edu_probe.jsonl"],
])
def test_a_result_file_no_one_can_write_is_refused_before_the_work(argv, capsys):
    """/proc takes no new file, yet root passes os.access there (a container, Colab): the check tries the folder,
    so the run is refused at once instead of dying at its end with the results lost."""
    if argv[0] in ("bench", "family", "variants"):                       # their own parsers exit
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
    else:
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "/proc" in err and ("cannot be written" in err or "cannot write into the folder" in err)
    assert "Traceback" not in err and "No such file" not in err       # refused by the check, not by the write


def test_trying_a_folder_leaves_no_file_and_never_touches_the_target(tmp_path):
    from grpo_edu.common import _checks

    target = tmp_path / "results.json"
    target.write_text("an earlier run's rows")
    assert _checks.can_create_file_in(tmp_path) and not _checks.can_create_file_in("/proc")
    assert _checks.output_file_problem(target, overwrite=True) is None      # replaced beside it, then moved onto it
    assert _checks.output_file_problem(tmp_path / "new.json") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no probe left
    assert target.read_text() == "an earlier run's rows"
