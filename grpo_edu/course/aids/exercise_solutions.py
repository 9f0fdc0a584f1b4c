"""How each exercise's answer is computed: the library calls behind ``exercise_bank.EXERCISES``.

Every function here asks grpo_edu for an answer (a schedule, an advantage, a loss, an export key …), or
is the reference a learner's function is compared with, or draws that comparison's seeded random inputs.
Nothing is typed in by hand: change the library, and the expected answers change with it.
"""

import math

import numpy as np


def schedule(**kw):
    from grpo_edu.core.schedule import TrainingSchedule

    return TrainingSchedule(**kw)


def adv(rewards, **kw):
    from grpo_edu.core.advantages import group_advantages

    return group_advantages([rewards], **kw)[0].tolist()


def loop_stages():
    from grpo_edu.course.aids.diagrams import LOOP_STAGES

    return list(LOOP_STAGES)


def group_size_halving_mu_std(p, G0):
    """The smallest G at which the spread of the group mean, √(p(1 − p)/G), is half its value at G0."""
    from grpo_edu.core.policy_gradient import advantage_distribution

    target = advantage_distribution(p, G0)[1]["mu_std"] / 2
    return next(g for g in range(G0, 64 * G0) if advantage_distribution(p, g)[1]["mu_std"] <= target + 1e-12)


def softmax_at(logits, temperature):
    """The probabilities of a softmax policy sampled at ``temperature``: softmax(logits / τ)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    e = np.exp(z - z.max())
    return (e / e.sum()).tolist()


def importance_estimate(rewards, ratios):
    """E_{π_θ}[R] from answers sampled from π_θold whose ratios r = π_θ/π_θold are ``ratios``."""
    from grpo_edu.core.policy_gradient import importance_weighted_mean

    logprobs = np.log(np.asarray(ratios, dtype=np.float64))
    return importance_weighted_mean(np.asarray(rewards, dtype=np.float64), logprobs, np.zeros_like(logprobs))[0]


def dead(p, G, B=1):
    from grpo_edu.core.advantages import dead_group_probability

    return dead_group_probability(p, G, batch_size=B)


def collapse_threshold(peak, floor=0.0):
    from grpo_edu.beyond.symptoms import COLLAPSE_FRACTION

    return round(floor + COLLAPSE_FRACTION * (peak - floor), 4)


def objective(ratio, advantage, epsilon=0.2, epsilon_high=None):
    """−grpo_loss for one token with π_θ/π_θold = ratio: min(r·Â, clip(r)·Â)."""
    import torch

    from grpo_edu.core.losses import grpo_loss

    logprobs = torch.tensor([[math.log(ratio)]], dtype=torch.float64)
    loss, _ = grpo_loss(logprobs, torch.zeros_like(logprobs), torch.tensor([float(advantage)]),
                        torch.ones_like(logprobs), epsilon=epsilon, epsilon_high=epsilon_high)
    return -loss.item()


def k3(p_theta, p_ref):
    from grpo_edu.core.kl import kl_estimate

    return float(kl_estimate(math.log(p_theta), math.log(p_ref), kind="k3"))


def token_weight(lengths, loss_type, answer):
    """Gradient weight −∂loss/∂logprob of one token of answer ``answer`` (Â = 1, on-policy)."""
    import torch

    from grpo_edu.core.losses import grpo_loss

    T = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])       # (N, T)
    logprobs = torch.zeros(len(lengths), T, requires_grad=True)
    loss, _ = grpo_loss(logprobs, logprobs.detach(), torch.ones(len(lengths)), mask, loss_type=loss_type)
    loss.backward()
    return -logprobs.grad[answer, 0].item()


def length_biased_loss_type(lengths, loss_types):
    """The one loss_type whose per-token weight is smaller in the longest answer than in the shortest."""
    short, long_ = lengths.index(min(lengths)), lengths.index(max(lengths))
    found = [t for t in loss_types if token_weight(lengths, t, long_) < token_weight(lengths, t, short) - 1e-12]
    if len(found) != 1:
        raise AssertionError(f"expected one length-biased loss_type among {loss_types}, found {found}")
    return found[0]


def kl_push(log_ratio, *, beta):
    """'up' or 'down': which way one gradient-descent step on β·k3 moves log π_θ when log π_θ − log π_ref = log_ratio."""
    import torch

    from grpo_edu.core.kl import kl_estimate

    logprob = torch.tensor(float(log_ratio), dtype=torch.float64, requires_grad=True)
    (beta * kl_estimate(logprob, torch.tensor(0.0, dtype=torch.float64), kind="k3")).backward()
    return "down" if logprob.grad.item() > 0 else "up"


def on_policy_ratio():
    """Mean ratio r that grpo_loss reports when π_θ is the policy that sampled (log π_θ = log π_θold)."""
    import torch

    from grpo_edu.core.losses import grpo_loss

    logprobs = torch.log(torch.tensor([[0.5, 0.9, 0.2], [0.7, 0.1, 0.6]]))
    _, info = grpo_loss(logprobs, logprobs.detach(), torch.tensor([1.0, -1.0]), torch.ones_like(logprobs))
    return info["ratio_mean"]


def live_token_gradient():
    """∂loss/∂log π of the right answer's token: one live group [1, 0, 0, 0], one dead group, |o| = 1."""
    import torch

    from grpo_edu.core.advantages import group_advantages
    from grpo_edu.core.losses import grpo_loss

    adv = group_advantages(torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)).reshape(-1)
    logprobs = torch.full((8, 1), -0.5, dtype=torch.float64, requires_grad=True)          # (N, |o| = 1)
    loss, _ = grpo_loss(logprobs, logprobs.detach(), adv, torch.ones_like(logprobs), loss_type="grpo")
    loss.backward()
    return logprobs.grad[0, 0].item()


