"""The concept diagrams (grpo_edu.course.aids.diagrams): each draws, carries its title, caption and the right
symbols, and shows the library's numbers."""

import dataclasses
import inspect
import re

import numpy as np
import pytest

from grpo_edu.core.advantages import group_advantages
from grpo_edu.course.aids import diagrams
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.trainers.replay import replay_count


def _texts(fig):
    """Every string drawn on ``fig``: its suptitle, its figure texts, and each axes' texts and titles."""
    found = [t.get_text() for t in fig.texts]
    if fig._suptitle is not None:
        found.append(fig._suptitle.get_text())
    for ax in fig.axes:
        found += [t.get_text() for t in ax.texts] + [ax.get_title()]
    return found


def _drawn(fig):
    fig.canvas.draw()                               # lays out the text and mathtext: a bad label raises here
    return "\n".join(_texts(fig))


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_each_diagram_draws_with_a_title_and_a_one_line_caption(name):
    fig = diagrams.DIAGRAMS[name]()
    _drawn(fig)
    assert fig._suptitle is not None and fig._suptitle.get_text().strip()
    captions = [t.get_text() for t in fig.texts if t.get_position()[1] < 0.1]
    assert len(captions) == 1 and "\n" not in captions[0] and captions[0].endswith("."), captions


def test_the_loop_names_its_five_stages_in_order_with_the_papers_symbols():
    text = _drawn(diagrams.grpo_loop(batch_size=4, num_generations=6))
    stages = [text.index(f"{i}. ") for i in range(1, 7)]
    assert stages == sorted(stages)
    for symbol in (r"\pi_\theta", r"\hat{A}", r"\sigma", "B = 4", "G = 6", "4 prompts × 6 answers = 24"):
        assert symbol in text, symbol


def test_the_three_policies_each_get_a_box_and_the_settings_they_are_for():
    text = _drawn(diagrams.three_policies(epsilon=0.3, beta=0.1))
    for symbol in (r"$\pi_\theta$: the policy", r"$\pi_{\theta_{old}}$: the sampler", r"$\pi_{ref}$: the reference",
                   "[0.7, 1.3]", "β = 0.1", r"\Vert"):
        assert symbol in text, symbol


def test_the_advantage_flow_shows_the_librarys_advantages_mean_and_sigma():
    rewards = [1, 0, 0, 0, 1, 1]
    fig = diagrams.advantage_flow(rewards)
    text = _drawn(fig)
    expected = group_advantages(np.array([rewards], dtype=float))[0]
    assert sorted(re.findall(r"^[+-]\d\.\d\d$", text, re.M)) == sorted(f"{a:+.2f}" for a in expected)
    assert "mean = 0.500" in text and f"= {np.std(rewards, ddof=1):.3f}" in text
    left, _, right = fig.axes
    assert [p.get_height() for p in left.patches] == rewards
    assert np.allclose([p.get_height() for p in right.patches], expected)
    assert r"\hat{A}_i" in text and r"\sigma" in text


def test_the_replay_mix_counts_its_rows_with_replay_count():
    fig = diagrams.replay_mix(batch_size=4, num_generations=8, replay_ratio=0.5)
    text = _drawn(fig)
    k = replay_count(32, 0.5)
    squares = [p for p in fig.axes[0].patches if type(p).__name__ == "Rectangle"]
    assert k == 32 and len(squares) == 32 + k
    assert f"k = {k}" in text and f"{k} of the step's {32 + k} rows (50%)" in text


def test_the_defaults_are_the_runs_defaults():
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for draw in (diagrams.grpo_loop, diagrams.three_policies, diagrams.replay_mix):
        for name, parameter in inspect.signature(draw).parameters.items():
            if name != "replay_ratio":                    # GRPOConfig's is 0 (no replay); 0.3 is lesson 06's
                assert parameter.default == defaults[name], (draw.__name__, name)


def test_the_command_writes_every_diagram_and_refuses_a_missing_folder(tmp_path, capsys):
    assert diagrams.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(diagrams.DIAGRAMS)
    assert all((tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in diagrams.DIAGRAMS)
    with pytest.raises(SystemExit):
        diagrams.main(["--out", str(tmp_path / "absent")])
    assert "--out:" in capsys.readouterr().err


def test_exercise_00_2_wants_the_loops_stages_in_the_order_the_diagram_numbers_them():
    from grpo_edu.course.aids.exercises import check

    text = _drawn(diagrams.grpo_loop())
    words = {"prompts": "1. prompts", "sample": "samples", "score": "scores", "advantage": "4. group advantage",
             "update": "5. update"}
    places = [text.index(words[stage]) for stage in diagrams.LOOP_STAGES]
    assert places == sorted(places)                 # the diagram draws the stages in LOOP_STAGES' order
    assert check("00.2", ["prompts", "sample", "score", "advantage", "update"]) is True
    assert check("00.2", ["prompts", "score", "sample", "advantage", "update"]) is False
