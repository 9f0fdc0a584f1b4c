"""grpo_edu.beyond.diagnose: each rule on a synthetic history that shows it, real runs (healthy and sick),
TRL's trainer_state.json, and the errors for bad input."""

import json
import math

import pytest

from grpo_edu.beyond.diagnose import coverage, diagnose, format_findings, plot_evidence
from grpo_edu.beyond.run_log import MIN_STEPS, TRL_NAMES, load_run
from grpo_edu.beyond.symptoms import RULES, Finding
from grpo_edu.training.trainers.config import GRPOConfig


# --- synthetic histories -------------------------------------------------------------------
def healthy(t, n):
    """A run shaped like the bundled model's first steps: reward up, entropy down a little, small KL."""
    wiggle = 0.03 * math.sin(1.7 * t)                      # step-to-step sampling noise, deterministic
    reward = 0.45 + 0.3 * t / n + wiggle
    return {"step": t, "epoch": 1, "loss": 0.004, "reward_mean": reward, "reward_std": 0.49, "accuracy": reward,
            "dead_group_fraction": 0.05 + 0.1 * t / n, "clip_fraction": 0.0, "kl": 0.1 * (1 - math.exp(-t / 10)),
            "ratio_mean": 1.0, "entropy": 1.1 - 0.5 * t / n, "completion_length": 3.6 + wiggle,
            "grad_norm": 3.5 + 20 * wiggle, "reward/ArithmeticTask.reward": reward, "seconds": 0.1}


def history(n=60, **curves):
    """``n`` healthy steps, with each metric in ``curves`` replaced by ``curve(t, n)`` (a function of the step)."""
    rows = [healthy(t, n) for t in range(1, n + 1)]
    for key, curve in curves.items():
        for row in rows:
            row[key] = curve(row["step"], n)
    return rows


def late(t, n, before, after, at=0.25):
    """``before`` up to a quarter of the run (or ``at``), then ``after``."""
    return before if t <= at * n else after


def first(findings):
    assert findings, "expected a finding"
    return findings[0].name


def test_a_healthy_synthetic_run_has_no_finding():
    assert diagnose(history()) == []
    assert diagnose(history(), config=GRPOConfig()) == []
    assert diagnose(history(n=1500)) == []
    assert format_findings([]) == "no problems found"


