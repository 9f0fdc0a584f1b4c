"""Exact step labels of the sums model's working, and GRPO's advantages from step rewards (DeepSeekMath §4.1.3)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_edu.core.advantages import group_advantages
from grpo_edu.core.process_advantages import process_advantages
from grpo_edu.training.task.sums import SumsTask, worked_solution
from grpo_edu.training.task.sums_steps import first_error, right_answer_wrong_working, step_labels, step_spans


# ---- step labels, by hand --------------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt, completion, labels", [
    ("3+8+5=", "3+8=11;11+5=16#16", [1, 1, 1]),          # a careful student
    ("3+8+5=", "#16", [1]),                               # a direct answer, right
    ("3+8+5=", "#17", [0]),                               # a direct answer, wrong
    ("3+8+5=", "3+8=12;12+5=16#16", [0, 0, 1]),           # errors that cancel: right answer, two wrong steps
    ("3+8+5=", "3+8=12;12+5=17#17", [0, 1, 1]),           # one slip, carried on correctly: the answer is wrong
    ("3+8+5=", "3+8=11;11+4=15#15", [1, 0, 1]),           # adds the wrong term
    ("3+8+5=", "3+8=11;12+5=17#17", [1, 0, 1]),           # starts from a number it did not reach
    ("3+8+5=", "3+8=11#16", [1, 1]),                      # stops early, adds the rest in its head
    ("3+8+5=", "3+8=11#11", [1, 0]),                      # stops early and forgets a term
    ("3+8+5=", "8+3=11;11+5=16#16", [0, 1, 1]),           # not the prompt's order: the first step is wrong
    ("3+8+5=", "3+8=11;11+5=16;16+1=17#17", [1, 1, 0, 1]),  # a step past the last term
    ("3+8+5=", "3+8=11;11+5=16#61", [1, 1, 0]),           # right working, answer copied wrong
])
def test_step_labels_by_hand(prompt, completion, labels):
    assert step_labels(prompt, completion) == labels
    assert len(step_spans(completion)) == len(labels)


def test_spans_cover_the_completion_and_end_on_separators():
    completion = "3+8=11;11+5=16#16"
    spans = step_spans(completion)
    assert "".join(completion[a:b] for a, b in spans) == completion
    assert [completion[b - 1] for a, b in spans[:-1]] == [";", "#"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=2, max_size=6))
def test_a_worked_solution_is_right_at_every_step(terms):
    prompt = "+".join(map(str, terms)) + "="
    completion = worked_solution(terms)
    assert step_labels(prompt, completion) == [1] * len(terms)
    assert SumsTask("sums", "").working_is_right(prompt, completion)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=2, max_size=6), st.data())
def test_one_changed_result_makes_that_step_wrong_and_only_it(terms, data):
    """Changing step j's result makes step j wrong; the next step (which starts from the written result) stays right."""
    prompt = "+".join(map(str, terms)) + "="
    steps = worked_solution(terms).split("#")[0].split(";")
    j = data.draw(st.integers(0, len(steps) - 1))
    a_b, c = steps[j].split("=")
    steps[j] = f"{a_b}={int(c) + data.draw(st.integers(1, 5))}"
    if j + 1 < len(steps):                                  # the next step continues from the written result
        nxt_a, rest = steps[j + 1].split("+", 1)
        term = int(rest.split("=")[0])
        new_c = int(steps[j].split("=")[1])
        steps[j + 1] = f"{new_c}+{term}={new_c + term}"
        for k in range(j + 2, len(steps)):
            prev = int(steps[k - 1].split("=")[1])
            term = int(steps[k].split("+", 1)[1].split("=")[0])
            steps[k] = f"{prev}+{term}={prev + term}"
    last = int(steps[-1].split("=")[1])
    labels = step_labels(prompt, ";".join(steps) + f"#{last}")
    assert first_error(labels) == j
    assert labels == [1] * j + [0] + [1] * (len(labels) - j - 1)


@pytest.mark.parametrize("completion", ["", "11", "3+8=11;", "3+8=11#", " #16", "#16<eos>", "3+8=11 #11", "#-1"])
def test_a_completion_that_cannot_be_split_is_refused_by_name(completion):
    with pytest.raises(ValueError, match="completion: cannot be split into steps"):
        step_labels("3+8+5=", completion)


@pytest.mark.parametrize("prompt", ["3+8+5", "3 + 8=", "hello", "7="])
def test_a_prompt_that_is_not_a_sum_is_refused_by_name(prompt):
    with pytest.raises(ValueError, match="prompt: is not a sums prompt"):
        step_labels(prompt, "#16")


