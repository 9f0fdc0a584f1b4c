"""The exercise bank: every lesson's exercises, with the library call that computes each answer.

``EXERCISES`` holds the self-check exercises (a number, a string or a list; or a function the learner
writes, compared with the library on seeded random inputs). An answer is never typed in by hand: each
``Exercise`` carries a ``solution`` that calls the library when the learner checks. The predict-then-run
questions, ``PREDICTIONS``, live in ``prediction_bank`` (imported here too); ``grpo_edu.course.exercises``
asks both kinds and checks the answers.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from grpo_edu.course.prediction_bank import CLINIC_MENU, PREDICTIONS, Prediction  # noqa: F401 (both banks, one import)


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


@dataclass(frozen=True)
class CodeExercise:
    question: str
    """What function the learner is asked to write, and its signature."""
    reference: Callable[..., Any]
    """The library's version: called with the same arguments as the learner's function."""
    inputs: Callable[[np.random.Generator], tuple]
    """Draws one tuple of arguments (numpy arrays / numbers) from a seeded generator."""
    hint: str
    """Shown after a wrong result."""
    trials: int = 20
    """How many random inputs are tried (seeded, so every run tries the same ones)."""
    tolerance: float = 1e-6
    """Absolute tolerance per element."""


def _schedule(**kw):
    from grpo_edu.core.schedule import TrainingSchedule

    return TrainingSchedule(**kw)


def _adv(rewards, **kw):
    from grpo_edu.core.advantages import group_advantages

    return group_advantages([rewards], **kw)[0].tolist()


def _dead(p, G, B=1):
    from grpo_edu.core.advantages import dead_group_probability

    return dead_group_probability(p, G, batch_size=B)


def _collapse_threshold(peak, floor=0.0):
    from grpo_edu.beyond.symptoms import COLLAPSE_FRACTION

    return round(floor + COLLAPSE_FRACTION * (peak - floor), 4)


def _objective(ratio, advantage, epsilon=0.2, epsilon_high=None):
    """−grpo_loss for one token with π_θ/π_θold = ratio: min(r·Â, clip(r)·Â)."""
    import torch

    from grpo_edu.core.losses import grpo_loss

    logprobs = torch.tensor([[math.log(ratio)]], dtype=torch.float64)
    loss, _ = grpo_loss(logprobs, torch.zeros_like(logprobs), torch.tensor([float(advantage)]),
                        torch.ones_like(logprobs), epsilon=epsilon, epsilon_high=epsilon_high)
    return -loss.item()


def _k3(p_theta, p_ref):
    from grpo_edu.core.kl import kl_estimate

    return float(kl_estimate(math.log(p_theta), math.log(p_ref), kind="k3"))


def _token_weight(lengths, loss_type, answer):
    """Gradient weight −∂loss/∂logprob of one token of answer ``answer`` (Â = 1, on-policy)."""
    import torch

    from grpo_edu.core.losses import grpo_loss

    T = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])       # (N, T)
    logprobs = torch.zeros(len(lengths), T, requires_grad=True)
    loss, _ = grpo_loss(logprobs, logprobs.detach(), torch.ones(len(lengths)), mask, loss_type=loss_type)
    loss.backward()
    return -logprobs.grad[answer, 0].item()


def _on_policy_ratio():
    """Mean ratio r that grpo_loss reports when π_θ is the policy that sampled (log π_θ = log π_θold)."""
    import torch

    from grpo_edu.core.losses import grpo_loss

    logprobs = torch.log(torch.tensor([[0.5, 0.9, 0.2], [0.7, 0.1, 0.6]]))
    _, info = grpo_loss(logprobs, logprobs.detach(), torch.tensor([1.0, -1.0]), torch.ones_like(logprobs))
    return info["ratio_mean"]


def _live_token_gradient():
    """∂loss/∂log π of the right answer's token: one live group [1, 0, 0, 0], one dead group, |o| = 1."""
    import torch

    from grpo_edu.core.advantages import group_advantages
    from grpo_edu.core.losses import grpo_loss

    adv = group_advantages(torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)).reshape(-1)
    logprobs = torch.full((8, 1), -0.5, dtype=torch.float64, requires_grad=True)          # (N, |o| = 1)
    loss, _ = grpo_loss(logprobs, logprobs.detach(), adv, torch.ones_like(logprobs), loss_type="grpo")
    loss.backward()
    return logprobs.grad[0, 0].item()


def _sequence_logprob_ref(token_logprobs, mask):
    return (np.asarray(token_logprobs) * np.asarray(mask)).sum(axis=1)


def _token_logprob_input(rng):
    N, T = int(rng.integers(1, 6)), int(rng.integers(1, 7))
    lengths = rng.integers(1, T + 1, size=N)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)          # (N, T)
    return (np.log(rng.uniform(0.01, 1.0, size=(N, T))), mask)


def _trl_steps(total_training_steps, num_iterations):
    """Optimizer updates (TRL's "steps") of a grpo_edu run: steps × num_iterations."""
    from grpo_edu.training.config import GRPOConfig

    config = GRPOConfig(total_training_steps=total_training_steps, num_iterations=num_iterations)
    return config.schedule(2000).total_steps * config.num_iterations


