"""Lesson 06's experiment pieces: the probes, run_phase, the two-task model, and the panels."""

import json
import math

import pytest
import torch

from grpo_edu.course.aids import viz, widgets
from grpo_edu.course.experiments.forgetting import probe, run_phase
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.model.models import load_model_and_tokenizer, two_task_model_dir
from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample, eviction_order, replay_composition, replay_count
from grpo_edu.training.rollouts.rollout import generate
from grpo_edu.training.task.tasks import get_task
from grpo_edu.training.trainers.trainer import GRPOTrainer

ADD, SUB = get_task("addition"), get_task("subtraction")


def test_probe_counts_right_answers_and_measures_entropy_by_hand(random_model, char_tokenizer):
    rows = ADD.split("heldout", 6)
    got = probe(random_model, char_tokenizer, {"addition": rows}, num_samples=3, seed=5, max_new_tokens=4)
    acc, ent = got["addition"]
    g = torch.Generator().manual_seed(5)
    rollout = generate(random_model, char_tokenizer, [r["prompt"] for r in rows], num_generations=3,
                       max_new_tokens=4, temperature=1.0, generator=g)
    right = [c.strip() == rows[i // 3]["answer"] for i, c in enumerate(rollout.completions)]
    assert acc == sum(right) / len(right)
    with torch.no_grad():                         # H = −Σ p log p at each answer token, averaged
        T = rollout.completion_ids.shape[1]
        logits = random_model(input_ids=rollout.input_ids).logits[:, -T - 1:-1].float()
        logp = torch.log_softmax(logits, -1)
        h = -(logp.exp() * logp).sum(-1)[rollout.completion_mask.bool()].mean().item()
    assert ent == pytest.approx(h, rel=1e-5)
    assert 0 < ent < math.log(len(char_tokenizer))


def test_run_phase_probes_at_the_start_every_k_steps_and_at_the_end(random_model, char_tokenizer):
    t = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=5, eval_size=0),
                    model=random_model, tokenizer=char_tokenizer)
    probes = {"addition": ADD.split("heldout", 4), "subtraction": SUB.split("heldout", 4)}
    record = run_phase(t, probes, probe_every=2, probe_samples=1, progress=False)
    assert record.steps == [0, 2, 4, 5] and len(record.history) == 5 and t.step_count == 5
    for name in probes:
        assert len(record.accuracy[name]) == len(record.entropy[name]) == 4
    assert json.loads(json.dumps(record.to_dict()))["steps"] == [0, 2, 4, 5]
    with pytest.raises(ValueError, match="^probe_every: "):
        run_phase(t, probes, probe_every=0)
    with pytest.raises(ValueError, match="^probes: is empty"):
        run_phase(t, {}, probe_every=1)


def test_the_two_task_model_half_knows_both_tasks_as_its_record_says():
    model, tokenizer = load_model_and_tokenizer(two_task_model_dir())
    record = json.loads((two_task_model_dir() / "grpo_edu_model.json").read_text())
    assert record["command"] == ("python -m grpo_edu.training.model.make_model --out assets/tiny-two-tasks --task addition,subtraction "
                                 "--check-every 500 --max-steps 2000 --stop-at 0.999")
    assert record["in_band"] and set(record["per_task"]) == {"addition", "subtraction"}
    for task in (ADD, SUB):
        got = probe(model, tokenizer, {task.name: task.split("heldout")}, num_samples=8, seed=0, max_new_tokens=4)
        recorded = record["per_task"][task.name]["heldout_sampled_accuracy"]
        assert got[task.name][0] == pytest.approx(recorded, abs=0.03)
        assert 0.2 <= recorded <= 0.6


def test_make_model_mixes_the_train_rows_of_several_tasks(tmp_path, monkeypatch):
    from grpo_edu.training.model import make_model

    seen = []
    real = make_model.encode_for_warmup
    monkeypatch.setattr(make_model, "encode_for_warmup", lambda tok, rows: seen.append(rows) or real(tok, rows))
    summary = make_model.build_tiny_model(tmp_path / "m", task="addition,subtraction", max_steps=2, check_every=1,
                                          eval_samples=1)
    prompts = [r["prompt"] for r in seen[0]]
    assert len(prompts) == len(ADD.split("train")) + len(SUB.split("train"))
    assert any("+" in p for p in prompts) and any("-" in p for p in prompts)
    assert set(summary["per_task"]) == {"addition", "subtraction"}
    assert summary["heldout_prompts"] == 500                                          # equal values stay ints
    assert summary["heldout_sampled_accuracy"] == pytest.approx(
        sum(m["heldout_sampled_accuracy"] for m in summary["per_task"].values()) / 2, abs=1e-4)
    with pytest.raises(ValueError, match="^task: unknown task 'multiplication'"):
        make_model.build_tiny_model(tmp_path / "x", task="addition,multiplication")