def test_first_error_and_its_checks():
    assert first_error([1, 1, 0, 1, 0]) == 2
    assert first_error([1, 1, 1]) == -1
    with pytest.raises(ValueError, match="labels: holds 2"):
        first_error([1, 2, 0])


def test_right_answer_wrong_working_rate():
    prompts = ["3+8+5="] * 5
    completions = ["3+8=11;11+5=16#16", "3+8=12;12+5=16#16", "#16", "3+8=11;11+5=17#17", "nonsense"]
    rate, info = right_answer_wrong_working(prompts, completions, ["16"] * 5)
    assert info == {"right": 3, "right_wrong_working": 1, "malformed": 1, "total": 5}
    assert rate == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="completions: has 1 entries"):
        right_answer_wrong_working(prompts, completions[:1], ["16"] * 5)


# ---- GRPO with process supervision ------------------------------------------------------------------------------

def test_process_advantages_by_hand():
    """Two completions of 4 tokens, steps ending at tokens 1 and 3. R = {1, 0, 1, 1}: mean 0.75, std (ddof 1) 0.5."""
    adv, info = process_advantages([[1, 0], [1, 1]], [[1, 3], [1, 3]], [4, 4], eps=0.0)
    assert info["mean"] == 0.75 and info["std"] == pytest.approx(0.5)
    # r̃ = 0.5, −1.5 and 0.5, 0.5; a token sums the steps ending at or after it
    np.testing.assert_allclose(adv, [[-1.0, -1.0, -1.5, -1.5], [1.0, 1.0, 0.5, 0.5]])
    adv_min, _ = process_advantages([[1, 0], [1, 1]], [[1, 3], [1, 3]], [4, 4], eps=0.0, form="min")
    np.testing.assert_allclose(adv_min, [[-1.5, -1.5, -1.5, -1.5], [0.5, 0.5, 0.5, 0.5]])


def test_the_wrong_step_carries_the_blame_and_later_steps_do_not():
    # completion 0: right, wrong, right (ends 2, 5, 8); completion 1: all right; tokens 9 long with padding after
    adv, info = process_advantages([[1, 0, 1], [1, 1, 1]], [[2, 5, 8], [2, 5, 8]], [9, 9], eps=0.0)
    r = info["normalised"][0]
    assert r[1] < 0 < r[0]
    np.testing.assert_allclose(adv[0, 6:9], r[2])             # after the wrong step: only the last step's reward
    np.testing.assert_allclose(adv[0, 3:6], r[1] + r[2])      # the wrong step's tokens carry its negative reward
    assert adv[0, 4] < adv[1, 4]


def test_one_step_per_completion_is_outcome_grpo():
    """With one step ending at the last token, GRPO+PS gives every token the outcome advantage (DeepSeekMath eq. 3)."""
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    lengths = [3, 5, 2, 4, 4]
    adv, _ = process_advantages([[r] for r in rewards], [[n - 1] for n in lengths], lengths)
    outcome = group_advantages([rewards])[0]
    for i, n in enumerate(lengths):
        np.testing.assert_allclose(adv[i, :n], outcome[i])
        assert (adv[i, n:] == 0).all()


def test_a_constant_group_gets_exactly_zero():
    adv, _ = process_advantages([[1, 1], [1]], [[0, 2], [1]], [3, 2])
    assert (adv == 0).all()


@pytest.mark.parametrize("kwargs, match", [
    (dict(step_rewards=[[1, 0]], step_ends=[[0, 1]], lengths=[2]), "step_rewards: must hold one list"),
    (dict(step_rewards=[[1, 0], [1]], step_ends=[[0], [0]], lengths=[2, 2]), r"step_ends\[0\]: has 1 step ends"),
    (dict(step_rewards=[[1, 0], [1]], step_ends=[[1, 0], [0]], lengths=[2, 2]), r"step_ends\[0\]: must be increasing"),
    (dict(step_rewards=[[1, 0], [1]], step_ends=[[0, 2], [0]], lengths=[2, 2]), r"step_ends\[0\]: must be increasing"),
    (dict(step_rewards=[[1, float("nan")], [1]], step_ends=[[0, 1], [0]], lengths=[2, 2]), r"step_rewards\[0\]: holds"),
    (dict(step_rewards=[[1], [0]], step_ends=[[0], [0]], lengths=[1, 1], form="max"), "form: unknown value"),
])
def test_bad_input_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        process_advantages(**kwargs)


# ---- Monte-Carlo labels against the exact ones ------------------------------------------------------------------

