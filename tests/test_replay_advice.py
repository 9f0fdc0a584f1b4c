"""The replay article's advice, measured (lesson 06 §3.6): the late ratio, the summary of a run, the table,
and the stored runs the lesson reads."""

import json
import re

import pytest

from grpo_edu.course.experiments import forgetting, replay_advice
from grpo_edu.course.experiments.forgetting import PhaseRecord
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample
from grpo_edu.training.task.tasks import get_task
from grpo_edu.training.trainers.trainer import GRPOTrainer

ADD, SUB = get_task("addition"), get_task("subtraction")


def test_first_step_is_the_first_probe_that_reaches_the_target():
    assert replay_advice.first_step([0, 10, 20, 30], [0.5, 0.69, 0.7, 0.9]) == 20     # 0.70 counts
    assert replay_advice.first_step([0, 10], [0.5, 0.6]) is None


def _record(a, b, shares):
    record = PhaseRecord(replay_ratio=0.3, steps=[0, 10, 20], accuracy={"addition": a, "subtraction": b})
    record.history = [{"replay_share": s, "seconds": 0.5} for s in shares]
    return record


def test_a_runs_summary_by_hand():
    record = _record([0.8, 0.6, 0.75], [0.5, 0.72, 0.8], [0.3, 0.3])
    row = replay_advice.summarize("7:3", record, seed=1, batch_size=16, num_generations=8)
    assert row["A lowest"] == 0.6 and row["B after"] == 0.8
    assert row["steps to B target"] == 10                   # B reaches 0.70 at step 10 ...
    assert row["steps to both targets"] == 20               # ... but A is below it there: both only at 20
    assert row["completions per step"] == 128 and row["completions to both targets"] == 2560
    assert row["rows per step"] == pytest.approx(128 / 0.7)  # fresh rows are 70 % of the step
    never = replay_advice.summarize("no replay", _record([0.8, 0.3, 0.4], [0.5, 0.8, 0.9], [0.0, 0.0]), seed=1,
                                    batch_size=16, num_generations=8)
    assert never["steps to both targets"] is None and never["completions to both targets"] is None
    table = {r["variant"]: r for r in replay_advice.table([row, never])}
    assert table["no replay"]["steps to both ≥ 70 %"] == "never (1 never)"
    assert table["7:3"]["steps to both ≥ 70 %"].startswith("20 [20, 20]")


def test_late_raises_the_replay_ratio_after_the_given_step(tmp_path, monkeypatch, random_model, char_tokenizer):
    monkeypatch.setattr(forgetting, "PHASE_B_STEPS", 4)
    notebook = tmp_path / "a.sqlite"
    with ReplayBuffer(1000, path=notebook, top_fraction=1.0) as buffer:
        buffer.add([ReplaySample(r["prompt"], r["answer"], 1.0, 1.0) for r in ADD.split("train", 200)], round=1)
    start = GRPOTrainer(GRPOConfig(eval_size=0), model=random_model, tokenizer=char_tokenizer)
    probes = {"addition": ADD.split("heldout", 2), "subtraction": SUB.split("heldout", 2)}
    record = forgetting.phase_b(start, notebook, replay_ratio=0.2, learning_rate=1e-3, probes=probes,
                                progress=False, late=(2, 0.4), name="late", batch_size=2, num_generations=4)
    shares = [m["replay_share"] for m in record.history]
    assert shares == pytest.approx([0.2, 0.2, 0.4, 0.4], abs=0.03)            # 8 fresh rows + 2, then + 5


def test_an_unknown_variant_is_named_before_any_work():
    with pytest.raises(ValueError, match=r"^names: unknown variant\(s\) \['7:4'\]"):
        replay_advice.run_seed(0, ["7:4"])


def test_the_stored_runs_cover_every_variant_seed_and_kernel_set():
    rows = replay_advice.stored()
    assert {(r["variant"], r["seed"]) for r in rows} == {(v, s) for v in replay_advice.VARIANTS for s in (0, 1, 2)}
    files = sorted((replay_advice.ASSETS_FOLDER).glob("*.json"))
    meta = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    assert {m["ATEN_CPU_CAPABILITY"] for m in meta} == {"", "default"}
    # made before course/ had rooms: the old dotted path still runs the same module (course/__init__.py)
    assert all(re.search(r"python -m grpo_edu\.course\.(experiments\.)?replay_advice --seeds", m["command"])
               for m in meta)
    assert len(rows) == 2 * 3 * len(replay_advice.VARIANTS)
