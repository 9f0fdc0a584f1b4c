"""Verifiable tasks: fixed splits, an exact checker, and a prompt loader that fails early."""

import csv
import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from grpo_edu.training.task.tasks import TASKS, PromptFileNotFoundError, get_task, load_prompts


def _solve(prompt):
    """Independent reference: compute the answer from the prompt text (a word problem: its two numbers, and its
    verb for the operation)."""
    if not prompt.endswith("="):
        a, b = (int(n) for n in re.findall(r"\d+", prompt))
        adds = any(verb in prompt for verb in ("buys", "gave", "又买了", "又给了"))
        return str(a + b if adds else a - b)
    expression = prompt.rstrip("=")
    op = "+" if "+" in expression else "-"
    a, *rest = (int(x) for x in expression.split(op))
    return str(a + sum(rest) if op == "+" else a - sum(rest))        # sums: any number of terms


# --- splits -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TASKS))
def test_splits_are_correct_disjoint_and_deterministic(name):
    task = get_task(name)
    train, heldout = task.split("train"), task.split("heldout")
    assert len(heldout) == 500
    train_prompts = {r["prompt"] for r in train}
    heldout_prompts = {r["prompt"] for r in heldout}
    assert len(train_prompts) == len(train) and len(heldout_prompts) == len(heldout)  # no repeats
    assert not train_prompts & heldout_prompts
    assert all(r["answer"] == _solve(r["prompt"]) for r in train + heldout)
    assert all(len(r["answer"]) <= task.max_answer_chars for r in train + heldout)
    assert task.split("train") == train and task.split("heldout") == heldout


def test_split_sizes_and_operand_ranges():
    addition = get_task("addition")
    assert len(addition.split("train")) == 8100 - 500
    operands = {int(x) for r in addition.split("train") for x in r["prompt"][:-1].split("+")}
    assert operands == set(range(10, 100))
    assert get_task("addition").row(12, 34) == {"prompt": "12+34=", "answer": "46"}
    subtraction = get_task("subtraction").split("train") + get_task("subtraction").split("heldout")
    assert len(subtraction) == 90 * 91 // 2  # pairs with a >= b
    assert min(int(r["answer"]) for r in subtraction) == 0
    assert len(get_task("addition3").split("train")) == 20_000
    assert get_task("addition3").max_answer_chars == 4


def test_first_n_rows_are_a_prefix_of_the_shuffled_split():
    task = get_task("addition")
    assert task.split("heldout", n=7) == task.split("heldout")[:7]
    sums = [int(r["answer"]) for r in task.split("train", n=200)]
    assert sums != sorted(sums)  # shuffled, not in operand order


def test_splits_are_the_same_in_a_fresh_interpreter():
    code = "from grpo_edu.training.task.tasks import get_task; print(get_task('addition').split('heldout', n=5))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(get_task("addition").split("heldout", n=5))


def test_split_rejects_bad_arguments():
    task = get_task("addition")
    with pytest.raises(ValueError, match="split"):
        task.split("test")
    with pytest.raises(ValueError, match="n:"):
        task.split("train", n=0)


# --- checking answers -------------------------------------------------------------------


@pytest.mark.parametrize("completion, expected", [
    ("46", True), (" 46", True), ("46 \n", True),
    ("47", False), ("046", False), ("46.0", False), ("4 6", False), ("", False), ("   ", False),
])
def test_is_correct_exact_match_after_strip(completion, expected):
    assert get_task("addition").is_correct(completion, "46") is expected


@given(answer=st.integers(0, 198), left=st.text(" \t\n", max_size=3),
       right=st.text(" \t\n", max_size=3), other=st.integers(0, 198))
def test_is_correct_ignores_surrounding_whitespace_only(answer, left, right, other):
    task = get_task("addition")
    assert task.is_correct(f"{left}{answer}{right}", str(answer))
    assert task.is_correct(str(other), str(answer)) == (other == answer)


def test_reward_is_trl_style_one_float_per_completion():
    task = get_task("addition")
    prompts = ["12+34="] * 3
    rewards = task.reward(prompts, ["46", " 46", "45"], answer=["46"] * 3, completion_ids=None)
    assert rewards == [1.0, 1.0, 0.0]
    assert all(type(r) is float for r in rewards)
    with pytest.raises(ValueError, match="answer"):
        task.reward(prompts, ["46", "46", "46"], answer=["46"])


def test_get_task_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match=r"task.*'multiplication'.*addition.*subtraction"):
        get_task("multiplication")


def test_importing_tasks_does_not_import_torch():
    code = "import sys, grpo_edu.training.task.tasks; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# --- loading prompts --------------------------------------------------------------------

ROWS = [{"prompt": "1+1=", "answer": 2}, {"prompt": "What is GRPO?", "answer": "a method"}]
EXPECTED = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "What is GRPO?", "answer": "a method"}]


