"""Tools and multi-turn rollouts: the calculator's parser, containment of a bad tool, the sampler's
tool mask and ids, the loss against TRL 1.16's ``_compute_loss`` with a ``tool_mask``, and the trainer's hook."""

import multiprocessing
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch

from grpo_edu.core.losses import grpo_loss
from grpo_edu.training.rollouts.multi_turn import generate_with_tools
from grpo_edu.training.rollouts.rollout import completion_logprobs
from grpo_edu.training.model.tokenizer import CHARS, build_char_tokenizer
from grpo_edu.training.rollouts.tools import Tool, ToolCallError, calculator, loss_mask, tool_mask_of, tool_stats

TOOL_CHARS = CHARS + "[]?#"


@pytest.fixture(scope="module")
def tool_tokenizer():
    return build_char_tokenizer(TOOL_CHARS)


@pytest.fixture
def tool_model(tool_tokenizer):
    """A random 2-layer Llama over the tool tokenizer, 64 positions: it writes "[" and "]" by chance."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tool_tokenizer
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=64, max_position_embeddings=64,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg).eval()


# --- the calculator ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, reply", [("12+345", "=357"), ("7", "=7"), ("5-7", "=-2"), ("2+3*4", "=14"),
                                         ("2*3*4-1", "=23"), ("10-2-3", "=5"), ("999999999999*2", "=1999999999998")])
def test_the_calculator_adds_subtracts_and_multiplies_as_in_school(call, reply):
    assert calculator(call) == reply


@pytest.mark.parametrize("call", ["", "12+", "+3", "1++2", "1/2", "2**3", "__import__('os')", " 1+2", "1e3",
                                  "1234567890123+1", "+".join(["1"] * 9),
                                  "١٢٣+1", "１２+３", "𝟏𝟐+1", "12+3\n", "12\n"])     # only ASCII digits, nothing after
def test_the_calculator_refuses_anything_but_its_syntax(call):
    with pytest.raises(ToolCallError):
        calculator(call)


# --- containment ---------------------------------------------------------------------------------------

def _hang(text):
    time.sleep(5)
    return "=1"


def _exits(text):
    raise SystemExit(3)


BAD_TOOLS = {
    "raises": (lambda text: 1 / 0, "ZeroDivisionError"),
    "exits": (_exits, "SystemExit"),
    "ends its process": (lambda text: os._exit(1), "ended its worker process"),
    "returns a non-string": (lambda text: 357, "not a string"),
    "returns characters the tokenizer cannot encode": (lambda text: "=x", "cannot encode"),
    "returns a special token": (lambda text: "=1<eos>", "special tokens"),
    "returns something huge": (lambda text: "=" + "9" * 1000, "max_result_tokens"),
    "hangs": (_hang, "time limit"),
}


@pytest.mark.parametrize("case", list(BAD_TOOLS))
def test_a_bad_tool_is_contained_and_reported_once_by_name(case, tool_tokenizer):
    function, words = BAD_TOOLS[case]
    tool = Tool(function=function, name="broken", timeout_s=0.2, max_result_tokens=8)
    error_ids = tool_tokenizer("=?", add_special_tokens=False)["input_ids"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = tool.run("1+2", tool_tokenizer)
        second = tool.run("1+2", tool_tokenizer)
    for ids, info in (first, second):
        assert ids == error_ids and info["failed"] and words in info["problem"]
    assert len(caught) == 1, [str(w.message) for w in caught]           # reported once
    assert "'broken'" in str(caught[0].message) and words in str(caught[0].message)


def test_a_10_mb_reply_is_refused_by_its_length_before_it_is_tokenized(tool_tokenizer):
    tool = Tool(function=lambda text: "=" + "1" * 10_000_000, max_result_tokens=8)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids, info = tool.run("1+2", tool_tokenizer)
    assert info["failed"] and "characters" in info["problem"] and time.perf_counter() - start < 2.0
    tool.close()


def _spin(text):
    while True:
        pass


def _loop_seconds():
    start = time.perf_counter()
    for _ in range(300_000):
        pass
    return time.perf_counter() - start


def test_a_tool_that_never_returns_is_stopped_so_later_calls_are_not_slowed(tool_tokenizer):
    """The stuck call's worker process is killed at timeout_s: nothing keeps spinning, so neither the next
    calls nor this process's own Python slow down (an abandoned thread would hold the GIL for ever)."""
    threads, children = threading.active_count(), set(multiprocessing.active_children())
    before = min(_loop_seconds() for _ in range(5))
    tool = Tool(function=_spin, timeout_s=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(8):
            start = time.perf_counter()
            ids, info = tool.run("1+2", tool_tokenizer)
            assert info["failed"] and "time limit" in info["problem"]
            assert time.perf_counter() - start < 5.0                           # each call: its limit and a restart
    assert threading.active_count() == threads and set(multiprocessing.active_children()) <= children
    assert min(_loop_seconds() for _ in range(5)) < 3 * before + 0.02       # nothing competes for the GIL
    ids, info = Tool(function=lambda text: "=3").run("1+2", tool_tokenizer)  # a good tool still answers
    assert not info["failed"] and tool_tokenizer.decode(ids) == "=3"


def test_a_stuck_tools_worker_ends_with_the_run_even_after_a_kill():
    """The run dies without a word (os._exit, as after kill -9) while its tool spins: the worker ends too."""
    code = ("import threading, time, os\n"
            "from grpo_edu.training.rollouts.tools import Tool\n"
            "from grpo_edu.training.model.tokenizer import CHARS, build_char_tokenizer\n"
            "def spin(text):\n    while True: pass\n"
            "tool = Tool(function=spin, timeout_s=60)\n"
            "threading.Thread(target=tool.run, args=('1+2', build_char_tokenizer(CHARS + '[]?#')), daemon=True).start()\n"
            "while getattr(getattr(tool._worker, 'process', None), 'pid', None) is None: time.sleep(0.01)\n"
            "print(tool._worker.process.pid, flush=True); time.sleep(0.3); os._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    pid = int(done.stdout.split()[0])
    deadline = time.time() + 5
    while time.time() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                                               # a zombie of another parent counts as ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_a_malformed_call_fails_without_a_warning_and_a_good_one_returns_its_reply(tool_tokenizer):
    tool = Tool()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids, info = tool.run("12+", tool_tokenizer)
    assert info["failed"] and tool_tokenizer.decode(ids) == "=?"
    ids, info = tool.run("12+345", tool_tokenizer)
    assert not info["failed"] and tool_tokenizer.decode(ids) == "=357"


@pytest.mark.parametrize("settings, arg", [({"max_calls": 0}, "max_calls"), ({"max_calls": -1}, "max_calls"),
                                           ({"timeout_s": 0}, "timeout_s"), ({"call_end": "["}, "call_end"),
                                           ({"function": "calculator"}, "function")])
def test_bad_settings_are_refused_naming_them(settings, arg):
    with pytest.raises(ValueError, match=f"^{arg}: .*Fix: "):
        Tool(**settings)


@pytest.mark.parametrize("settings, arg", [({}, "call_start"), ({"call_start": "*"}, "call_end"),
                                           ({"call_start": "*", "call_end": "=", "error_text": "?"}, "error_text")])
def test_a_syntax_the_tokenizer_cannot_write_is_refused_before_sampling(settings, arg, char_tokenizer, random_model):
    """The course's plain tokenizer has no "[", "]" or "?"."""
    with pytest.raises(ValueError, match=f"^{arg}: .*Fix: "):
        generate_with_tools(random_model, char_tokenizer, ["1+2="], Tool(**settings))


# --- the sampler -----------------------------------------------------------------------------------------

def _expected_tool_mask(tokenizer, tool, ids):
    """Walk a completion's ids as the environment would: after each "]" that closes a call within the
    budget, the tool's reply follows (mask 0); every other token is the model's (mask 1)."""
    start, end = (tokenizer.convert_tokens_to_ids(t) for t in (tool.call_start, tool.call_end))
    mask, calls, i = [], 0, 0
    while i < len(ids):
        mask.append(1)
        if ids[i] == end and calls < tool.max_calls and i + 1 < len(ids):
            calls += 1
            body = ids[:i]
            if start in body:
                text = tokenizer.decode(body[len(body) - body[::-1].index(start):])
                try:
                    reply = tokenizer(calculator(text), add_special_tokens=False)["input_ids"]
                except ToolCallError:
                    reply = tokenizer(tool.error_text, add_special_tokens=False)["input_ids"]
            else:
                reply = tokenizer(tool.error_text, add_special_tokens=False)["input_ids"]
            reply = reply[:len(ids) - i - 1]
            assert ids[i + 1:i + 1 + len(reply)] == reply
            mask += [0] * len(reply)
            i += len(reply)
        i += 1
    return mask


def test_the_tool_mask_is_zero_exactly_on_the_tools_replies(tool_model, tool_tokenizer):
    tool = Tool(max_calls=3)
    rollout = generate_with_tools(tool_model, tool_tokenizer, ["12+345=", "7+8=", "3=", "100+23+4="], tool,
                                  num_generations=8, max_new_tokens=24, generator=torch.Generator().manual_seed(0))
    assert sum(rollout.tool_calls) >= 5 and 0 < sum(rollout.tool_failures) <= sum(rollout.tool_calls)
    assert sum(n > 1 for n in rollout.tool_calls) >= 1                          # several turns in one row
    for ids, n, mask, logps in zip(rollout.completion_ids.tolist(), rollout.lengths.tolist(),
                                   rollout.tool_mask.tolist(), rollout.logprobs.tolist()):
        assert mask[:n] == _expected_tool_mask(tool_tokenizer, tool, ids[:n])
        replies = [len(run) for run in "".join(map(str, mask[:n])).split("1") if run]
        assert mask[:n] == tool_mask_of(ids[:n], tool_tokenizer.convert_tokens_to_ids("]"), replies)
        assert all(m == 1 for m in mask[n:])                                     # padding: 1, as TRL pads
        assert all(lp == 0.0 for lp, m in zip(logps, mask) if m == 0)            # no log-prob on the tool's tokens
    assert rollout.completion_mask.sum() > loss_mask(rollout.completion_mask, rollout.tool_mask).sum()


def test_the_ids_the_sampler_drew_are_the_ids_the_loss_scores(tool_model, tool_tokenizer):
    """Turns are joined as ids: a teacher-forced pass over the rollout's ids gives back the sampler's own
    log-probs on every model token, through every turn (re-encoded text would not guarantee it)."""
    tool = Tool(max_calls=3)
    rollout = generate_with_tools(tool_model, tool_tokenizer, ["12+345=", "7+8=", "3="], tool, num_generations=8,
                                  max_new_tokens=24, generator=torch.Generator().manual_seed(1))
    assert sum(rollout.tool_calls) >= 3
    T = rollout.completion_ids.shape[1]
    with torch.no_grad():
        forced, _ = completion_logprobs(tool_model, rollout.input_ids, rollout.attention_mask, T)
    own = loss_mask(rollout.completion_mask, rollout.tool_mask).bool()
    assert torch.allclose(forced[own], rollout.logprobs[own], atol=1e-5)
    texts = tool_tokenizer.batch_decode(rollout.completion_ids * rollout.completion_mask, skip_special_tokens=True)
    assert texts == rollout.completions


def test_a_call_after_the_budget_is_an_ordinary_token_and_the_stats_follow_trl(tool_model, tool_tokenizer):
    one = Tool(max_calls=1)
    rollout = generate_with_tools(tool_model, tool_tokenizer, ["12+345=", "7+8="], one, num_generations=16,
                                  max_new_tokens=24, generator=torch.Generator().manual_seed(0))
    assert max(rollout.tool_calls) == 1
    assert (1 - rollout.tool_mask).sum(dim=1).max() <= 2 + 3                     # at most one reply per row
    stats = tool_stats(rollout)
    assert stats["tools/call_frequency"] == sum(rollout.tool_calls) / 32
    assert stats["tools/failure_frequency"] == sum(rollout.tool_failures) / max(sum(rollout.tool_calls), 1)
    assert stats["model_completion_length"] == pytest.approx(
        float(loss_mask(rollout.completion_mask, rollout.tool_mask).sum() / 32))


# --- the loss against TRL's, with a tool mask ------------------------------------------------------------------

def _trl_trainer(tmp_path, model, tokenizer, loss_type, beta):
    trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    import datasets

    from grpo_edu.beyond.export import to_trl
    from grpo_edu.training.trainers.config import GRPOConfig

    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    config = GRPOConfig(batch_size=2, num_generations=4, max_completion_length=6, beta=beta, epsilon_high=0.28,
                        loss_type=loss_type, total_training_steps=1)
    kwargs, _ = to_trl(config)
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), report_to=[], logging_steps=1, use_cpu=True, **kwargs)
    trainer = trl.GRPOTrainer(model=str(tmp_path / "model"), processing_class=tokenizer, args=args,
                              reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(completions)],
                              train_dataset=datasets.Dataset.from_list([{"prompt": "12+34="}] * 8))
    trainer.current_gradient_accumulation_steps = 1
    return config, trainer