# --- the composition arithmetic ------------------------------------------------------------
@pytest.mark.parametrize("n, ratio, k", [(70, 0.3, 30), (128, 0.3, 55), (100, 0.5, 100), (128, 0.0, 0), (10, 0.1, 1)])
def test_replay_count_makes_the_replayed_share_of_the_total(n, ratio, k):
    assert replay_count(n, ratio) == k                       # k / (n + k) ≈ ratio, by hand
    assert abs(k / (n + k) - ratio) <= 0.5 / (n + k) + 1e-12


def test_replay_composition_by_hand():
    c = replay_composition(128, 0.3, 10_000)
    assert (c["replayed samples"], c["total"]) == (55, 183)
    assert c["P(a stored sample is drawn) per step"] == pytest.approx(55 / 10_000)
    assert c["steps between draws of one stored sample"] == pytest.approx(10_000 / 55)
    small = replay_composition(70, 0.3, 20)                  # the buffer holds fewer than asked for
    assert small["replayed samples"] == 20 and small["short of the ratio (buffer too small)"] == 10
    assert small["P(a stored sample is drawn) per step"] == 1.0
    assert replay_composition(70, 0.3, 0)["steps between draws of one stored sample"] == math.inf
    with pytest.raises(ValueError, match="^replay_ratio: "):
        replay_composition(70, 1.0, 10)


def test_eviction_order_and_buffer_table_list_who_leaves_first():
    b = ReplayBuffer(4, top_fraction=1.0)
    b.add([ReplaySample("a", "1", 0.9, 1.0), ReplaySample("b", "1", 0.4, 1.0)], round=1)
    b.add([ReplaySample("c", "1", 0.4, 1.0), ReplaySample("d", "1", 1.5, 1.0)], round=2)
    assert [s.question for s, _ in eviction_order(b)] == ["b", "c", "a", "d"]
    table = viz.buffer_table(b)
    assert [r["question"] for r in table.rows] == ["b", "c", "a", "d"] and table.rows[0]["leaves"] == 1
    b.add([ReplaySample("e", "1", 0.7, 1.0)], round=3)          # evicts b, exactly the first row
    assert [s.question for s, _ in eviction_order(b)] == ["c", "e", "a", "d"]


def test_buffer_state_round_trips_through_json_with_its_rng(tmp_path):
    b = ReplayBuffer(50, top_fraction=1.0, seed=3)
    b.add([ReplaySample(f"{i}+0=", str(i), 0.1 * (i + 1), 1.0) for i in range(20)], round=1)
    b.sample(5)
    state = json.loads(json.dumps(b.state()))
    expected_next = b.sample(7)
    other = ReplayBuffer(50, path=tmp_path / "o.sqlite", top_fraction=1.0, seed=99)
    other.add([ReplaySample("x", "y", 5.0, 1.0)], round=9)
    assert other.load_state(state) == 1                         # "x" was not in the state: removed
    assert other.entries() == b.entries() and other.sample(7) == expected_next
    other.close()
    with ReplayBuffer(50, path=tmp_path / "o.sqlite") as reopened:     # the file followed
        assert reopened.entries() == b.entries()
    with pytest.raises(ValueError, match="^state: "):
        other.load_state({"entries": []})
    with pytest.raises(ValueError, match="^capacity: is 3 but the saved state holds 20"):
        ReplayBuffer(3).load_state(state)


# --- the panels ------------------------------------------------------------------------------
def test_replay_mix_panel_shows_the_library_composition():
    p = widgets.replay_mix_panel()
    assert p.outputs[1].rows == viz.Table(replay_composition(128, 0.3, 10_000)).rows
    p.controls["replay_ratio"].value = 0.5
    assert p.outputs[1].rows == viz.Table(replay_composition(128, 0.5, 10_000)).rows
    p.controls["num_new"].value = 0                                 # below the slider's range: clamped by the widget
    assert "replayed samples" in repr(p.outputs[1])


