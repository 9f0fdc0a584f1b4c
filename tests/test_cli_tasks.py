"""A task that needs its own model or tool gets them from the command line: `grpo-edu train --task calc` trains
assets/tiny-calc with the calculator in the loop, `--task sums` starts from the sums preset, `eval` scores with
the tool, and a model that cannot write a task's characters is refused before any model loads (faults-4 T48, T50)."""

import json

import pytest

from grpo_edu import cli
from grpo_edu.cli import main


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def no_loading(monkeypatch):
    from grpo_edu.training.trainers import family
    from grpo_edu.training.model import models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the flags were checked")
    monkeypatch.setattr(family, "make_trainer", refuse)
    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)


def _config(argv):
    parser = cli.build_parser()
    cli._apply_preset(parser, argv)
    return cli._config_from(parser.parse_args(argv))


def test_a_task_with_its_own_model_starts_from_its_preset_and_flags_still_win():
    calc = _config(["train", "--task", "calc"])
    assert (calc.model, calc.max_completion_length, calc.beta) == ("bundled-calc", 24, 0.0)
    sums = _config(["train", "--task", "sums", "--total-training-steps", "5"])
    assert (sums.model, sums.max_completion_length, sums.total_training_steps) == ("bundled-sums", 42, 5)
    assert _config(["train"]).model == "bundled"
    assert _config(["train", "--task", "subtraction"]).model == "bundled"


@pytest.mark.parametrize("argv, chars", [(["--task", "calc", "--model", "bundled"], "'\\[' '\\]' '\\?' '#'"),
                                         (["--task", "sums", "--model", "bundled"], "';' '#'"),
                                         (["--task", "calc", "--model", "bundled-sums"], "'\\[' '\\]' '\\?'")])
def test_a_model_that_cannot_write_the_task_is_refused_naming_model_before_any_work(argv, chars, capsys, no_loading):
    assert main(["train", *argv, "--total-training-steps", "1", "--eval-size", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert pytest.importorskip("re").search(f"error: --model: .*'s tokenizer cannot write {chars}, which task", err)
    assert "Fix: leave --model out to use the task's own model" in err


def test_train_on_calc_has_the_calculator_in_the_loop_and_eval_scores_with_it(capsys):
    from grpo_edu.training.model.models import calc_model_dir, load_model_and_tokenizer
    from grpo_edu.training.rollouts.multi_turn import evaluate_with_tools
    from grpo_edu.training.task.tasks import get_task
    from grpo_edu.training.rollouts.tools import Tool

    assert main(["train", "--task", "calc", "--total-training-steps", "2", "--batch-size", "4",
                 "--num-generations", "4", "--eval-size", "8", "--no-progress", "--output-dir", "run",
                 "--metrics-out", "m.jsonl"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GRPO on bundled-calc · task calc · the calculator in the loop")
    rows = [json.loads(line) for line in open("m.jsonl")]
    assert all({"tools/call_frequency", "tools/failure_frequency"} <= set(r) for r in rows)
    assert sum(r["tools/call_frequency"] for r in rows) > 0
    # eval: the bundled calc model, with the calculator, equals multi_turn.evaluate_with_tools on the same prompts
    assert main(["eval", "--task", "calc", "--n", "32"]) == 0
    out = capsys.readouterr().out
    model, tokenizer = load_model_and_tokenizer(calc_model_dir())
    task = get_task("calc")
    expected = evaluate_with_tools(model, tokenizer, task.split("heldout", 32), task, Tool(), max_new_tokens=24)
    assert expected["accuracy"] > 0.15
    assert f"calculator in the loop): accuracy {expected['accuracy']:.1%}" in out
    # a calc run's folder is scored on its own task, with the tool
    assert main(["eval", "--model", "run", "--n", "8"]) == 0
    assert "run on calc/heldout (8 prompts × 1 samples, temperature 1.0, the calculator in the loop)" in \
        capsys.readouterr().out
