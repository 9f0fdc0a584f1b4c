"""Faults, fifth pass (issue 66): each test reproduces a case of the probe (its id in the name's comment)
and fails on the code before the fix."""

import json

import pytest

from grpo_edu.cli import main

ROWS = [{"prompt": "Tom has 3 apples and buys 4 more. How many?", "answer": "7"},
        {"prompt": "Anna has 5 pens and gives away 2. How many are left?", "answer": "3"}]


def _write_rows(path):
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path.read_bytes()


# --- loses work -----------------------------------------------------------------------------------------------
def test_export_dataset_out_never_replaces_the_runs_own_dataset_or_another_file(tmp_path, capsys):   # C14b, C15, C19
    data = tmp_path / "data.jsonl"
    before = _write_rows(data)
    common = ["export", "trl", "--task", "words", "--batch-size", "2", "--dataset", str(data)]
    assert main(common + ["--dataset-out", str(data), "--overwrite"]) == 2     # its own input: never
    assert "is also the run's --dataset" in capsys.readouterr().err
    assert data.read_bytes() == before
    other = tmp_path / "metrics.jsonl"
    other.write_text('{"step": 1}\n')
    assert main(common + ["--dataset-out", str(other)]) == 2
    assert "already exists" in capsys.readouterr().err and other.read_text() == '{"step": 1}\n'
    assert main(common + ["--dataset-out", str(other), "--overwrite"]) == 0
    assert len(other.read_text().splitlines()) == 2
    (tmp_path / "adir.jsonl").mkdir()
    assert main(common + ["--dataset-out", str(tmp_path / "adir.jsonl")]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_write_trl_dataset_refuses_an_existing_file(tmp_path):
    from grpo_edu.beyond.export import write_trl_dataset
    from grpo_edu.training.task.tasks import get_task

    target = tmp_path / "out.jsonl"
    target.write_text("keep\n")
    with pytest.raises(ValueError, match="already exists"):
        write_trl_dataset(get_task("words"), ROWS, target)
    assert target.read_text() == "keep\n"
    assert write_trl_dataset(get_task("words"), ROWS, target, overwrite=True) == 2


def _refuse_runs(monkeypatch, module, *names):
    def refuse(*args, **kwargs):
        raise AssertionError("a run started before --json was checked")
    for name in names:
        monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize("module, names, argv", [
    ("tools_runs", ("run",), ["--seeds", "0"]),
    ("text_clinic", ("run", "measurements"), ["--case", "healthy"]),
])
def test_experiment_json_is_checked_before_any_run_and_kept_without_overwrite(tmp_path, monkeypatch, capsys,
                                                                             module, names, argv):
    import importlib

    mod = importlib.import_module(f"grpo_edu.course.experiments.{module}")
    _refuse_runs(monkeypatch, mod, *names)
    stored = tmp_path / "stored.json"
    stored.write_text("{}")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, says in ((stored, "already exists"), (afile / "sub.json", "does not exist"),
                         (tmp_path, "is a folder")):
        with pytest.raises(SystemExit) as exit_:
            mod.main(argv + ["--json", str(target)])
        assert exit_.value.code == 2 and says in capsys.readouterr().err
    assert stored.read_text() == "{}"


def test_replay_advice_checks_its_folder_before_any_run_and_keeps_stored_seeds(tmp_path, monkeypatch, capsys):
    from grpo_edu.course.experiments import replay_advice

    _refuse_runs(monkeypatch, replay_advice, "run_seed")
    (tmp_path / "native-seed1.json").write_text("{}")
    with pytest.raises(SystemExit):
        replay_advice.main(["--seeds", "0", "1", "--json", str(tmp_path)])
    assert "native-seed1.json already exists" in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("x")
    for folder in (afile, afile / "sub"):
        with pytest.raises(SystemExit):
            replay_advice.main(["--seeds", "0", "--json", str(folder)])
        assert "--json" in capsys.readouterr().err
    calls = []
    monkeypatch.setattr(replay_advice, "run_seed", lambda seed, variants: calls.append(seed) or [])
    monkeypatch.setattr(replay_advice, "table", lambda rows: [])
    assert replay_advice.main(["--seeds", "1", "--json", str(tmp_path), "--overwrite"]) == 0
    assert calls == [1] and json.loads((tmp_path / "native-seed1.json").read_text())["rows"] == []


# --- hangs ----------------------------------------------------------------------------------------------------
def _words_tokenizer(template_prefix):
    from transformers import AutoTokenizer

    from grpo_edu.training.model.models import ASSETS

    tokenizer = AutoTokenizer.from_pretrained(str(ASSETS / "tiny-words"))
    tokenizer.chat_template = template_prefix + tokenizer.chat_template
    return tokenizer


def test_a_chat_template_that_loops_without_end_is_stopped_and_refused(monkeypatch):        # B07, B35
    from grpo_edu.training.model import chat_tokenizer

    monkeypatch.setattr(chat_tokenizer, "TEMPLATE_SECONDS", 0.5, raising=False)
    nested = "{%- for i in range(100000) %}{%- for j in range(100000) %}{%- endfor %}{%- endfor %}"
    with pytest.raises(ValueError, match=r"^tokenizer\.chat_template: ran past 0\.5 s for one prompt"):
        chat_tokenizer.check_chat_tokenizer(_words_tokenizer(nested))


def test_a_chat_template_that_writes_hundreds_of_megabytes_is_refused():                     # B08, B34
    from grpo_edu.training.model import chat_tokenizer

    huge = "{%- for m in messages %}{{- m['content'] * 1000000 }}{%- endfor %}"     # 9 MB of 'Be brief.'
    with pytest.raises(ValueError, match=r"^tokenizer\.chat_template: wrote \d\d,\d{3},\d{3} characters for one prompt"):
        chat_tokenizer.check_chat_tokenizer(_words_tokenizer(huge))
    from grpo_edu.training.task.tasks import get_task

    task = get_task("words")                    # the model's own template still renders every prompt
    tokenizer = _words_tokenizer("")
    rows = task.split("heldout")[:3]
    assert [r["prompt"] for r in chat_tokenizer.render_prompts(tokenizer, task, rows)] == [
        tokenizer.apply_chat_template(task.messages(r["prompt"]), tokenize=False, add_generation_prompt=True)
        for r in rows]


def _tasks():
    from grpo_edu.training.task.calc import CalcTask
    from grpo_edu.training.task.sums import SumsTask
    from grpo_edu.training.task.tasks import ArithmeticTask
    from grpo_edu.training.task.words import WordsTask

    return WordsTask, SumsTask, CalcTask, ArithmeticTask


@pytest.mark.parametrize("make, says", [                                                    # W01, W02, W03, W05
    (lambda W, S, C, A: W("w", "", high=3), r"^train_size: .*only 2,160 distinct questions .*Fix: .*widen"),
    (lambda W, S, C, A: W("w", "", high=6), r"^train_size: .*only 8,208 distinct questions"),
    (lambda W, S, C, A: W("w", "", low=5, high=2), r"^high: must be an integer ≥ 5, got 2"),
    (lambda W, S, C, A: W("w", "", heldout_size=-5), r"^heldout_size: must be an integer ≥ 1"),
    (lambda W, S, C, A: W("w", "", low=-9, high=-1), r"^low: must be an integer ≥ 0, got -9"),
    (lambda W, S, C, A: S("s", "", max_terms=2), r"^train_size: .*only 81 distinct sums"),
    (lambda W, S, C, A: S("s", "", min_terms=4, max_terms=3), r"^max_terms: must be an integer ≥ 4"),
    (lambda W, S, C, A: S("s", "", low=3, high=1), r"^high: must be an integer ≥ 3"),
    (lambda W, S, C, A: C("c", "", max_digits=1), r"^train_size: .*only 81 distinct pairs"),
    (lambda W, S, C, A: C("c", "", max_digits=0), r"^max_digits: must be an integer ≥ 1"),
    (lambda W, S, C, A: A("a", "", op="+", low=1, high=9, train_size=200), r"^train_size: .*only 81 distinct"),
    (lambda W, S, C, A: A("a", "", op="+", low=1, high=9, heldout_size=81), r"^heldout_size: .*only 81 distinct"),
    (lambda W, S, C, A: A("a", "", op="*", low=1, high=9), r"^op: unknown value '\*'"),
])
def test_generated_tasks_refuse_ranges_and_sizes_they_cannot_draw(make, says):
    with pytest.raises(ValueError, match=says):
        make(*_tasks())


def test_a_task_may_ask_for_every_question_that_exists():
    from grpo_edu.training.task.words import distinct_questions

    W, S, C, A = _tasks()
    words = W("w", "", high=3, heldout_size=60, train_size=distinct_questions(1, 3) - 60)
    assert len({r["prompt"] for r in words.split("train") + words.split("heldout")}) == distinct_questions(1, 3)
    assert len(A("a", "", op="-", low=1, high=9, ordered=True, heldout_size=5).split("train")) == 45 - 5


# --- insecure -------------------------------------------------------------------------------------------------
def test_a_reward_model_backbone_is_checked_as_the_policy_is(tmp_path):                      # K15, K08, K18
    import shutil

    import torch
    from safetensors.torch import load_file

    from grpo_edu.training.model.models import sums_model_dir
    from grpo_edu.training.reward_models.reward_model import make_reward_model

    pickled = tmp_path / "pickled"
    shutil.copytree(sums_model_dir(), pickled)
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"^backbone: .*only in pickle format \(pytorch_model\.bin\)"):
        make_reward_model(pickled)
    with pytest.raises(ValueError, match=r"^backbone: no such folder"):
        make_reward_model(str(tmp_path / "no" / "such-model"))
    broken = tmp_path / "nan"
    shutil.copytree(sums_model_dir(), broken)
    from safetensors.torch import save_file

    weights = load_file(broken / "model.safetensors")
    first = sorted(weights)[0]
    weights[first] = torch.full_like(weights[first], float("nan"))
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"^backbone: .*NaN or infinite weights"):
        make_reward_model(broken)


