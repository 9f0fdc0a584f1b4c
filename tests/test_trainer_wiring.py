"""How the trainer connects the pieces, each pinned to an independent computation.

The math modules have their own tests; these check the wiring: which model is π_ref,
which log-probs are π_θold, which rows form a group, what gradient reaches the optimizer,
what order the prompts come in. Each test recomputes the trainer's numbers from the
rollout it sampled, with plain forward passes and hand-written formulas (and
``grpo_loss`` itself for the loss), so a trainer that wires a piece wrongly fails here
even when every module is right.
"""

import copy
import math

import pytest
import torch

from grpo_edu.core.losses import grpo_loss
from grpo_edu.training.trainers import trainer as trainer_module
from grpo_edu.training.trainers.config import GRPOConfig
from grpo_edu.training.task.tasks import get_task
from grpo_edu.training.trainers.trainer import GRPOTrainer

ROWS = get_task("addition").split("train", n=16)   # "12+34=": all prompts 6 characters, so no left padding


def prompt_dependent_reward(prompts, completions, **kw):
    """Each prompt has its own reward level (its first digit), so groups have different means."""
    return [int(p[0]) + 0.5 * len(c) + float(c[:1] == "1") for p, c in zip(prompts, completions)]


def _spied_trainer(monkeypatch, model, tok, **overrides):
    """A trainer on the tiny random model, and what it samples and applies at each update."""
    settings = dict(batch_size=2, num_generations=4, total_training_steps=4, eval_size=0,
                    max_completion_length=4, learning_rate=1e-2, beta=0.1, max_grad_norm=0.0)
    t = GRPOTrainer(GRPOConfig(**{**settings, **overrides}), model=model, tokenizer=tok, train_rows=ROWS,
                    reward_funcs=[prompt_dependent_reward])
    seen = {"rollouts": [], "params": [], "grads": [], "advantages": []}

    def spy(generate):                 # the trainer samples with the engine (the default) or the loop
        def spy_generate(*args, **kwargs):
            rollout = generate(*args, **kwargs)
            seen["rollouts"].append(rollout)
            return rollout
        return spy_generate

    loss_fn = trainer_module.grpo_loss

    def spy_loss(logprobs, old, advantages, mask, **kwargs):
        seen["advantages"].append(advantages.detach().clone())
        return loss_fn(logprobs, old, advantages, mask, **kwargs)

    monkeypatch.setattr(trainer_module, "generate", spy(trainer_module.generate))
    monkeypatch.setattr(trainer_module.engine, "generate", spy(trainer_module.engine.generate))
    monkeypatch.setattr(trainer_module, "grpo_loss", spy_loss)
    optimizer_step = t.optimizer.step

    def spy_step(*args, **kwargs):   # the parameters the gradient was taken at, and the gradient applied
        seen["params"].append([p.detach().clone() for p in t.model.parameters()])
        seen["grads"].append([p.grad.detach().clone() for p in t.model.parameters()])
        return optimizer_step(*args, **kwargs)

    t.optimizer.step = spy_step
    return t, seen


# --- independent recomputations -----------------------------------------------------------
def _logprobs(model, rollout, temperature=1.0):
    """log π(o_t | q, o_<t) from one plain forward pass (prompts of equal length: no padding)."""
    ids = rollout.input_ids                                             # (N, P+T)
    T = rollout.completion_ids.shape[1]
    logits = model(input_ids=ids).logits[:, -T - 1:-1].float() / temperature   # (N, T, V)
    return torch.log_softmax(logits, -1).gather(-1, ids[:, -T:, None]).squeeze(-1)


def _prompt_of_rows(rollout, tok):
    return tok.batch_decode(rollout.prompt_ids, skip_special_tokens=True)


def _advantages(rollout, tok, eps=1e-4):
    """(R − mean of its prompt's group) / (unbiased σ of that group + eps), grouping rows by prompt text."""
    prompts = _prompt_of_rows(rollout, tok)
    rewards = torch.tensor(prompt_dependent_reward(prompts, rollout.completions))
    adv = torch.empty_like(rewards)
    for p in set(prompts):
        rows = [i for i, q in enumerate(prompts) if q == p]
        r = rewards[rows]
        adv[rows] = (r - r.mean()) / (r.std() + eps)
    return adv, prompts


