"""Self-check exercises at the end of each lesson.

Each exercise's expected answer is *computed by the library* when you check, never typed
in by hand, so the exercises stay true to the code. In a notebook:

>>> from grpo_edu.exercises import check, show
>>> show("01.1")                     # prints the question
>>> check("01.1", 250)               # prints ✅ or ❌ with a hint; returns True/False
"""

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Exercise:
    question: str
    """What the learner is asked."""
    solution: Callable[[], Any]
    """Computes the expected answer with grpo_edu (a number, a string or a list of them)."""
    hint: str
    """Shown after a wrong answer."""
    tolerance: float = 1e-3
    """Absolute tolerance for numeric answers."""


def _schedule(**kw):
    from grpo_edu.schedule import TrainingSchedule

    return TrainingSchedule(**kw)


def _adv(rewards, **kw):
    from grpo_edu.advantages import group_advantages

    return group_advantages([rewards], **kw)[0].tolist()


def _dead(p, G, B=1):
    from grpo_edu.advantages import dead_group_probability

    return dead_group_probability(p, G, batch_size=B)


def _objective(ratio, advantage, epsilon=0.2, epsilon_high=None):
    """−grpo_loss for one token with π_θ/π_θold = ratio: min(r·Â, clip(r)·Â)."""
    import torch

    from grpo_edu.losses import grpo_loss

    logprobs = torch.tensor([[math.log(ratio)]], dtype=torch.float64)
    loss, _ = grpo_loss(logprobs, torch.zeros_like(logprobs), torch.tensor([float(advantage)]),
                        torch.ones_like(logprobs), epsilon=epsilon, epsilon_high=epsilon_high)
    return -loss.item()


def _k3(p_theta, p_ref):
    from grpo_edu.kl import kl_estimate

    return float(kl_estimate(math.log(p_theta), math.log(p_ref), kind="k3"))


def _token_weight(lengths, loss_type, answer):
    """Gradient weight −∂loss/∂logprob of one token of answer ``answer`` (Â = 1, on-policy)."""
    import torch

    from grpo_edu.losses import grpo_loss

    T = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])       # (N, T)
    logprobs = torch.zeros(len(lengths), T, requires_grad=True)
    loss, _ = grpo_loss(logprobs, logprobs.detach(), torch.ones(len(lengths)), mask, loss_type=loss_type)
    loss.backward()
    return -logprobs.grad[answer, 0].item()


def _on_policy_ratio():
    """Mean ratio r that grpo_loss reports when π_θ is the policy that sampled (log π_θ = log π_θold)."""
    import torch

    from grpo_edu.losses import grpo_loss

    logprobs = torch.log(torch.tensor([[0.5, 0.9, 0.2], [0.7, 0.1, 0.6]]))
    _, info = grpo_loss(logprobs, logprobs.detach(), torch.tensor([1.0, -1.0]), torch.ones_like(logprobs))
    return info["ratio_mean"]


def _dead_step_policy_loss(B=16, G=8, T=4, beta=0.04):
    """info["policy_loss"] of a step where every answer of every group scored 0 (a collapsed run)."""
    import torch

    from grpo_edu.advantages import group_advantages
    from grpo_edu.losses import grpo_loss

    torch.manual_seed(0)
    adv = group_advantages(torch.zeros(B, G)).reshape(-1)                 # (N,)
    logprobs = -torch.rand(B * G, T)                                      # any log-probs
    ref = logprobs.detach() - 0.1 * torch.rand(B * G, T)                  # the policy has drifted from π_ref
    _, info = grpo_loss(logprobs, logprobs.detach(), adv, torch.ones(B * G, T), ref_logprobs=ref, beta=beta)
    return info["policy_loss"]


def _default_run_schedule():
    """The schedule of ``GRPOConfig()`` on the addition task's train split."""
    from grpo_edu.config import GRPOConfig
    from grpo_edu.tasks import get_task

    config = GRPOConfig()
    return config.schedule(len(get_task(config.task).split("train")))


def _bundled_heldout(n=100, **sampling):
    """Per-sample correctness of the bundled model on the first ``n`` held-out prompts (seed 0)."""
    from grpo_edu.evaluation import evaluate
    from grpo_edu.models import load_model_and_tokenizer
    from grpo_edu.tasks import get_task

    task = get_task("addition")
    model, tokenizer = load_model_and_tokenizer("bundled")
    result = evaluate(model, tokenizer, task.split("heldout", n), task, seed=0, **sampling)
    return [s[3] for s in result["samples"]]


def _pass_at_k(n=100, k=8):
    """Fraction of the first ``n`` held-out prompts with at least one right answer among k samples."""
    correct = _bundled_heldout(n, num_samples=k)
    return sum(any(correct[i:i + k]) for i in range(0, len(correct), k)) / n