SICK = {
    "reward_always_zero": dict(reward_mean=lambda t, n: 0.0, reward_std=lambda t, n: 0.0, accuracy=lambda t, n: 0.0,
                               dead_group_fraction=lambda t, n: 1.0),
    "no_reward_signal": dict(reward_mean=lambda t, n: 1.0, reward_std=lambda t, n: 0.0,
                             dead_group_fraction=lambda t, n: 1.0,
                             **{"reward/ArithmeticTask.reward": lambda t, n: 1.0}),
    "dead_groups_late": dict(dead_group_fraction=lambda t, n: 0.05 + 0.95 * t / n,
                             reward_mean=lambda t, n: 0.5 + 0.45 * t / n, accuracy=lambda t, n: 0.5 + 0.45 * t / n),
    "reward_collapse": dict(reward_mean=lambda t, n: late(t, n, 0.5, 0.02),
                            accuracy=lambda t, n: late(t, n, 0.5, 0.02)),
    "reward_oscillation": dict(reward_mean=lambda t, n: 0.2 if (t - 1) // 3 % 2 else 0.7,
                               accuracy=lambda t, n: 0.2 if (t - 1) // 3 % 2 else 0.7),
    "grad_norm_spikes": dict(grad_norm=lambda t, n: 80.0 if t in (30, 45) else 3.0),
    "kl_runaway": dict(kl=lambda t, n: 1.5 * t / n * 1.5),
    "entropy_collapse": dict(entropy=lambda t, n: 1.1 * math.exp(-t / 8)),
    "length_collapse": dict(completion_length=lambda t, n: late(t, n, 3.6, 1.2, at=0.5)),
    "clip_fraction_high": dict(clip_fraction=lambda t, n: 0.3),
    "reward_up_accuracy_down": dict(accuracy=lambda t, n: 0.6 - 0.3 * t / n),
    "few_live_groups": dict(dead_group_fraction=lambda t, n: 0.6),
    "no_progress": dict(reward_mean=lambda t, n: 0.45 + 0.03 * math.sin(1.7 * t),
                        accuracy=lambda t, n: 0.45 + 0.03 * math.sin(1.7 * t)),
}


@pytest.mark.parametrize("name", list(SICK))
def test_each_rule_finds_its_symptom_first(name):
    findings = diagnose(history(**SICK[name]))
    assert first(findings) == name, format_findings(findings)
    top = findings[0]
    assert isinstance(top, Finding) and top.symptom and top.causes and top.lesson
    assert len(top.evidence["steps"]) == len(top.evidence["values"]) > 0
    assert all(len(fix) == 3 for fix in top.fixes)
    text = format_findings(findings)
    assert f"1. {name} (severity" in text and top.evidence["summary"] in text and top.lesson in text


def test_an_entropy_collapse_offers_todays_remedies_as_well():
    """Beside the temperature and beta, clip-higher (DAPO) and an entropy bonus: the remedies a collapse that came
    from training, not from a low temperature, has left (lesson 09 §5)."""
    fixes = [f[0] for f in diagnose(history(**SICK["entropy_collapse"]))[0].fixes]
    assert fixes[0] == "temperature" and {"beta", "epsilon_high", "entropy_coef"} <= set(fixes)


def test_findings_are_sorted_most_severe_first():
    findings = diagnose(history(**SICK["dead_groups_late"], **SICK["kl_runaway"], **SICK["clip_fraction_high"]))
    assert [f.name for f in findings] == ["kl_runaway", "clip_fraction_high", "dead_groups_late"]
    assert [f.severity for f in findings] == sorted((f.severity for f in findings), reverse=True)


def test_zero_reward_and_constant_reward_are_told_apart():
    zero = diagnose(history(**SICK["reward_always_zero"]))[0]
    assert zero.evidence["metric"] == "dead_group_fraction" and zero.evidence["threshold"] == 0.9
    assert zero.severity == 100 and any("too hard" in c for c in zero.causes)
    # the checker saw right answers the reward did not pay: the reward function disagrees with it
    zero = diagnose(history(**{**SICK["reward_always_zero"], "accuracy": lambda t, n: 0.3}))[0]
    assert "disagrees with the checker" in zero.causes[0]
    const = diagnose(history(**SICK["no_reward_signal"]))[0]
    assert "reward/ArithmeticTask.reward returned the same mean reward on every step" in const.causes[0]
    assert "the reward ignores whether the answer is right" in const.causes[1]     # accuracy moved, the reward did not
    # a run that gets out of it later is a smaller problem
    escaped = diagnose(history(**{**SICK["reward_always_zero"],
                                  "dead_group_fraction": lambda t, n: late(t, n, 1.0, 0.2)}))
    assert escaped[0].name == "reward_always_zero" and escaped[0].severity == 50


def test_dead_groups_late_tells_mastered_from_broken():
    mastered = diagnose(history(**SICK["dead_groups_late"]))[0]
    assert mastered.severity == 20 and "mastered" in mastered.causes[0]
    assert mastered.fixes[0][0] == "total_training_steps"
    like_the_default_run = diagnose(history(dead_group_fraction=lambda t, n: 0.15 + 0.65 * t / n,   # ends near 0.75
                                            reward_mean=lambda t, n: 0.5 + 0.45 * t / n,
                                            accuracy=lambda t, n: 0.5 + 0.45 * t / n))
    assert like_the_default_run == []                       # success, not a problem (lesson 08's run ends so)
    broken = diagnose(history(dead_group_fraction=lambda t, n: 0.05 + 0.8 * t / n,
                              reward_mean=lambda t, n: 0.5 - 0.2 * t / n, accuracy=lambda t, n: 0.5 - 0.2 * t / n))
    assert first(broken) == "dead_groups_late" and broken[0].severity == 40 and "all wrong" in broken[0].symptom


def test_a_cold_sampler_is_named_and_warmed_first():
    # τ = 0.3 on the task's own reward (reward = the checker's accuracy): answers alike, not a broken reward
    alike = dict(reward_mean=lambda t, n: 0.9 + 0.05 * math.sin(t), dead_group_fraction=lambda t, n: 0.93,
                 accuracy=lambda t, n: 0.9 + 0.05 * math.sin(t))
    top = diagnose(history(**alike), config=GRPOConfig(temperature=0.3))[0]
    assert top.name == "no_reward_signal"
    assert top.causes[0].startswith("temperature = 0.3 is low")
    assert "the G answers to a prompt were the same" in top.causes[1]
    assert not any("ignores whether the answer is right" in c for c in top.causes)
    assert top.fixes[0][:2] == ("temperature", "0.3 → 1.0")
    assert all(fix[0] != "reward functions" for fix in top.fixes)
    warm = diagnose(history(**alike))[0]                     # no config: τ unknown, G first, τ a little higher
    assert [f[0] for f in warm.fixes] == ["num_generations", "temperature"]


def test_held_out_accuracy_best_at_step_0_is_worded_as_the_start():
    rows = history(reward_mean=lambda t, n: 0.3 + 0.3 * t / n)
    evals = [{"step": 0, "accuracy": 0.5}, {"step": 30, "accuracy": 0.3}, {"step": 60, "accuracy": 0.1}]
    top = diagnose(rows, evals)[0]
    assert top.name == "reward_up_accuracy_down"
    assert "batch reward 0.3" in top.evidence["summary"] and "over steps 1–6, " in top.evidence["summary"]
    assert "after that" in top.evidence["summary"]


@pytest.mark.parametrize("name", list(SICK))
def test_no_finding_cites_a_source_the_reader_cannot_see(name):
    """`grpo-edu diagnose` prints to anyone: a fix cites a measurement or a lesson, never "the guide" or a seed id."""
    text = format_findings(diagnose(history(**SICK[name]), config=GRPOConfig(num_generations=2))).lower()
    for unseen in ("the guide", "seed 00", "source article", "practical guide"):
        assert unseen not in text, f"{name}: {unseen!r} in\n{text}"


def test_few_live_groups_names_a_small_G():
    rows = history(dead_group_fraction=lambda t, n: 0.55, reward_mean=lambda t, n: 0.45 + 0.3 * t / n)
    top = diagnose(rows, config=GRPOConfig(num_generations=2))[0]
    assert top.name == "few_live_groups" and top.severity == 15
    assert top.causes[0].startswith("G = 2 is small: even at p = 0.5 a group is dead with probability 0.50")
    assert top.fixes[0][:2] == ("num_generations", "2 → 8")
    assert "p^G + (1 − p)^G = 0.5" in top.evidence["summary"]
    assert diagnose(history(dead_group_fraction=lambda t, n: 0.45)) == []       # under half dead: fine
    assert first(diagnose(history(dead_group_fraction=lambda t, n: 0.95))) == "no_reward_signal"


def test_no_progress_needs_live_groups_and_a_long_enough_run():
    flat = SICK["no_progress"]
    top = diagnose(history(**flat), config=GRPOConfig(beta=5.0))[0]
    assert top.name == "no_progress" and top.causes[0].startswith("beta = 5 is large")
    assert top.fixes[0][:2] == ("beta", "5 → 0.04 (DeepSeekMath's value)")
    # against a large β a faster step is no cure (three times the rate lowered the adder's accuracy at β = 10)
    assert "learning_rate" not in [field for field, *_ in top.fixes]
    assert top.causes[1].endswith("(a cause only once beta is back near 0.04)")
    low_lr = diagnose(history(**flat), config=GRPOConfig(learning_rate=1e-5))[0]
    assert low_lr.causes[0].startswith("learning_rate = 1e-5 is small")
    assert ("learning_rate", "1e-5 → 3e-5") == low_lr.fixes[1][:2]
    # divided by σ, Â is about ±1 whatever the reward's scale: β is weighed against that, not the reward
    assert "whatever the reward's scale" in top.causes[0] and "0–1" not in top.causes[0]
    unscaled = diagnose(history(**flat), config=GRPOConfig(beta=5.0, scale="none"))[0]
    assert "scale='none'" in unscaled.causes[0] and "keep the reward's units" in unscaled.causes[0]
    spikes = diagnose(history(**SICK["grad_norm_spikes"]), config=GRPOConfig(beta=10.0))[0]
    assert spikes.name == "grad_norm_spikes" and spikes.causes[0].startswith("beta = 10 is large")
    assert diagnose(history(n=29, **flat)) == []                                # too short to judge
    assert diagnose(history(**flat, dead_group_fraction=lambda t, n: 0.7))[0].name == "few_live_groups"
    assert diagnose(history(reward_mean=lambda t, n: 0.95, accuracy=lambda t, n: 0.95)) == []  # nothing left to gain
    # a reward that rises 0.06 over the run is progress; one within 0.05 is not
    assert diagnose(history(reward_mean=lambda t, n: 0.45 + 0.08 * t / n, accuracy=lambda t, n: 0.5)) == []


def test_kl_still_climbing_is_a_milder_finding():
    findings = diagnose(history(kl=lambda t, n: late(t, n, 0.1, 0.5, at=0.75)))
    assert first(findings) == "kl_runaway" and findings[0].severity == 45
    assert diagnose(history(kl=lambda t, n: None)) == []          # β = 0: no KL measured, nothing to say


def test_truncation_needs_the_limit_from_the_config():
    cut = history(completion_length=lambda t, n: 4.0)
    assert diagnose(cut) == []                                    # 4 tokens may be 3 digits and <eos>: unknown
    findings = diagnose(cut, config=GRPOConfig(max_completion_length=4))
    assert first(findings) == "completion_truncated"
    assert ("max_completion_length", "4 → 8") == findings[0].fixes[0][:2]
    assert ("mask_truncated_completions", "True") == findings[0].fixes[1][:2]
    assert diagnose(cut, config=GRPOConfig(max_completion_length=8)) == []


def test_masking_is_not_suggested_when_nearly_every_answer_is_cut():
    # lesson 09b's case 6: 98 % cut, the right answers included; masking them would leave no gradient
    def fixes(share):
        rows = history(completion_length=lambda t, n: 2.0, truncated_fraction=lambda t, n: share)
        top = diagnose(rows, config=GRPOConfig(max_completion_length=2))[0]
        assert top.name == "completion_truncated"
        return [fix[0] for fix in top.fixes]
    assert "mask_truncated_completions" not in fixes(0.98)
    assert "mask_truncated_completions" not in fixes(0.9)
    assert fixes(0.5) == ["max_completion_length", "mask_truncated_completions", "loss_type"]


def test_clip_with_one_iteration_is_itself_a_sign():
    small_clip = history(clip_fraction=lambda t, n: 0.01)
    assert diagnose(small_clip) == []
    assert first(diagnose(small_clip, config=GRPOConfig(num_iterations=1))) == "clip_on_policy"
    assert diagnose(small_clip, config=GRPOConfig(num_iterations=2)) == []


def test_reward_up_while_held_out_accuracy_falls():
    evals = [{"step": 0, "accuracy": 0.5}, {"step": 20, "accuracy": 0.7}, {"step": 40, "accuracy": 0.6},
             {"step": 60, "accuracy": 0.55}]
    findings = diagnose(history(), evals=evals)
    assert first(findings) == "reward_up_accuracy_down" and findings[0].severity == 80
    assert findings[0].evidence["metric"] == "heldout_accuracy"
    assert findings[0].lesson == "07_reward_design"
    rising = [dict(e, accuracy=0.5 + e["step"] / 200) for e in evals]
    assert diagnose(history(), evals=rising) == []


def test_fixes_use_the_configs_values():
    findings = diagnose(history(**SICK["reward_collapse"]), config=GRPOConfig(learning_rate=2e-3))
    assert findings[0].fixes[0][:2] == ("learning_rate", "2e-3 → 2e-4")
    assert "beta" not in [fix[0] for fix in findings[0].fixes]      # lesson 09: β = 0.4 did not prevent it
    assert diagnose(history(**SICK["reward_collapse"]))[0].fixes[0][1] == "divide by 10"


def test_a_jsonl_file_gives_the_same_findings(tmp_path):
    rows = history(**SICK["reward_collapse"])
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert diagnose(str(path)) == diagnose(rows)
    assert diagnose(path)[0].name == "reward_collapse"


def test_plot_evidence_draws_one_panel_per_metric():
    from matplotlib.figure import Figure

    rows = history(**SICK["reward_collapse"], **SICK["kl_runaway"])
    findings = diagnose(rows)
    fig = plot_evidence(rows, findings)
    assert isinstance(fig, Figure)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == [f.name for f in findings]
    assert [ax.get_title() for ax in plot_evidence(history(), []).axes] == ["no problems found"]


def test_coverage_says_what_could_not_be_checked():
    lines = coverage(history(kl=lambda t, n: None))
    assert len([line for line in lines if line.startswith(("checked", "not checked"))]) == len(RULES)
    assert "not checked: the KL to π_ref stays moderate (no kl logged)" in lines


# --- TRL's trainer_state.json ----------------------------------------------------------------
def trl_state(n=12, every=10, **curves):
    """A TRL trainer_state.json: a log row every ``every`` optimizer steps, an eval row and the summary row."""
    rows = []
    for i, ours in enumerate(history(n, **curves), start=1):
        rows.append({"loss": ours["loss"], "grad_norm": ours["grad_norm"], "learning_rate": 3e-4 * (1 - i / n),
                     "num_tokens": 1000.0 * i, "completions/mean_length": ours["completion_length"],
                     "completions/min_length": 2.0, "completions/max_length": 4.0,
                     "completions/mean_terminated_length": ours["completion_length"] - 0.1,
                     "completions/clipped_ratio": curves.get("clipped", lambda t, n: 0.0)(i, n),
                     "rewards/accuracy_reward/mean": ours["reward_mean"], "rewards/accuracy_reward/std": 0.49,
                     "reward": ours["reward_mean"], "reward_std": ours["reward_std"],
                     "frac_reward_zero_std": ours["dead_group_fraction"], "kl": ours["kl"], "entropy": ours["entropy"],
                     "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0,
                     "clip_ratio/region_mean": ours["clip_fraction"], "epoch": i / n, "step": i * every})
        if i == n // 2:
            rows.append({"eval_loss": 0.1, "eval_reward": 0.6, "epoch": i / n, "step": i * every})
    rows.append({"train_runtime": 12.0, "train_loss": 0.01, "epoch": 1.0, "step": n * every})
    return {"global_step": n * every, "max_steps": n * every, "logging_steps": every, "log_history": rows}


def test_trl_names_map_to_ours(tmp_path):
    path = tmp_path / "trainer_state.json"
    state = trl_state()
    path.write_text(json.dumps(state))
    rows, evals, config = load_run(path)
    assert len(rows) == 12 and evals is None and config is None           # the eval and summary rows are dropped
    trl = state["log_history"][0]
    assert rows[0]["step"] == 10 and rows[0]["epoch"] == pytest.approx(1 / 12)
    expected = {"reward_mean": "reward", "reward_std": "reward_std", "dead_group_fraction": "frac_reward_zero_std",
                "kl": "kl", "entropy": "entropy", "clip_fraction": "clip_ratio/region_mean",
                "completion_length": "completions/mean_length", "truncated_fraction": "completions/clipped_ratio",
                "completion_length_min": "completions/min_length", "completion_length_max": "completions/max_length",
                "completion_length_terminated": "completions/mean_terminated_length", "grad_norm": "grad_norm", "loss": "loss", "learning_rate": "learning_rate",
                "reward/accuracy_reward": "rewards/accuracy_reward/mean"}
    assert {ours: rows[0][ours] for ours in expected} == {ours: trl[name] for ours, name in expected.items()}
    assert set(TRL_NAMES.values()) <= set(rows[0])
    assert "accuracy" not in rows[0] and "rewards/accuracy_reward/std" not in rows[0]
    assert load_run(state["log_history"])[0] == rows                       # the log_history list alone
    assert diagnose(path) == []


def test_a_sick_trl_run_is_diagnosed(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(trl_state(kl=SICK["kl_runaway"]["kl"])))
    assert first(diagnose(path)) == "kl_runaway"
    path.write_text(json.dumps(trl_state(clipped=lambda t, n: 0.5)))      # TRL counts the cut completions
    findings = diagnose(path)
    assert first(findings) == "completion_truncated" and findings[0].evidence["metric"] == "truncated_fraction"


# --- bad input -------------------------------------------------------------------------------
def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bad_files_are_named_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"^history: \S*empty\.jsonl is empty\. Fix: "):
        diagnose(write(tmp_path, "empty.jsonl", "\n"))
    good = "".join(json.dumps(r) + "\n" for r in history(8))
    broken = good.replace("\n", "\n{\"step\": 9, \"reward_mean\n", 1)
    with pytest.raises(ValueError,
                       match=r"^history: \S*broken\.jsonl line 2 is not JSON \(.*\)\. Fix: repair or delete"):
        diagnose(write(tmp_path, "broken.jsonl", broken))
    with pytest.raises(ValueError,
                       match=r"^history: \S*other\.json is neither grpo_edu metrics nor TRL's trainer_state"):
        diagnose(write(tmp_path, "other.json", json.dumps({"model": "gpt2", "lr": 3e-4})))
    with pytest.raises(ValueError, match=r"^history: \S*nowhere\.jsonl does not exist"):
        diagnose(tmp_path / "nowhere.jsonl")
    with pytest.raises(ValueError, match=r"^history: \S* is a folder"):
        diagnose(tmp_path)