from types import SimpleNamespace

from grpo_edu.training.reward_models import monte_carlo_labels as mc
from grpo_edu.training.task.sums import terms_of


def _completer(rule):
    """A fake engine.generate whose endings follow ``rule(terms, working_so_far) → ending``."""
    def generate(model, tokenizer, prompts, *, num_generations, **kwargs):
        endings = []
        for text in prompts:
            prompt, working = text.split("=", 1)
            ending = rule(terms_of(prompt + "="), working)
            endings += ending if isinstance(ending, list) else [ending] * num_generations
        return SimpleNamespace(completions=endings)
    return generate


def _careful(terms, working):
    """Continues correctly from what is written (the last written result, then the terms not yet added)."""
    steps = [s for s in working.rstrip(";#").split(";") if s] if not working.endswith("#") else \
        [s for s in working[:-1].split(";") if s]
    total = int(steps[-1].split("=")[1]) if steps else terms[0]
    rest = terms[len(steps) + 1:]
    if working.endswith("#"):
        return str(total + sum(rest))
    out = []
    for t in rest:
        out.append(f"{total}+{t}={total + t}")
        total += t
    return ";".join(out) + f"#{total}"


def test_monte_carlo_labels_repair_gives_a_false_positive_and_a_failing_completer_false_negatives(monkeypatch):
    model = __import__("torch").nn.Linear(1, 1)
    prompt, answer = "3+8+5=", "16"
    repaired = "3+8=12;12+4=16#16"           # exact [0, 0, 1]: two wrong steps, the second repairs the first
    monkeypatch.setattr(mc.engine, "generate", _completer(_careful))
    hard, info = mc.monte_carlo_labels(model, None, [prompt], [repaired], [answer], num_completions=4)
    assert hard == [[0, 1, 1]]                # step 2 is wrong, yet every ending after it reaches 16
    assert info["soft"] == [[0.0, 1.0, 1.0]] and info["endings"] == 2 * 4
    matrix, stats = mc.confusion([[0, 0, 1]], hard)
    assert matrix == {"tp": 1, "fp": 1, "fn": 0, "tn": 1}
    assert stats["false_positive_rate"] == 0.5

    monkeypatch.setattr(mc.engine, "generate", _completer(lambda terms, working: "#0"))
    hard, _ = mc.monte_carlo_labels(model, None, [prompt], ["3+8=11;11+5=16#16"], [answer], num_completions=4)
    assert hard == [[0, 0, 1]]                # right steps, a completer that always fails: false negatives
    matrix, stats = mc.confusion([[1, 1, 1]], hard)
    assert matrix == {"tp": 1, "fp": 0, "fn": 2, "tn": 0} and stats["recall"] == pytest.approx(1 / 3)


def test_one_right_ending_in_four_is_a_hard_1_and_a_soft_quarter(monkeypatch):
    monkeypatch.setattr(mc.engine, "generate", _completer(lambda terms, w: [_careful(terms, w)] + ["#0"] * 3))
    hard, info = mc.monte_carlo_labels(__import__("torch").nn.Linear(1, 1), None, ["3+8+5="], ["3+8=11;11+5=16#16"], ["16"], num_completions=4)
    assert hard == [[1, 1, 1]] and info["soft"] == [[0.25, 0.25, 1.0]]


def test_monte_carlo_labels_on_the_sums_model():
    """The real path: the bundled sums model completes from every cut; the answer step is its correctness."""
    from grpo_edu.training.model.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("bundled-sums")
    prompts = ["3+8+5=", "2+4=", "9+9+9+1="]
    completions = ["3+8=11;11+5=16#16", "#7", "9+9=18;18+9=27;27+1=28#29"]
    hard, info = mc.monte_carlo_labels(model, tok, prompts, completions, ["16", "6", "28"], num_completions=3)
    assert [len(h) for h in hard] == [3, 1, 4]
    assert [h[-1] for h in hard] == [1, 0, 0]
    assert all(h == int(s > 0) for hs, ss in zip(hard, info["soft"]) for h, s in zip(hs, ss))
    assert all(s * 3 == round(s * 3) for ss in info["soft"] for s in ss)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_completions=0), "num_completions: must be an integer ≥ 1"),
    (dict(completions=["3+8=11 #11"]), r"completions\[0\]: cannot be split into steps"),
    (dict(answers=[]), "completions: has 1 entries"),
])
def test_monte_carlo_labels_refuse_bad_input_by_name(kwargs, match):
    args = dict(prompts=["3+8="], completions=["#11"], answers=["11"]) | kwargs
    with pytest.raises(ValueError, match=match):
        mc.monte_carlo_labels(None, None, args.pop("prompts"), args.pop("completions"), args.pop("answers"), **args)