# --- wrong ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sums_rm():
    from grpo_edu.training.model.models import sums_model_dir
    from grpo_edu.training.reward_models.reward_model import make_reward_model

    return make_reward_model(sums_model_dir(), seed=0)


def test_a_reward_model_refuses_another_models_tokenizer(sums_rm):                             # K09, K10
    from transformers import AutoTokenizer

    from grpo_edu.training.model.models import bundled_model_dir, words_model_dir
    from grpo_edu.training.reward_models.reward_function import RewardModelReward
    from grpo_edu.training.reward_models.reward_trainer import train_reward_model

    rm, own = sums_rm
    assert len(RewardModelReward([rm], own)(["1+2="], ["3#3"])) == 1   # its own tokenizer: accepted
    adder = AutoTokenizer.from_pretrained(str(bundled_model_dir()))   # its ids fit, '#' is <unk> there
    with pytest.raises(ValueError, match=r"^tokenizer: is not the reward model's own .*'#'"):
        RewardModelReward([rm], adder)
    words = AutoTokenizer.from_pretrained(str(words_model_dir()))     # ids past the RM's embedding
    with pytest.raises(ValueError, match=r"^tokenizer: has \d+ tokens, but the reward model's embedding has 21"):
        RewardModelReward([rm], words)
    with pytest.raises(ValueError, match=r"^tokenizer: is not the reward model's own"):
        train_reward_model(rm, adder, [{"prompt": "1+2=", "chosen": "3#3", "rejected": "9#9"}])


