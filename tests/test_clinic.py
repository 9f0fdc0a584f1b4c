"""grpo_edu.course.experiments.clinic: the lesson 09 cases, their rewards, and the report that runs them."""

import io
import json

import pytest

from grpo_edu.course.experiments import clinic
from grpo_edu.course.experiments.clinic import CASES, REWARDS, Runs, brevity_if_correct, str_vs_int_reward
from grpo_edu.course.aids.exercise_bank import CLINIC_MENU, PREDICTIONS


def test_the_broken_reward_pays_nothing_even_for_a_right_answer():
    assert str_vs_int_reward(["12+34="], ["46"], answer=["46"]) == [0.0]
    assert str_vs_int_reward(["12+34="], ["46"], answer=[46]) == [1.0]         # what its author meant


def test_gated_brevity_pays_only_right_answers_and_shorter_ones_more():
    gated = brevity_if_correct(4)
    assert gated(["1+2=", "1+2=", "1+2="], ["3", "", "4"], answer=["3", "3", "3"]) == [0.75, 0.0, 0.0]
    assert gated(["50+50="], ["100"], answer=["100"]) == [0.25]
    composite = REWARDS["brevity 0.8, gated"]
    assert composite(["1+2=", "1+2="], ["", "3"], answer=["3", "3"]) == [0.0, pytest.approx(0.2 + 0.8 * 0.75)]
    assert REWARDS["brevity 0.8"](["1+2="], [""], answer=["3"]) == [pytest.approx(0.8)]   # the loophole


def test_gated_brevity_gives_a_group_the_advantages_of_correctness_alone():
    # lesson 09b §5: every right answer to a prompt is the same string, so the gate pays c · 1[right] with one c per
    # prompt, and dividing by σ removes c: the cure trains as the correctness-only run does, up to the 1e-4 in σ + eps
    from grpo_edu.core.advantages import group_advantages
    from grpo_edu.training.task.rewards import correctness

    prompts, answer = ["12+34="] * 8, ["46"] * 8
    completions = ["46", "45", "46", "", "4", "46", "146", "6"]
    plain = group_advantages([correctness(prompts, completions, answer)])
    gated = group_advantages([REWARDS["brevity 0.8, gated"](prompts, completions, answer=answer)])
    hackable = group_advantages([REWARDS["brevity 0.8"](prompts, completions, answer=answer)])
    assert abs(gated - plain).max() < 1e-3
    assert abs(hackable - plain).max() > 0.5                                  # the ungated bonus: a signal of its own


def test_every_case_is_well_formed():
    for name, case in CASES.items():
        assert case.change and case.change != case.title, name       # the setting, shown before the reveal
        assert case.expected in CLINIC_MENU, name
        assert case.reward in REWARDS and case.fix_reward in REWARDS
        clinic.config(case.sick), clinic.config(case.fix)                            # valid configs
        for overrides, reward in case.advice.values():
            clinic.config(overrides)
            assert reward in REWARDS
    # lesson 09 asks one prediction per case, in the same order
    assert [PREDICTIONS[f"09.P{i}"].choices for i in range(1, len(CASES) + 1)] == [CLINIC_MENU] * len(CASES)


def test_config_is_the_default_with_the_clinics_run_length():
    c = clinic.config({"beta": 10.0}, seed=2)
    assert (c.total_training_steps, c.eval_size, c.eval_every, c.seed, c.beta) == (60, 200, 20, 2, 10.0)
    assert c.learning_rate == 3e-4 and c.num_generations == 8


def test_runs_trains_each_setting_once(monkeypatch):
    calls = []
    monkeypatch.setattr(clinic, "run", lambda overrides, reward, **kw: calls.append((overrides, reward)) or object())
    runs = Runs(seed=1)
    a = runs.get_run({"beta": 0.1, "temperature": 0.7})
    assert runs.get_run({"temperature": 0.7, "beta": 0.1}) is a          # key order does not matter
    assert runs.get_run() is runs.get_run({}) is not a
    assert len(calls) == 2


def test_bad_names_are_refused_before_any_run():
    with pytest.raises(ValueError, match="reward: unknown setup 'nope'"):
        clinic.run({}, "nope")
    with pytest.raises(ValueError, match=r"names: unknown case\(s\) \['flu'\]"):
        clinic.report(names=["flu"])


def test_the_report_runs_a_case_and_its_cure():
    out = io.StringIO()
    rows = clinic.report(0, ["broken_reward"], steps=6, out=out)
    assert rows[0]["first finding"] == rows[0]["expected"] == "reward_always_zero"
    assert rows[0]["sick: end"] == rows[0]["sick: held-out start"]           # the model never changed
    assert json.loads(out.getvalue().split(" (")[0])["case"] == "broken_reward"
