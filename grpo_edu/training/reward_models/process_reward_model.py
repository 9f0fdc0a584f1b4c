"""A process reward model (PRM): the backbone with a head that scores every step, p_φ(step j is right | x, y_≤j).

Lesson 17's reward model reads a whole answer and gives one number. A PRM gives one number per *step*: the
same body, a linear head on every token (an ``AutoModelForTokenClassification`` with ``num_labels=1``), read
at each step's last token (the ``;`` or ``#`` that closes a working step, the answer's last digit). It is
trained with binary cross-entropy on step labels (Lightman et al. 2023 on PRM800K; Math-Shepherd on its
Monte-Carlo labels, hard 0/1 or soft shares in [0, 1]):

    L = − Σ_j [ y_j log σ(s_j) + (1 − y_j) log(1 − σ(s_j)) ] / (number of steps)

A solution's score for best-of-N is the probability that every step is right, the product of the steps'
σ(s_j) (Lightman et al.), or their minimum (PURE's min-form): :func:`solution_scores`.

Trained to predict the *final* answer's correctness at every step instead, the same model is an outcome reward
model (ORM, as Cobbe et al.'s 2021 verifiers), so the two differ only in what they learn from (:func:`outcome_labels`).

Steps are the sums model's (:mod:`~grpo_edu.training.task.sums_steps`): its tokenizer writes one token per
character, so a step's last character is its last token.
"""

from __future__ import annotations

import math

import torch

from grpo_edu.common import _checks
from grpo_edu.training.reward_models.reward_model import with_fresh_head
from grpo_edu.training.rollouts.rollout import pad_right
from grpo_edu.training.task.sums_steps import step_spans

AGGREGATIONS = ("prod", "min", "last")
"""How a solution's step probabilities become one score: their product (Lightman et al.), minimum (PURE), or the
last step's alone (an outcome reward model's reading)."""


def make_process_reward_model(backbone, *, seed=0):
    """(PRM, tokenizer): ``backbone`` (the folder of a causal LM with a one-token-per-character tokenizer, e.g.
    ``assets/tiny-sums``) with a fresh per-token scalar head, seeded; loaded as a reward model's backbone is
    (``reward_model.with_fresh_head``: the policy's folder checks)."""
    from transformers import AutoModelForTokenClassification

    def one_token_per_character(tokenizer):
        probe = "12+3=15;15+4=19#19"
        if len(tokenizer(probe, add_special_tokens=False)["input_ids"]) != len(probe):
            _checks.fail("backbone", f"{backbone}'s tokenizer does not write one token per character, so a step's "
                         "end is not one token", "use the sums model's folder (assets/tiny-sums) or a run trained "
                         "from it")

    model, tokenizer = with_fresh_head(AutoModelForTokenClassification, backbone, seed=seed,
                                       check_tokenizer=one_token_per_character)
    return check_process_reward_model(model), tokenizer


def check_process_reward_model(model, arg="prm"):
    """Refuse a model whose head does not give one number per token (a sequence head, or several labels)."""
    labels = getattr(getattr(model, "config", None), "num_labels", None)
    kind = type(model).__name__
    if labels != 1 or not kind.endswith("ForTokenClassification"):
        _checks.fail(arg, f"is a {kind} with {labels} outputs per position; a PRM gives one number per token",
                     "load it with AutoModelForTokenClassification.from_pretrained(folder) from a folder "
                     "make_process_reward_model wrote (num_labels=1)")
    return model


def step_positions(tokenizer, prompts, completions):
    """(token ids, positions): each prompt + completion as ids (with ``<bos>`` when the tokenizer adds one) and
    the index of each step's last token in them."""
    ids, positions = [], []
    for prompt, completion in zip(prompts, completions):
        spans = step_spans(completion)                             # refuses a completion with no steps
        offset = len(tokenizer(prompt)["input_ids"])               # <bos> and the prompt
        ids.append(tokenizer(prompt + completion)["input_ids"])
        positions.append([offset + end - 1 for _, end in spans])
    return ids, positions


