"""Held-out accuracy: sample answers to prompts the model never trained on, and check them."""

import torch

from grpo_edu.rollout import generate


@torch.no_grad()
def evaluate(model, tokenizer, rows, task, *, temperature=1.0, num_samples=1, max_new_tokens=8, seed=0,
             batch_size=256):
    """Accuracy of ``model`` on ``rows`` ({"prompt", "answer"}), checked by ``task.is_correct``.

    Sampling at temperature 1 (the default) measures the policy itself, not its best guess;
    ``temperature=0`` gives greedy accuracy. Seeded, so the same model gives the same number.
    Returns ``{"accuracy": float, "samples": [(prompt, completion, answer, correct), ...]}``.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    samples = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        out = generate(model, tokenizer, [r["prompt"] for r in chunk], num_generations=num_samples,
                       max_new_tokens=max_new_tokens, temperature=temperature, generator=gen)
        for i, text in enumerate(out.completions):
            row = chunk[i // num_samples]
            samples.append((row["prompt"], text, row["answer"], task.is_correct(text, row["answer"])))
    model.train(was_training)
    accuracy = sum(s[3] for s in samples) / max(len(samples), 1)
    return {"accuracy": accuracy, "samples": samples}