EXERCISES: dict[str, Exercise] = {
    # lesson 01: batch, step, epoch
    "01.1": Exercise("A dataset has 3000 prompts and batch_size = 12. How many steps make one epoch?",
                     lambda: _schedule(dataset_size=3000, batch_size=12, num_generations=8,
                                       total_epochs=1).steps_per_epoch,
                     "steps per epoch = dataset_size // batch_size."),
    "01.2": Exercise("3000 prompts, batch_size = 12, G = 8, total_epochs = 5, total_training_steps = 600. "
                     "How many steps does the run take?",
                     lambda: _schedule(dataset_size=3000, batch_size=12, num_generations=8, total_epochs=5,
                                       total_training_steps=600).total_steps,
                     "the run stops at whichever limit comes first: compare 600 with 5 × steps_per_epoch."),
    "01.3": Exercise("batch_size = 6, G = 8, micro_batch_size = 16. How many gradient-accumulation passes "
                     "make one optimizer step?",
                     lambda: _schedule(dataset_size=600, batch_size=6, num_generations=8, total_epochs=1,
                                       micro_batch_size=16).gradient_accumulation_steps,
                     "a step holds batch_size × G completions; each pass handles micro_batch_size of them."),
    "01.4": Exercise("1000 prompts, batch_size = 64. How many prompts are left out of every epoch?",
                     lambda: _schedule(dataset_size=1000, batch_size=64, num_generations=8,
                                       total_epochs=1).dropped_per_epoch,
                     "the incomplete last batch is dropped: dataset_size % batch_size."),
    # lesson 02: group advantages
    "02.1": Exercise("Rewards [1, 0, 0, 0] for G = 4 (default eps = 1e-4). What is the advantage of the "
                     "correct answer? (4 decimals)",
                     lambda: _adv([1, 0, 0, 0])[0],
                     "μ = 0.25; σ is the unbiased std (divide by G − 1 = 3)."),
    "02.2": Exercise("Rewards [0.5, 0.5, 0.5, 0.5]. What are the four advantages?",
                     lambda: _adv([0.5, 0.5, 0.5, 0.5]),
                     "every answer is exactly average: there is nothing to prefer."),
    "02.3": Exercise("Rewards [2, 0, 0, 0] with scale='none' (Dr. GRPO). Advantage of the first answer?",
                     lambda: _adv([2, 0, 0, 0], scale="none")[0],
                     "scale='none' only subtracts the group mean."),
    # lesson 03: zero-σ groups
    "03.1": Exercise("A prompt is solved with probability p = 0.9 and G = 4. Chance that its group is dead? "
                     "(4 decimals)",
                     lambda: round(_dead(0.9, 4), 4),
                     "dead = all right or all wrong: p^G + (1 − p)^G.", tolerance=1e-4),
    "03.2": Exercise("Same p = 0.9, but G = 16. Chance that the group is dead? (4 decimals)",
                     lambda: round(_dead(0.9, 16), 4),
                     "p^G + (1 − p)^G with G = 16.", tolerance=1e-4),
    "03.3": Exercise("p = 0.5, G = 2, batch_size = 4. Chance that the *whole step* is dead? (4 decimals)",
                     lambda: round(_dead(0.5, 2, 4), 4),
                     "each of the 4 groups must be dead independently: (p^G + (1 − p)^G)^B.", tolerance=1e-4),
    # lesson 04: clipped loss and KL
    "04.1": Exercise("ε = 0.2, Â = +1, and the new policy made a token 1.5 times as likely (r = 1.5). "
                     "What is this token's objective min(r·Â, clip(r, 1 − ε, 1 + ε)·Â)?",
                     lambda: _objective(1.5, 1.0),
                     "clip(1.5, 0.8, 1.2) = 1.2; take the smaller of 1.5·Â and 1.2·Â."),
    "04.2": Exercise("ε = 0.2, Â = −1, r = 0.5. What is the token's objective? (the min picks the worse case)",
                     lambda: _objective(0.5, -1.0),
                     "r·Â = −0.5 and clip(0.5, 0.8, 1.2)·Â = −0.8; min takes the smaller (more negative) one."),
    "04.3": Exercise("The policy gives a token probability 0.5, the reference model 0.25. "
                     "What is the k3 estimate of the KL for this token? (4 decimals)",
                     lambda: round(_k3(0.5, 0.25), 4),
                     "with ρ = π_ref/π_θ = 0.5: k3 = ρ − log ρ − 1.", tolerance=1e-4),
    "04.4": Exercise("Two answers, 2 tokens and 8 tokens, both with Â = 1, loss_type = 'grpo'. What is the "
                     "gradient weight of ONE token of the 8-token answer? (the short answer's tokens get 0.25)",
                     lambda: _token_weight((2, 8), "grpo", 1),
                     "'grpo' averages over each answer's own tokens, then over the N = 2 answers: 1/(N·|o_i|)."),
    # lesson 05: one GRPO step, short runs
    "05.1": Exercise("On the first update of a batch, π_θ is still the policy that sampled the answers. "
                     "What is the mean probability ratio r = π_θ / π_θold?",
                     _on_policy_ratio,
                     "the same model gave the same log-probabilities: exp(logprobs − old_logprobs) = exp(0)."),
    "05.2": Exercise("One group of G = 8 answers has rewards [1, 0, 0, 0, 0, 0, 0, 0]. What is the advantage "
                     "of the single right answer? (4 decimals)",
                     lambda: round(_adv([1, 0, 0, 0, 0, 0, 0, 0])[0], 4),
                     "μ = 1/8; σ is the unbiased std of the 8 rewards; Â = (1 − μ)/(σ + 1e-4).", tolerance=1e-4),
    "05.3": Exercise("At temperature 0.3 the bundled model answers about 97 % of the prompts right (p = 0.97). "
                     "With G = 8, what share of groups do you expect to be dead? (4 decimals)",
                     lambda: round(_dead(0.97, 8), 4),
                     "dead = all right or all wrong: p^G + (1 − p)^G.", tolerance=1e-4),
    "05.4": Exercise("G = 2 and the model is right with p = 0.5. What is the chance that a group is dead?",
                     lambda: _dead(0.5, 2),
                     "two answers: both right (p²) or both wrong ((1 − p)²)."),
    "05.5": Exercise("After a collapse every answer of every group scores 0, and β = 0.04. What is the "
                     "policy-gradient part of the loss, info['policy_loss']?",
                     _dead_step_policy_loss,
                     "every group is dead, so every advantage is 0; only the KL term is left."),
    # lesson 08: the full run
    "08.1": Exercise("The default run has batch_size B = 16 and G = 8. On one GPU without gradient "
                     "accumulation, what per_device_train_batch_size gives TRL the same step?",
                     lambda: _default_run_schedule().completions_per_step,
                     "TRL counts completions, not prompts: B · G."),
    "08.2": Exercise("How many epochs (passes over the 7600 train prompts) does the default 1500-step run "
                     "make? (3 decimals)",
                     lambda: round(_default_run_schedule().epochs_completed, 3),
                     "steps per epoch = 7600 // 16; epochs = 1500 / steps per epoch."),
    "08.3": Exercise("Greedy accuracy (temperature 0) of the bundled model on the first 100 held-out prompts?",
                     lambda: sum(_bundled_heldout(100, temperature=0)) / 100,
                     "evaluate(model, tokenizer, task.split('heldout', 100), task, temperature=0)['accuracy']."),
    "08.4": Exercise("pass@8 of the bundled model: on what fraction of the first 100 held-out prompts is at "
                     "least one of 8 samples right (temperature 1, seed 0)?",
                     _pass_at_k,
                     "evaluate(..., num_samples=8, seed=0); the samples come 8 per prompt, in order; "
                     "count the prompts with any right sample."),
}