def test_forgetting_panel_redraws_the_chosen_run_without_training():
    results = {0.0: {"steps": [0, 25], "accuracy": {"addition": [0.8, 0.3], "subtraction": [0.5, 0.7]}},
               0.3: {"steps": [0, 25], "accuracy": {"addition": [0.8, 0.9], "subtraction": [0.5, 0.75]}}}
    p = widgets.forgetting_panel(results)
    assert p.outputs[1].rows[0] == {"task": "addition", "before phase B": 0.8, "after phase B": 0.3,
                                    "change": pytest.approx(-0.5)}
    p.controls["replay_ratio"].value = 0.3
    assert p.outputs[1].rows[0]["after phase B"] == 0.9
    lines = p.outputs[0].axes[0].get_lines()
    assert [line.get_linewidth() for line in lines] == [1.0, 2.4]   # the chosen ratio in bold


def test_the_experiment_command_prints_a_row_per_seed_and_ratio(monkeypatch, capsys):
    from grpo_edu.course.experiments import forgetting

    monkeypatch.setattr(forgetting, "PHASE_A_STEPS", 2)
    monkeypatch.setattr(forgetting, "PHASE_B_STEPS", 2)
    monkeypatch.setattr(forgetting, "PROBE_ROWS", 4)
    assert forgetting.main(["--seeds", "0", "--ratios", "0", "0.3"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("0 ")]
    assert [r[1] for r in rows] == ["0%", "30%"]
    assert all(0 <= float(r[3]) <= 1 for r in rows)
    assert forgetting.main(["--seeds", "0", "--ratios", "0.3", "--frozen"]) == 0
    frozen = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("0 ")]
    assert float(frozen[0][-3]) == 1.0               # a frozen notebook holds only addition's answers


def test_a_frozen_notebook_admits_nothing_in_phase_b(tmp_path, monkeypatch, random_model, char_tokenizer):
    from grpo_edu.course.experiments import forgetting
    from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample

    monkeypatch.setattr(forgetting, "PHASE_B_STEPS", 2)
    notebook = tmp_path / "a.sqlite"
    buffer = ReplayBuffer(100, path=notebook)
    buffer.add([ReplaySample(r["prompt"], r["answer"], 1.0, 1.0) for r in ADD.split("train", 4)], round=1)
    buffer.close()
    start = GRPOTrainer(GRPOConfig(eval_size=0), model=random_model, tokenizer=char_tokenizer)
    probes = {"addition": ADD.split("heldout", 2), "subtraction": SUB.split("heldout", 2)}
    monkeypatch.setattr(GRPOTrainer, "step", _offering_step(GRPOTrainer.step))
    for frozen, grows in ((True, False), (False, True)):
        record = forgetting.phase_b(start, notebook, replay_ratio=0.3, learning_rate=1e-3, probes=probes,
                                    progress=False, frozen=frozen)
        assert (record.history[-1]["replay_buffer_size"] > 2) == grows, frozen
        assert (record.notebook_share["addition"][-1] == 1.0) == (not grows)


def _offering_step(step):
    """The real step, after which a right subtraction answer with Â > 0 is offered as the trainer would."""
    from grpo_edu.training.trainers.replay import ReplaySample

    def wrapped(self):
        metrics = step(self)
        admitted = self.replay_buffer.add([ReplaySample("9-4=", "5", 1.0, 1.0)], round=self.step_count + 100)
        metrics["replay_buffer_size"] = len(self.replay_buffer)
        metrics["admitted_by_hand"] = admitted
        return metrics
    return wrapped


def test_a_phase_stopped_midway_lets_go_of_its_buffer_file(tmp_path, monkeypatch, random_model, char_tokenizer):
    """Jupyter's Stop in the middle of phase A must not leave the notebook file locked for the rerun."""
    from grpo_edu.course.experiments import forgetting

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(forgetting, "run_phase", stopped)
    path = tmp_path / "a.sqlite"
    with pytest.raises(KeyboardInterrupt) as stop:        # kept, as Jupyter keeps the last traceback (and its trainer)
        forgetting.phase_a(random_model, char_tokenizer, path, probes={"addition": ADD.split("heldout", 2)})
    with ReplayBuffer(10, path=path) as again:                       # the rerun can open it
        assert len(again) == 0
    assert stop.traceback