def test_histories_without_what_the_rules_need_are_refused():
    with pytest.raises(ValueError, match=r"^history: holds no steps"):
        diagnose([])
    with pytest.raises(ValueError, match=rf"^history: has 3 logged steps; a diagnosis needs at least {MIN_STEPS}"):
        diagnose(history(3))
    with pytest.raises(ValueError, match=r"^history: row 1 has no reward_mean"):
        diagnose([{"step": t, "score": 1.0} for t in range(1, 9)])
    with pytest.raises(ValueError, match=r"^history: row 5 has step 1 after step 4\. Fix: .*two runs"):
        diagnose(history(4) + history(4))
    with pytest.raises(ValueError, match=r"^history: step 3: kl is 'high', not a number"):
        diagnose(history(kl=lambda t, n: "high" if t == 3 else 0.1))
    with pytest.raises(ValueError, match=r"^evals: is not a list of \{'step', 'accuracy'\} records of held-out"):
        diagnose(history(), evals=[{"step": 0, "accuracy": 50}])
    with pytest.raises(ValueError, match=r"^config: is a str"):
        diagnose(history(), config="lr=3e-4")


# --- real runs on the bundled model ----------------------------------------------------------
def real_run(**config):
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    funcs = config.pop("reward_funcs", None)
    trainer = GRPOTrainer(GRPOConfig(eval_size=0, **config), reward_funcs=funcs)
    trainer.train(progress=False)
    return trainer