def show(exercise_id):
    """Print the question of an exercise."""
    ex = _get(exercise_id)
    print(f"Exercise {exercise_id}: {ex.question}")


def check(exercise_id, answer):
    """Compare ``answer`` with the library's result; print ✅ or ❌ (with a hint). Returns a bool.

    ``answer=None`` (or ``...``) means "not answered yet" and prints the question.
    """
    ex = _get(exercise_id)
    if answer is None or answer is Ellipsis:
        print(f"Exercise {exercise_id}: not answered yet. {ex.question}")
        return False
    ok = _matches(answer, ex.solution(), ex.tolerance)
    if ok:
        print(f"✅ Exercise {exercise_id}: correct.")
    else:
        print(f"❌ Exercise {exercise_id}: not quite. Hint: {ex.hint}")
    return ok


def _get(exercise_id):
    if exercise_id not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise ValueError(f"exercise_id: unknown exercise {exercise_id!r}. Fix: use one of {known}.")
    return EXERCISES[exercise_id]


def _matches(answer, expected, tol):
    if isinstance(expected, (list, tuple)):
        try:
            answer = list(answer)
        except TypeError:
            return False
        return len(answer) == len(expected) and all(_matches(a, e, tol) for a, e in zip(answer, expected))
    if isinstance(expected, str):
        return str(answer).strip() == expected
    try:
        return math.isclose(float(answer), float(expected), rel_tol=0, abs_tol=tol)
    except (TypeError, ValueError):
        return False
