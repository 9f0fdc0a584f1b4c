"""The long-answer model (assets/tiny-sums): its recorded numbers re-measured, and the bands lesson 11 needs."""

import json

import pytest

from grpo_edu.training.model.make_model import _measure
from grpo_edu.training.model.models import load_model_and_tokenizer, sums_model_dir
from grpo_edu.training.task.tasks import get_task

TASK = get_task("sums")


@pytest.fixture(scope="module")
def measured():
    folder = sums_model_dir()
    record = json.loads((folder / "grpo_edu_model.json").read_text())
    model, tokenizer = load_model_and_tokenizer(str(folder))
    numbers = _measure(model, tokenizer, TASK.split("heldout"), TASK, record["eval_samples_per_prompt"],
                       TASK.max_answer_chars + 1)
    return record, numbers


def test_the_recorded_numbers_are_what_the_model_measures(measured):
    record, numbers = measured
    assert record["command"].startswith("python -m grpo_edu.training.model.make_model --out assets/tiny-sums --task sums")
    assert record["in_band"] and record["seed"] == 0 and record["num_parameters"] == 1_052_416
    for key, tolerance in {"heldout_sampled_accuracy": 0.02, "fraction_prompts_0_lt_p_lt_1": 0.03,
                           "well_formed_rate": 0.02, "worked_fraction": 0.03, "truncated_fraction": 0.01}.items():
        assert numbers[key] == pytest.approx(record[key], abs=tolerance), key
    assert abs(numbers["length_median"] - record["length_median"]) <= 2


def test_the_model_has_what_lesson_11_needs(measured):
    _, numbers = measured
    assert 0.25 <= numbers["heldout_sampled_accuracy"] <= 0.60        # right often, not always: GRPO can learn
    assert numbers["fraction_prompts_0_lt_p_lt_1"] > 0.5               # most groups carry a signal
    assert numbers["length_median"] >= 12                              # long answers
    assert numbers["length_p90"] >= 3 * numbers["length_p10"]          # of very different lengths
    assert 0.2 <= numbers["worked_fraction"] <= 0.8                    # working is the model's choice
    assert 0.02 <= 1 - numbers["well_formed_rate"] <= 0.3              # a minority break the format
    assert numbers["length_max"] <= TASK.max_answer_chars + 1          # the full cap cuts almost nothing


def test_the_model_folder_is_small_and_safe():
    folder = sums_model_dir()
    assert sum(p.stat().st_size for p in folder.iterdir()) < 5 * 2**20
    assert not [p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pkl")]