# The clinic's real runs (the healthy run finds nothing, lr 3e-3 → reward_collapse, G = 2 → few_live_groups,
# β = 10 → no_progress) are checked by lessons 09 and 09b, whose check_claim cells run them under the same test
# command: a test file does not train them again. What only a test checks stays here.
def test_a_runs_checkpoint_reads_back_as_the_run_it_holds(tmp_path):
    trainer = real_run(total_training_steps=8, output_dir=str(tmp_path / "run"))
    state = tmp_path / "run" / "checkpoint-000008" / "trainer_state.json"
    rows, evals, config = load_run(state)
    assert rows == json.loads(json.dumps(trainer.history)) and config == trainer.config.to_dict()
    assert diagnose(state) == diagnose(trainer.history, config=trainer.config)


def test_a_constant_reward_gives_no_signal():
    constant = [lambda prompts, completions, **kw: [1.0] * len(completions)]
    trainer = real_run(total_training_steps=20, reward_funcs=constant)
    findings = diagnose(trainer.history)
    assert first(findings) == "no_reward_signal", format_findings(findings)
    assert "<lambda> returned the same mean reward on every step" in findings[0].causes[0]


def test_subtraction_on_the_addition_model_is_never_paid():
    trainer = real_run(total_training_steps=20, task="subtraction")
    findings = diagnose(trainer.history)
    assert first(findings) == "reward_always_zero", format_findings(findings)


