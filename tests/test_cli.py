"""The grpo-edu command: train, eval, bench and their errors."""

import json

from grpo_edu.cli import main


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
    assert "held-out accuracy" in text and "step 0:" in text and "step 3:" in text
    assert (out / "checkpoint-000003" / "model.safetensors").exists()
    # the checkpoint is a model directory that eval can score
    assert main(["eval", "--model", str(out / "checkpoint-000003"), "--n", "10", "--show", "2"]) == 0
    assert "accuracy" in capsys.readouterr().out


def test_bad_flags_give_a_named_error_and_exit_2(capsys):
    assert main(["train", "--batch-size", "3", "--micro-batch-size", "5"]) == 2
    err = capsys.readouterr().err
    assert "micro_batch_size" in err and "Fix:" in err
    assert main(["train", "--model", "./missing/model/dir", "--no-progress"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["eval", "--task", "poetry"]) == 2
    assert "unknown task" in capsys.readouterr().err


def test_bench_prints_its_numbers(capsys):
    assert main(["bench", "--steps", "1", "--warmup", "0", "--no-trl"]) == 0
    out = capsys.readouterr().out
    assert "grpo_edu" in out and "floor" in out and "s/step" in out and "start → first step" in out