def check_labels(labels, completions, arg="labels"):
    """One label in [0, 1] per step of each completion (hard 0/1, or a soft share)."""
    if len(labels) != len(completions):
        _checks.fail(arg, f"has {len(labels)} rows for {len(completions)} completions", "label every completion once")
    for i, (row, completion) in enumerate(zip(labels, completions)):
        steps = len(step_spans(completion))
        if len(row) != steps:
            _checks.fail(f"{arg}[{i}]", f"has {len(row)} labels for the {steps} steps of {completion!r}",
                         "give one label per step (sums_steps.step_labels, or monte_carlo_labels)")
        bad = [y for y in row if not (_checks.is_finite_number(y) and 0 <= y <= 1)]
        if bad:
            _checks.fail(f"{arg}[{i}]", f"holds {bad[0]!r}, outside [0, 1]",
                         "use 1 for a right step and 0 for a wrong one (or a soft share between)")


def step_logits(model, id_lists, positions):
    """s_j at each step's last token: a list of (K_i,) tensors, with gradient when grad is on."""
    device = next(model.parameters()).device
    input_ids, attention_mask = pad_right(id_lists, model.config.pad_token_id)   # (N, L)
    logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits.squeeze(-1)
    return [logits[i, pos] for i, pos in enumerate(positions)]                   # (N, L) → K_i each


def step_loss(logits, labels):
    """Binary cross-entropy over every step of the batch (mean over steps): ``(loss, info)``, info ``accuracy``
    (σ(s) > ½ against label > ½) and ``steps``."""
    s = torch.cat(logits)                                                         # all steps, (K,)
    y = torch.tensor([float(v) for row in labels for v in row], dtype=s.dtype, device=s.device)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(s, y)
    with torch.no_grad():
        accuracy = float(((s > 0) == (y > 0.5)).float().mean())
    return loss, {"accuracy": accuracy, "steps": int(s.numel())}


def train_process_reward_model(model, tokenizer, prompts, completions, labels, *, steps=300, batch_size=32,
                               learning_rate=1e-3, seed=0):
    """Fit the PRM's body and head to step labels by AdamW on :func:`step_loss`; returns ``(model, history)``."""
    check_process_reward_model(model)
    check_labels(labels, completions)
    _checks.positive_int("steps", steps)
    _checks.positive_int("batch_size", batch_size)
    _checks.positive_float("learning_rate", learning_rate)
    ids, positions = step_positions(tokenizer, prompts, completions)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    history = []
    for _ in range(steps):
        batch = torch.randint(len(ids), (min(batch_size, len(ids)),), generator=generator).tolist()
        loss, info = step_loss(step_logits(model, [ids[i] for i in batch], [positions[i] for i in batch]),
                               [labels[i] for i in batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history.append({"loss": loss.item(), **info})
    model.eval()
    return model, history


@torch.no_grad()
def step_probabilities(model, tokenizer, prompts, completions, *, batch_size=256):
    """σ(s_j) for every step of every completion: a list of lists of floats."""
    check_process_reward_model(model)
    was_training = model.training
    model.eval()
    ids, positions = step_positions(tokenizer, prompts, completions)
    out = []
    for start in range(0, len(ids), batch_size):
        for s in step_logits(model, ids[start:start + batch_size], positions[start:start + batch_size]):
            out.append(torch.sigmoid(s.float()).cpu().tolist())
    model.train(was_training)
    return out


def solution_scores(step_probs, how="prod"):
    """One score per solution from its steps' probabilities: product, minimum or last (:data:`AGGREGATIONS`)."""
    _checks.choice("how", how, AGGREGATIONS)
    pick = {"prod": math.prod, "min": min, "last": lambda p: p[-1]}[how]
    return [pick(p) for p in step_probs]


def outcome_labels(completions, final_right):
    """An outcome reward model's labels: every step labelled with whether the *final* answer is right, the target
    Cobbe et al.'s (2021) verifiers learn at every position; read its score at the last step (``how="last"``)."""
    if len(final_right) != len(completions):
        _checks.fail("final_right", f"has {len(final_right)} entries for {len(completions)} completions",
                     "pass whether each completion's final answer is right")
    return [[float(bool(r))] * len(step_spans(c)) for c, r in zip(completions, final_right)]