A_PAIR = {"prompt": "1+2=", "chosen": "3+0=3#3", "rejected": "9#9"}
B_PAIR = {"prompt": "2+2=", "chosen": "4#4", "rejected": "5#5"}


@pytest.mark.parametrize("pairs", [[A_PAIR, dict(B_PAIR, margin=5.0)], [dict(A_PAIR, margin=5.0), B_PAIR]])
def test_margins_on_some_pairs_only_are_refused_whichever_comes_first(sums_rm, pairs):           # A55, K04, K05
    from grpo_edu.training.reward_models.preference_data import check_pairs
    from grpo_edu.training.reward_models.reward_trainer import pair_loss, train_reward_model

    rm, tok = sums_rm
    with pytest.raises(ValueError, match=r"^pairs\[\d\]\.margin: is missing, while pairs\[\d\] has one"):
        check_pairs(pairs)
    with pytest.raises(ValueError, match=r"margin: is missing"):
        pair_loss(rm, tok, pairs)
    with pytest.raises(ValueError, match=r"margin: is missing"):
        train_reward_model(rm, tok, pairs, epochs=1, batch_size=2)


def test_margins_on_every_pair_are_used(sums_rm):
    from grpo_edu.training.reward_models.reward_trainer import pair_loss

    rm, tok = sums_rm
    plain, _ = pair_loss(rm, tok, [A_PAIR, B_PAIR])
    zero, _ = pair_loss(rm, tok, [dict(A_PAIR, margin=0.0), dict(B_PAIR, margin=0.0)])
    wide, _ = pair_loss(rm, tok, [dict(A_PAIR, margin=5.0), dict(B_PAIR, margin=5.0)])
    assert float(zero) == pytest.approx(float(plain)) and float(wide) > float(plain)


