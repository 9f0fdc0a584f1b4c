"""The family's comparison on lesson 11's sums model (``grpo-edu family --model sums``): the option reaches the
config and the stored file, a bad value is refused, every method trains on the sums task, the critic reads
left-padded prompts (sums prompts differ in length, the adder's do not), and each model's stored runs stay apart.
Fast: no long run (the stored comparison is ``assets/family-sums``)."""

import json
import warnings

import pytest
import torch

from grpo_edu.course.experiments import family
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.family import PPOTrainer


def test_the_sums_budget_is_the_sums_preset_with_the_comparisons_own_fields():
    config = family._config(1, model="sums")
    assert config == GRPOConfig.preset("sums", **family.SUMS, seed=1)
    assert (config.model, config.task, config.max_completion_length) == ("bundled-sums", "sums", 42)
    assert family._config(1) == GRPOConfig(**family.COMMON, seed=1)                 # the adder's, unchanged
    for model, budget in family.BUDGETS.items():                                    # one budget for every method
        assert {"batch_size", "num_generations", "total_training_steps", "eval_size"} <= set(budget), model


@pytest.mark.parametrize("bad", ["Sums", "adder2", ""])
def test_an_unknown_model_is_refused_naming_the_argument(bad):
    with pytest.raises(ValueError, match="^model: unknown value"):
        family.run_method("grpo", model=bad)
    with pytest.raises(ValueError, match="^model: unknown value"):
        family.stored_runs(model=bad)


def test_the_command_refuses_a_bad_model_before_any_run(capsys, monkeypatch):
    from grpo_edu.cli import main

    monkeypatch.setattr(family, "comparison", lambda *a, **k: pytest.fail("ran before checking its arguments"))
    with pytest.raises(SystemExit) as exit_:
        main(["family", "--model", "sum"])
    assert exit_.value.code == 2
    assert "--model: invalid choice: 'sum'" in capsys.readouterr().err


def test_the_model_option_reaches_every_part_of_the_run_and_the_stored_file(tmp_path, monkeypatch):
    """``--model sums`` is passed to the runs, the gradient's noise and the step cost, and the JSON records it."""
    from grpo_edu.cli import main

    seen = {}

    def fake_comparison(names, seeds, *, steps=None, model="adder", num_iterations=None, progress=False, results=None,
                        on_row=None):
        seen["comparison"] = model
        seen["num_iterations"] = num_iterations
        return {name: [{**{m: 0.5 for m in family.METRICS}, "seed": s, "tokens_to_target": None,
                        "steps_to_target": None, "curve": [0.5]} for s in seeds] for name in names}

    def fake_noise(names, *, resamples, seed, model="adder", progress=False):
        seen.setdefault("noise", []).append(model)
        return {name: {"noise_to_signal": 1.0, "used": resamples} for name in names}

    def fake_cost(names, *, model="adder"):
        seen["cost"] = model
        return {name: {"median_step_s": 0.1, "peak_rss_mib": 1.0, "trained_weights": 1, "frozen_weights": 0}
                for name in names}

    monkeypatch.setattr(family, "comparison", fake_comparison)
    monkeypatch.setattr(family, "gradient_noise", fake_noise)
    monkeypatch.setattr(family, "step_cost", fake_cost)
    target = tmp_path / "sums.json"
    assert main(["family", "--model", "sums", "--seeds", "0", "1", "--methods", "grpo", "rft", "--cost",
                 "--json", str(target)]) == 0
    assert seen == {"comparison": "sums", "noise": ["sums", "sums"], "cost": "sums", "num_iterations": None}
    stored = json.loads(target.read_text())
    assert stored["model"] == "sums" and stored["budget"]["model"] == "bundled-sums"
    assert "--model sums" in stored["command"] and "num_iterations" not in stored["budget"]
    # --num-iterations reaches the runs and the stored budget (lesson 13's four updates per batch)
    assert main(["family", "--seeds", "0", "--methods", "ppo", "--num-iterations", "4", "--json",
                 str(tmp_path / "four.json")]) == 0
    assert seen["num_iterations"] == 4
    assert json.loads((tmp_path / "four.json").read_text())["budget"]["num_iterations"] == 4