def _batch(trainer, model, vocab):
    torch.manual_seed(0)
    prompt_ids = torch.randint(4, vocab, (8, 4))
    completion_ids = torch.randint(4, vocab, (8, 6))
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0],
                                    [1, 1, 1, 1, 1, 0]] * 2)
    tool_mask = torch.tensor([[1, 0, 0, 1, 1, 1], [1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1],
                              [0, 0, 1, 0, 1, 1]] * 2)                    # the tool's reply: 0 (last row: two replies)
    attention = torch.cat([torch.ones(8, 4, dtype=torch.long), completion_mask], 1)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, torch.cat([prompt_ids, completion_ids], 1),
                                                             attention, 6)
    old = logps.detach() + 0.3 * torch.randn(8, 6)          # ratios far from 1: the clip binds on some tokens
    ref = logps.detach() + 0.5 * torch.randn(8, 6)
    advantages = torch.randn(8)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones(8, 4, dtype=torch.long),
              "completion_ids": completion_ids, "completion_mask": completion_mask, "advantages": advantages,
              "old_per_token_logps": old, "ref_per_token_logps": ref, "tool_mask": tool_mask,
              "num_items_in_batch": (completion_mask * tool_mask).sum()}
    return inputs, logps


def _ours(config, logps, inputs, mask=None):
    mask = loss_mask(inputs["completion_mask"], inputs["tool_mask"]) if mask is None else mask
    return grpo_loss(logps, inputs["old_per_token_logps"], inputs["advantages"], mask,
                     ref_logprobs=inputs["ref_per_token_logps"], beta=config.beta, epsilon=config.epsilon,
                     epsilon_high=config.epsilon_high, loss_type=config.loss_type,
                     max_completion_length=config.max_completion_length)[0]


