"""The long-answer task (sums written with or without working) and the length metrics a step logs."""

import pytest
import torch

from grpo_edu.training.rollouts.rollout import Rollout, length_stats
from grpo_edu.training.task.sums import final_answer, terms_of, worked_solution
from grpo_edu.training.task.tasks import get_task

SUMS = get_task("sums")


def test_a_worked_solution_is_a_running_sum_then_the_answer():
    assert worked_solution([12, 7, 30]) == "12+7=19;19+30=49#49"
    assert worked_solution([5, 5]) == "5+5=10#10"
    assert terms_of("8+53+9+23=") == [8, 53, 9, 23]
    assert SUMS.row([3, 8, 5]) == {"prompt": "3+8+5=", "answer": "16"}
    assert SUMS.max_answer_chars == len("9+9=18;18+9=27;27+9=36;36+9=45;45+9=54#54") == 41


@pytest.mark.parametrize("completion, correct, formed, working", [
    ("12+7=19;19+30=49#49", True, True, True),
    ("#49", True, True, True),                           # a direct answer: no working, nothing wrong in it
    ("12+7=20;20+30=49#49", True, True, False),          # wrong working, right total: still "correct"
    ("12+7=19;19+30=50#50", False, True, False),
    ("12+7=19#26", False, True, False),                  # stops a step early
    ("12+7=19;19+30=49", False, False, False),           # no answer marker
    ("12+7=19;19+30=49#049", False, True, True),         # "049" is not "49"; the working is right
    ("12+7=19;;19+30=49#49", True, False, False),        # the answer is found, the format is broken
    ("7+12=19;19+30=49#49", True, True, False),          # the terms out of order
])
def test_correct_well_formed_and_right_working_are_three_checks(completion, correct, formed, working):
    assert SUMS.is_correct(completion, "49") is correct
    assert SUMS.well_formed(completion) is formed
    assert SUMS.working_is_right("12+7+30=", completion) is working


def test_the_answer_is_what_follows_the_last_marker():
    assert final_answer("1+2=3#3") == "3" and final_answer("#4#5") == "5" and final_answer("1+2=3") is None
    assert SUMS.reward(["12+7+30="] * 2, ["#49", "#48"], answer=["49", "49"]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="^answer: has 1 entries for 2 completions"):
        SUMS.reward(["a", "b"], ["#1", "#2"], answer=["1"])


def test_the_splits_are_fixed_disjoint_and_span_two_to_six_terms():
    heldout, train = SUMS.split("heldout"), SUMS.split("train")
    assert len(heldout) == 500 and len(train) == 20_000
    assert not {r["prompt"] for r in heldout} & {r["prompt"] for r in train}
    sizes = {split: {len(terms_of(r["prompt"])) for r in rows} for split, rows in (("train", train), ("heldout", heldout))}
    assert sizes["train"] == sizes["heldout"] == {2, 3, 4, 5, 6}
    assert {int(t) for r in heldout for t in terms_of(r["prompt"])} == set(range(1, 10))
    assert all(str(sum(terms_of(r["prompt"]))) == r["answer"] for r in heldout[:100])
    assert SUMS.split("heldout", 3) == heldout[:3]


def test_the_warm_up_shows_a_seeded_mix_of_worked_and_direct_answers():
    from grpo_edu.training.model.make_model import _demonstrations, task_chars

    shown = _demonstrations(SUMS, 0.3, seed=0)
    worked = sum("+" in r["answer"] for r in shown) / len(shown)
    assert worked == pytest.approx(0.3, abs=0.02)
    assert shown == _demonstrations(SUMS, 0.3, seed=0)                       # the same choice each time
    assert all(SUMS.is_correct(r["answer"], str(sum(terms_of(r["prompt"])))) for r in shown[:200])
    assert _demonstrations(get_task("addition"), -1.0, 0)[0]["answer"].isdigit()
    assert task_chars([SUMS]).endswith(";#") and task_chars([get_task("addition")]) == task_chars([])


def test_make_model_refuses_what_cannot_work_before_any_training(tmp_path):
    from grpo_edu.training.model.make_model import build_tiny_model

    with pytest.raises(ValueError, match=r"^max_positions: is 32, but a prompt with <bos>, its longest answer and "
                                         r"<eos> need \d+\. Fix: pass --max-positions"):
        build_tiny_model(tmp_path / "m", task="sums")
    with pytest.raises(ValueError, match=r"^worked_fraction: task 'addition' has no written working to show"):
        build_tiny_model(tmp_path / "m", task="addition", worked_fraction=0.5)
    with pytest.raises(ValueError, match=r"^worked_fraction: must be a share in \[0, 1\]"):
        build_tiny_model(tmp_path / "m", task="sums", worked_fraction=1.5, max_positions=64)
    with pytest.raises(ValueError, match=r"^stop_metric: "):
        build_tiny_model(tmp_path / "m", task="sums", stop_metric="loss", max_positions=64)
    assert not (tmp_path / "m").exists()