@pytest.mark.parametrize("method", family.ORDER)
def test_every_method_takes_a_step_on_the_sums_model(method):
    """One step of each method on lesson 11's model, scored on 4 held-out prompts: it runs, its answers are the
    sums model's long ones (the adder's are at most 4 tokens), and nothing is skipped at this start (about half
    the answers are right, so rejection sampling keeps some and DPO finds pairs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # a skipped step warns: that would fail here
        row, info = family.run_method(method, 0, model="sums", steps=1, eval_size=4)
    config = info["trainer"].config
    assert (config.model, config.max_completion_length, config.batch_size) == ("bundled-sums", 42, 8)
    assert row["skipped"] == 0 and len(row["curve"]) == 1
    assert row["length"] > 5
    assert 0.0 <= row["before"] <= 1.0 and 0.0 <= row["after"] <= 1.0


def test_the_critic_reads_left_padded_prompts_as_it_reads_each_prompt_alone():
    """Sums prompts differ in length, so a batch's prompts are left-padded (the adder's never are): each row's
    V(s_t) in the padded batch must equal V(s_t) of that row alone, without padding."""
    rows = [{"prompt": "1+2=", "answer": "3"}, {"prompt": "3+8+5+1+4=", "answer": "21"}]
    config = GRPOConfig.preset("sums", batch_size=2, num_generations=2, total_training_steps=1, eval_size=0,
                               sampler="engine", seed=0)
    t = PPOTrainer(config, train_rows=rows)
    torch.manual_seed(0)
    torch.nn.init.normal_(t.critic.head.weight)
    rollout = t._sample([r["prompt"] for r in rows])
    mask = rollout.completion_mask
    T = mask.shape[1]
    assert not bool(rollout.attention_mask[:, 0].all()), "the batch should hold a left-padded row"
    with torch.no_grad():
        values = t.critic(rollout.input_ids, rollout.attention_mask, T)                   # (N, T)
        for i in range(mask.shape[0]):
            start = int((rollout.attention_mask[i] == 0).long().cumprod(0).sum())        # this row's left padding
            alone = t.critic(rollout.input_ids[i:i + 1, start:], rollout.attention_mask[i:i + 1, start:], T)[0]
            kept = mask[i].bool()
            torch.testing.assert_close(values[i][kept], alone[kept], atol=1e-4, rtol=1e-4)


def test_each_models_stored_runs_stay_apart(tmp_path):
    """A folder is read as one model's: a file of another model is refused naming ``model``, and a file written
    before the field existed counts as the adder's."""
    adder_file = {"command": "grpo-edu family", "cpu_capability": "AVX512",
                  "results": {"grpo": [{"seed": 0, "after": 0.5}]}}
    (tmp_path / "old.json").write_text(json.dumps(adder_file))
    runs, info = family.stored_runs(tmp_path)                      # no "model" field: the adder's
    assert info["model"] == "adder" and list(runs) == ["grpo"]
    with pytest.raises(ValueError, match="^model: is 'sums', but .*old.json holds runs of the 'adder' model"):
        family.stored_runs(tmp_path, model="sums")
    (tmp_path / "sums.json").write_text(json.dumps({**adder_file, "model": "sums"}))
    with pytest.raises(ValueError, match="^model: is 'adder', but .*sums.json holds runs of the 'sums' model"):
        family.stored_runs(tmp_path)
    with pytest.raises(ValueError, match="^folder: .*grpo-edu family --model sums --seeds 0 1 2"):
        family.stored_runs(tmp_path / "empty", model="sums")


def test_a_control_file_beside_the_comparison_merges_and_can_be_left_out(tmp_path):
    """Two files of one kernel set (the six methods, then the controls): their noise per seed is merged, not the
    second's over the first's, and ``methods=`` keeps the chosen methods' rows, noise and cost only."""
    noise = lambda *names: {"0": {n: {"noise_to_signal": 1.0} for n in names}}               # noqa: E731
    main = {"command": "grpo-edu family --model sums", "cpu_capability": "DEFAULT", "model": "sums",
            "results": {"grpo": [{"seed": 0, "after": 0.5}], "reinforce": [{"seed": 0, "after": 0.2}]},
            "gradient_noise": noise("grpo", "reinforce"), "step_cost": {"grpo": {}, "reinforce": {}}}
    control = {**main, "results": {"rft_answer_mean": [{"seed": 0, "after": 0.3}]},
               "gradient_noise": noise("rft_answer_mean"), "step_cost": None}
    (tmp_path / "a.json").write_text(json.dumps(main))
    (tmp_path / "b.json").write_text(json.dumps(control))
    runs, info = family.stored_runs(tmp_path, model="sums")
    assert list(runs) == ["grpo", "reinforce", "rft_answer_mean"]
    assert set(info["gradient_noise"]["DEFAULT"][0]) == {"grpo", "reinforce", "rft_answer_mean"}
    runs, info = family.stored_runs(tmp_path, model="sums", methods=family.ORDER)
    assert list(runs) == ["grpo", "reinforce"] and set(info["gradient_noise"]["DEFAULT"][0]) == {"grpo", "reinforce"}
    runs, info = family.stored_runs(tmp_path, model="sums", methods=("grpo", "rft_answer_mean"))
    assert list(runs) == ["grpo", "rft_answer_mean"] and set(info["step_cost"]["DEFAULT"]) == {"grpo"}


def test_the_stored_sums_runs_hold_every_method_seed_and_kernel_set():
    """What lesson 13's sections 6 and 6b read: ``assets/family-sums``, the sums model's runs only: the six methods
    on two kernel sets, and the two controls on seeds 0–2 (two kernel sets of another machine)."""
    from grpo_edu.course.experiments import variants

    assert list(family.stored_runs(model="sums")[0]) == [*family.ORDER, *family.CONTROLS]
    controls, _ = family.stored_runs(model="sums", methods=family.CONTROLS)
    for name, rows in controls.items():
        assert sorted({r["seed"] for r in rows}) == [0, 1, 2] and len({r["kernels"] for r in rows}) == 2, name
        assert all(len(r["curve"]) == family.SUMS["total_training_steps"] for r in rows)
    runs, info = family.stored_runs(model="sums", methods=family.ORDER)
    assert info["model"] == "sums" and list(runs) == list(family.ORDER)
    for name, rows in runs.items():
        assert sorted((r["seed"], r["kernels"]) for r in rows) == sorted(
            (s, k) for s in (0, 1, 2) for k in ("AVX512", "DEFAULT")), name
        assert all(len(r["curve"]) == family.SUMS["total_training_steps"] for r in rows)
    assert set(variants.paired_differences(runs)) == set(family.ORDER) - {"grpo"}
    assert {len(seeds) for seeds in info["gradient_noise"].values()} == {3}
    assert set(info["step_cost"]) == {"AVX512"}                       # timed once, on the native kernels
    for path in info["files"]:
        assert "--model sums" in path["command"]
    adder, adder_info = family.stored_runs()
    assert adder_info["model"] == "adder"
    assert {len(r["curve"]) for rows in adder.values() for r in rows} == {family.COMMON["total_training_steps"]}