def _with_params(model, params):
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p, v in zip(m.parameters(), params):
            p.copy_(v)
    return m


def _expected_update(policy, ref, rollout, tok, config, old=None):
    """Loss and gradient of one update: grpo_loss on the rollout, at ``policy``'s weights."""
    policy.zero_grad(set_to_none=True)
    adv, _ = _advantages(rollout, tok)
    lp = _logprobs(policy, rollout, config.temperature)
    with torch.no_grad():
        ref_lp = _logprobs(ref, rollout, config.temperature)
    loss, _ = grpo_loss(lp, lp.detach() if old is None else old, adv, rollout.completion_mask.float(),
                        ref_logprobs=ref_lp, beta=config.beta, epsilon=config.epsilon, loss_type=config.loss_type)
    loss.backward()
    return loss.item(), [p.grad.clone() for p in policy.parameters()]


def _assert_grads_close(got, expected):
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=2e-6, rtol=1e-4)


# --- the tests ----------------------------------------------------------------------------
def test_mu1_each_update_is_grpo_loss_on_its_rollout(monkeypatch, random_model, char_tokenizer):
    """μ = 1: π_θold = the current policy (ratio 1), π_ref = the starting model, Â grouped by prompt."""
    start = copy.deepcopy(random_model)
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer)
    history = [t.step() for _ in range(2)]
    for k in range(2):   # step 2 runs after the policy moved, so the KL term and π_ref matter
        policy = _with_params(start, seen["params"][k])
        loss, grads = _expected_update(policy, start, seen["rollouts"][k], char_tokenizer, t.config)
        assert history[k]["loss"] == pytest.approx(loss, abs=1e-6)
        _assert_grads_close(seen["grads"][k], grads)
    assert max(g.abs().max() for g in seen["grads"][1]) > 1e-3   # a real gradient, not zeros


def test_mu2_with_micro_batches_uses_the_samplers_logprobs_as_pi_old(monkeypatch, random_model, char_tokenizer):
    """μ = 2 over micro-batches of 4: both updates use the sampler's log-probs as π_θold,
    and each accumulated gradient equals the whole batch's."""
    start = copy.deepcopy(random_model)
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer, num_iterations=2, micro_batch_size=4)
    m = t.step()
    rollout = seen["rollouts"][0]
    assert len(seen["grads"]) == 2 and len(seen["advantages"]) == 4   # 2 updates × 2 micro-batches
    losses = []
    for k in range(2):
        policy = _with_params(start, seen["params"][k])
        loss, grads = _expected_update(policy, start, rollout, char_tokenizer, t.config, old=rollout.logprobs)
        _assert_grads_close(seen["grads"][k], grads)
        losses.append(loss)
    assert m["loss"] == pytest.approx(sum(losses) / 2, abs=1e-6)
    assert m["ratio_mean"] != pytest.approx(1.0, abs=1e-4)          # the second update is off-policy


def test_gradient_is_clipped_to_max_grad_norm(monkeypatch, random_model, char_tokenizer):
    start = copy.deepcopy(random_model)
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer, max_grad_norm=0.01)
    m = t.step()
    _, raw = _expected_update(_with_params(start, seen["params"][0]), start, seen["rollouts"][0],
                              char_tokenizer, t.config)
    raw_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in raw]))
    applied_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in seen["grads"][0]]))
    assert raw_norm > 0.05                                           # the clip binds
    assert m["grad_norm"] == pytest.approx(raw_norm.item(), rel=1e-4)   # logged: the norm before clipping
    assert applied_norm <= 0.01 * (1 + 1e-5)
    _assert_grads_close(seen["grads"][0], [g * 0.01 / (raw_norm + 1e-6) for g in raw])


def test_advantages_sum_to_zero_within_each_prompts_group(monkeypatch, random_model, char_tokenizer):
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer, batch_size=4, num_generations=2)
    t.step()
    used = seen["advantages"][0]                                     # (N,) as the loss received them
    expected, prompts = _advantages(seen["rollouts"][0], char_tokenizer)
    for p in set(prompts):
        rows = [i for i, q in enumerate(prompts) if q == p]
        assert abs(float(used[rows].sum())) < 1e-5, p
    torch.testing.assert_close(used, expected, atol=1e-5, rtol=1e-5)