# --- the bundled TRL runs (assets/trl-runs, made by python -m grpo_edu.beyond.trl_example) ---------------
def test_the_bundled_trl_runs_read_as_trl_logs_and_get_the_right_diagnosis():
    from grpo_edu.training.model.models import ASSETS

    runs = ASSETS / "trl-runs"
    for name in ("healthy", "lr-too-high"):
        record = json.loads((runs / name / "trainer_state.json").read_text())
        assert record["made_by"].startswith("python -m grpo_edu.beyond.trl_example (trl ")
        assert {"reward", "frac_reward_zero_std", "kl", "completions/mean_length"} <= set(record["log_history"][0])
    assert diagnose(runs / "healthy" / "trainer_state.json") == []
    assert first(diagnose(runs / "lr-too-high" / "trainer_state.json")) == "reward_collapse"


def test_the_trl_example_script_refuses_an_unknown_run_before_importing_trl(capsys):
    from grpo_edu.beyond.trl_example import main

    assert main(["nonsense"]) == 2
    assert "unknown run 'nonsense'; choose from healthy, lr-too-high" in capsys.readouterr().err


# --- a diverged run is never called healthy ---------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_run_whose_last_steps_are_not_finite_is_reported_diverged(tmp_path, value):
    rows = history()
    for row in rows[-5:]:                                              # the last 5 steps blew up
        row.update(loss=value, kl=value, grad_norm=value)
    findings = diagnose(rows)
    assert first(findings) == "non_finite"
    assert findings[0].symptom == "the run diverged at step 56: loss, kl, grad_norm became NaN or ∞"
    assert "at 5 of 60 logged steps" in findings[0].evidence["summary"]
    path = tmp_path / "m.jsonl"                                        # as JSONL (json writes NaN / Infinity)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert first(diagnose(path)) == "non_finite"
    assert format_findings(diagnose(path)) != "no problems found"