def test_load_prompts_from_json_jsonl_and_csv(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(ROWS), encoding="utf-8")
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n", encoding="utf-8")
    with open(tmp_path / "p.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["prompt", "answer", "source"])
        writer.writeheader()
        writer.writerow({"prompt": "1+1=", "answer": "2", "source": "x"})
    assert load_prompts(tmp_path / "p.json") == EXPECTED
    assert load_prompts(str(tmp_path / "p.jsonl")) == EXPECTED
    assert load_prompts(tmp_path / "p.csv") == [{"prompt": "1+1=", "answer": "2"}]


class FakeDataset:
    """What load_prompts may rely on in a datasets.Dataset: column_names and dict rows."""

    column_names = ["prompt", "answer"]

    def __init__(self, rows):
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)


def test_load_prompts_from_a_dataset_and_a_list():
    assert load_prompts(FakeDataset(ROWS)) == EXPECTED
    assert load_prompts(ROWS) == EXPECTED
    assert load_prompts(get_task("addition").split("heldout", n=3)) == get_task("addition").split(
        "heldout", n=3)
    assert load_prompts([{"prompt": "Say hi"}, {"prompt": "Say bye", "answer": None}]) == [
        {"prompt": "Say hi"}, {"prompt": "Say bye"}]                   # no answers at all is fine


def test_load_prompts_from_a_real_datasets_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([{"prompt": "1+1=", "answer": "2", "source": "x"},
                                     {"prompt": "What is GRPO?", "answer": "a method", "source": "y"}])
    assert load_prompts(ds) == EXPECTED
    path = tmp_path / "d.jsonl"
    ds.to_json(str(path))
    assert load_prompts(path) == EXPECTED


def test_load_prompts_wants_an_answer_in_every_row_or_none(tmp_path):
    """A row without "answer" among rows with one used to load, then raise KeyError('answer') mid-run."""
    rows = [{"prompt": f"{a}+1=", "answer": a + 1} for a in range(5)]
    rows.insert(3, {"prompt": "9+9="})
    path = tmp_path / "gap.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(ValueError, match=r"^source: row 3 of .*gap\.json has no 'answer' while 5 other rows have "
                       r"one \(1 rows lack it\)\. Fix: give every row an 'answer', or none"):
        load_prompts(path)


@pytest.mark.parametrize("name, text", [
    ("sheet.csv", "prompt,answer\r\n1+1=,2\r\n"),
    ("p.json", json.dumps([{"prompt": "1+1=", "answer": "2"}])),
    ("p.jsonl", json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n"),
])
def test_load_prompts_reads_files_with_a_byte_order_mark(tmp_path, name, text):
    """A spreadsheet's CSV starts with a BOM; it used to be refused as having no "prompt" column."""
    (tmp_path / name).write_bytes("\ufeff".encode("utf-8") + text.encode("utf-8"))
    assert load_prompts(tmp_path / name) == [{"prompt": "1+1=", "answer": "2"}]


@pytest.mark.parametrize("bad_row", [{"answer": "2"}, {"prompt": ""}, {"prompt": "  "},
                                     {"prompt": 12}, "1+1="])
def test_load_prompts_names_the_row_without_a_prompt(tmp_path, bad_row):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"prompt": "ok"}, {"prompt": "ok"}, bad_row]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"row 2 of .*bad\.json.*'prompt'"):
        load_prompts(path)


@pytest.mark.parametrize("content, name", [("[]", "e.json"), ("\n\n", "e.jsonl"), ("prompt\n", "e.csv")])
def test_load_prompts_rejects_empty_files(tmp_path, content, name):
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="no rows"):
        load_prompts(tmp_path / name)


def test_load_prompts_rejects_other_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="no rows"):
        load_prompts(FakeDataset([]))
    with pytest.raises(ValueError, match=r"\.txt.*\.json, \.jsonl, \.csv"):
        load_prompts(tmp_path / "prompts.txt")
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(ValueError, match="missing.jsonl") as error:
        load_prompts(missing)
    assert isinstance(error.value, FileNotFoundError) and isinstance(error.value, PromptFileNotFoundError)
    (tmp_path / "obj.json").write_text('{"prompt": "x"}', encoding="utf-8")
    with pytest.raises(ValueError, match="list of objects"):
        load_prompts(tmp_path / "obj.json")
    (tmp_path / "broken.jsonl").write_text('{"prompt": "x"}\n{"prompt": \n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2 of .*broken.jsonl"):
        load_prompts(tmp_path / "broken.jsonl")
    with pytest.raises(ValueError, match="source"):
        load_prompts(42)


def test_load_prompts_names_the_line_of_a_non_utf8_file(tmp_path):
    path = tmp_path / "gbk.jsonl"
    path.write_bytes('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "一加一="}\n'.encode("gbk"))
    with pytest.raises(ValueError, match=r"^source: .*gbk\.jsonl is not UTF-8 text: line 2 holds the byte 0x..\. "
                                         r"Fix: save the file as UTF-8"):
        load_prompts(path)


def test_load_prompts_refuses_a_csv_field_too_long_to_read(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text('prompt,answer\n"' + "x" * 140_000 + '",1\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^source: .*long\.csv is not a CSV file this reader can read \(field "
                                         r"larger than field limit.*Fix: keep each field under 131,072"):
        load_prompts(path)


def test_a_jsonl_prompt_may_hold_a_line_separator_character(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a\u2028b", "answer": "1"}\n', encoding="utf-8")
    assert load_prompts(path) == [{"prompt": "a\u2028b", "answer": "1"}]