def test_reference_model_stays_the_start_while_the_policy_moves(monkeypatch, random_model, char_tokenizer):
    start = copy.deepcopy(random_model)
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer)
    assert not {p.data_ptr() for p in t.ref_model.parameters()} & {p.data_ptr() for p in t.model.parameters()}
    history = [t.step() for _ in range(2)]
    for ref, s, policy in zip(t.ref_model.parameters(), start.parameters(), t.model.parameters()):
        assert torch.equal(ref, s)
    assert max((p - s).abs().max() for p, s in zip(t.model.parameters(), start.parameters())) > 1e-3
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-7)          # π_θ = π_ref before any update
    # step 2: mean k3 = exp(ref − lp) − (ref − lp) − 1 over active tokens, by hand
    rollout = seen["rollouts"][1]
    with torch.no_grad():
        lp = _logprobs(_with_params(start, seen["params"][1]), rollout)
        d = _logprobs(start, rollout) - lp
    mask = rollout.completion_mask.bool()
    k3 = (d.exp() - d - 1)[mask].mean().item()
    assert k3 > 1e-4 and history[1]["kl"] == pytest.approx(k3, rel=1e-3)


def test_each_epoch_visits_every_prompt_once_in_a_new_order(monkeypatch, random_model, char_tokenizer):
    rows = ROWS[:8]
    t = GRPOTrainer(GRPOConfig(batch_size=4, num_generations=2, total_training_steps=6, eval_size=0,
                               max_completion_length=2), model=random_model, tokenizer=char_tokenizer,
                    train_rows=rows, reward_funcs=[prompt_dependent_reward])
    sampled = []
    sample = t._sample
    monkeypatch.setattr(t, "_sample", lambda prompts: sampled.append(list(prompts)) or sample(prompts))
    t.train(progress=False)
    epochs = [sampled[0] + sampled[1], sampled[2] + sampled[3], sampled[4] + sampled[5]]
    for order in epochs:
        assert sorted(order) == sorted(r["prompt"] for r in rows)   # every prompt once per epoch
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and epochs[0] != epochs[2]
    assert [m["epoch"] for m in t.history] == [1, 1, 2, 2, 3, 3]


def test_step_metrics_match_an_independent_count(monkeypatch, random_model, char_tokenizer):
    """Step 1's logged numbers, recomputed from its rollout: rewards, accuracy, dead groups,
    lengths, entropy; and the on-policy facts (ratio 1, no clipping, KL 0)."""
    start = copy.deepcopy(random_model)
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer, batch_size=4)
    m = t.step()
    rollout = seen["rollouts"][0]
    prompts = _prompt_of_rows(rollout, char_tokenizer)
    rewards = prompt_dependent_reward(prompts, rollout.completions)
    answers = {r["prompt"]: r["answer"] for r in ROWS}
    correct = [c.strip() == answers[p] for p, c in zip(prompts, rollout.completions)]
    groups = {p: [r for q, r in zip(prompts, rewards) if q == p] for p in set(prompts)}
    eos = char_tokenizer.eos_token_id
    lengths = [ids.index(eos) + 1 if eos in ids else len(ids) for ids in rollout.completion_ids.tolist()]
    with torch.no_grad():
        T = rollout.completion_ids.shape[1]
        logp = torch.log_softmax(start(input_ids=rollout.input_ids).logits[:, -T - 1:-1].float(), -1)
        entropy = -(logp.exp() * logp).sum(-1)[rollout.completion_mask.bool()].mean().item()
    assert m["reward_mean"] == pytest.approx(sum(rewards) / len(rewards), rel=1e-6)
    assert m["reward_std"] == pytest.approx(torch.tensor(rewards).std().item(), rel=1e-5)
    assert m["accuracy"] == sum(correct) / len(correct)
    assert m["dead_group_fraction"] == sum(len(set(g)) == 1 for g in groups.values()) / len(groups)
    assert m["completion_length"] == pytest.approx(sum(lengths) / len(lengths))
    assert m["entropy"] == pytest.approx(entropy, rel=1e-4)
    assert m["ratio_mean"] == pytest.approx(1.0) and m["clip_fraction"] == 0 and m["kl"] == pytest.approx(0, abs=1e-7)
    assert m["step"] == 1 and m["epoch"] == 1
    no_ref = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=1, eval_size=0, beta=0.0),
                         model=random_model, tokenizer=char_tokenizer, train_rows=ROWS)
    assert no_ref.ref_model is None and no_ref.step()["kl"] is None   # not measured, not "0"