def test_confusion_refuses_soft_or_mismatched_labels():
    with pytest.raises(ValueError, match=r"estimated\[0\]: holds a label outside"):
        mc.confusion([[1, 0]], [[1, 0.5]])
    with pytest.raises(ValueError, match=r"estimated\[0\]: has 1 steps for 2"):
        mc.confusion([[1, 0]], [[1]])


# ---- the trainer reaches it -----------------------------------------------------------------------------------

from grpo_edu.training.trainers.config import GRPOConfig


def test_the_trainer_gives_each_token_the_formula_by_hand():
    """Two answers to 3+8+5= (17 characters and <eos>): R = {1,1,1, 0,0,1}, mean 2/3, std (ddof 1) √(4/15).
    r̃ = +0.6455 for a right step, −1.2910 for a wrong one; steps end at tokens 6, 14 and 17 (the <eos>)."""
    import dataclasses

    import torch

    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = dataclasses.replace(GRPOConfig.preset("sums"), process_supervision="exact", batch_size=1,
                                 num_generations=2, total_training_steps=1, eval_size=0)
    trainer = GRPOTrainer(config)
    completions = ["3+8=11;11+5=16#16", "3+8=12;12+5=16#16"]
    rollout = SimpleNamespace(num_generations=2, completions=completions, completion_ids=torch.zeros(2, 20),
                              lengths=torch.tensor([18, 18]))
    adv = trainer._process_advantages([{"prompt": "3+8+5=", "answer": "16"}], rollout)
    right, wrong = 1 / 3 / (4 / 15) ** 0.5, -2 / 3 / (4 / 15) ** 0.5
    expected = torch.zeros(2, 20)
    expected[0, :7], expected[0, 7:15], expected[0, 15:18] = 3 * right, 2 * right, right
    expected[1, :7], expected[1, 7:15], expected[1, 15:18] = 2 * wrong + right, wrong + right, right
    torch.testing.assert_close(adv, expected, rtol=1e-3, atol=1e-3)


def test_a_process_supervised_run_trains_from_the_cli_settings(tmp_path):
    import dataclasses
    import math

    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = dataclasses.replace(GRPOConfig.preset("sums"), process_supervision="exact", process_credit="min",
                                 batch_size=2, num_generations=4, total_training_steps=2, eval_size=0)
    trainer = GRPOTrainer(config)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = [trainer.step() for _ in range(2)]
    assert all(math.isfinite(m["loss"]) for m in metrics)
    assert any((p.detach() != b).any() for p, b in zip(trainer.model.parameters(), before))


@pytest.mark.parametrize("kwargs, match", [
    (dict(process_supervision="exact"), "process_supervision: is 'exact'.*clash: task"),
    (dict(process_supervision="exact", task="sums", model="bundled-sums", replay_ratio=0.3),
     "process_supervision: .*clash: replay_ratio"),
    (dict(process_credit="min"), "process_credit: is 'min' but process_supervision is 'none'"),
    (dict(process_supervision="yes"), "process_supervision: unknown value"),
])
def test_process_supervision_settings_are_checked_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**kwargs)


def test_export_says_process_supervision_is_course_only():
    import dataclasses

    from grpo_edu.beyond.export import to_trl, to_verl

    config = dataclasses.replace(GRPOConfig.preset("sums"), process_supervision="exact")
    assert "process_supervision" in dict(to_trl(config)[1]["unmatched"])
    assert "process_supervision" in dict(to_verl(config)[1]["unmatched"])
    assert "process_supervision" not in dict(to_trl(GRPOConfig.preset("sums"))[1]["unmatched"])


def test_the_experiment_refuses_to_replace_a_stored_file_before_any_run(tmp_path, capsys):
    from grpo_edu.course.experiments import process_rewards

    stored = tmp_path / "compare.json"
    stored.write_text('{"kept": true}')
    for command in ("compare", "labels"):
        with pytest.raises(SystemExit):
            process_rewards.main([command, "--json", str(stored)])
        assert "--json" in capsys.readouterr().err
    assert stored.read_text() == '{"kept": true}'
    with pytest.raises(SystemExit):
        process_rewards.main(["labels", "--completions", "0"])


# ---- a process reward model ------------------------------------------------------------------------------------

from grpo_edu.training.reward_models import process_reward_model as prm