def _same(theirs, ours, params):
    if abs(theirs.item() - ours.item()) > 1e-6:
        return False
    g_theirs = torch.autograd.grad(theirs, params, retain_graph=True, allow_unused=True)
    g_ours = torch.autograd.grad(ours, params, retain_graph=True, allow_unused=True)
    return all(a is None or torch.allclose(a, b, atol=1e-6) for a, b in zip(g_theirs, g_ours))


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo"])
def test_our_loss_with_a_tool_mask_equals_trls_compute_loss_and_every_gradient(loss_type, random_model,
                                                                               tool_tokenizer, tmp_path):
    model = random_model.__class__(random_model.config.__class__(**{**random_model.config.to_dict(),
                                                                    "vocab_size": len(tool_tokenizer)}))
    config, trainer = _trl_trainer(tmp_path, model, tool_tokenizer, loss_type, beta=0.04)
    model = trainer.model.train()
    inputs, logps = _batch(trainer, model, len(tool_tokenizer))
    theirs = trainer._compute_loss(model, inputs)
    assert _same(theirs, _ours(config, logps, inputs), list(model.parameters()))


BUGS = {
    "tool tokens left in the loss": lambda i: i["completion_mask"],
    "the mask shifted by one": lambda i: loss_mask(i["completion_mask"], i["tool_mask"].roll(1, dims=1)),
}