def test_eval_every_scores_the_weights_of_that_step(monkeypatch, random_model, char_tokenizer):
    t = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=5, eval_size=4, eval_every=2,
                               max_completion_length=4), model=random_model, tokenizer=char_tokenizer,
                    train_rows=ROWS, reward_funcs=[prompt_dependent_reward])
    after_step, at_eval = {}, {}
    checksum = lambda: sum(float(p.detach().double().sum()) for p in t.model.parameters())   # noqa: E731
    t.callbacks.append(lambda m: after_step.__setitem__(m["step"], checksum()))
    evaluate = t.evaluate

    def spy_evaluate(*args, **kwargs):
        at_eval[t.step_count] = checksum()
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(t, "evaluate", spy_evaluate)
    printed = []
    t.eval_callbacks.append(printed.append)
    t.train(progress=False)
    assert [e["step"] for e in t.evals] == [0, 2, 4, 5] == [e["step"] for e in printed]
    for step in (2, 4, 5):
        assert at_eval[step] == after_step[step]
    assert at_eval[2] != at_eval[4]


# --- replay (lesson 06) ---------------------------------------------------------------------
def _filled(t, answers, advantages):
    """Put samples "<prompt of ROWS[i]> → answer" with the given advantages in t's buffer."""
    from grpo_edu.training.trainers.replay import ReplaySample

    samples = [ReplaySample(ROWS[i]["prompt"], a, adv, 1.0) for i, (a, adv) in enumerate(zip(answers, advantages))]
    assert t.replay_buffer.add(samples, round=0) == len(samples)
    return {(s.question, s.answer): s.advantage for s in samples}


def _replayed_rows(batch, N, tok, stored):
    """The rows after the N fresh ones: their text, checked against the tokens they hold."""
    eos = tok.eos_token_id
    keys = []
    for i in range(N, batch.completion_ids.shape[0]):
        ids = batch.completion_ids[i][batch.completion_mask[i].bool()].tolist()
        answer = "".join(tok.convert_ids_to_tokens(ids[:-1]))
        assert ids[-1] == eos                                              # the stored answer, then <eos>
        keys.append((tok.decode(batch.prompt_ids[i], skip_special_tokens=True), answer))
    assert sorted(keys) == sorted(stored)                                  # every stored sample, once
    return keys


def test_replayed_rows_are_scored_on_their_stored_answer_with_their_stored_advantage(
        monkeypatch, random_model, char_tokenizer):
    """μ = 1, ratio 0.3: N = 8 fresh rows + k = round(0.3·8/0.7) = 3 replayed. The gradient is
    grpo_loss over all 11 rows, the replayed ones with their stored Â and ratio 1."""
    start = copy.deepcopy(random_model)
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer, replay_ratio=0.3, replay_top_fraction=1.0)
    stored = _filled(t, ["57", "1", "123"], [1.5, 0.25, 2.0])
    batches = []
    concat = trainer_module.concat_rollouts
    monkeypatch.setattr(trainer_module, "concat_rollouts", lambda *a, **k: batches.append(concat(*a, **k)) or batches[-1])
    m = t.step()
    batch, rollout = batches[0], seen["rollouts"][0]
    N = rollout.completion_ids.shape[0]
    assert N == 8 and batch.completion_ids.shape[0] == 11 and m["replay_share"] == 3 / 11
    keys = _replayed_rows(batch, N, char_tokenizer, stored)
    fresh_adv, _ = _advantages(rollout, char_tokenizer)
    adv = torch.cat([fresh_adv, torch.tensor([stored[k] for k in keys])])
    torch.testing.assert_close(seen["advantages"][0], adv, atol=1e-5, rtol=1e-5)
    # the expected update, by hand: all rows share the prompt length, so no left padding
    policy = _with_params(start, seen["params"][0])
    lp = _logprobs(policy, batch)
    with torch.no_grad():
        ref_lp = _logprobs(start, batch)
    loss, _ = grpo_loss(lp, lp.detach(), adv, batch.completion_mask.float(), ref_logprobs=ref_lp,
                        beta=t.config.beta, epsilon=t.config.epsilon)
    loss.backward()
    assert m["loss"] == pytest.approx(loss.item(), abs=1e-6)
    _assert_grads_close(seen["grads"][0], [p.grad for p in policy.parameters()])