def test_a_pair_that_is_not_a_dict_is_named():                                                     # A53, K23
    from grpo_edu.training.reward_models.preference_data import check_pairs

    with pytest.raises(ValueError, match=r"^pairs\[1\]: is a tuple, not a dict"):
        check_pairs([A_PAIR, ("1+2=", "3", "4")])


@pytest.mark.parametrize("where", ["rewards_chosen", "rewards_rejected", "margin"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_bradley_terry_names_a_non_finite_score(where, bad):                                      # A40, A41
    import torch

    from grpo_edu.core.preference import bradley_terry_loss

    values = {"rewards_chosen": torch.tensor([1.0, 2.0]), "rewards_rejected": torch.tensor([0.0, 0.5]),
              "margin": torch.tensor([0.1, 0.2])}
    values[where][1] = bad
    with pytest.raises(ValueError, match=rf"^{where}: holds NaN or ±inf \(first at pair 1"):
        bradley_terry_loss(values["rewards_chosen"], values["rewards_rejected"], margin=values["margin"])


def test_a_reward_models_infinite_score_is_refused_where_it_is_made(sums_rm):                      # K13
    import copy

    import torch

    from grpo_edu.training.reward_models.reward_model import score

    rm, tok = sums_rm
    broken = copy.deepcopy(rm)
    with torch.no_grad():
        broken.score.weight.fill_(float("inf"))
    with pytest.raises(ValueError, match=r"^reward_model: scored completion 0 (inf|-inf|nan)"):
        score(broken, tok, ["1+2="], ["3#3"])


# --- poor: flags a method would ignore --------------------------------------------------------------------------
TINY = ["--total-training-steps", "1", "--batch-size", "2", "--num-generations", "2", "--eval-size", "0"]


@pytest.mark.parametrize("argv, flag", [                                                       # D05–D09
    (["--method", "reinforce", "--advantage-estimator", "rloo"], "--advantage-estimator"),
    (["--method", "dpo", "--loss-type", "dapo"], "--loss-type"),
    (["--method", "dpo", "--epsilon-high", "0.28"], "--epsilon-high"),
    (["--method", "dpo_offline", "--replay-ratio", "0.3"], "--replay-ratio"),
    (["--method", "rft", "--dynamic-sampling"], "--dynamic-sampling"),
    (["--method", "ppo", "--scale", "batch"], "--scale"),
    (["--method", "ppo", "--replay-path", "r.sqlite", "--replay-ratio", "0.3"], "--replay-"),
    (["--method", "reinforce_dr_grpo", "--loss-type", "dapo"], "--loss-type"),
])
def test_a_grpo_only_flag_is_refused_for_a_method_that_ignores_it(argv, flag, capsys, monkeypatch):
    from grpo_edu.training.model import models
    from grpo_edu.training.trainers import family

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the flags were checked")
    monkeypatch.setattr(family, "make_trainer", refuse)
    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)
    assert main(["train", *TINY, *argv]) == 2
    err = capsys.readouterr().err
    assert f"error: {flag}" in err and f"--method {argv[1]} would ignore it" in err


@pytest.mark.parametrize("argv, family", [(["--method", "ppo", "--loss-type", "dapo"], True),
                                          (["--method", "reinforce", "--loss-type", "dr_grpo"], False),
                                          (["--method", "grpo", "--scale", "batch"], False),
                                          (["--method", "reinforce_dr_grpo"], False)])      # D15: a control
def test_flags_a_method_uses_and_the_controls_are_accepted(argv, family):
    from grpo_edu.cli import build_parser, method_flags
    from grpo_edu.common import command_line
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.family import FamilyConfig

    args = command_line.parse_args(build_parser("train"), ["train", *TINY, *argv])
    method, settings = method_flags.method_and_settings(args, default_beta=GRPOConfig.beta)
    assert method == argv[1] and (settings == FamilyConfig() if family else settings is None)


@pytest.mark.parametrize("settings, says", [                                                  # A117, A121, A120
    (dict(static_cache="yes"), r"^static_cache: must be True or False, got 'yes'"),
    (dict(static_cache=True, cuda_graphs="no"), r"^cuda_graphs: must be True or False, got 'no'"),
    (dict(static_cache=1), r"^static_cache: must be True or False, got 1"),
    (dict(static_cache=True, buckets=(10 ** 9,)), r"^buckets: holds 1,000,000,000, but .* at most 65,536"),
])
def test_decode_settings_check_their_types_and_bucket_sizes(settings, says):
    from grpo_edu.training.rollouts.static_cache import DecodeSettings

    with pytest.raises(ValueError, match=says):
        DecodeSettings(**settings)
    DecodeSettings(static_cache=True, buckets=(8, 1 << 16))


# --- poor: a damaged tokenizer, or one that asks to run code -----------------------------------------------------
def _damaged_words_model(tmp_path, damage):
    import shutil

    from grpo_edu.training.model.models import words_model_dir

    folder = tmp_path / "m"
    shutil.copytree(words_model_dir(), folder)
    damage(folder)
    return folder


def _cut(folder):
    data = (folder / "tokenizer.json").read_bytes()
    (folder / "tokenizer.json").write_bytes(data[: len(data) // 2])


def _empty_vocab(folder):
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tok["model"]["vocab"] = {}
    (folder / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")


def _auto_map(folder):
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.update(auto_map={"AutoTokenizer": ["evil_tok.EvilTokenizer", None]}, tokenizer_class="EvilTokenizer")
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


@pytest.mark.parametrize("damage, says", [                                           # B14–B18
    (_cut, r"the tokenizer in \S+ cannot be read \(tokenizer\.json, tokenizer_config\.json: JSONDecodeError"),
    (lambda f: (f / "tokenizer.json").write_bytes(bytes(range(256)) * 8), r"cannot be read .*UnicodeDecodeError"),
    (_empty_vocab, r"cannot be read .*out of vocabulary"),
    (_auto_map, r"tokenizer_config\.json asks to run the folder's own Python code .*--trust-remote-code"),
])
def test_a_damaged_or_code_running_tokenizer_is_named_with_its_files_and_the_fix(tmp_path, damage, says):
    from grpo_edu.training.model.models import load_model_and_tokenizer

    folder = _damaged_words_model(tmp_path, damage)
    with pytest.raises(ValueError, match=f"^model: .*{says}") as refused:
        load_model_and_tokenizer(str(folder))
    assert ". Fix: " in str(refused.value)


@pytest.mark.parametrize("command, damage", [("train", _empty_vocab), ("eval", _cut)])        # B30–B33, B36
def test_train_and_eval_name_a_damaged_tokenizer_instead_of_a_traceback(tmp_path, capsys, command, damage):
    folder = _damaged_words_model(tmp_path, damage)
    extra = ["--output-dir", str(tmp_path / "run")] if command == "train" else []
    assert main([command, "--task", "words", "--model", str(folder), *extra]) == 2
    assert f"grpo-edu {command}: error: model: the tokenizer in {folder} cannot be read" in capsys.readouterr().err


def test_trl_rows_of_a_chat_task_without_answers_keep_their_prompts():                             # C23
    from grpo_edu.beyond.export import trl_dataset_rows
    from grpo_edu.training.task.tasks import get_task

    task = get_task("words")
    rows = trl_dataset_rows(task, [{"prompt": r["prompt"]} for r in ROWS])
    assert rows == [{"prompt": task.messages(r["prompt"])} for r in ROWS]
    assert trl_dataset_rows(task, ROWS)[0]["answer"] == "7"


def test_reward_model_training_and_scoring_refuse_what_they_cannot_do(sums_rm):                   # K07, K21
    from grpo_edu.training.reward_models.reward_model import score
    from grpo_edu.training.reward_models.reward_trainer import train_reward_model

    rm, tok = sums_rm
    with pytest.raises(ValueError, match=r"^learning_rate: must be ≤ 0.1, got 5.0"):
        train_reward_model(rm, tok, [A_PAIR], learning_rate=5.0)
    with pytest.raises(ValueError, match=r"^completions: text 1 takes \d+ tokens, past the reward model's 64 positions"):
        score(rm, tok, ["1+2=", "1+2="], ["3#3", "3" * 500])


def test_chat_rows_refuse_a_missing_answer_and_an_empty_completion():                            # A135, A137
    from grpo_edu.training.text.chat import completion_text, conversational_rows

    with pytest.raises(ValueError, match=r"^rows\[0\]\['answer'\]: is None"):
        conversational_rows([{"question": "q", "answer": None}])
    with pytest.raises(ValueError, match=r"^completion: is \[\], not a list ending with an assistant message"):
        completion_text([])
    assert completion_text([{"role": "assistant", "content": "7"}]) == completion_text("7") == "7"


def test_token_roles_names_a_template_that_edits_the_content():                                   # W10
    from grpo_edu.training.text.completion_mask import token_roles

    tokenizer = _words_tokenizer("")
    tokenizer.chat_template = tokenizer.chat_template.replace("message['content']", "message['content'] | trim")
    with pytest.raises(ValueError, match=r"^messages\[1\]\['content'\]: is not written verbatim"):
        token_roles(tokenizer, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " 3+4? "}])


def test_drift_refuses_ids_outside_the_vocabulary():                                              # W11
    from grpo_edu.training.text.drift import drift

    tokenizer = _words_tokenizer("")
    ids = tokenizer("Tom has 3 apples", add_special_tokens=False)["input_ids"]
    assert drift(tokenizer, [ids])[0] == 0.0
    with pytest.raises(ValueError, match=rf"^samples\[1\]: holds {len(tokenizer) + 5}, not a token id"):
        drift(tokenizer, [ids, ids + [len(tokenizer) + 5]])


def test_gpu_run_refuses_an_absurd_bucket_before_building_anything(capsys):                       # F17, F22
    from grpo_edu.beyond import gpu_run

    with pytest.raises(SystemExit) as stop:
        gpu_run.main(["--dry-run", "--static-cache", "--buckets", "99999999999999999999"])
    assert stop.value.code == 2
    assert "error: --buckets: holds 99,999,999,999,999,999,999, but" in capsys.readouterr().err