@pytest.mark.parametrize("bug", [*BUGS, "tool tokens in the KL"])
def test_the_trl_comparison_turns_red_on_each_deliberate_bug(bug, random_model, tool_tokenizer, tmp_path):
    """The equality above can fail: each of three masking mistakes gives another loss or gradient."""
    model = random_model.__class__(random_model.config.__class__(**{**random_model.config.to_dict(),
                                                                    "vocab_size": len(tool_tokenizer)}))
    config, trainer = _trl_trainer(tmp_path, model, tool_tokenizer, "grpo", beta=0.04)
    model = trainer.model.train()
    inputs, logps = _batch(trainer, model, len(tool_tokenizer))
    theirs = trainer._compute_loss(model, inputs)
    if bug == "tool tokens in the KL":         # the policy term masked right, the KL over every completion token
        from grpo_edu.core.kl import kl_estimate

        every = inputs["completion_mask"]
        kl = kl_estimate(logps, inputs["ref_per_token_logps"], kind="k3")                  # (N, T)
        policy = _ours(config.__class__(**{**config.to_dict(), "beta": 0.0}), logps, inputs)
        right = loss_mask(every, inputs["tool_mask"])
        fixed = policy + config.beta * ((kl * right).sum(-1) / right.sum(-1)).mean()       # the same sum, masked right
        assert _same(theirs, fixed, list(model.parameters()))
        ours = policy + config.beta * ((kl * every).sum(-1) / every.sum(-1)).mean()        # each answer's mean
    else:
        ours = _ours(config, logps, inputs, BUGS[bug](inputs))
    assert not _same(theirs, ours, list(model.parameters()))