def _rollout(rows, eos=2, pad=0):
    """A Rollout whose completions are ``rows`` of token ids (pad after the first <eos>)."""
    T = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (T - len(r)) for r in rows])
    is_eos = ids == eos
    mask = (~((is_eos.cumsum(1) - is_eos.long()) > 0)).long()
    n = len(rows)
    return Rollout(prompts=["p"] * n, num_generations=1, prompt_ids=torch.ones(n, 1, dtype=torch.long),
                   prompt_mask=torch.ones(n, 1, dtype=torch.long), completion_ids=ids, completion_mask=mask,
                   logprobs=torch.zeros(n, T), completions=[""] * n)


def test_length_stats_by_hand():
    # lengths with <eos>: 3, 5 (cut: no <eos> within T = 5), 2, 5 (ends with <eos> exactly at the limit)
    rollout = _rollout([[5, 6, 2], [5, 6, 7, 8, 9], [5, 2], [5, 6, 7, 8, 2]])
    stats = length_stats(rollout, eos_token_id=2, correct=[True, False, False, True])
    assert stats == {"completion_length": 3.75, "completion_length_min": 2, "completion_length_max": 5,
                     "truncated_fraction": 0.25, "completion_length_terminated": pytest.approx(10 / 3),
                     "completion_length_correct": 4.0, "completion_length_wrong": 3.5}
    none_right = length_stats(rollout, 2, correct=[False] * 4)
    assert none_right["completion_length_correct"] is None and none_right["completion_length_wrong"] == 3.75
    all_cut = length_stats(_rollout([[5, 6], [7, 8]]), 2)
    assert all_cut["truncated_fraction"] == 1.0 and all_cut["completion_length_terminated"] is None
    assert "completion_length_correct" not in all_cut


def test_a_step_logs_lengths_right_and_wrong_and_the_truncated_share(random_model, char_tokenizer):
    from grpo_edu import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=4, max_completion_length=3, eval_size=0,
                                     total_training_steps=1), model=random_model, tokenizer=char_tokenizer)
    m = trainer.step()
    assert 1 <= m["completion_length_min"] <= m["completion_length"] <= m["completion_length_max"] <= 3
    assert 0 <= m["truncated_fraction"] <= 1
    assert (m["completion_length_wrong"] is None) == (m["accuracy"] == 1.0)
    if m["truncated_fraction"] == 1:                                  # nothing ended: every answer is 3 tokens
        assert m["completion_length_min"] == 3 and m["completion_length_terminated"] is None


def test_the_sums_preset_names_only_what_differs_and_flags_beside_it_win(monkeypatch):
    from grpo_edu import GRPOConfig
    from grpo_edu.training.trainers.config import PRESETS
    from grpo_edu.training.model.models import locate_model, sums_model_dir

    config = GRPOConfig.preset("sums", seed=2)
    assert (config.task, config.model, config.max_completion_length, config.seed) == ("sums", "bundled-sums", 42, 2)
    assert config.max_completion_length == SUMS.max_answer_chars + 1           # the longest worked answer fits
    assert all(getattr(GRPOConfig(), k) != v for k, v in PRESETS["sums"].items())   # nothing restated
    assert locate_model("bundled-sums") == (str(sums_model_dir()), {"kind": "bundled"})
    with pytest.raises(ValueError, match=r"^preset: unknown preset 'long'\. Fix: use one of calc, sums"):
        GRPOConfig.preset("long")

    from grpo_edu import cli

    parser = cli.build_parser()
    cli._apply_preset(parser, ["train", "--preset", "sums", "--total-training-steps", "7"])
    args = parser.parse_args(["train", "--preset", "sums", "--total-training-steps", "7"])
    config = cli._config_from(args)
    assert (config.task, config.model, config.total_training_steps) == ("sums", "bundled-sums", 7)
    plain = cli._config_from(cli.build_parser().parse_args(["train"]))
    assert plain.task == "addition" and plain.max_completion_length == 4         # no preset: the defaults


def test_a_length_limit_no_answer_fits_in_is_refused_before_any_model_loads(monkeypatch):
    from grpo_edu import GRPOConfig, GRPOTrainer
    from grpo_edu.training.trainers import trainer

    monkeypatch.setattr(trainer, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("a model was loaded"))
    assert SUMS.min_completion_tokens == len("#2") + 1                  # 1+1: the smallest sum, "#2<eos>"
    with pytest.raises(ValueError, match=r"^max_completion_length: is 2, but no answer to task 'sums' fits in fewer "
                                         r"than 3 tokens .*Fix: give it at least 3; 42 holds the longest answer"):
        GRPOTrainer(GRPOConfig.preset("sums", max_completion_length=2))