def sequence_logprob_ref(token_logprobs, mask):
    return (np.asarray(token_logprobs) * np.asarray(mask)).sum(axis=1)


def token_logprob_input(rng):
    N, T = int(rng.integers(1, 6)), int(rng.integers(1, 7))
    lengths = rng.integers(1, T + 1, size=N)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)          # (N, T)
    return (np.log(rng.uniform(0.01, 1.0, size=(N, T))), mask)


def trl_steps(total_training_steps, num_iterations):
    """Optimizer updates (TRL's "steps") of a grpo_edu run: steps × num_iterations."""
    from grpo_edu.training.trainers.config import GRPOConfig

    config = GRPOConfig(total_training_steps=total_training_steps, num_iterations=num_iterations)
    return config.schedule(2000).total_steps * config.num_iterations


def to_trl_value(batch_size, G, micro, processes, key):
    from grpo_edu.beyond.export import to_trl
    from grpo_edu.training.trainers.config import GRPOConfig

    return to_trl(GRPOConfig(batch_size=batch_size, num_generations=G, micro_batch_size=micro),
                  num_processes=processes)[0][key]


def verl_batch(batch_size, G, n_gpus):
    from grpo_edu.beyond.export import to_verl
    from grpo_edu.training.trainers.config import GRPOConfig

    pairs = dict(to_verl(GRPOConfig(batch_size=batch_size, num_generations=G), n_gpus=n_gpus)[1]["pairs"])
    return [pairs["data.train_batch_size"], pairs["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]]


def optimizer_gib(name, n_gpus, stage):
    from grpo_edu.beyond.memory import ARCHITECTURES, memory_per_gpu

    parts, _ = memory_per_gpu(ARCHITECTURES[name], n_gpus=n_gpus, zero_stage=stage)
    return parts["AdamW moments + fp32 master weights"]


def run_schedule(**changes):
    """The schedule of ``GRPOConfig(**changes)`` on its task's train split."""
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.task.tasks import get_task

    config = GRPOConfig(**changes)
    return config.schedule(len(get_task(config.task).split("train")))


def default_run_schedule():
    """The schedule of ``GRPOConfig()`` on the addition task's train split."""
    return run_schedule()


def bundled_heldout(n=100, **sampling):
    """Per-sample correctness of the bundled model on the first ``n`` held-out prompts (seed 0)."""
    from grpo_edu.training.task.evaluation import evaluate
    from grpo_edu.training.model.models import load_model_and_tokenizer
    from grpo_edu.training.task.tasks import get_task

    task = get_task("addition")
    model, tokenizer = load_model_and_tokenizer("bundled")
    result = evaluate(model, tokenizer, task.split("heldout", n), task, seed=0, **sampling)
    return [s[3] for s in result["samples"]]


def pass_at_k(n=100, k=8):
    """Fraction of the first ``n`` held-out prompts with at least one right answer among k samples."""
    correct = bundled_heldout(n, num_samples=k)
    return sum(any(correct[i:i + k]) for i in range(0, len(correct), k)) / n


# --- code exercises: references and seeded random inputs -----------------------------------

def policy_gradient_ref(logits, answers, advantages):
    """∂/∂logits of −(1/G) Σ Â_i log π(a_i): the mean of log_derivative_step's per-answer gradients."""
    from grpo_edu.core.policy_gradient import log_derivative_step

    grads = [log_derivative_step(logits, int(a), float(adv))[1]["grad"] for a, adv in zip(answers, advantages)]
    return np.mean(grads, axis=0)


def policy_gradient_input(rng):
    V, G = int(rng.integers(2, 7)), int(rng.integers(2, 9))
    return rng.normal(0, 1.5, size=V), rng.integers(0, V, size=G), rng.normal(0, 1, size=G)


def rewards_input(rng):
    """A (B, G) reward table; small G and few reward values, so dead groups turn up."""
    B, G = int(rng.integers(1, 5)), int(rng.integers(2, 9))
    if rng.random() < 0.5:
        return (rng.integers(0, 2, size=(B, G)).astype(float),)          # right / wrong
    return (rng.choice([0.0, 0.25, 0.5, 1.0], size=(B, G)),)              # partial credit


def zero_std_ref(rewards):
    from grpo_edu.core.advantages import zero_std_groups

    return zero_std_groups(rewards)


def clip_input(rng):
    n = int(rng.integers(3, 9))
    return (rng.uniform(0.5, 1.6, size=n), rng.normal(0, 1.5, size=n), float(rng.choice([0.1, 0.2, 0.3])))


def clip_push_ref(ratio, advantage, epsilon):
    """d min(r·Â, clip(r)·Â) / d log π_θ per token: grpo_loss's own gradient (token_push, one-token answers)."""
    from grpo_edu.core.losses import token_push

    n = len(ratio)
    push, _ = token_push(np.asarray(advantage, dtype=float), np.ones((n, 1)), ratio=np.asarray(ratio)[:, None],
                         epsilon=float(epsilon))
    return (push[:, 0] * n).numpy()                      # × N undoes the mean over the N one-token answers


def k3_slope_ref(logprobs, ref_logprobs):
    """d k3 / d log π_θ per token, by autograd through the library's kl_estimate."""
    import torch

    from grpo_edu.core.kl import kl_estimate

    lp = torch.tensor(np.asarray(logprobs, dtype=float), requires_grad=True)
    kl_estimate(lp, torch.tensor(np.asarray(ref_logprobs, dtype=float)), kind="k3").sum().backward()
    return lp.grad.numpy()


def logprob_input(rng):
    n = int(rng.integers(3, 9))
    logprobs = np.log(rng.uniform(0.01, 1.0, size=n))
    return (logprobs, logprobs + rng.normal(0, 0.5, size=n))


def evicted_by(stored, newcomer):
    """Fill a buffer of capacity len(stored) with (Â, round) samples, offer ``newcomer``; return what left."""
    from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample

    buffer = ReplayBuffer(len(stored), top_fraction=1.0)
    for i, (adv, rnd) in enumerate(stored):
        buffer.add([ReplaySample(f"q{i}", "a", adv, 1.0)], round=rnd)
    before = {s.question: (s.advantage, r) for s, r in buffer.entries()}
    buffer.add([ReplaySample("new", "a", newcomer[0], 1.0)], round=newcomer[1])
    after = {s.question for s, _ in buffer.entries()}
    gone = [list(v) for q, v in before.items() if q not in after]
    return gone[0] if gone else "none"


def admitted_ref(advantages, top_fraction, min_advantage):
    """The buffer's admission rule, run on a fresh buffer: which of one add's samples get in."""
    from grpo_edu.training.trainers.replay import ReplayBuffer, ReplaySample

    buffer = ReplayBuffer(len(advantages) + 1, top_fraction=top_fraction, min_advantage=min_advantage)
    buffer.add([ReplaySample(str(i), "a", float(a), 1.0) for i, a in enumerate(advantages)], round=0)
    stored = {int(s.question) for s in buffer.samples()}
    return np.array([i in stored for i in range(len(advantages))])


def admission_input(rng):
    n = int(rng.integers(3, 17))
    advantages = np.round(rng.normal(0, 1, size=n), 1)           # rounded: ties happen
    return (advantages, float(rng.choice([0.3, 0.5, 1.0])), float(rng.choice([0.0, 0.5])))


def replay_count(num_new, replay_ratio):
    from grpo_edu.training.trainers.replay import replay_count

    return replay_count(num_new, replay_ratio)


def replay_composition(num_new, replay_ratio, buffer_size):
    from grpo_edu.training.trainers.replay import replay_composition

    return replay_composition(num_new, replay_ratio, buffer_size)


def composite(weights, completions, answer="46"):
    from grpo_edu.training.task.rewards import brevity_reward, combine, correctness, format_reward

    funcs = {"correctness": correctness, "brevity": brevity_reward(4), "format": format_reward(3)}
    reward = combine(**{name: (funcs[name], w) for name, w in weights.items()})
    return reward(["12+34="] * len(completions), list(completions), answer=[answer] * len(completions))


def push_ratio(short, long, loss_type):
    """How many times harder each token of a ``short``-token answer is pushed than one of a ``long`` one
    (same Â = −1, one group of two, ``loss_type``)."""
    from grpo_edu.core.losses import token_push

    T = max(short, long)
    mask = np.array([[1.0] * n + [0.0] * (T - n) for n in (short, long)])
    push, _ = token_push(np.array([-1.0, -1.0]), mask, loss_type=loss_type, max_completion_length=T)
    return float(push[0, 0] / push[1, 0])


def push_off_policy(ratio, advantage, variants):
    """The push on log π of a one-token answer with token ratio ``ratio`` and advantage ``advantage``
    under each of ``variants`` (a list of ``grpo_loss`` settings), as a list: ``token_push`` with one
    answer, so the push is the variant's own weight times Â."""
    from grpo_edu.core.losses import token_push

    return [float(token_push(np.array([advantage]), np.ones((1, 1)), ratio=np.array([[ratio]]), **settings)[0][0, 0])
            for settings in variants]


def pass_at_1_and_k(flags, k):
    """[pass@1, pass@k] of right/wrong flags, one row of n samples per prompt: the library's unbiased estimator."""
    from grpo_edu.training.task.evaluation import pass_at_k as estimate

    rows = [[bool(f) for f in row] for row in flags]
    return [float(np.mean([estimate(len(r), sum(r), 1)[0] for r in rows])),
            float(np.mean([estimate(len(r), sum(r), k)[0] for r in rows]))]


def pass_at_k_ref(n, c, k):
    from grpo_edu.training.task.evaluation import pass_at_k

    return pass_at_k(int(n), int(c), int(k))[0]


def pass_at_k_input(rng):
    n = int(rng.integers(1, 31))
    return n, int(rng.integers(0, n + 1)), int(rng.integers(1, n + 1))


def sequence_ratio_ref(logprobs, old_logprobs, mask):
    import torch

    from grpo_edu.core.losses import sequence_ratio

    s, _ = sequence_ratio(torch.as_tensor(logprobs), torch.as_tensor(old_logprobs), torch.as_tensor(mask))
    return s.numpy()


def two_logprob_input(rng):
    logprobs, mask = token_logprob_input(rng)
    return logprobs, logprobs + rng.normal(0, 0.3, size=logprobs.shape), mask    # log π_θ, log π_θold, (N, T)


def policy_term(loss_type, ratio, advantage, logprob=None, **settings):
    import torch

    from grpo_edu.core.losses import LOSS_TYPES

    term, _ = LOSS_TYPES[loss_type]
    logprob = np.zeros_like(ratio) if logprob is None else logprob
    return term(torch.as_tensor(ratio), torch.as_tensor(advantage), torch.as_tensor(logprob), **settings).numpy()


def cispo_input(rng):
    n = int(rng.integers(3, 9))
    return (rng.uniform(0.2, 8.0, size=n), rng.normal(0, 1.5, size=n), np.log(rng.uniform(0.01, 1.0, size=n)),
            float(rng.choice([2.0, 5.0])))


def sapo_input(rng):
    n = int(rng.integers(3, 9))
    return rng.uniform(0.3, 3.0, size=n), rng.normal(0, 1.5, size=n), float(rng.choice([1.0, 2.0])), 1.05


def rloo_ref(rewards):
    from grpo_edu.core.advantages import rloo_advantages

    return rloo_advantages(rewards)


def gated_brevity_ref(completions, answers, max_length):
    from grpo_edu.course.experiments.clinic import brevity_if_correct

    return brevity_if_correct(int(max_length))(None, list(completions), list(answers))


def gated_brevity_input(rng):
    n, max_length = int(rng.integers(3, 9)), int(rng.integers(2, 6))
    answers = [str(int(rng.integers(10, 200))) for _ in range(n)]
    pick = lambda a: rng.choice([a, a + "0", a[:-1], "", " " + a + " ", str(int(a) + 1)])   # noqa: E731
    return [str(pick(a)) for a in answers], answers, max_length


def trl_batch_ref(batch_size, G, processes, micro_batch_size):
    return [to_trl_value(int(batch_size), int(G), int(micro_batch_size) or None, int(processes), key)
            for key in ("per_device_train_batch_size", "gradient_accumulation_steps")]


def trl_batch_input(rng):
    processes = int(rng.choice([1, 2, 4, 8]))
    G = int(rng.choice([2, 4, 8, 16]))
    batch_size = processes * int(rng.integers(1, 5))                     # B·G splits over the processes
    share = batch_size * G // processes                                  # completions per process
    micro = int(rng.choice([d for d in range(1, share + 1) if share % d == 0] + [0]))   # 0: no micro-batches
    return batch_size, G, processes, micro


def collapse_ref(rewards):
    from grpo_edu.beyond.diagnose import diagnose

    rows = [{"step": i + 1, "reward_mean": float(r)} for i, r in enumerate(rewards)]
    return "reward_collapse" in [finding.name for finding in diagnose(rows)]


def reward_curve_input(rng):
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


def truncated_ref(lengths, max_completion_length):
    from grpo_edu.beyond.diagnose import diagnose

    rows = [{"step": i + 1, "reward_mean": 0.5, "completion_length": float(n)} for i, n in enumerate(lengths)]
    found = diagnose(rows, config={"max_completion_length": int(max_completion_length)})
    return "completion_truncated" in [finding.name for finding in found]


def length_curve_input(rng):
    """A run's mean completion length per step and its max_completion_length, one of six shapes: well below
    the limit, at it all run long, just under the rule's 98 % all run long, at it only in the last quarter
    (the run learned to ramble), only in the first tenth (it learned to stop), or only in the middle."""
    n = int(rng.integers(12, 61))
    limit = int(rng.choice([4, 8, 20, 42]))
    head, tail = max(3, math.ceil(n / 10)), max(3, math.ceil(n / 4))
    at_limit = limit * rng.uniform(0.985, 1.0, n)
    below = limit * rng.uniform(0.5, 0.85, n)
    shape = str(rng.choice(["below", "at the limit", "just under", "late", "early", "middle"]))
    if shape == "below":
        curve = below
    elif shape == "at the limit":
        curve = at_limit
    elif shape == "just under":                              # 97 %: a rule read as "close to the limit" fires here
        curve = limit * rng.uniform(0.968, 0.972, n)
    elif shape == "late":
        curve = np.concatenate([below[:n - tail], at_limit[n - tail:]])
    elif shape == "early":                                   # exactly the first tenth: the head must be that long
        curve = np.concatenate([at_limit[:head], below[head:]])
    else:
        curve = np.concatenate([below[:head], at_limit[head:n - tail], below[n - tail:]])
    return np.round(curve, 3), limit


def overlong(length, max_completion_length=42, cache_length=10):
    from grpo_edu.training.task.rewards import soft_overlong_punishment

    return soft_overlong_punishment(max_completion_length, cache_length)(completion_ids=[[0] * length])[0]


def gae_ref(rewards, values, gamma, lam):
    import torch

    from grpo_edu.core.gae import gae_advantages

    r = torch.as_tensor(rewards, dtype=torch.float64).reshape(1, -1)              # (1, T) token rewards
    v = torch.as_tensor(values, dtype=torch.float64).reshape(1, -1)               # (1, T)
    advantages, _ = gae_advantages(r, v, torch.ones_like(v), gamma=float(gamma), lam=float(lam))
    return advantages[0].numpy()


def gae_input(rng):
    """One answer of 2–7 tokens: the outcome reward on the last token (sometimes a per-token penalty too),
    the critic's values, and γ, λ from the usual grid (1 and 0 included)."""
    T = int(rng.integers(2, 8))
    rewards = np.zeros(T)
    rewards[-1] = float(rng.integers(0, 2))
    if rng.random() < 0.3:
        rewards -= rng.uniform(0, 0.05, size=T)                                   # a KL-style penalty per token
    return (rewards, rng.normal(0.4, 0.3, size=T), float(rng.choice([1.0, 0.99, 0.9, 0.5])),
            float(rng.choice([1.0, 0.95, 0.5, 0.0])))


def tool_mask_ref(ids, call_end, reply_lengths):
    """Lesson 15: the tool mask of one completion, by the library's walk."""
    from grpo_edu.training.rollouts.tools import tool_mask_of

    return np.array(tool_mask_of(ids.tolist(), int(call_end), reply_lengths.tolist()))


def tool_mask_input(rng):
    """A completion as the sampler makes it: model turns (no call_end inside) each closed by call_end (id 5),
    then a reply of 1–4 tokens that may hold a 5 itself; the last turn ends without a call."""
    ids, replies = [], []
    for _ in range(int(rng.integers(0, 4))):
        ids += rng.choice([6, 7, 8, 9], size=int(rng.integers(0, 4))).tolist() + [5]
        reply = rng.choice([5, 6, 7, 8], size=int(rng.integers(1, 5))).tolist()
        ids += reply
        replies.append(len(reply))
    ids += rng.choice([6, 7, 8, 9], size=int(rng.integers(1, 4))).tolist()
    return (np.array(ids), 5, np.array(replies, dtype=int))


def forward_flops_ref(L, D, H, K, d, I, V, tokens, context):
    from types import SimpleNamespace

    from grpo_edu.beyond.step_cost import forward_flops

    config = SimpleNamespace(num_hidden_layers=L, hidden_size=D, num_attention_heads=H, num_key_value_heads=K,
                             head_dim=d, intermediate_size=I, vocab_size=V)
    return forward_flops(config, tokens, context=context)


def forward_flops_input(rng):
    """A random small Llama shape (grouped KV heads: K divides H) and a pass of 0–20 tokens after 0–50."""
    H = int(rng.choice([1, 2, 4, 8]))
    K = int(rng.choice([k for k in (1, 2, 4, 8) if H % k == 0]))
    d = int(rng.choice([8, 16, 32]))
    return (int(rng.integers(1, 5)), H * d, H, K, d, int(rng.integers(8, 300)), int(rng.integers(10, 500)),
            int(rng.integers(0, 21)), int(rng.integers(0, 51)))


def step_labels_ref(prompt, completion):
    """Lesson 17b: the exact label of each step of a sums answer, by the library."""
    from grpo_edu.training.task.sums_steps import step_labels

    return np.array(step_labels(prompt, completion))


def step_labels_input(rng):
    """A sums prompt and an answer with working in which slips happen: a result off by 1–3, a wrong term, a step
    that starts from another number, an early stop, or a wrong final copy."""
    terms = [int(t) for t in rng.integers(1, 10, size=int(rng.integers(2, 6)))]
    written, steps = terms[0], []
    for t in terms[1:int(rng.integers(1, len(terms))) + 1]:
        a = written + (int(rng.integers(1, 3)) if rng.random() < 0.15 else 0)    # starts from another number
        b = t + (int(rng.integers(1, 3)) if rng.random() < 0.15 else 0)          # adds a wrong term
        c = a + b + (int(rng.integers(1, 4)) if rng.random() < 0.25 else 0)      # adds wrong
        steps.append(f"{a}+{b}={c}")
        written = c
    answer = written + sum(terms[len(steps) + 1:]) + (int(rng.integers(1, 3)) if rng.random() < 0.2 else 0)
    return ("+".join(map(str, terms)) + "=", ";".join(steps) + f"#{answer}")


def process_token_advantage():
    """Lesson 17b, exercise 17b.2: the first token's Â of the worked answer with one wrong step."""
    from grpo_edu.core.process_advantages import process_advantages

    adv, _ = process_advantages([[1, 0, 1], [1, 1, 1]], [[6, 14, 17], [6, 14, 17]], [18, 18])
    return float(adv[0, 0])


def completion_mask_ref(ids, end_token_id):
    """Lesson 16: the completion mask, by the library (1 up to and including each row's first end token)."""
    import torch

    from grpo_edu.training.text.completion_mask import completion_mask

    return completion_mask(torch.as_tensor(ids), int(end_token_id))[0].numpy()


def completion_ids_input(rng):
    """(N, T) sampled ids with end token 2: some rows end once (then padding 0 or more samples), some twice, some
    never (cut at T)."""
    N, T = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    ids = rng.choice([0, 2, 5, 6, 7], size=(N, T), p=[0.1, 0.25, 0.25, 0.2, 0.2])
    return (ids, 2)


# --- lesson 18: sampling and training apart ---------------------------------------------------------------------
def lagged_version(step, lag):
    from grpo_edu.training.asynchronous.versions import draw_version

    return draw_version(step, lag)


def decoupled_one_token(r_theta_prox, w_prox_behav, advantage, epsilon=0.2):
    """The decoupled loss of one token with π_θ/π_prox = r and π_prox/μ = w (``core.off_policy``)."""
    import math

    import torch

    from grpo_edu.core.off_policy import off_policy_loss

    behav = torch.tensor([[-2.0]])
    prox = behav + math.log(w_prox_behav)
    lp = prox + math.log(r_theta_prox)
    loss, _ = off_policy_loss("decoupled", lp, prox, behav, torch.tensor([advantage]), torch.ones(1, 1),
                              epsilon=epsilon)
    return float(loss)


def sequence_weight(tokens, log_ratio, cap=3.0):
    """TRL's sequence_mask weight of one answer of ``tokens`` tokens, each with log π_prox − log μ = ``log_ratio``."""
    import torch

    from grpo_edu.core.off_policy import sequence_mask

    prox = torch.full((1, tokens), log_ratio)
    (_, weight), _ = sequence_mask(prox, prox, torch.zeros(1, tokens), torch.ones(1, tokens), cap=cap)
    return float(weight)


def two_process_step_share():
    """Lesson 18's stored ``wallclock``: a two-process step once both ran (train ends, steps 2 … 12) over a
    synchronous step (its seconds over its steps)."""
    from grpo_edu.course.experiments.asynchronous import stored

    wall = stored("wallclock")
    ends = [row["train_ended"] for row in wall["two_processes_lag1"]["timeline"]]
    synchronous = wall["synchronous"]["seconds"] / wall["synchronous"]["steps"]
    return (ends[-1] - ends[0]) / (len(ends) - 1) / synchronous