# --- the trainer's hook --------------------------------------------------------------------------------------

def test_a_trainer_step_with_a_tool_logs_trls_tool_metrics_and_masks_the_replies(tool_model, tool_tokenizer):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    config = GRPOConfig(batch_size=2, num_generations=8, max_completion_length=20, total_training_steps=2,
                        eval_size=0, beta=0.04, learning_rate=1e-3, sampler="engine")
    rows = [{"prompt": "12+345=", "answer": "357"}, {"prompt": "7+8=", "answer": "15"}]
    seen = []
    trainer = GRPOTrainer(config, model=tool_model.train(), tokenizer=tool_tokenizer, train_rows=rows,
                          reward_funcs=[lambda prompts, completions, **kw: [float("357" in c) for c in completions]],
                          tool=Tool(max_calls=3))
    original = trainer._update
    trainer._update = lambda rollout, *a: (seen.append(rollout), original(rollout, *a))[1]
    metrics = trainer.step()
    rollout = seen[0]
    assert metrics["tools/call_frequency"] == sum(rollout.tool_calls) / 16 > 0
    assert metrics["tools/failure_frequency"] == sum(rollout.tool_failures) / sum(rollout.tool_calls)
    assert rollout.tool_mask is not None and bool((rollout.tool_mask == 0).any())


