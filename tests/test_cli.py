"""The grpo-edu command: train, eval, bench, their help and their errors."""

import dataclasses
import json
import re
import time

import pytest

from grpo_edu import cli
from grpo_edu.cli import main
from grpo_edu.training.trainers.config import CHOICES, GRPOConfig

TINY = ["--total-training-steps", "2", "--batch-size", "4", "--eval-size", "5", "--no-progress"]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)      # runs/<timestamp>/ lands here, not in the repository
    return tmp_path


def test_train_writes_metrics_and_checkpoint(tmp_path, capsys):
    metrics = tmp_path / "m.jsonl"
    out = tmp_path / "run"
    code = main(["train", "--total-training-steps", "3", "--batch-size", "4", "--eval-size", "20",
                 "--metrics-out", str(metrics), "--output-dir", str(out), "--no-progress"])
    assert code == 0
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert {"reward_mean", "kl", "clip_fraction", "entropy", "dead_group_fraction", "seconds"} <= set(lines[0])
    text = capsys.readouterr().out
    assert "held-out accuracy before training: " in text and "step 0:" in text and "step 3:" in text
    assert f"grpo-edu eval --model {out}" in text
    assert (out / "checkpoint-000003" / "model.safetensors").exists()
    # the checkpoint is a model directory that eval can score
    assert main(["eval", "--model", str(out / "checkpoint-000003"), "--n", "10", "--show", "2"]) == 0
    assert "accuracy" in capsys.readouterr().out
    # the same command again would mix two runs in one folder: refused, unless told to overwrite
    assert main(["train", *TINY, "--output-dir", str(out)]) == 2
    assert "already holds another run" in capsys.readouterr().err
    assert (out / "checkpoint-000003").exists()
    assert main(["train", *TINY, "--output-dir", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-000002", "latest.json"]


def test_train_saves_into_runs_by_default_and_eval_scores_the_run(tmp_path, capsys):
    assert main(["train", *TINY, "--metrics-out", "m.jsonl"]) == 0
    text = capsys.readouterr().out
    run = re.search(r"model saved in (runs/\d{8}-\d{6}) \(checkpoint-000002\); score it with: "
                    r"grpo-edu eval --model (runs/\d{8}-\d{6})", text)
    assert run and run.group(1) == run.group(2), text
    run = run.group(1)
    assert (tmp_path / run / "checkpoint-000002" / "model.safetensors").exists()
    assert main(["eval", "--model", run, "--n", "5"]) == 0       # used to say "not a model directory"
    assert f"scoring its latest checkpoint, {run}/checkpoint-000002" in capsys.readouterr().out
    # resuming without --output-dir continues in the resumed folder, and --metrics-out keeps the early steps
    assert main(["train", *TINY[2:], "--total-training-steps", "3", "--resume", run, "--metrics-out", "m.jsonl"]) == 0
    captured = capsys.readouterr()
    assert f"saves into {run}" in captured.err
    assert (tmp_path / run / "checkpoint-000003").exists()
    assert [json.loads(line)["step"] for line in open("m.jsonl")] == [1, 2, 3]


def test_a_failed_resume_leaves_the_metrics_file_alone(tmp_path, capsys):
    (tmp_path / "m.jsonl").write_text('{"step": 1}\n')
    assert main(["train", *TINY, "--resume", "nowhere", "--metrics-out", "m.jsonl"]) == 2
    assert "error: --resume: no folder at nowhere" in capsys.readouterr().err          # the flag typed, not resume_from
    assert (tmp_path / "m.jsonl").read_text() == '{"step": 1}\n'


def test_accuracy_before_training_is_printed_as_soon_as_it_is_measured(monkeypatch, capsys):
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    def no_steps(self):
        raise ValueError("stopped before the first step")

    monkeypatch.setattr(GRPOTrainer, "step", no_steps)
    assert main(["train", *TINY]) == 2
    captured = capsys.readouterr()
    assert re.search(r"held-out accuracy before training: \d+\.\d% \(sampling at temperature 1, 5 prompts\)",
                     captured.out)
    assert "stopped before the first step" in captured.err


@pytest.mark.parametrize("argv, message", [
    (["--learning-rate", "-1e-4"], "learning_rate: must be a finite number > 0, got -0.0001"),
    (["--epsilon", "-.5"], "epsilon: must be a finite number > 0, got -0.5"),
    (["--seed", "-1"], "seed: must be an integer ≥ 0, got -1"),
    (["--beta", "-inf"], "beta: must be a finite number ≥ 0, got -inf"),
])
def test_negative_numbers_reach_the_configs_own_error(capsys, argv, message):
    """argparse used to read -1e-4 as a flag: "expected one argument"."""
    assert main(["train", *argv]) == 2
    assert message in capsys.readouterr().err


def test_bad_flags_give_a_named_error_and_exit_2(tmp_path, capsys):
    assert main(["train", "--batch-size", "3", "--micro-batch-size", "5"]) == 2
    err = capsys.readouterr().err
    assert "micro_batch_size" in err and "Fix:" in err
    assert main(["train", "--model", "./missing/model/dir", "--no-progress"]) == 2
    assert "no such folder './missing/model/dir'" in capsys.readouterr().err
    assert main(["eval", "--task", "poetry"]) == 2
    assert "unknown task" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main(["train", "--output-dir", "afile"]) == 2
    assert "output_dir: afile is a file, not a folder" in capsys.readouterr().err
    assert main(["train", "--resume", "x", "--overwrite"]) == 2
    assert "--overwrite: cannot be combined with --resume" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()                       # nothing was created


def _squash(text):
    return re.sub(r"\s+", "", text)


def test_train_help_gives_each_fields_meaning_and_choices(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = _squash(capsys.readouterr().out)
    docs = cli.field_docs()
    assert set(docs) == {f.name for f in dataclasses.fields(GRPOConfig)}
    for name, doc in docs.items():
        sentence = cli.first_sentence(doc)
        assert sentence.endswith((".", ")")) and len(sentence) > 10, name
        if name != "output_dir":                  # train gives its own default: runs/<timestamp>/, not "None saves nothing"
            assert _squash(sentence) in text, name
    assert _squash("(default: runs/<timestamp>/ under the current folder; a resumed run: the folder it resumes)") in text
    for name, choices in {**CHOICES, "task": ("addition", "subtraction", "addition3", "sums", "calc", "words")}.items():
        assert _squash(f"Choices: {', '.join(choices)}.") in text, name
    assert cli.first_sentence('Advantage scaling: "none" (Dr. GRPO). More.') == 'Advantage scaling: "none" (Dr. GRPO).'
    assert cli.first_sentence("Sets it, e.g. to 3. Then more.") == "Sets it, e.g. to 3."


def test_eval_help_documents_every_flag(capsys):
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = capsys.readouterr().out
    ev = next(a for a in parser._actions if a.dest == "command").choices["eval"]
    for action in ev._actions:
        if action.dest != "help":
            assert action.help and len(action.help) > 15, action.dest
            assert action.option_strings[0] in text
    assert "run's output folder" in text and "addition, subtraction, addition3, sums" in text


def test_join_negative_values():
    flags = {"--learning-rate", "--seed"}
    assert cli.join_negative_values(["--learning-rate", "-1e-4", "--seed", "-2", "--no-progress"], flags) == [
        "--learning-rate=-1e-4", "--seed=-2", "--no-progress"]
    assert cli.join_negative_values(["--no-progress", "-1"], flags) == ["--no-progress", "-1"]


def test_bench_prints_its_numbers(capsys, monkeypatch):
    from grpo_edu.beyond import bench

    # the floor runs in its own process, as every child does (the machinery under test); the
    # trainer's child runs in this one, which saves an interpreter start of the suite's budget
    in_a_process = bench._run_child
    monkeypatch.setattr(bench, "_run_child", lambda name, steps, warmup, **kw: (
        in_a_process(name, steps, warmup) if name == "floor" else bench.CHILDREN[name](time.time(), steps, warmup)))
    assert main(["bench", "--steps", "1", "--warmup", "0", "--rounds", "1", "--no-trl"]) == 0
    out = capsys.readouterr().out
    assert "grpo_edu" in out and "floor" in out and "s/step" in out and "start → first step" in out


def test_the_bench_step_times_the_floor_not_the_trainer_in_the_budgets_units(capsys, monkeypatch):
    """The ruler of the time budgets measures the machine: a faster (or slower) trainer must not move it."""
    from grpo_edu.beyond import bench

    timed = []
    monkeypatch.setattr(bench, "_run_child", lambda name, steps, warmup, threads=None, **kw: (
        timed.append((name, threads)), {"median_step_s": {"floor": 0.030, "grpo_edu": 0.020}[name]})[1])
    assert main(["bench", "--step-ms", "--rounds", "3"]) == 0
    assert timed == [("floor", 1)] * 3                                   # one thread, as each test worker has
    assert float(capsys.readouterr().out) == pytest.approx(30.0 * 78.7 / 71.8, abs=0.05)   # 32.9: the laptop's ratio


def test_bench_times_the_long_answer_workload_on_its_own_model(capsys, monkeypatch):
    from grpo_edu.beyond import bench

    def in_this_process(name, steps, warmup, workload="adder", **kw):     # as _run_child does, minus the process
        monkeypatch.setenv("GRPO_EDU_BENCH_WORKLOAD", workload)
        return bench.CHILDREN[name](time.time(), steps, warmup)
    monkeypatch.setattr(bench, "_run_child", in_this_process)
    assert main(["bench", "--workload", "sums", "--steps", "1", "--warmup", "0", "--rounds", "1", "--no-trl"]) == 0
    out = capsys.readouterr().out
    assert "workload sums (bundled-sums on sums): one step = 4 prompts × G=8, ≤42 new tokens" in out
    assert re.search(r"grpo_edu step / floor step +median [\d.]+×.*goal ≤ 1.15×", out)
    # the floor sampled the sums model's long answers: more tokens than the adder's 32 answers of ≤ 8 could hold
    floor = in_this_process("floor", 1, 0, workload="sums")
    assert floor["tokens_per_s"] * floor["median_step_s"] > 32 * 8


def test_bench_replay_prints_buffer_and_step_numbers(capsys, monkeypatch):
    from grpo_edu.beyond import bench

    # the children run in this process: the test above already proves the subprocess machinery,
    # and three more interpreters would cost half a minute of the suite's budget
    monkeypatch.setattr(bench, "_run_child", lambda name, steps, warmup, **kw: bench.CHILDREN[name](time.time(), steps, warmup))
    assert main(["bench", "--replay", "--steps", "1", "--warmup", "0", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for storage in ("memory", "sqlite", "jsonl"):
        assert re.search(rf"{storage} +add +[\d.]+ ms +sample\(64\) +[\d.]+ ms +\(10000 stored\)", out), storage
    assert re.search(r"replay 0.3 / no replay +median [\d.]+×", out)
    assert re.search(r"replay 0.3 / 184-row step +median [\d.]+×", out)
    assert re.search(r"replay 0.3 in place / no replay +median [\d.]+×", out)


# --- diagnose --------------------------------------------------------------------------------
def _metrics_jsonl(path, reward=lambda t: 0.45 + 0.3 * t / 40, n=40):
    """A --metrics-out file of n steps: healthy, unless ``reward`` says otherwise."""
    rows = [{"step": t, "epoch": 1, "loss": 0.004, "reward_mean": reward(t), "reward_std": 0.49, "accuracy": reward(t),
             "dead_group_fraction": 0.1, "clip_fraction": 0.0, "kl": 0.05, "ratio_mean": 1.0, "entropy": 1.0 - t / 100,
             "completion_length": 3.6, "grad_norm": 3.0, "seconds": 0.1} for t in range(1, n + 1)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_diagnose_prints_the_findings_of_a_sick_run(tmp_path, capsys):
    sick = _metrics_jsonl(tmp_path / "sick.jsonl", reward=lambda t: 0.5 if t <= 10 else 0.01)
    assert main(["diagnose", str(sick), "--plot", "evidence.png"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{sick}: 1 finding, most severe first")
    assert "1. reward_collapse (severity 90) · lesson 05_toy_grpo" in out
    assert "The reward fell from 0.50 to 0.01 and stayed there" in out and "learning_rate: divide by 10" in out
    assert "evidence plot written to evidence.png" in out and (tmp_path / "evidence.png").stat().st_size > 0


def test_diagnose_says_what_it_checked_on_a_healthy_run(tmp_path, capsys):
    healthy = _metrics_jsonl(tmp_path / "ok.jsonl")
    evals = tmp_path / "evals.json"
    evals.write_text(json.dumps([{"step": 0, "accuracy": 0.5}, {"step": 20, "accuracy": 0.6},
                                 {"step": 40, "accuracy": 0.7}]))
    assert main(["diagnose", str(healthy), "--evals", str(evals)]) == 0
    out = capsys.readouterr().out
    assert f"{healthy}: no problems found" in out
    assert "checked: the reward and held-out accuracy do not part ways" in out
    evals.write_text(json.dumps([{"step": 0, "accuracy": 0.5}, {"step": 20, "accuracy": 0.8},
                                 {"step": 40, "accuracy": 0.6}]))       # held-out accuracy falls as the reward rises
    assert main(["diagnose", str(healthy), "--evals", str(evals)]) == 0
    assert "1. reward_up_accuracy_down (severity 80)" in capsys.readouterr().out


def test_diagnose_names_a_broken_file_and_exits_2(tmp_path, capsys):
    broken = _metrics_jsonl(tmp_path / "broken.jsonl")
    broken.write_text(broken.read_text() + '{"step": 41, "reward_me\n')         # a run killed mid-line
    assert main(["diagnose", str(broken)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"grpo-edu diagnose: error: FILE: {broken} line 41 is not JSON" in captured.err and "Fix:" in captured.err
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["diagnose", "empty.jsonl"]) == 2
    assert "error: FILE: empty.jsonl is empty. Fix:" in capsys.readouterr().err
    assert main(["diagnose", str(_metrics_jsonl(tmp_path / "ok.jsonl")), "--plot", "no/such/dir/p.png"]) == 2
    assert "--plot: the folder of no/such/dir/p.png does not exist" in capsys.readouterr().err
    assert main(["diagnose", str(tmp_path / "ok.jsonl"), "--evals", "ok.jsonl"]) == 2   # metrics, not evaluations
    assert "evals: ok.jsonl is not a list of {'step', 'accuracy'} records" in capsys.readouterr().err


# --- nothing lost: every output path is checked before anything is deleted -----------------

def test_overwrite_with_an_unwritable_metrics_file_deletes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--output-dir", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["train", *TINY, "--output-dir", str(out), "--overwrite", "--metrics-out", "no/such/folder/m.jsonl"]) == 2
    assert "--metrics-out: the folder of no/such/folder/m.jsonl does not exist. Fix: create it first" \
        in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before            # the old run's checkpoints are all there


def test_a_second_runs_metrics_file_does_not_silently_replace_the_first(tmp_path, capsys):
    assert main(["train", *TINY, "--output-dir", "a", "--metrics-out", "m.jsonl"]) == 0
    first = (tmp_path / "m.jsonl").read_text()
    capsys.readouterr()
    assert main(["train", *TINY, "--output-dir", "b", "--metrics-out", "m.jsonl"]) == 2
    assert "--metrics-out: m.jsonl already holds metrics (another run's?)" in capsys.readouterr().err
    assert (tmp_path / "m.jsonl").read_text() == first and not (tmp_path / "b").exists()
    assert main(["train", *TINY, "--output-dir", "b", "--metrics-out", "m.jsonl", "--overwrite"]) == 0


def test_a_replay_path_inside_a_new_output_dir_simply_works(tmp_path):
    assert main(["train", *TINY, "--output-dir", "runs/x", "--replay-path", "runs/x/buf.sqlite",
                 "--replay-ratio", "0.3"]) == 0
    assert (tmp_path / "runs" / "x" / "buf.sqlite").is_file() and (tmp_path / "runs" / "x" / "latest.json").is_file()


@pytest.mark.parametrize("argv, message", [
    (["replay", "."], "path: . is a folder. Fix: name the buffer file inside it"),
    (["replay", "b.sqlite", "--show", "-1"], "--show: is -1. Fix: give how many"),
])
def test_grpo_edu_replay_refuses_a_folder_and_a_negative_count(tmp_path, capsys, argv, message):
    from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample

    with ReplayBuffer(10, path=tmp_path / "b.sqlite", top_fraction=1.0) as buf:
        buf.add([ReplaySample("1+1=", "2", 1.0, 1.0)], round=1)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_grpo_edu_replay_into_a_closed_pipe_ends_quietly(tmp_path):
    import subprocess
    import sys

    from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample

    with ReplayBuffer(5000, path=tmp_path / "b.jsonl", top_fraction=1.0) as buf:
        buf.add([ReplaySample(f"{i}+1=", str(i + 1), 1.0, 1.0) for i in range(5000)], round=1)
    run = subprocess.run(f"{sys.executable} -m grpo_edu.cli replay b.jsonl --show 5000 | head -n 1", shell=True,
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.stdout.startswith("b.jsonl: 5000 samples") and "Traceback" not in run.stderr, run.stderr


def test_a_resumed_run_may_ask_for_checkpoints_without_naming_its_folder_again(tmp_path, capsys):
    assert main(["train", *TINY, "--output-dir", "run"]) == 0
    assert main(["train", *TINY[2:], "--total-training-steps", "4", "--resume", "run", "--checkpoint-every", "1"]) == 0
    assert "saves into run, the folder it resumes" in capsys.readouterr().err
    assert (tmp_path / "run" / "checkpoint-000004").is_dir() and (tmp_path / "run" / "checkpoint-000003").is_dir()


def test_diagnose_plot_names_the_file_it_writes(tmp_path, capsys):
    assert main(["train", *TINY[2:], "--total-training-steps", "6", "--output-dir", "run", "--metrics-out", "m.jsonl"]) == 0
    capsys.readouterr()
    (tmp_path / "plots").mkdir()
    assert main(["diagnose", "m.jsonl", "--plot", "plots"]) == 2
    assert "--plot: plots is a folder. Fix: name the image file, e.g. plots/evidence.png" in capsys.readouterr().err
    assert main(["diagnose", "m.jsonl", "--plot", "plots/evidence"]) == 0
    assert "evidence plot written to plots/evidence.png" in capsys.readouterr().out
    assert (tmp_path / "plots" / "evidence.png").is_file()


def test_export_accepts_and_refuses_what_train_does(tmp_path, capsys):
    (tmp_path / "one.csv").write_text("prompt,answer\n1+1=,2\n", encoding="utf-8")
    (tmp_path / "gbk.jsonl").write_bytes('{"prompt": "一加一="}\n'.encode("gbk"))
    for argv, message in ((["--dataset", "one.csv"], "batch_size: 16 is larger than dataset_size=1"),
                          (["--dataset", "missing.csv"], "--dataset: no file at missing.csv"),
                          (["--dataset", "gbk.jsonl"], "is not UTF-8 text: line 1")):
        assert main(["export", "trl", *argv]) == 2
        assert message in capsys.readouterr().err
        assert main(["train", *TINY[:-1], *argv, "--batch-size", "16"]) == 2     # train says the same
        assert message in capsys.readouterr().err
    assert main(["export", "verl", "--checkpoint-every", "3"]) == 0               # as train accepts it


def test_version_prints_the_packages_version(capsys):
    import tomllib

    from grpo_edu import __version__
    from grpo_edu.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"grpo-edu {__version__}"
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__                     # one version, in the package and its metadata
