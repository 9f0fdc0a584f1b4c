"""Scoring a model: sample answers to prompts (held-out ones, usually) and check them.

One sampler serves everything here: ``sample_completions`` (the trainer's own sampler: the engine,
``engine.generate``, unless ``sampler="loop"`` asks for the readable ``rollout.generate``);
``evaluate``, ``success_rates`` and ``evaluate_accuracy`` check its answers with a task's verifier;
``pass_at_k`` turns n samples per prompt into pass@k.
"""

import math

import torch

from grpo_edu.common._checks import fail, positive_float, positive_int
from grpo_edu.training.rollouts import engine
from grpo_edu.training.rollouts.rollout import completion_logprobs, generate, rollout_from_text

SAMPLERS = {"engine": engine.generate, "loop": generate}
"""``GRPOConfig.sampler``'s choices: the same distribution, other random numbers (greedy answers are equal)."""


def sample_completions(model, tokenizer, prompts: list[str], *, temperature: float = 1.0,
                       num_samples: int = 1, seed: int = 0, max_new_tokens: int = 4,
                       batch_size: int = 1024, sampler: str = "engine"):
    """``num_samples`` completions per prompt, prompt-major: all of prompt 0's come first.

    ``temperature=0`` means greedy decoding. Sampling is plain multinomial sampling from
    softmax(logits / temperature): no top-k, no top-p. It draws from its own seeded
    ``torch.Generator``, so evaluating never changes the caller's global RNG.
    Returns ``(texts, stopped)``: the text before the first ``<eos>`` with special tokens
    removed, and whether ``<eos>`` was produced within ``max_new_tokens``. ``sampler``: "engine"
    (``engine.generate``) or "loop" (``rollout.generate``); the two give other answers for a seed at τ > 0.
    """
    if sampler not in SAMPLERS:
        fail("sampler", f"is {sampler!r}, not one of {sorted(SAMPLERS)}", "pass 'engine' (the default) or 'loop'")
    positive_float("temperature", temperature, allow_zero=True,
                   fix="pass 1.0 to sample as GRPO does, or 0 for greedy decoding")
    positive_int("num_samples", num_samples)
    positive_int("max_new_tokens", max_new_tokens)
    positive_int("batch_size", batch_size)
    greedy = temperature == 0
    per_prompt = 1 if greedy else num_samples
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)  # its own stream: the global RNG is untouched
    eos = tokenizer.eos_token_id
    texts, stopped = [], []
    was_training = model.training
    model.eval()
    chunk = max(1, batch_size // per_prompt)
    for start in range(0, len(prompts), chunk):
        out = SAMPLERS[sampler](model, tokenizer, list(prompts[start:start + chunk]), num_generations=per_prompt,
                                max_new_tokens=max_new_tokens, temperature=temperature, generator=generator)
        texts += out.completions
        stopped += (out.completion_ids == eos).any(dim=1).tolist()
    model.train(was_training)
    if greedy and num_samples > 1:  # greedy answers are all the same: copy, don't recompute
        texts = [t for t in texts for _ in range(num_samples)]
        stopped = [s for s in stopped for _ in range(num_samples)]
    return texts, stopped


def success_rates(model, tokenizer, rows: list[dict], task, **sampling) -> list[float]:
    """Per prompt, the fraction of its ``num_samples`` completions that are correct.

    This estimates p, the chance that one sampled answer is right. A GRPO group of G
    answers is all-equal (σ = 0, no learning signal) with probability pᴳ + (1 − p)ᴳ, so
    prompts with 0 < p < 1 are the ones GRPO can learn from.
    """
    if not rows:
        fail("rows", "is empty", "pass at least one {'prompt', 'answer'} row")
    num_samples = sampling.get("num_samples", 1)
    texts, _ = sample_completions(model, tokenizer, [r["prompt"] for r in rows], **sampling)
    correct = [task.is_correct(t, rows[i // num_samples]["answer"]) for i, t in enumerate(texts)]
    return [sum(correct[i * num_samples: (i + 1) * num_samples]) / num_samples
            for i in range(len(rows))]


def evaluate_accuracy(model, tokenizer, rows: list[dict], task, *, temperature: float = 1.0,
                      num_samples: int = 1, seed: int = 0, max_new_tokens: int = 4, sampler: str = "engine") -> float:
    """Mean accuracy over ``rows`` × ``num_samples`` completions (``temperature=0``: greedy)."""
    rates = success_rates(model, tokenizer, rows, task, temperature=temperature,
                          num_samples=num_samples, seed=seed, max_new_tokens=max_new_tokens, sampler=sampler)
    return sum(rates) / len(rates)


@torch.no_grad()
def evaluate(model, tokenizer, rows, task, *, temperature=1.0, num_samples=1, max_new_tokens=8, seed=0,
             batch_size=256, sampler="engine"):
    """Accuracy of ``model`` on ``rows`` ({"prompt", "answer"}), checked by ``task.is_correct``.

    Sampling at temperature 1 (the default) measures the policy itself, not its best guess;
    ``temperature=0`` gives greedy accuracy. Seeded, so the same model gives the same number.
    ``batch_size`` prompts are sampled at once, by ``sampler`` (see :func:`sample_completions`).
    Returns ``{"accuracy": float, "samples": [(prompt, completion, answer, correct), ...]}``.
    """
    texts, _ = sample_completions(model, tokenizer, [r["prompt"] for r in rows], temperature=temperature,
                                  num_samples=num_samples, seed=seed, max_new_tokens=max_new_tokens,
                                  batch_size=batch_size * num_samples, sampler=sampler)
    samples = []
    for i, text in enumerate(texts):
        row = rows[i // num_samples]
        samples.append((row["prompt"], text, row["answer"], task.is_correct(text, row["answer"])))
    accuracy = sum(s[3] for s in samples) / max(len(samples), 1)
    return {"accuracy": accuracy, "samples": samples}


def evaluate_run(model, tokenizer, rows, task, config, **sampling):
    """Held-out accuracy as a GRPO run measures it: :func:`evaluate` with the run's
    ``max_completion_length``, ``seed`` and ``sampler`` (sampling at temperature 1 unless ``sampling``
    says otherwise). ``GRPOTrainer.evaluate`` and ``graduation.run_trl`` both call this, so grpo_edu and
    TRL are scored by one ruler."""
    sampling.setdefault("max_new_tokens", config.max_completion_length)
    sampling.setdefault("seed", config.seed)
    sampling.setdefault("sampler", config.sampler)
    return evaluate(model, tokenizer, rows, task, **sampling)


def pass_at_k(num_samples, num_correct, k):
    """The unbiased pass@k of one prompt from n samples of which c are right (Chen et al. 2021, eq. 1).

        pass@k = 1 − C(n − c, k) / C(n, k)

    the chance that k answers drawn without replacement from the n include a right one. Computing
    1 − (1 − c/n)^k instead would be biased low for k close to n. Needs 1 ≤ k ≤ n and 0 ≤ c ≤ n.
    Returns ``(value, info)``; ``info["misses"]`` is C(n − c, k) / C(n, k).
    """
    n, c = num_samples, num_correct
    positive_int("num_samples", n)
    positive_int("num_correct", c, minimum=0)
    positive_int("k", k)
    if k > n:
        fail("k", f"is {k}, more than the {n} samples", f"draw at least k samples per prompt, or ask for k ≤ {n}")
    if c > n:
        fail("num_correct", f"is {c}, more than the {n} samples", "count the right answers among the n samples")
    misses = math.comb(n - c, k) / math.comb(n, k)               # no right answer among k drawn
    return 1.0 - misses, {"misses": misses}


def pass_at_k_curve(correct_counts, num_samples, ks):
    """Mean pass@k over prompts for each k in ``ks``: ``({k: value}, info)``.

    ``correct_counts``: right answers per prompt, each out of ``num_samples`` (e.g. from
    :func:`success_rates` × n). ``info["solved_by_any"]``: the share of prompts with c > 0,
    the ceiling pass@k reaches as k → n.
    """
    if not correct_counts:
        fail("correct_counts", "is empty", "pass one count per prompt")
    curve = {k: sum(pass_at_k(num_samples, c, k)[0] for c in correct_counts) / len(correct_counts) for k in ks}
    return curve, {"solved_by_any": sum(c > 0 for c in correct_counts) / len(correct_counts)}


@torch.no_grad()
def answer_entropy(model, tokenizer, prompts, answers):
    """The model's entropy while reading *given* answers, token by token (teacher forcing).

    Fixed texts make entropies comparable across models: the per-token mean over a run's own
    samples also moves when the answers change (long worked answers have many near-certain
    tokens), this one only when the model does. Returns ``(mean, info)``: the mean over all
    answer tokens (``<eos>`` included), and ``info["entropy"]``, (N, T), with ``info["mask"]``.
    """
    if len(prompts) != len(answers) or not prompts:
        fail("answers", f"has {len(answers)} entries for {len(prompts)} prompts", "pass one answer per prompt")
    device = next(model.parameters()).device
    rollout = rollout_from_text(tokenizer, list(prompts), list(answers), device=device)
    was_training = model.training
    model.eval()
    _, entropy = completion_logprobs(model, rollout.input_ids, rollout.attention_mask,
                                     rollout.completion_ids.shape[1], with_entropy=True)   # (N, T)
    model.train(was_training)
    mask = rollout.completion_mask
    return float((entropy * mask).sum() / mask.sum()), {"entropy": entropy * mask, "mask": mask}