def _to_trl_value(batch_size, G, micro, processes, key):
    from grpo_edu.beyond.export import to_trl
    from grpo_edu.training.config import GRPOConfig

    return to_trl(GRPOConfig(batch_size=batch_size, num_generations=G, micro_batch_size=micro),
                  num_processes=processes)[0][key]


def _verl_batch(batch_size, G, n_gpus):
    from grpo_edu.beyond.export import to_verl
    from grpo_edu.training.config import GRPOConfig

    pairs = dict(to_verl(GRPOConfig(batch_size=batch_size, num_generations=G), n_gpus=n_gpus)[1]["pairs"])
    return [pairs["data.train_batch_size"], pairs["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]]


def _optimizer_gib(name, n_gpus, stage):
    from grpo_edu.beyond.memory import ARCHITECTURES, memory_per_gpu

    parts, _ = memory_per_gpu(ARCHITECTURES[name], n_gpus=n_gpus, zero_stage=stage)
    return parts["AdamW moments + fp32 master weights"]


def _run_schedule(**changes):
    """The schedule of ``GRPOConfig(**changes)`` on its task's train split."""
    from grpo_edu.training.config import GRPOConfig
    from grpo_edu.training.tasks import get_task

    config = GRPOConfig(**changes)
    return config.schedule(len(get_task(config.task).split("train")))


def _default_run_schedule():
    """The schedule of ``GRPOConfig()`` on the addition task's train split."""
    return _run_schedule()


def _bundled_heldout(n=100, **sampling):
    """Per-sample correctness of the bundled model on the first ``n`` held-out prompts (seed 0)."""
    from grpo_edu.training.evaluation import evaluate
    from grpo_edu.training.models import load_model_and_tokenizer
    from grpo_edu.training.tasks import get_task

    task = get_task("addition")
    model, tokenizer = load_model_and_tokenizer("bundled")
    result = evaluate(model, tokenizer, task.split("heldout", n), task, seed=0, **sampling)
    return [s[3] for s in result["samples"]]


def _pass_at_k(n=100, k=8):
    """Fraction of the first ``n`` held-out prompts with at least one right answer among k samples."""
    correct = _bundled_heldout(n, num_samples=k)
    return sum(any(correct[i:i + k]) for i in range(0, len(correct), k)) / n


# --- code exercises: references and seeded random inputs -----------------------------------

def _policy_gradient_ref(logits, answers, advantages):
    """∂/∂logits of −(1/G) Σ Â_i log π(a_i): the mean of log_derivative_step's per-answer gradients."""
    from grpo_edu.core.policy_gradient import log_derivative_step

    grads = [log_derivative_step(logits, int(a), float(adv))[1]["grad"] for a, adv in zip(answers, advantages)]
    return np.mean(grads, axis=0)


def _policy_gradient_input(rng):
    V, G = int(rng.integers(2, 7)), int(rng.integers(2, 9))
    return rng.normal(0, 1.5, size=V), rng.integers(0, V, size=G), rng.normal(0, 1, size=G)


def _rewards_input(rng):
    """A (B, G) reward table; small G and few reward values, so dead groups turn up."""
    B, G = int(rng.integers(1, 5)), int(rng.integers(2, 9))
    if rng.random() < 0.5:
        return (rng.integers(0, 2, size=(B, G)).astype(float),)          # right / wrong
    return (rng.choice([0.0, 0.25, 0.5, 1.0], size=(B, G)),)              # partial credit


def _zero_std_ref(rewards):
    from grpo_edu.core.advantages import zero_std_groups

    return zero_std_groups(rewards)


def _clip_input(rng):
    n = int(rng.integers(3, 9))
    return (rng.uniform(0.5, 1.6, size=n), rng.normal(0, 1.5, size=n), float(rng.choice([0.1, 0.2, 0.3])))


def _clip_push_ref(ratio, advantage, epsilon):
    """d min(r·Â, clip(r)·Â) / d log π_θ per token: grpo_loss's own gradient (token_push, one-token answers)."""
    from grpo_edu.core.losses import token_push

    n = len(ratio)
    push, _ = token_push(np.asarray(advantage, dtype=float), np.ones((n, 1)), ratio=np.asarray(ratio)[:, None],
                         epsilon=float(epsilon))
    return (push[:, 0] * n).numpy()                      # × N undoes the mean over the N one-token answers


def _k3_slope_ref(logprobs, ref_logprobs):
    """d k3 / d log π_θ per token, by autograd through the library's kl_estimate."""
    import torch

    from grpo_edu.core.kl import kl_estimate

    lp = torch.tensor(np.asarray(logprobs, dtype=float), requires_grad=True)
    kl_estimate(lp, torch.tensor(np.asarray(ref_logprobs, dtype=float)), kind="k3").sum().backward()
    return lp.grad.numpy()


def _logprob_input(rng):
    n = int(rng.integers(3, 9))
    logprobs = np.log(rng.uniform(0.01, 1.0, size=n))
    return (logprobs, logprobs + rng.normal(0, 0.5, size=n))


def _evicted_by(stored, newcomer):
    """Fill a buffer of capacity len(stored) with (Â, round) samples, offer ``newcomer``; return what left."""
    from grpo_edu.training.replay import ReplayBuffer, ReplaySample

    buffer = ReplayBuffer(len(stored), top_fraction=1.0)
    for i, (adv, rnd) in enumerate(stored):
        buffer.add([ReplaySample(f"q{i}", "a", adv, 1.0)], round=rnd)
    before = {s.question: (s.advantage, r) for s, r in buffer.entries()}
    buffer.add([ReplaySample("new", "a", newcomer[0], 1.0)], round=newcomer[1])
    after = {s.question for s, _ in buffer.entries()}
    gone = [list(v) for q, v in before.items() if q not in after]
    return gone[0] if gone else "none"


def _admitted_ref(advantages, top_fraction, min_advantage):
    """The buffer's admission rule, run on a fresh buffer: which of one add's samples get in."""
    from grpo_edu.training.replay import ReplayBuffer, ReplaySample

    buffer = ReplayBuffer(len(advantages) + 1, top_fraction=top_fraction, min_advantage=min_advantage)
    buffer.add([ReplaySample(str(i), "a", float(a), 1.0) for i, a in enumerate(advantages)], round=0)
    stored = {int(s.question) for s in buffer.samples()}
    return np.array([i in stored for i in range(len(advantages))])


def _admission_input(rng):
    n = int(rng.integers(3, 17))
    advantages = np.round(rng.normal(0, 1, size=n), 1)           # rounded: ties happen
    return (advantages, float(rng.choice([0.3, 0.5, 1.0])), float(rng.choice([0.0, 0.5])))


def _replay_count(num_new, replay_ratio):
    from grpo_edu.training.replay import replay_count

    return replay_count(num_new, replay_ratio)


def _replay_composition(num_new, replay_ratio, buffer_size):
    from grpo_edu.training.replay import replay_composition

    return replay_composition(num_new, replay_ratio, buffer_size)


def _composite(weights, completions, answer="46"):
    from grpo_edu.training.rewards import brevity_reward, combine, correctness, format_reward

    funcs = {"correctness": correctness, "brevity": brevity_reward(4), "format": format_reward(3)}
    reward = combine(**{name: (funcs[name], w) for name, w in weights.items()})
    return reward(["12+34="] * len(completions), list(completions), answer=[answer] * len(completions))


def _push_ratio(short, long, loss_type):
    """How many times harder each token of a ``short``-token answer is pushed than one of a ``long`` one
    (same Â = −1, one group of two, ``loss_type``)."""
    from grpo_edu.core.losses import token_push

    T = max(short, long)
    mask = np.array([[1.0] * n + [0.0] * (T - n) for n in (short, long)])
    push, _ = token_push(np.array([-1.0, -1.0]), mask, loss_type=loss_type, max_completion_length=T)
    return float(push[0, 0] / push[1, 0])


def _pass_at_k_ref(n, c, k):
    from grpo_edu.training.evaluation import pass_at_k

    return pass_at_k(int(n), int(c), int(k))[0]


def _pass_at_k_input(rng):
    n = int(rng.integers(1, 31))
    return n, int(rng.integers(0, n + 1)), int(rng.integers(1, n + 1))


def _sequence_ratio_ref(logprobs, old_logprobs, mask):
    import torch

    from grpo_edu.core.losses import sequence_ratio

    s, _ = sequence_ratio(torch.as_tensor(logprobs), torch.as_tensor(old_logprobs), torch.as_tensor(mask))
    return s.numpy()


def _two_logprob_input(rng):
    logprobs, mask = _token_logprob_input(rng)
    return logprobs, logprobs + rng.normal(0, 0.3, size=logprobs.shape), mask    # log π_θ, log π_θold, (N, T)


def _policy_term(loss_type, ratio, advantage, logprob=None, **settings):
    import torch

    from grpo_edu.core.losses import LOSS_TYPES

    term, _ = LOSS_TYPES[loss_type]
    logprob = np.zeros_like(ratio) if logprob is None else logprob
    return term(torch.as_tensor(ratio), torch.as_tensor(advantage), torch.as_tensor(logprob), **settings).numpy()


def _cispo_input(rng):
    n = int(rng.integers(3, 9))
    return (rng.uniform(0.2, 8.0, size=n), rng.normal(0, 1.5, size=n), np.log(rng.uniform(0.01, 1.0, size=n)),
            float(rng.choice([2.0, 5.0])))


def _sapo_input(rng):
    n = int(rng.integers(3, 9))
    return rng.uniform(0.3, 3.0, size=n), rng.normal(0, 1.5, size=n), float(rng.choice([1.0, 2.0])), 1.05


def _rloo_ref(rewards):
    from grpo_edu.core.advantages import rloo_advantages

    return rloo_advantages(rewards)


def _gated_brevity_ref(completions, answers, max_length):
    from grpo_edu.course.clinic import brevity_if_correct

    return brevity_if_correct(int(max_length))(None, list(completions), list(answers))


def _gated_brevity_input(rng):
    n, max_length = int(rng.integers(3, 9)), int(rng.integers(2, 6))
    answers = [str(int(rng.integers(10, 200))) for _ in range(n)]
    pick = lambda a: rng.choice([a, a + "0", a[:-1], "", " " + a + " ", str(int(a) + 1)])   # noqa: E731
    return [str(pick(a)) for a in answers], answers, max_length


def _trl_batch_ref(batch_size, G, processes, micro_batch_size):
    return [_to_trl_value(int(batch_size), int(G), int(micro_batch_size) or None, int(processes), key)
            for key in ("per_device_train_batch_size", "gradient_accumulation_steps")]


def _trl_batch_input(rng):
    processes = int(rng.choice([1, 2, 4, 8]))
    G = int(rng.choice([2, 4, 8, 16]))
    batch_size = processes * int(rng.integers(1, 5))                     # B·G splits over the processes
    share = batch_size * G // processes                                  # completions per process
    micro = int(rng.choice([d for d in range(1, share + 1) if share % d == 0] + [0]))   # 0: no micro-batches
    return batch_size, G, processes, micro


def _collapse_ref(rewards):
    from grpo_edu.beyond.diagnose import diagnose

    rows = [{"step": i + 1, "reward_mean": float(r)} for i, r in enumerate(rewards)]
    return "reward_collapse" in [finding.name for finding in diagnose(rows)]


def _reward_curve_input(rng):
    """A run's mean reward per step, one of six shapes a sick or healthy run takes: rising, collapsing
    after a peak, a one-step spike, a crash inside the last quarter, a partial fall of a reward with
    penalties (below 0), or flat; with a little noise."""
    n = int(rng.integers(12, 61))
    t = np.linspace(0, 1, n)
    tail = max(3, math.ceil(n / 4))
    shape = str(rng.choice(["rise", "collapse", "spike", "late crash", "penalty fall", "flat"]))
    if shape == "rise":
        curve = 0.3 + 0.5 * t
    elif shape == "collapse":
        peak_at = float(rng.uniform(0.2, 0.5))
        curve = np.where(t < peak_at, 0.3 + 0.5 * t / peak_at, 0.8 * np.exp(-12 * (t - peak_at)))
    elif shape == "spike":                                   # one lucky step: smoothing must see through it
        curve = np.full(n, 0.2)
        curve[int(rng.integers(1, n // 3))] = 0.9
        curve[n - tail:] = 0.15
    elif shape == "late crash":                              # the peak is inside the tail: not a collapse yet
        curve = np.where(np.arange(n) < n - tail + 1, 0.3 + 0.5 * t, 0.0)
    elif shape == "penalty fall":                            # rewards with penalties: the floor is below 0
        curve = np.where(t < 0.4, -0.5 + 2.0 * t, 0.3 - 1.0 * (t - 0.4))
    else:
        curve = np.full(n, 0.4)
    return (np.round(curve + rng.normal(0, 0.01, n), 4),)

def _overlong(length, max_completion_length=42, cache_length=10):
    from grpo_edu.training.rewards import soft_overlong_punishment

    return soft_overlong_punishment(max_completion_length, cache_length)(completion_ids=[[0] * length])[0]


EXERCISES: dict[str, Any] = {
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
    "01.5": Exercise("A grpo_edu run of 600 steps with num_iterations = 3, run on 2 processes with 4 "
                     "micro-batches of gradient accumulation each. How many steps does TRL's log show for the "
                     "same run, since TRL counts optimizer updates?",
                     lambda: _trl_steps(600, 3),
                     "each grpo_edu step is one sampled batch, used for num_iterations optimizer updates; processes "
                     "and micro-batches split one update, they add none."),
    # lesson 06: data replay
    "06.1": Exercise("A step has 70 new completions and replay_ratio = 0.3. How many replayed samples join them?",
                     lambda: _replay_count(70, 0.3),
                     "replay_ratio is the replayed share of the total: k / (70 + k) = 0.3."),
    "06.2": Exercise("Seed 000 also says: sample replayed data equal to 30 % of the new data. With 100 new "
                     "samples, what replay_ratio (replayed share of the total) is that? (4 decimals)",
                     lambda: round(_replay_composition(100, 30 / 130, 10_000)["replayed share of the total"], 4),
                     "30 replayed for 100 new: the total is 130.", tolerance=1e-4),
    "06.3": Exercise("A full buffer of capacity 3 holds samples with (Â, round) = (0.8, 1), (0.5, 2), (0.5, 1). "
                     "A newcomer with Â = 0.6 arrives in round 3. Which sample leaves? Answer [Â, round].",
                     lambda: _evicted_by([(0.8, 1), (0.5, 2), (0.5, 1)], (0.6, 3)),
                     "lowest advantage first; among equal advantages, the oldest round."),
    "06.4": Exercise("A buffer holds 10,000 samples and each step draws 55 of them (128 new at replay_ratio 0.3). "
                     "On average, how many steps pass between two draws of one stored sample? (1 decimal)",
                     lambda: round(_replay_composition(128, 0.3, 10_000)["steps between draws of one stored sample"], 1),
                     "each step draws a given sample with probability 55 / 10,000.", tolerance=0.1),
    "06.5": CodeExercise("Write my_admitted(advantages, top_fraction, min_advantage): advantages is a numpy array "
                         "of one step's n samples; return n booleans, True for each sample the buffer admits: "
                         "advantage > min_advantage and among the first ⌈top_fraction · n⌉ when sorted by "
                         "advantage, highest first (on a tie, the one offered first ranks higher).",
                         _admitted_ref, _admission_input,
                         "rank with a stable sort: np.argsort(-advantages, kind='stable')[:math.ceil(top_fraction * n)]; "
                         "then also require advantages > min_advantage."),
    # lesson 07: reward design
    "07.1": Exercise("With the guide's weights (0.6 correctness, 0.2 brevity_reward(4), 0.2 format_reward(3)), what "
                     "reward R does the answer '46' get for 12+34=?",
                     lambda: round(_composite({"correctness": 0.6, "brevity": 0.2, "format": 0.2}, ["46"])[0], 4),
                     "right (1), brevity 1 − 2/4, well formed (1): weigh and add."),
    "07.2": Exercise("A component gives every answer of a G = 4 group the same reward 0.2. What advantage does it "
                     "give each answer? (a list of 4 numbers)",
                     lambda: _adv([0.2, 0.2, 0.2, 0.2]),
                     "subtracting the group mean removes whatever all answers share."),
    "07.3": Exercise("Rewards [10, 0, 0, 0] with scale='group' (eps = 1e-4). Advantage of the first answer? "
                     "(4 decimals)",
                     lambda: round(_adv([10, 0, 0, 0])[0], 4),
                     "μ and σ both grow tenfold compared with [1, 0, 0, 0]; only eps does not.", tolerance=1e-4),
    "07.5": CodeExercise("Write my_gated_brevity(completions, answers, max_length): lists of answer strings and "
                         "reference answers; return the gated brevity reward of each, brevity 1 − len/max_length "
                         "(floored at 0, on the stripped answer) for a right answer and 0 for a wrong one.",
                         _gated_brevity_ref, _gated_brevity_input,
                         "right means c.strip() == a.strip(); brevity is max(0, 1 − len(c.strip()) / max_length); "
                         "multiply the two."),
    "07.4": Exercise("Weights 0.2 correctness and 0.8 brevity_reward(4). Rewards of the empty answer '' and of the "
                     "right answer '46'? Answer [R(''), R('46')].",
                     lambda: [round(r, 4) for r in _composite({"correctness": 0.2, "brevity": 0.8}, ["", "46"])],
                     "'' is not right but has length 0; '46' is right with length 2."),
    # lesson 09: the diagnostics clinic
    "09.1": Exercise("A batch's success rate is p = 0.45 and G = 2. What share of groups do you expect to be dead "
                     "(all answers right or all wrong)? (4 decimals)",
                     lambda: round(_dead(0.45, 2), 4),
                     "a group is dead when all G answers are right (p^G) or all wrong ((1 − p)^G)."),
    "09.2": Exercise("The same p = 0.45 with G = 8: what share of groups do you expect to be dead? (4 decimals)",
                     lambda: round(_dead(0.45, 8), 4),
                     "p^8 + (1 − p)^8: both terms are tiny.", tolerance=1e-4),
    "09.3": Exercise("A run's reward, averaged over a few steps, peaked at 0.6; rewards never went below 0. Up to "
                     "what mean reward at the end of the run does diagnose call it reward_collapse?",
                     lambda: _collapse_threshold(0.6),
                     "the rule's threshold is a quarter of the way from the floor (0) to the peak."),
    "09.4": CodeExercise("Write my_collapsed(rewards): a run's mean reward per step (a numpy array); return True "
                         "when diagnose's reward_collapse rule fires. The rule: smooth the rewards with a trailing "
                         "moving average of window max(3, n // 20); the peak is the smoothed maximum (its first "
                         "step); the floor is min(0, lowest reward); the tail is the last max(3, ⌈n / 4⌉) steps. "
                         "Collapse: the peak comes before the tail, is at least 0.1 above the floor, and the tail's "
                         "mean is at most floor + 0.25 · (peak − floor).",
                         _collapse_ref, _reward_curve_input,
                         "trailing means: rewards[max(0, i + 1 − w):i + 1].mean() at each step i; the peak's index "
                         "must be < n − len(tail); compare the tail's mean (raw rewards) with the threshold."),
    # lesson 10: graduation to TRL and verl
    "10.1": Exercise("B = 16, G = 8 on 4 processes, micro_batch_size = 16. What per_device_train_batch_size and "
                     "gradient_accumulation_steps give TRL the same step? Answer [per_device, accumulation].",
                     lambda: [_to_trl_value(16, 8, 16, 4, k) for k in ("per_device_train_batch_size",
                                                                       "gradient_accumulation_steps")],
                     "128 completions per step, 32 per process, in micro-batches of 16."),
    "10.4": CodeExercise("Write my_trl_batch(batch_size, G, processes, micro_batch_size): a grpo_edu step of "
                         "batch_size prompts × G answers on `processes` TRL processes, in micro-batches of "
                         "micro_batch_size completions (0: none); return [per_device_train_batch_size, "
                         "gradient_accumulation_steps] for TRL's same step.",
                         _trl_batch_ref, _trl_batch_input,
                         "each process takes batch_size · G / processes completions; per_device is the micro-batch "
                         "(or that whole share when micro_batch_size is 0), accumulation is share / per_device."),
    "10.2": Exercise("The same B = 16, G = 8 in verl on 4 GPUs, no micro_batch_size. What are data.train_batch_size "
                     "and ppo_micro_batch_size_per_gpu? Answer [train_batch_size, micro_per_gpu].",
                     lambda: _verl_batch(16, 8, 4),
                     "verl counts data.train_batch_size in prompts; the micro-batch is completions on one GPU."),
    "10.3": Exercise("Qwen2.5-7B (7,615,616,512 parameters) on 8 GPUs with ZeRO stage 1: how many GiB per GPU do "
                     "AdamW's moments and the fp32 master weights take? (2 decimals)",
                     lambda: round(_optimizer_gib("Qwen2.5-7B", 8, 1), 2),
                     "12 bytes per parameter (4 + 4 + 4), split 8 ways; 1 GiB = 1024³ bytes.", tolerance=0.01),
    # lesson 02: group advantages
    "02.1": Exercise("Rewards [1, 0, 0, 0] for G = 4 (default eps = 1e-4). What is the advantage of the "
                     "correct answer? (4 decimals)",
                     lambda: _adv([1, 0, 0, 0])[0],
                     "μ = 0.25; σ is the unbiased std (divide by G − 1 = 3)."),
    "02.2": Exercise("A reward model adds 0.3 to every answer: rewards [0.3, 0.3, 0.3, 0.3, 1.3]. What are the "
                     "five advantages with scale='none' (a list)?",
                     lambda: [round(a, 4) for a in _adv([0.3, 0.3, 0.3, 0.3, 1.3], scale="none")],
                     "scale='none' only subtracts the group mean μ = 0.5; the common 0.3 cancels."),
    "02.3": Exercise("Rewards [2, 0, 0, 0] with scale='none' (Dr. GRPO). Advantage of the first answer?",
                     lambda: _adv([2, 0, 0, 0], scale="none")[0],
                     "scale='none' only subtracts the group mean."),
    "02.4": CodeExercise("Write my_policy_gradient(logits, answers, advantages): a softmax policy over V answers "
                         "(logits, shape (V,)), G sampled answers (integers) and their advantages; return the "
                         "gradient of the loss L = −(1/G) Σ_i Â_i · log π(answers_i) with respect to the logits, "
                         "shape (V,).",
                         _policy_gradient_ref, _policy_gradient_input,
                         "one answer gives −Â·(onehot(a) − π) (section 2); the loss is the mean over the G "
                         "answers, so average those vectors. π = softmax(logits)."),
    # lesson 03: zero-σ groups
    "03.1": Exercise("A prompt is solved with probability p = 0.9 and G = 4. Chance that its group is dead? "
                     "(4 decimals)",
                     lambda: round(_dead(0.9, 4), 4),
                     "dead = all right or all wrong: p^G + (1 − p)^G.", tolerance=1e-4),
    "03.2": Exercise("A step holds B = 4 prompts, each solved with p = 0.95, and G = 16. Chance that *at least "
                     "one* of the four groups is dead? (4 decimals)",
                     lambda: round(1 - (1 - _dead(0.95, 16)) ** 4, 4),
                     "one group is dead with d = p^G + (1 − p)^G; none of four is with (1 − d)^4.", tolerance=1e-4),
    "03.3": Exercise("p = 0.5, G = 2, batch_size = 4. Chance that the *whole step* is dead? (4 decimals)",
                     lambda: round(_dead(0.5, 2, 4), 4),
                     "each of the 4 groups must be dead independently: (p^G + (1 − p)^G)^B.", tolerance=1e-4),
    "03.4": CodeExercise("Write my_zero_std_groups(rewards): rewards is a (B, G) numpy array; return B booleans, "
                         "True where all G rewards of the row are equal (a dead group).",
                         _zero_std_ref, _rewards_input,
                         "compare each row's largest and smallest reward: rewards.max(axis=1) == rewards.min(axis=1)."),
    # lesson 04: clipped loss and KL
    "04.1": Exercise("ε = 0.2, Â = +1, and the new policy made a token 1.5 times as likely (r = 1.5). "
                     "What is this token's objective min(r·Â, clip(r, 1 − ε, 1 + ε)·Â)?",
                     lambda: _objective(1.5, 1.0),
                     "clip(1.5, 0.8, 1.2) = 1.2; take the smaller of 1.5·Â and 1.2·Â."),
    "04.2": Exercise("Clip-higher: ε_low = 0.2, ε_high = 0.28, Â = +2, r = 1.35. What is the token's objective?",
                     lambda: round(_objective(1.35, 2.0, epsilon=0.2, epsilon_high=0.28), 4),
                     "clip(1.35, 0.8, 1.28) = 1.28; min(1.35·2, 1.28·2).", tolerance=1e-4),
    "04.3": Exercise("The policy gives a token probability 0.5, the reference model 0.25. "
                     "What is the k3 estimate of the KL for this token? (4 decimals)",
                     lambda: round(_k3(0.5, 0.25), 4),
                     "with ρ = π_ref/π_θ = 0.5: k3 = ρ − log ρ − 1.", tolerance=1e-4),
    "04.4": Exercise("Two answers, 2 tokens and 8 tokens, both with Â = 1, loss_type = 'grpo'. What is the "
                     "gradient weight of ONE token of the 8-token answer? (the short answer's tokens get 0.25)",
                     lambda: _token_weight((2, 8), "grpo", 1),
                     "'grpo' averages over each answer's own tokens, then over the N = 2 answers: 1/(N·|o_i|)."),
    "04.5": CodeExercise("Write my_clip_push(ratio, advantage, epsilon): ratio and advantage are numpy arrays, "
                         "one entry per token; return how hard the clipped objective min(r·Â, clip(r, 1 − ε, 1 + ε)·Â) "
                         "pushes each token's log-probability: its derivative with respect to log π_θ (which "
                         "is r·Â where the unclipped term is the smaller one, and 0 where the clip binds).",
                         _clip_push_ref, _clip_input,
                         "d(r·Â)/d log π = r·Â, since dr/d log π = r; the clipped term is a constant. The clip "
                         "binds where r > 1 + ε with Â > 0, or r < 1 − ε with Â < 0."),
    "04.6": CodeExercise("Write my_k3_slope(logprobs, ref_logprobs): numpy arrays of log π_θ and log π_ref of the "
                         "sampled tokens; return the derivative of each token's k3 = ρ − log ρ − 1 "
                         "(ρ = π_ref/π_θ) with respect to its log π_θ: how the KL term pushes that token.",
                         _k3_slope_ref, _logprob_input,
                         "log ρ = ref − logprobs, so d log ρ / d log π_θ = −1 and dρ/d log π_θ = −ρ: the slope "
                         "is −ρ + 1."),
    # lesson 05: one GRPO step, short runs
    "05.1": Exercise("On the first update of a batch, π_θ is still the policy that sampled the answers. "
                     "What is the mean probability ratio r = π_θ / π_θold?",
                     _on_policy_ratio,
                     "the same model gave the same log-probabilities: exp(logprobs − old_logprobs) = exp(0)."),
    "05.2": Exercise("One group of G = 6 answers has rewards [1, 1, 0, 0, 0, 0]. What is the advantage of each "
                     "right answer? (4 decimals)",
                     lambda: round(_adv([1, 1, 0, 0, 0, 0])[0], 4),
                     "μ = 1/3; σ is the unbiased std of the 6 rewards (divide by 5); Â = (1 − μ)/(σ + 1e-4).",
                     tolerance=1e-4),
    "05.3": Exercise("At temperature 0.3 the bundled model answers about 97 % of the prompts right (p = 0.97). "
                     "With G = 8, what share of groups do you expect to be dead? (4 decimals)",
                     lambda: round(_dead(0.97, 8), 4),
                     "dead = all right or all wrong: p^G + (1 − p)^G.", tolerance=1e-4),
    "05.4": Exercise("G = 4 and the model is right with p = 0.8. What is the chance that a group is dead? "
                     "(4 decimals)",
                     lambda: round(_dead(0.8, 4), 4),
                     "all four right (p⁴) or all four wrong ((1 − p)⁴).", tolerance=1e-4),
    "05.5": Exercise("A step has two groups of G = 4: rewards [1, 0, 0, 0] and [0, 0, 0, 0]. Every answer is one "
                     "token long; it is the first update (r = 1), β = 0, loss_type = 'grpo'. The loss is 0. What "
                     "is ∂loss/∂log π of the right answer's token? (4 decimals)",
                     _live_token_gradient,
                     "−Â/(N·|o|): Â of the right answer is 0.75/(0.5 + 1e-4), N = 8 answers (the dead group counts "
                     "in N too), |o| = 1.", tolerance=1e-4),
    "05.6": CodeExercise("Write my_sequence_logprob(token_logprobs, mask): (N, T) numpy arrays of the log-prob of "
                         "each completion token and the completion mask (1 up to and including <eos>); return the "
                         "N log-probabilities of the whole answers.",
                         _sequence_logprob_ref, _token_logprob_input,
                         "log π(answer) is the sum of its tokens' log-probs; masked-out tokens (after <eos>) add nothing."),
    # lesson 08: the full run
    "08.1": Exercise("The default run has batch_size B = 16 and G = 8. On one GPU without gradient "
                     "accumulation, what per_device_train_batch_size gives TRL the same step?",
                     lambda: _default_run_schedule().completions_per_step,
                     "TRL counts completions, not prompts: B · G."),
    "08.2": Exercise("The default run with batch_size = 24 instead of 16, for 2000 steps: how many epochs "
                     "(passes over the 7600 train prompts) does it make? (3 decimals)",
                     lambda: round(_run_schedule(batch_size=24, total_training_steps=2000).epochs_completed, 3),
                     "steps per epoch = 7600 // 24 (the incomplete last batch is dropped); epochs = 2000 / that."),
    "08.3": Exercise("Greedy accuracy (temperature 0) of the bundled model on the first 100 held-out prompts?",
                     lambda: sum(_bundled_heldout(100, temperature=0)) / 100,
                     "evaluate(model, tokenizer, task.split('heldout', 100), task, temperature=0)['accuracy']."),
    "08.4": Exercise("pass@8 of the bundled model: on what fraction of the first 100 held-out prompts is at "
                     "least one of 8 samples right (temperature 1, seed 0)?",
                     _pass_at_k,
                     "evaluate(..., num_samples=8, seed=0); the samples come 8 per prompt, in order; "
                     "count the prompts with any right sample."),
    # lesson 11: long answers
    "11.1": Exercise("Two wrong answers (Â = −1 each), one of 5 tokens and one of 40, under loss_type='grpo'. How "
                     "many times harder is each token of the short one pushed down than each token of the long one?",
                     lambda: round(_push_ratio(5, 40, "grpo"), 3),
                     "'grpo' divides each answer's token sum by its own length |o_i|: the push per token is Â/(N·|o_i|)."),
    "11.2": Exercise("The same two answers under loss_type='dr_grpo'. The same ratio?",
                     lambda: round(_push_ratio(5, 40, "dr_grpo"), 3),
                     "'dr_grpo' divides every answer by the same constant, N · max_completion_length."),
    "11.3": Exercise("Soft overlong punishment with max_completion_length = 42 and cache_length = 10: what reward "
                     "does an answer of 38 tokens (<eos> included) get from it?",
                     lambda: round(_overlong(38), 4),
                     "the ramp starts after 42 − 10 = 32 tokens and falls by 1/10 per token."),
    "11.4": CodeExercise("Write my_pass_at_k(n, c, k): n samples of one prompt, c of them right; return the "
                         "unbiased pass@k, the chance that k of the n drawn without replacement include a right one.",
                         _pass_at_k_ref, _pass_at_k_input,
                         "1 − C(n − c, k) / C(n, k), with math.comb; C(n − c, k) is 0 when k > n − c."),
    # lesson 12: GRPO's variants
    "12.1": CodeExercise("Write my_sequence_ratio(logprobs, old_logprobs, mask): (N, T) numpy arrays of log π_θ "
                         "and log π_θold of each completion token, and the completion mask; return GSPO's N "
                         "sequence ratios s_i = exp(mean over the answer's tokens of (log π_θ − log π_θold)).",
                         _sequence_ratio_ref, _two_logprob_input,
                         "mask the log-ratios, sum them per row, divide by the row's number of tokens "
                         "(mask.sum(axis=1)), then np.exp: the geometric mean of the token ratios."),
    "12.2": CodeExercise("Write my_cispo_term(ratio, advantage, logprob, eps_max): numpy arrays of the token "
                         "ratios r, the advantages Â and log π_θ, and CISPO's cap ε_max; return CISPO's loss per "
                         "token, −min(r, ε_max)·Â·log π_θ (the min is a constant in the gradient; here you "
                         "return values only).",
                         lambda r, a, lp, eps: _policy_term("cispo", r, a, lp, eps_high=eps), _cispo_input,
                         "np.minimum(ratio, eps_max) caps the weight at ε_max itself, not at 1 + ε; "
                         "then − weight · Â · log π."),
    "12.3": CodeExercise("Write my_rloo(rewards): rewards is a (B, G) numpy array; return RLOO's advantages, "
                         "each reward minus the mean of the other G − 1 rewards of its group.",
                         _rloo_ref, _rewards_input,
                         "the others' mean is (row sum − R_i) / (G − 1); equivalently G/(G − 1)·(R_i − μ)."),
    "12.4": CodeExercise("Write my_sapo_term(ratio, advantage, tau_pos, tau_neg): numpy arrays of r and Â and "
                         "SAPO's two temperatures; return SAPO's loss per token, −σ(τ(r − 1))·(4/τ)·Â, with "
                         "τ = tau_pos where Â > 0 and tau_neg elsewhere (σ is the logistic sigmoid).",
                         lambda r, a, tp, tn: _policy_term("sapo", r, a, tau_pos=tp, tau_neg=tn), _sapo_input,
                         "tau = np.where(advantage > 0, tau_pos, tau_neg); σ(x) = 1 / (1 + np.exp(−x)); at r = 1 "
                         "the term is −2Â/τ and its slope in r is −Â, as GRPO's."),
}