def test_a_non_finite_reward_names_the_step_it_diverged_at():
    rows = history()
    rows[40]["reward_mean"] = float("nan")
    with pytest.raises(ValueError, match=r"^history: step 41: reward_mean is nan: the run diverged there.*the rows "
                                         r"up to step 40"):
        diagnose(rows)


@pytest.mark.parametrize("key, value", [("dead_group_fraction", 1.5), ("clip_fraction", -0.2), ("accuracy", 7.0)])
def test_a_fraction_outside_zero_to_one_is_refused(key, value):
    rows = history()
    rows[10][key] = value
    with pytest.raises(ValueError, match=rf"^history: step 11: {key} is {value!r}, but it is a fraction \(0 to 1\)"):
        diagnose(rows)


def test_a_metric_that_blew_up_without_reaching_infinity_is_a_diverged_run():
    rows = history()
    for row in rows[-4:]:                                              # huge, still finite
        row.update(grad_norm=3.4e17, loss=-2e13)
    findings = diagnose(rows)
    assert first(findings) == "non_finite"
    assert findings[0].symptom == ("the run diverged at step 57: loss, grad_norm became astronomically large "
                                   "(±1e12 or more)")
    rows[-1]["kl"] = float("nan")                                      # both kinds: the symptom says both
    assert diagnose(rows)[0].symptom.endswith("became NaN or ∞ or astronomically large (±1e12 or more)")
    big_reward = history()
    big_reward[30]["reward_mean"] = 5e12                               # a reward's scale is the user's: no finding
    assert all(f.name != "non_finite" for f in diagnose(big_reward))