def test_with_mu2_a_replayed_rows_pi_old_is_the_policy_at_the_start_of_the_step(
        monkeypatch, random_model, char_tokenizer):
    """Fresh rows keep the sampler's log-probs as π_θold; replayed rows get the policy's log-probs
    taken once before the first update (so their first ratio is 1), the same for both updates."""
    start = copy.deepcopy(random_model)
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer, replay_ratio=0.3, replay_top_fraction=1.0,
                             num_iterations=2)
    stored = _filled(t, ["57", "1", "123"], [1.5, 0.25, 2.0])
    olds, batches = [], []
    loss_fn, concat = trainer_module.grpo_loss, trainer_module.concat_rollouts
    monkeypatch.setattr(trainer_module, "grpo_loss", lambda lp, old, *a, **k: olds.append(old.clone()) or loss_fn(lp, old, *a, **k))
    monkeypatch.setattr(trainer_module, "concat_rollouts", lambda *a, **k: batches.append(concat(*a, **k)) or batches[-1])
    t.step()
    batch, rollout = batches[0], seen["rollouts"][0]
    N = rollout.completion_ids.shape[0]
    _replayed_rows(batch, N, char_tokenizer, stored)
    with torch.no_grad():
        expected = _logprobs(start, batch) * batch.completion_mask
    assert len(olds) == 2 and torch.equal(olds[0], olds[1])
    torch.testing.assert_close(olds[0][N:], expected[N:], atol=1e-6, rtol=1e-5)
    T = rollout.completion_ids.shape[1]
    torch.testing.assert_close(olds[0][:N, :T], rollout.logprobs)


def test_only_finished_answers_in_the_top_fraction_with_positive_advantage_are_offered(
        monkeypatch, random_model, char_tokenizer):
    """A random model often runs out of tokens: those completions (no <eos>) never enter the buffer;
    what enters is a finished answer with Â > 0 among the top half of the step's finished answers."""
    t, seen = _spied_trainer(monkeypatch, random_model, char_tokenizer, replay_ratio=0.3, batch_size=4,
                             max_completion_length=2)
    t.reward_funcs = [lambda prompts, completions, **kw: [int(p[0]) - len(c) for p, c in zip(prompts, completions)]]
    offered = []
    add = t.replay_buffer.add
    monkeypatch.setattr(t.replay_buffer, "add", lambda samples, round: offered.append(list(samples)) or add(samples, round=round))
    m = t.step()
    rollout = seen["rollouts"][0]
    prompts = _prompt_of_rows(rollout, char_tokenizer)
    rewards = torch.tensor([int(p[0]) - len(c) for p, c in zip(prompts, rollout.completions)], dtype=torch.float)
    adv = torch.cat([(r - r.mean()) / (r.std() + 1e-4) for r in rewards.view(4, -1)])   # rows b·G + g
    eos = char_tokenizer.eos_token_id
    finished = [i for i, ids in enumerate(rollout.completion_ids.tolist()) if eos in ids]
    assert 0 < len(finished) < rollout.completion_ids.shape[0]           # both kinds occur
    assert [(s.answer, round(s.advantage, 4)) for s in offered[0]] == \
        [(rollout.completions[i], round(float(adv[i]), 4)) for i in finished]
    k = math.ceil(0.5 * len(finished))
    top = sorted(float(adv[i]) for i in finished)[-k:]
    stored = t.replay_buffer.samples()
    assert stored and all(s.advantage > 0 and s.advantage >= top[0] - 1e-6 for s in stored)
    assert m["replay_admitted"] == len(stored) == m["replay_buffer_size"] and m["replay_share"] == 0.0