def test_the_trainer_refuses_a_tool_its_tokenizer_cannot_write(random_model, char_tokenizer):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    with pytest.raises(ValueError, match="^call_start: "):
        GRPOTrainer(GRPOConfig(batch_size=1, num_generations=2, total_training_steps=1, eval_size=0),
                    model=random_model, tokenizer=char_tokenizer, train_rows=[{"prompt": "1+2=", "answer": "3"}],
                    tool=Tool())
    with pytest.raises(ValueError, match="^tool: "):
        GRPOTrainer(GRPOConfig(batch_size=1, num_generations=2, total_training_steps=1, eval_size=0),
                    model=random_model, tokenizer=char_tokenizer, train_rows=[{"prompt": "1+2=", "answer": "3"}],
                    tool=calculator)


@pytest.mark.parametrize("reply_in_loss", [False, True])
def test_the_loss_sees_the_replies_only_in_the_ablation(reply_in_loss, tool_model, tool_tokenizer, monkeypatch):
    from grpo_edu.training.trainers import trainer as trainer_module
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    masks, seen = [], []
    real = trainer_module.grpo_loss
    monkeypatch.setattr(trainer_module, "grpo_loss", lambda lp, old, adv, mask, **kw: (masks.append(mask),
                                                                                      real(lp, old, adv, mask, **kw))[1])
    config = GRPOConfig(batch_size=2, num_generations=8, max_completion_length=20, total_training_steps=1,
                        eval_size=0, sampler="engine")
    trainer = GRPOTrainer(config, model=tool_model.train(), tokenizer=tool_tokenizer,
                          train_rows=[{"prompt": "12+345=", "answer": "357"}, {"prompt": "7+8=", "answer": "15"}],
                          reward_funcs=[lambda prompts, completions, **kw: [float(len(c) % 2) for c in completions]],
                          tool=Tool(max_calls=3, reply_in_loss=reply_in_loss))
    original = trainer._update
    trainer._update = lambda rollout, *a: (seen.append(rollout), original(rollout, *a))[1]
    trainer.step()
    rollout = seen[0]
    assert bool((rollout.tool_mask == 0).any())
    expected = rollout.completion_mask if reply_in_loss else loss_mask(rollout.completion_mask, rollout.tool_mask)
    assert torch.equal(masks[0], expected)


def test_one_trl_step_runs_on_our_multi_turn_rollouts_with_env_mask(tool_model, tool_tokenizer, tmp_path):
    """to_trl_tools: TRL 1.16's GRPOTrainer trains one step on our sampler's rows through rollout_func, takes
    env_mask as its tool_mask, and counts only the model's tokens in its completion length."""
    trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install -e '.[trl]'")
    import datasets

    from grpo_edu.beyond.trl_tools import to_trl_tools

    tool_model.save_pretrained(tmp_path / "model")
    tool_tokenizer.save_pretrained(tmp_path / "model")
    kwargs, extras = to_trl_tools(Tool(max_calls=3), max_completion_length=20)
    assert kwargs == {"max_tool_calling_iterations": 3}
    assert extras["tool_function"]("12+345") == "=357" and "Args:" in extras["tool_function"].__doc__
    seen = []
    rollout_func = extras["rollout_func"]
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), report_to=[], logging_steps=1, use_cpu=True,
                          per_device_train_batch_size=8, num_generations=8, max_steps=1, max_completion_length=20,
                          **kwargs)
    trainer = trl.GRPOTrainer(model=str(tmp_path / "model"), processing_class=tool_tokenizer, args=args,
                              reward_funcs=[lambda prompts, completions, **kw: [float(len(c) % 2) for c in completions]],
                              train_dataset=datasets.Dataset.from_list([{"prompt": "12+345="}, {"prompt": "7+8="}] * 4),
                              rollout_func=lambda prompts, t: (seen.append(rollout_func(prompts, t)), seen[-1])[1])
    trainer.train()
    out = seen[0]
    assert len(out["completion_ids"]) == 8 and any(0 in m for m in out["env_mask"])
    own = [sum(m) for m in out["env_mask"]]
    logged = trainer.state.log_history[0]
    assert logged["completions/mean_length"] == pytest.approx(sum(own) / len(own))     # the model's tokens only
