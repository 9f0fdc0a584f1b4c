"""Lesson 16's clinic (course/experiments/text_clinic.py): each sick setting does what it says, on the words model;
the stored runs read back with their commands; bad names refused before any run."""

import pytest
import torch

from grpo_edu.course.experiments import text_clinic
from grpo_edu.training.model.chat_tokenizer import is_chat_task
from grpo_edu.training.task.tasks import get_task


def test_bare_questions_are_the_words_task_without_its_turns():
    bare = text_clinic.BareQuestions(get_task("words"))
    assert not is_chat_task(bare) and is_chat_task(get_task("words"))
    assert bare.split("heldout", 2) == get_task("words").split("heldout", 2)
    assert bare.is_correct("<think>3+4=7</think><answer>7</answer>", "7")


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_the_pad_is_eos_trainer_takes_every_end_token_out_of_the_loss_only(monkeypatch, mask_truncated):
    """One sampled step of the sick trainer: the rollout its update gets covers no <|im_end|> (the right mask
    covers each ended answer's one), while the rollout the step logs keeps the true mask. With ``mask_truncated``
    the answers cut at the cap leave the loss too, and the ended ones keep every token but their end (a first
    version read the cut answers off the end-less mask, so every answer left the loss and nothing trained)."""
    from grpo_edu.training.rollouts.rollout import finished
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = GRPOConfig.preset("words", batch_size=2, num_generations=8, total_training_steps=1, eval_size=0)
    sick = text_clinic._end_masked_out_trainer(mask_truncated=mask_truncated)(config)
    rollout = sick._sample([r["prompt"] for r in sick.batch_for(1)])
    seen = []
    monkeypatch.setattr(GRPOTrainer, "_update", lambda self, r, advantages, ref: seen.append(r))
    sick._update(rollout, torch.zeros(16), None)
    end = sick.tokenizer.eos_token_id
    is_end = (rollout.completion_ids == end).long()
    ended = finished(rollout, end)
    assert ended.any() and not ended.all()                       # both kinds in the batch
    assert int(is_end.sum()) > 0 and int((rollout.completion_mask * is_end).sum()) == int(is_end.sum())
    assert int((seen[0].completion_mask * is_end).sum()) == 0
    kept = rollout.completion_mask - rollout.completion_mask * is_end
    if mask_truncated:
        kept = kept * ended.unsqueeze(1)
    assert torch.equal(seen[0].completion_mask, kept)
    assert int(seen[0].completion_mask[ended].sum()) > 0


def test_bad_names_are_refused_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="case"):
        text_clinic.run("no_such_case")
    with pytest.raises(ValueError, match="holds no stored runs"):
        text_clinic.stored(tmp_path)
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(SystemExit):                        # an existing --json is refused (argparse, status 2)
        text_clinic.main(["--case", "healthy", "--json", str(tmp_path / "x.json")])


def test_the_stored_runs_carry_their_commands_and_the_cases_they_show():
    runs = text_clinic.stored()
    for (case, seed), run in runs.items():
        assert run["command"].startswith("OMP_NUM_THREADS=1 python -m grpo_edu.course.experiments.text_clinic")
        assert f"--case {case}" in run["command"] and len(run["history"]) == run["steps"]
    assert {("healthy", s) for s in (0, 1, 2)} <= set(runs)
    newline = runs["newline_regex", 0]
    assert max(h["reward_mean"] for h in newline["history"]) == 0.0 and "reward_always_zero" in newline["findings"]


def test_the_runs_are_as_long_as_the_words_preset():
    from grpo_edu.training.trainers.config import PRESETS

    assert text_clinic.STEPS == PRESETS["words"]["total_training_steps"]
