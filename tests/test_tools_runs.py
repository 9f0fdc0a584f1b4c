"""Lesson 15's runs (grpo_edu.course.experiments.tools_runs) and the bundled tiny-calc model."""

import json

import pytest

from grpo_edu.course import tools_runs
from grpo_edu.training.model.models import ASSETS


def test_a_per_call_reward_counts_the_calls_in_the_text():
    bonus, cost = tools_runs.per_call_reward(0.5), tools_runs.per_call_reward(-0.3)
    texts = ["#5", "[2+3]=5#5", "[2+3]=5[1+1]=2#5", "[2+"]
    assert bonus(None, texts) == [0.0, 0.5, 1.0, 0.0]
    assert cost(None, texts) == pytest.approx([0.0, -0.3, -0.6, 0.0])


def test_a_short_run_reports_both_ends_and_refuses_an_unknown_setting():
    with pytest.raises(ValueError, match="^setting: "):
        tools_runs.run("bribe")
    r = tools_runs.run("reply_in_loss", steps=2, eval_prompts=12, eval_samples=2)
    for side in ("before", "after"):
        assert 0 <= r[side]["accuracy"] <= 1 and 0 <= r[side]["call_rate"] <= 1
        assert r[side]["reply_logprob"] < 0
    assert r["after"]["reply_logprob"] > r["before"]["reply_logprob"]      # the ablation pushes the replies up
    assert len(r["history"]) == 2 and "tools/call_frequency" in r["history"][0]


def test_the_bundled_calc_model_starts_where_lesson_15_needs_it():
    """It calls about half the time, is mostly right with a call and mostly wrong without one."""
    record = json.loads((ASSETS / "tiny-calc" / "grpo_edu_model.json").read_text())
    assert 0.3 < record["call_rate"] < 0.7
    assert record["accuracy_with_call"] > 0.8 > 0.2 > record["accuracy_without_call"]
    assert 0 < record["failed_call_rate"] < 0.05
    assert (ASSETS / "tiny-calc" / "model.safetensors").stat().st_size < 5 * 2**20


def test_the_call_rates_table_splits_easy_prompts_from_the_rest():
    """Lesson 15's "when to call" table: the call rate on prompts whose terms all have one digit, and on the rest."""
    assert tools_runs.is_easy("7+8=") and not tools_runs.is_easy("17+8=") and not tools_runs.is_easy("7+8+10=")
    runs = tools_runs.stored_runs()
    text = tools_runs.call_rates_table(runs, ("outcome", "high_cost"))
    for r in (r for r in runs if r["kernels"] == "native" and r["setting"] in ("outcome", "high_cost")):
        easy, hard = (f"{r['before'][k]:.3f} → {r['after'][k]:.3f}" for k in ("call_rate_easy", "call_rate_hard"))
        assert any(line.split()[:2] == [r["setting"], str(r["seed"])] and line.index(easy) < line.index(hard)
                   for line in text.splitlines()[1:])
    with pytest.raises(ValueError, match="^settings: no stored run has setting 'bribe'"):
        tools_runs.call_rates_table(runs, ("bribe",))
    assert tools_runs.PER_CALL["high_cost"] < -1                  # above what a right answer earns