@pytest.fixture(scope="module")
def sums_solutions():
    """Well-formed answers of the bundled sums model to 200 train prompts (4 each), with their exact step labels."""
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.task.evaluation import sample_completions
    from grpo_edu.training.task.sums import FORMAT
    from grpo_edu.training.task.tasks import get_task

    rows = get_task("sums").split("train", 200)
    model, tok = load_model_and_tokenizer("bundled-sums")
    texts, _ = sample_completions(model, tok, [r["prompt"] for r in rows], num_samples=4, seed=0, max_new_tokens=42)
    data = [(rows[i // 4]["prompt"], t.strip()) for i, t in enumerate(texts) if FORMAT.match(t.strip())]
    return [p for p, _ in data], [c for _, c in data], [step_labels(p, c) for p, c in data]


def _auc(probs, labels):
    pos = [p for row, ys in zip(probs, labels) for p, y in zip(row, ys) if y == 1]
    neg = [p for row, ys in zip(probs, labels) for p, y in zip(row, ys) if y == 0]
    return sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / (len(pos) * len(neg))


def test_a_prm_reads_each_step_at_its_last_token():
    from grpo_edu.training.model.models import sums_model_dir

    model, tok = prm.make_process_reward_model(sums_model_dir())
    ids, positions = prm.step_positions(tok, ["3+8+5="], ["3+8=11;11+5=16#16"])
    assert [tok.decode([ids[0][p]]) for p in positions[0]] == [";", "#", "6"]
    assert len(prm.step_probabilities(model, tok, ["3+8+5="], ["3+8=11;11+5=16#16"])[0]) == 3


def test_a_prm_learns_which_steps_are_wrong(sums_solutions):
    """Trained on the exact labels of 3/4 of the answers, it ranks the held-out wrong steps below the right ones."""
    from grpo_edu.training.model.models import sums_model_dir

    prompts, completions, labels = sums_solutions
    n = len(prompts) * 3 // 4
    model, tok = prm.make_process_reward_model(sums_model_dir(), seed=0)
    before = _auc(prm.step_probabilities(model, tok, prompts[n:], completions[n:]), labels[n:])
    model, history = prm.train_process_reward_model(model, tok, prompts[:n], completions[:n], labels[:n], steps=100)
    after = _auc(prm.step_probabilities(model, tok, prompts[n:], completions[n:]), labels[n:])
    assert history[-1]["loss"] < history[0]["loss"]
    assert after > 0.75 and after > before + 0.1, (before, after)


def test_solution_scores_and_outcome_labels():
    assert prm.solution_scores([[0.5, 0.8], [0.9]], "prod") == [0.4, 0.9]
    assert prm.solution_scores([[0.5, 0.8], [0.9]], "min") == [0.5, 0.9]
    assert prm.solution_scores([[0.5, 0.8], [0.9]], "last") == [0.8, 0.9]
    assert prm.outcome_labels(["3+8=11#11", "#16"], [False, True]) == [[0.0, 0.0], [1.0]]
    with pytest.raises(ValueError, match="how: unknown value"):
        prm.solution_scores([[0.5]], "mean")


def test_a_prm_refuses_bad_labels_and_a_head_that_does_not_match():
    from grpo_edu.training.model.models import sums_model_dir
    from grpo_edu.training.reward_models.reward_model import make_reward_model

    model, tok = prm.make_process_reward_model(sums_model_dir())
    for labels, match in (([[1, 2, 1]], r"labels\[0\]: holds 2, outside \[0, 1\]"),
                          ([[1, 1]], r"labels\[0\]: has 2 labels for the 3 steps"),
                          ([[1, float("nan"), 1]], r"labels\[0\]: holds nan")):
        with pytest.raises(ValueError, match=match):
            prm.train_process_reward_model(model, tok, ["3+8+5="], ["3+8=11;11+5=16#16"], labels, steps=1)
    sequence_head, _ = make_reward_model(sums_model_dir())
    with pytest.raises(ValueError, match="prm: is a LlamaForSequenceClassification with 1 outputs per position"):
        prm.step_probabilities(sequence_head, tok, ["3+8="], ["#11"])


def test_a_prm_backbone_gets_the_policys_folder_checks(tmp_path):
    """A backbone folder whose weights are a pickle is refused by name, as the policy's and a reward model's are."""
    import shutil

    from grpo_edu.training.model.models import sums_model_dir

    folder = tmp_path / "backbone"
    shutil.copytree(sums_model_dir(), folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not really a pickle")
    with pytest.raises(ValueError, match="^backbone: "):
        prm.make_process_reward_model(folder)