def test_run_phase_records_whose_answers_the_notebook_holds(random_model, char_tokenizer):
    from grpo_edu.training.trainers.replay import ReplaySample

    t = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=2, eval_size=0,
                               replay_ratio=0.3), model=random_model, tokenizer=char_tokenizer)
    add, sub = ADD.split("train", 3), SUB.split("train", 1)
    t.replay_buffer.add([ReplaySample(r["prompt"], r["answer"], 1.0, 1.0) for r in add + sub], round=0)
    t.replay_buffer.top_fraction = 1.0
    probes = {"addition": ADD.split("heldout", 2), "subtraction": SUB.split("heldout", 2)}
    before = len(t.replay_buffer)
    record = run_phase(t, probes, probe_every=1, probe_samples=1, progress=False)
    assert before == 2                                  # top half of the four offered: the first two additions
    assert record.notebook_share["addition"][0] == 1.0 and record.notebook_share["subtraction"][0] == 0.0
    assert all(abs(a + s - 1) < 1e-9 or (a + s) <= 1 for a, s in zip(record.notebook_share["addition"],
                                                                     record.notebook_share["subtraction"]))
    no_buffer = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=1, eval_size=0),
                            model=random_model, tokenizer=char_tokenizer)
    assert run_phase(no_buffer, probes, probe_every=1, probe_samples=1, progress=False).notebook_share == {}


def test_the_store_command_writes_what_the_lesson_reads_back_and_trains_a_seed_not_stored(
        tmp_path, monkeypatch, capsys, random_model, char_tokenizer):
    from grpo_edu.course.experiments import forgetting

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    for name, value in (("PHASE_A_STEPS", 2), ("PHASE_B_STEPS", 2), ("PROBE_ROWS", 4)):
        monkeypatch.setattr(forgetting, name, value)
    assert forgetting.main(["--seeds", "1", "--store", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["native-seed1.json"]
    for name, settings in forgetting.STORED_RUNS.items():
        record, meta = forgetting.stored_run(name, seed=1, folder=tmp_path)
        assert record.replay_ratio == settings["replay_ratio"] and record.steps == [0, 2]
        assert all(len(record.accuracy[t]) == 2 for t in (forgetting.TASK_A, forgetting.TASK_B))
        assert meta["seed"] == 1 and f"--seeds 1 --store {tmp_path}" in meta["command"]
        assert record.history == []                                   # the per-step metrics are not stored
    # the lesson's cell: the stored run, saying the command that made it
    start = GRPOTrainer(GRPOConfig(eval_size=0), model=random_model, tokenizer=char_tokenizer)
    notebook = tmp_path / "a.sqlite"
    ReplayBuffer(10, path=notebook).close()
    stored, where = forgetting.stored_or_trained("lr 1e-3, replay 3 %", start, notebook, seed=1, folder=tmp_path)
    assert "stored, made by" in where and "--store" in where and stored.steps == [0, 2]
    # another seed, or the portable kernels, have no file here: the run is trained, and the line says so
    trained, where = forgetting.stored_or_trained("lr 1e-3, replay 3 %", start, notebook, seed=5, folder=tmp_path,
                                                  progress=False)
    assert "trained here" in where and trained.steps == [0, 2] and len(trained.history) == 2
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert forgetting.stored_path(1, tmp_path).name == "default-seed1.json"
    with pytest.raises(ValueError, match="^seed: .*--store"):
        forgetting.stored_run("lr 1e-3, replay 3 %", seed=1, folder=tmp_path)
    with pytest.raises(ValueError, match="^name: "):
        forgetting.stored_run("lr 1e-3, replay 30 %", seed=1, folder=tmp_path)
    # bad input is refused before any run, and nothing is written
    for bad, argument in ((dict(seeds=[0, -1]), "seeds"), (dict(seeds=[0], label="../x"), "label")):
        with pytest.raises(ValueError, match=f"^{argument}: "):
            forgetting.store(folder=tmp_path / "new", **bad)
        assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("label", ["native", "default"])
def test_the_runs_lesson_06_reads_are_stored_for_seeds_0_to_2_with_the_command_that_made_them(label, monkeypatch):
    from grpo_edu.course.experiments import forgetting

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default" if label == "default" else "")
    for seed in (0, 1, 2):
        for name, settings in forgetting.STORED_RUNS.items():
            record, meta = forgetting.stored_run(name, seed=seed)
            assert meta["path"].endswith(f"{label}-seed{seed}.json")
            assert meta["command"].endswith(f"--seeds {seed} --store assets/forgetting --label {label}")
            assert ("ATEN_CPU_CAPABILITY=default" in meta["command"]) == (label == "default")
            assert record.replay_ratio == settings["replay_ratio"]
            assert record.steps[0] == 0 and record.steps[-1] == forgetting.PHASE_B_STEPS
            for task in (forgetting.TASK_A, forgetting.TASK_B):
                assert len(record.accuracy[task]) == len(record.entropy[task]) == len(record.steps)