@pytest.mark.parametrize("key, value", [("kl", -0.3), ("completion_length", -4.0), ("grad_norm", -1.0),
                                        ("entropy", -0.5), ("reward_std", -0.1)])
def test_a_negative_value_that_cannot_be_negative_is_refused(key, value):
    rows = history()
    rows[20][key] = value
    with pytest.raises(ValueError, match=rf"^history: step 21: {key} is {value!r}, but it cannot be negative"):
        diagnose(rows)
    rows[20][key] = -1e-9                                              # rounding, not damage
    diagnose(rows)


def test_truncation_is_read_from_the_logged_share_at_the_end_of_the_run():
    # grpo_edu's trainer logs truncated_fraction (as TRL logs completions/clipped_ratio)
    cut_at_the_end = history(truncated_fraction=lambda t, n: 0.3, completion_length=lambda t, n: 3.0)
    findings = diagnose(cut_at_the_end, config={"max_completion_length": 8})    # well below the limit on average
    assert first(findings) == "completion_truncated"
    assert findings[0].evidence["summary"].startswith("30% of completions cut at the length limit over steps 46–60")
    # a start that rambles past the limit, ended by a run that learned to stop, is not a finding
    rambling_start = history(truncated_fraction=lambda t, n: late(t, n, 0.3, 0.02))
    assert all(f.name != "completion_truncated" for f in diagnose(rambling_start, config={"max_completion_length": 4}))


