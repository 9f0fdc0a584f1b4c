"""The lesson figures and panels: right kind of object, and the numbers the library gives."""

import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import grpo_edu
from grpo_edu.core.advantages import dead_group_probability, group_advantages, rank_advantages
from grpo_edu.core.kl import kl_estimate
from grpo_edu.core.losses import grpo_loss
from grpo_edu.core.schedule import TrainingSchedule
from grpo_edu.course.aids import viz, widgets

SEED_EXAMPLE = dict(dataset_size=2000, batch_size=4, num_generations=8, total_epochs=3, total_training_steps=1000)


def test_import_grpo_edu_loads_no_matplotlib_or_widgets():
    code = ("import sys, grpo_edu; grpo_edu.group_advantages([[1, 0]]); "
            "assert not any(m.split('.')[0] in ('matplotlib', 'ipywidgets', 'torch') for m in sys.modules)")
    root = str(pathlib.Path(grpo_edu.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# --- viz ---------------------------------------------------------------------------------

def test_schedule_timeline_staircase_is_epoch_of():
    schedule = TrainingSchedule(**SEED_EXAMPLE)
    fig = viz.schedule_timeline(schedule)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    staircase, stop_line, other_limit = fig.axes[0].lines
    assert list(staircase.get_xdata()) == list(range(1, 1001))
    assert staircase.get_ydata()[499] == 1 and staircase.get_ydata()[500] == 2
    assert stop_line.get_xdata()[0] == 1000.5 and other_limit.get_xdata()[0] == 1500.5
    assert "stops here" in stop_line.get_label() and "not reached" in other_limit.get_label()


def test_schedule_timeline_one_limit_and_own_axes():
    fig = Figure()
    ax = fig.add_subplot()
    words = TrainingSchedule(dataset_size=1000, batch_size=10, num_generations=4, total_epochs=15)
    assert viz.schedule_timeline(words, ax=ax) is fig
    assert len(ax.lines) == 2 and ax.lines[0].get_ydata()[-1] == 15


@pytest.mark.parametrize("scale", ["group", "none", "rank"])
def test_advantage_bars_heights_are_library_advantages(scale):
    rewards = [1, 0, 0, 1, 0, 0, 0, 1]
    fig = viz.advantage_bars(rewards, scale=scale)
    heights = [bar.get_height() for bar in fig.axes[0].patches]
    expected = rank_advantages([rewards])[0] if scale == "rank" else group_advantages([rewards], scale=scale)[0]
    np.testing.assert_allclose(heights, expected)


def test_advantage_spread_draws_the_exact_distribution():
    from grpo_edu.core.policy_gradient import advantage_distribution

    fig = viz.advantage_spread(p=(0.5, 0.2), num_generations=(2, 8, 32))
    ax = fig.axes[0]
    means = [line for line in ax.lines if line.get_label().endswith("mean of Â, ± 1 std")]
    limits = [line for line in ax.lines if "limit" in line.get_label()]
    assert [list(m.get_xdata()) for m in means] == [[2, 8, 32], [2, 8, 32]]
    np.testing.assert_allclose(means[1].get_ydata(), [advantage_distribution(0.2, g)[1]["mean"] for g in (2, 8, 32)])
    np.testing.assert_allclose([line.get_ydata()[0] for line in limits], [1.0, 2.0])   # √((1 − p)/p)
    vertices = ax.collections[0].get_paths()[0].vertices              # the p = 0.5 band
    at_8 = vertices[np.isclose(vertices[:, 0], 8), 1]
    s = advantage_distribution(0.5, 8)[1]
    assert np.isclose(at_8, s["mean"] + s["std"]).any() and np.isclose(at_8, s["mean"] - s["std"]).any()


def test_dead_group_curves_are_the_formula():
    fig = viz.dead_group_curves((2, 8), p=0.5, G=8)
    g2, g8, point = fig.axes[0].lines
    np.testing.assert_allclose(g8.get_ydata(), dead_group_probability(g8.get_xdata(), 8))
    assert point.get_ydata()[0] == pytest.approx(2 * 0.5 ** 8)


def test_clip_curve_matches_grpo_loss():
    objective, clipped = viz.clip_curve([0.5, 1.0, 1.5], 1.0, epsilon=0.2)
    np.testing.assert_allclose(objective, [0.5, 1.0, 1.2])
    assert clipped.tolist() == [False, False, True]
    objective, clipped = viz.clip_curve([0.5, 1.0, 1.5], -1.0, epsilon=0.2, epsilon_high=0.28)
    np.testing.assert_allclose(objective, [-0.8, -1.0, -1.5])
    assert clipped.tolist() == [True, False, False]


def test_clip_objective_lines():
    fig = viz.clip_objective(epsilon=0.2, epsilon_high=0.28)
    ax = fig.axes[0]
    curves = [line for line in ax.lines if line.get_label().startswith("Â")]
    assert [c.get_label() for c in curves] == ["Â = +1", "Â = -1"]
    i = int(np.argmin(np.abs(curves[0].get_xdata() - 1.0)))
    assert curves[0].get_ydata()[i] == pytest.approx(1.0) and curves[1].get_ydata()[i] == pytest.approx(-1.0)
    assert max(curves[0].get_ydata()) == pytest.approx(1.28)      # capped at 1 + ε_high


def test_kl_estimator_hist_and_token_weights():
    torch.manual_seed(0)
    logprobs, ref = torch.randn(100) * 0.1 - 2, torch.randn(100) * 0.1 - 2
    fig = viz.kl_estimator_hist(logprobs, ref, exact=0.01)
    labels = [p.get_label() for p in fig.axes[0].patches]
    k1_mean = float(kl_estimate(logprobs, ref, kind="k1").mean())
    assert labels[0].startswith(f"k1: mean {k1_mean:.4f}") and len(labels) == 3
    fig = viz.token_weights({"grpo": {"short": 0.25, "long": 0.0625}, "bnpo": {"short": 0.1, "long": 0.1}})
    assert [b.get_height() for b in fig.axes[0].patches] == [0.25, 0.1, 0.0625, 0.1]


def test_one_token_bandit_is_seeded_and_beta_is_a_leash():
    p0, kl0 = viz.one_token_bandit(0.0, steps=60)
    again, _ = viz.one_token_bandit(0.0, steps=60)
    p1, kl1 = viz.one_token_bandit(1.0, steps=60)
    np.testing.assert_array_equal(p0, again)
    assert p0[-1] > 0.8 and kl1[-1] < kl0[-1]
    fig = viz.kl_leash(0.3, steps=20)
    assert len(fig.axes) == 2 and [len(ax.lines) for ax in fig.axes] == [2, 2]


def test_table_text_and_html_are_deterministic():
    table = viz.Table([{"a": 1.23456789, "b": "x"}, {"a": -0.0, "b": None}], title="T")
    assert repr(table) == "T\na      b\n-----  -\n1.235  x\n0      —"
    assert "<td>1.235</td>" in table._repr_html_() and "<caption>T</caption>" in table._repr_html_()


# --- widgets -----------------------------------------------------------------------------

def _table(panel):
    return next(out for out in panel.outputs if isinstance(out, viz.Table))


def _figure(panel):
    return next(out for out in panel.outputs if isinstance(out, Figure))


def test_schedule_panel_shows_the_summary():
    panel = widgets.schedule_panel()
    assert isinstance(panel, widgets.W.Widget)
    expected = TrainingSchedule(**SEED_EXAMPLE, micro_batch_size=8).summary()
    assert {r["quantity"]: r["value"] for r in _table(panel).rows} == expected
    assert len(_figure(panel).axes) == 1
    assert repr(panel) == ("SchedulePanel(dataset_size=2000, batch_size=4, num_generations=8, total_epochs=3, "
                           "total_training_steps=1000, micro_batch_size=8)")


def test_schedule_panel_updates_and_micro_batch_size_follows_the_batch():
    panel = widgets.schedule_panel()
    panel.controls["batch_size"].value = 8
    assert {r["quantity"]: r["value"] for r in _table(panel).rows}["steps_per_epoch"] == 250
    micro = panel.controls["micro_batch_size"]
    assert list(micro.options) == [1, 2, 4, 8, 16, 32, 64] and micro.value == 8           # divisors of 8 × 8
    panel.controls["num_generations"].value = 7                                         # 56 = 2³ · 7
    assert list(micro.options) == [1, 2, 4, 7, 8, 14, 28, 56] and micro.value == 8
    panel.controls["num_generations"].value = 5                                         # 40: 8 still divides
    micro.value = 20
    panel.controls["num_generations"].value = 3                                         # 24: 20 does not; 12 is kept
    assert micro.value == 12
    summary = {r["quantity"]: r["value"] for r in _table(panel).rows}
    assert summary == TrainingSchedule(dataset_size=2000, batch_size=8, num_generations=3, total_epochs=3,
                                       total_training_steps=1000, micro_batch_size=12).summary()
    with pytest.raises(ValueError, match=r"^micro_batch_size: batch_size × G = 4 × 8 = 32 completions do not split "
                                         r"into micro-batches of 12"):
        widgets.schedule_panel(micro_batch_size=12)


def test_schedule_panel_random_walk_never_lands_on_an_error():
    import random

    panel, rng = widgets.schedule_panel(), random.Random(0)
    errors = 0
    for _ in range(150):          # a person nudging sliders: one control, one step left or right
        control = rng.choice(list(panel.controls.values()))
        if isinstance(control, widgets.W.SelectionSlider):
            i = list(control.options).index(control.value) + rng.choice((-1, 1))
            control.value = control.options[min(max(i, 0), len(control.options) - 1)]
        else:
            control.value = min(max(control.value + rng.choice((-1, 1)) * control.step, control.min), control.max)
        errors += any(isinstance(out, viz.Note) for out in panel.outputs)
    assert errors == 0


def test_a_panel_shows_the_librarys_error_in_place_of_its_results():
    panel = widgets.advantage_panel()
    panel.controls["rewards"].value = "1, oops"
    assert isinstance(panel.outputs[0], viz.Note) and panel.outputs[0].text.startswith("rewards:")


def test_advantage_panel_shows_library_advantages():
    panel = widgets.advantage_panel()
    rewards = [1, 0, 0, 1, 0, 0, 0, 1]
    rows = _table(panel).rows
    np.testing.assert_allclose([r["advantage Â"] for r in rows], group_advantages([rewards])[0])
    np.testing.assert_allclose([r["R − μ"] for r in rows], group_advantages([rewards], scale="none")[0])
    panel.controls["scale"].value = "rank"
    np.testing.assert_allclose([r["advantage Â"] for r in _table(panel).rows], rank_advantages([rewards])[0])
    panel.controls["rewards"].value = "1, oops"
    assert "Fix:" in panel.outputs[0].text


def test_dead_group_panel_shows_library_probabilities():
    panel = widgets.dead_group_panel(p=0.8, num_generations=4, batch_size=4)
    values = [r["value"] for r in _table(panel).rows]
    dead = dead_group_probability(0.8, 4)
    assert values == pytest.approx([dead, 4 * dead, dead ** 4])
    panel.controls["num_generations"].value = 16
    assert _table(panel).rows[0]["value"] == pytest.approx(dead_group_probability(0.8, 16))


def test_clip_panel_table_is_grpo_loss():
    panel = widgets.clip_panel()
    for row in _table(panel).rows:
        for adv, key in ((1.0, "objective, Â=+1"), (-1.0, "objective, Â=−1")):
            loss, _ = grpo_loss(torch.tensor([[math.log(row["r"])]]), torch.zeros(1, 1), torch.tensor([adv]),
                                torch.ones(1, 1), epsilon=0.2)
            assert row[key] == pytest.approx(-loss.item(), abs=1e-6)


def test_kl_panel_table_is_the_toy_run():
    panel = widgets.kl_panel(beta=0.5, steps=30)
    rows = _table(panel).rows
    assert [r["β"] for r in rows] == [0.0, 0.5]
    p, kl = viz.one_token_bandit(0.5, steps=30)
    assert rows[1]["KL(π_θ ‖ π_ref)"] == kl[-1] and rows[1]["π_θ(correct) after 30 steps"] == p[-1]


def test_panel_display_publishes_controls_then_results(monkeypatch):
    shown = []

    class Handle:
        def __init__(self, obj):
            self.obj = obj

        def update(self, obj):
            self.obj = obj

    def fake_display(obj, raw=False, display_id=None):
        shown.append(obj)
        return Handle(obj) if display_id else None

    monkeypatch.setattr(widgets, "display", fake_display)
    panel = widgets.dead_group_panel()
    panel._ipython_display_()
    bundle, table, fig = shown
    assert bundle["text/plain"] == "DeadGroupPanel(p=0.5, num_generations=8, batch_size=4)\n" + widgets.STATIC_HINT
    assert "Run All Cells" in widgets.STATIC_HINT
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert isinstance(table, viz.Table) and isinstance(fig, Figure)
    panel.controls["p"].value = 0.9
    handle_table = panel._shown[0][0]
    assert handle_table.obj.rows[0]["value"] == pytest.approx(dead_group_probability(0.9, 8))


def test_lesson_04_exercises_are_computed_by_the_library():
    from grpo_edu.course.aids.exercise_bank import EXERCISES
    from grpo_edu.course.aids.exercises import check

    expected = {"04.1": 1.2, "04.2": 2.56, "04.3": 0.1931, "04.4": 1 / 16}
    for exercise_id, value in expected.items():
        assert EXERCISES[exercise_id].solution() == pytest.approx(value, abs=1e-4)
    assert check("04.1", 1.2) and not check("04.2", 2.7)


# --- lessons 05 and 08: groups, training curves, live plot -------------------------------

def _fake_history(steps=30):
    return [{"step": s, "reward_mean": s / steps, "kl": 0.01 * s, "entropy": 1.0 - s / (2 * steps),
             "dead_group_fraction": 0.25, "completion_length": 4.0, "grad_norm": 2.0} for s in range(1, steps + 1)]


def test_group_table_shows_answers_marks_and_advantages():
    rewards = [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    adv = group_advantages(rewards)
    table = viz.group_table(["1+1=", "2+2="], ["2", "4"], ["2", "3", "", "11", "4", "4", "4", "4"], rewards, adv)
    first, second = table.rows
    assert first["o1"] == f"2 ✓ {adv[0, 0]:+.2f}" and first["o3"] == f"∅ ✗ {adv[0, 2]:+.2f}"
    assert second["o4"] == "4 ✓ 0" and first["μ"] == 0.25 and second["μ"] == 1.0
    with pytest.raises(ValueError, match="group_table"):
        viz.group_table(["1+1="], ["2"], ["2"], rewards, adv)


def test_moving_average_is_a_trailing_mean():
    np.testing.assert_allclose(viz.moving_average([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(viz.moving_average([1, 2, 3], 1), [1, 2, 3])


def test_training_curves_draw_the_history_and_the_evals():
    history = _fake_history()
    evals = [{"step": 0, "accuracy": 0.4}, {"step": 30, "accuracy": 0.8}]
    fig = viz.training_curves(history, evals, smooth=5)
    assert isinstance(fig, Figure) and len(fig.axes) == 6
    raw, smooth, held_out = fig.axes[0].lines
    np.testing.assert_allclose(smooth.get_ydata(), viz.moving_average([m["reward_mean"] for m in history], 5))
    assert list(held_out.get_xdata()) == [0, 30] and list(held_out.get_ydata()) == [0.4, 0.8]
    kl_smooth = fig.axes[1].lines[-1]
    np.testing.assert_allclose(kl_smooth.get_ydata(), viz.moving_average([m["kl"] for m in history], 5))
    assert len(viz.training_curves([], None).axes) == 6          # before the first step: empty panels


def test_compare_runs_one_line_per_run_and_gaps_for_unmeasured():
    a, b = _fake_history(), [{**m, "kl": None} for m in _fake_history()]
    evals = {"a": [{"step": 0, "accuracy": 0.5}, {"step": 30, "accuracy": 0.9}]}
    fig = viz.compare_runs({"a": a, "b": b}, ("reward_mean", "kl", "heldout_accuracy"), evals=evals, smooth=1)
    reward_ax, kl_ax, acc_ax = fig.axes
    assert [line.get_label() for line in reward_ax.lines] == ["a", "b"]
    assert np.isnan(kl_ax.lines[1].get_ydata()).all()
    assert len(acc_ax.lines) == 1 and list(acc_ax.lines[0].get_ydata()) == [0.5, 0.9]
    four = viz.compare_runs({"a": a}, ("reward_mean", "kl", "entropy", "grad_norm"))
    assert sum(ax.get_visible() for ax in four.axes) == 4
    with pytest.raises(ValueError, match="viz.CURVES"):
        viz.compare_runs({"a": a}, ("loss_of_nerve",))


def test_live_plot_redraws_every_k_steps_in_place(monkeypatch):
    shown = []

    def fake_show(figure, handle):
        shown.append((figure, handle))
        return "handle"

    from grpo_edu.course.aids import viz_runs

    monkeypatch.setattr(viz_runs, "_show_in_place", fake_show)   # LivePlot lives there; viz re-exports it
    evals = [{"step": 0, "accuracy": 0.5}]
    live = viz.LivePlot(every=10, evals=evals)
    for m in _fake_history(25):
        live(m)
    assert len(shown) == 2 and shown[0][1] is None and shown[1][1] == "handle"
    assert len(live.history) == 25 and live.figure is shown[-1][0]
    evals.append({"step": 25, "accuracy": 0.9})                    # the trainer appends in place
    live.finish()
    assert len(shown) == 3 and list(live.figure.axes[0].lines[-1].get_ydata()) == [0.5, 0.9]
    with pytest.raises(ValueError, match="every"):
        viz.LivePlot(every=0)


def test_live_plot_outside_ipython_only_keeps_the_figure():
    live = viz.LivePlot(every=1)
    live(_fake_history(1)[0])
    assert isinstance(live.figure, Figure) and live._handle is None


def test_live_plot_as_a_trainer_callback(random_model, char_tokenizer):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    live = viz.LivePlot(every=2)
    config = GRPOConfig(batch_size=2, num_generations=2, total_training_steps=3, eval_size=4)
    trainer = GRPOTrainer(config, model=random_model, tokenizer=char_tokenizer, callbacks=[live])
    live.evals = trainer.evals
    trainer.train(progress=False)
    live.finish()
    assert [m["step"] for m in live.history] == [1, 2, 3] and live.history == trainer.history
    assert [e["step"] for e in live.evals] == [0, 3]


def test_lesson_05_and_08_exercises_are_computed_by_the_library():
    from grpo_edu.course.aids.exercise_bank import EXERCISES
    from grpo_edu.course.aids.exercises import check

    expected = {"05.1": 1.0, "05.2": 1.2907, "05.3": 0.7837, "05.4": 0.4112, "05.5": -0.1875, "08.1": 128, "08.2": 6.329}
    for exercise_id, value in expected.items():
        assert EXERCISES[exercise_id].solution() == pytest.approx(value, abs=1e-4)
    assert check("08.1", 128) and not check("05.4", 0.41)
    assert 0.9 < EXERCISES["08.3"].solution() <= 1.0 and 0.9 < EXERCISES["08.4"].solution() <= 1.0


def test_show_source_prints_the_library_code_numbered(capsys):
    from grpo_edu.core import losses

    viz.show_source(losses.grpo_loss, start="# r_{i,t}", stop="kl = None")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# grpo_edu/core/losses.py · grpo_loss"
    assert "r_{i,t} = π_θ / π_θold" in out[1] and "kl = None" not in "\n".join(out)
    assert all(line[:3].strip().isdigit() and line[3:6] == " | " for line in out[1:])


def test_reward_weights_panel_is_combine_then_group_advantages():
    from grpo_edu.core.advantages import group_advantages
    from grpo_edu.training.task.rewards import brevity_reward, combine, correctness, format_reward

    p = widgets.reward_weights_panel()
    group = list(widgets.REWARD_GROUP)
    for weights in ((0.6, 0.2, 0.2), (0.2, 0.8, 0.0)):
        p.controls["correct"].value, p.controls["brevity"].value, p.controls["fmt"].value = weights
        reward = combine(c=(correctness, weights[0]), b=(brevity_reward(4), weights[1]), f=(format_reward(3), weights[2]))
        R = reward(["12+34="] * 8, group, answer=["46"] * 8)
        assert [row["R"] for row in p.outputs[1].rows] == pytest.approx(R)
        assert [row["Â"] for row in p.outputs[1].rows] == pytest.approx(group_advantages([R])[0].tolist(), abs=1e-6)
    assert p.outputs[1].title == "largest Â: ''"          # brevity 0.8: the empty answer wins


def test_runs_panel_highlights_the_chosen_run():
    history = [{"step": s, "reward_mean": 0.1 * s, "completion_length": 3.0} for s in range(1, 11)]
    evals = {"a": [{"step": 0, "accuracy": 0.5}, {"step": 10, "accuracy": 0.7}],
             "b": [{"step": 0, "accuracy": 0.5}, {"step": 10, "accuracy": 0.1}]}
    p = widgets.runs_panel({"a": history, "b": history}, evals, selected="b")
    assert p.outputs[1].rows[1] == {"quantity": "held-out accuracy, end", "value": 0.1}
    widths = [line.get_linewidth() for line in p.outputs[0].axes[0].get_lines()]
    assert widths == [0.9, 1.8]                           # a faint, b bold
    p.controls["run"].value = "a"
    assert p.outputs[1].rows[1]["value"] == 0.7
    assert [line.get_linewidth() for line in p.outputs[0].axes[0].get_lines()] == [1.8, 0.9]
    assert p.outputs[0]._suptitle.get_text() == "2 runs side by side, 'a' in bold"   # a figure has a title


def test_memory_bars_stack_every_part_to_the_tables_total():
    from grpo_edu.beyond.memory import memory_table

    rows = memory_table()
    fig = viz.memory_bars(rows)
    ax = fig.axes[0]
    parts = [k for k in rows[0] if k not in ("model", "GPUs", "ZeRO stage", "total GiB per GPU")]
    assert len(ax.patches) == len(rows) * len(parts) == 24
    ends = {}
    for patch in ax.patches:                       # each bar ends where the next part starts
        y = round(patch.get_y(), 6)
        ends[y] = max(ends.get(y, 0.0), patch.get_x() + patch.get_width())
    totals = sorted(r["total GiB per GPU"] for r in rows)
    assert sorted(ends.values()) == pytest.approx(totals, abs=0.06)   # the table rounds each part to 0.01
    labels = {t.get_position()[1]: t.get_text() for t in ax.get_yticklabels()}
    assert labels[max(labels)] == "Qwen2.5-0.5B, 1 GPU, ZeRO 0"        # the table's first row on top
    assert labels[min(labels)] == "Qwen2.5-7B, 8 GPUs, ZeRO 3"


def test_length_histograms_count_every_answer_in_its_bin():
    panels = {"before": {"right": [4, 4, 20, 27], "wrong": [4, 9]}, "after": {"right": [27, 27], "wrong": [30]}}
    fig = viz.length_histograms(panels, max_length=42)
    before, after = fig.axes[:2]
    assert [ax.get_title() for ax in (before, after)] == ["before", "after"]
    assert [t.get_text() for t in before.get_legend().get_texts()] == ["right (4)", "wrong (2)"]
    right = before.patches[0].get_path().vertices                     # the step outline of "right"
    heights = {round(float(x) + 0.5): float(y) for x, y in right if float(y) > 0}
    assert heights[4] == 2 and heights[20] == 1 and heights[27] == 1 and 9 not in heights
    assert after.get_xlim() == (0, 43)
    with pytest.raises(ValueError, match="exactly 'right' and 'wrong'"):
        viz.length_histograms({"before": {"right": [4]}})
    with pytest.raises(ValueError, match="panels: is empty"):
        viz.length_histograms({})


def test_token_push_rows_colour_each_token_by_the_sign_and_size_of_its_push():
    import matplotlib.colors as mcolors
    from matplotlib import colormaps

    rows = {"cut": (list("9+1="), [-0.5, -0.5, -1.0, -1.0]), "masked": (list("9+1="), [0.0] * 4),
            "right": (list("#10") + ["<eos>"], [1.0, 1.0, 1.0, 1.0])}
    fig = viz.token_push_rows(rows)
    ax = fig.axes[0]
    colour = [mcolors.to_rgba(b.get_facecolor()) for b in ax.patches]
    assert len(colour) == 12                                          # one box per token, row by row
    half_down, down, zero, up = colour[0], colour[2], colour[4], colour[8]
    assert down[0] > down[2] and up[2] > up[0]                        # down is red, up is blue
    assert min(zero[:3]) > 0.9                                        # no push: white
    assert sum(half_down[:3]) > sum(down[:3])                         # half the push: a lighter red
    scale_ends = colormaps["RdBu"](0.0), colormaps["RdBu"](1.0)     # the largest |push| (1.0) sets the scale
    assert (down, up) == (pytest.approx(scale_ends[0]), pytest.approx(scale_ends[1]))
    assert [t.get_text() for t in ax.texts][:5] == ["9", "+", "1", "=", "total -3"]
    clipped = viz.token_push_rows(rows, scale=0.5).axes[0]            # ±0.5 at full colour, ±1.0 saturates
    clipped_colour = [mcolors.to_rgba(b.get_facecolor()) for b in clipped.patches]
    assert clipped_colour[0] == pytest.approx(scale_ends[0]) and clipped_colour[2] == pytest.approx(scale_ends[0])
    with pytest.raises(ValueError, match="^scale: is 0"):
        viz.token_push_rows(rows, scale=0)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["cut", "masked", "right"]
    with pytest.raises(ValueError, match="one push per token"):
        viz.token_push_rows({"cut": (list("9+1="), [0.1])})
    with pytest.raises(ValueError, match="rows: is empty"):
        viz.token_push_rows({})