def test_a_model_that_never_ends_is_named_first():
    """Lesson 16's clinic: every answer at the cap with no end token and nothing paid is ``never_ends`` (above
    ``reward_always_zero``, its consequence); cut answers that are still paid stay ``completion_truncated``."""
    never = dict(SICK["reward_always_zero"], completion_length=lambda t, n: 24.0, truncated_fraction=lambda t, n: 1.0)
    findings = diagnose(history(**never), config=GRPOConfig(max_completion_length=24))
    assert [f.name for f in findings[:2]] == ["never_ends", "reward_always_zero"]
    assert findings[0].lesson == "16_real_text" and "100% of answers cut" in findings[0].evidence["summary"]
    assert "chat template" in findings[0].causes[0]
    # learning to end during the run (the tail ends) is not "never": the start alone was cut
    ends_later = dict(never, truncated_fraction=lambda t, n: late(t, n, 1.0, 0.1))
    assert "never_ends" not in [f.name for f in diagnose(history(**ends_later))]
    # every answer cut yet paid (a cap too small for a right answer's end): truncation, not never-ending
    paid = dict(completion_length=lambda t, n: 2.0, truncated_fraction=lambda t, n: 1.0)
    assert first(diagnose(history(**paid), config=GRPOConfig(max_completion_length=2))) == "completion_truncated"
