"""Figures for the lessons: the math of lessons 01–04b here, the training runs of 05–12 in ``viz_runs``.

Every number drawn here comes from a library call (``schedule``, ``advantages``, ``kl``,
``losses``); this module only lays it out. Figures are plain ``matplotlib.figure.Figure``
objects, not pyplot figures: nothing is registered globally, so a notebook shows a figure
once (when it is the value of a cell, or passed to ``display``) and never twice.

Functions that draw one panel take ``ax=None``: give an Axes to draw into your own
figure, or leave it out to get a new Figure. They always return the Figure.

Importing ``grpo_edu`` does not import this module; matplotlib loads only when a lesson
asks for a figure.
"""

import numpy as np
from matplotlib.figure import Figure

# the display pieces (colours, tables, notes, library source) live in common/display.py; a lesson
# reaches them through this module as viz.Table, viz.show_source, viz.BLUE, ...
from grpo_edu.common.display import (BLUE, GREEN, GREY, ORANGE, RED, Note, Table, axes_or_new,  # noqa: F401
                                      moving_average, show_source)
from grpo_edu.core.advantages import dead_group_probability, group_advantages, group_stats, rank_advantages


# --- lesson 01: schedule ----------------------------------------------------------------

def schedule_timeline(schedule, ax=None):
    """Which epoch every step belongs to, and where the run stops (lesson 01).

    The staircase is ``schedule.epoch_of(step)`` for the steps actually run. When both
    limits are given, the limit that is not reached is drawn dashed.
    """
    fig, ax = axes_or_new(ax, (7.5, 3.0))
    spe = schedule.steps_per_epoch
    steps = np.arange(1, schedule.total_steps + 1)
    epochs = np.array([schedule.epoch_of(int(s)) for s in steps])

    limits = schedule.limits                     # the two stop conditions, in steps
    horizon = max(limits.values())

    n_bands = int(np.ceil(horizon / spe))
    for e in range(n_bands if n_bands <= 40 else 0):  # one shaded band per epoch (if few enough to see)
        ax.axvspan(e * spe + 0.5, min((e + 1) * spe, horizon) + 0.5,
                   color=BLUE if e % 2 == 0 else ORANGE, alpha=0.12, lw=0)
    ax.step(steps, epochs, where="post", color=BLUE, lw=2, label="epoch of each step run")

    for name, step in limits.items():
        stops = name == schedule.stop_reason
        label = (f"{name}: step {step}" if name == "total_training_steps"
                 else f"total_epochs = {schedule.total_epochs}: step {step}")
        ax.axvline(step + 0.5, color=RED if stops else GREY, ls="-" if stops else "--", lw=1.8,
                   label=label + (" (stops here)" if stops else " (not reached)"))

    ax.set_xlim(0, horizon * 1.03 + 1)
    ax.set_ylim(0, max(epochs.max(), horizon / spe) + 0.8)
    ax.set_xlabel("step (one sampled batch)")
    ax.set_ylabel("epoch")
    ax.set_title(f"{schedule.steps_per_epoch} steps per epoch; the run takes {schedule.total_steps} steps "
                 f"= {schedule.epochs_completed:g} epoch{'' if schedule.epochs_completed == 1 else 's'}", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    return fig


# --- lesson 02: advantages --------------------------------------------------------------

def advantage_bars(rewards, *, scale="group", eps=1e-4, ax=None):
    """One bar per completion: its advantage Â_i, with its reward R_i under the bar (lesson 02).

    ``rewards`` is one group, shape (G,). ``scale`` is passed to ``group_advantages``
    ("group", "batch", "none"), or "rank" for ``rank_advantages``.
    """
    rewards = np.asarray(rewards, dtype=float)
    if scale == "rank":
        adv = rank_advantages([rewards])[0]
    else:
        adv = group_advantages([rewards], scale=scale, eps=eps)[0]
    mu, sigma = (float(x[0]) for x in group_stats([rewards]))

    fig, ax = axes_or_new(ax, (7.0, 3.0))
    x = np.arange(1, len(rewards) + 1)
    colors = [GREEN if a > 0 else RED if a < 0 else GREY for a in adv]
    ax.bar(x, adv, color=colors, width=0.7)
    ax.axhline(0, color="black", lw=0.8)
    for xi, a in zip(x, adv):
        ax.annotate(f"{a:+.2f}", (xi, a), ha="center", va="bottom" if a >= 0 else "top", fontsize=8,
                    xytext=(0, 2 if a >= 0 else -2), textcoords="offset points")
    ax.set_xticks(x, [f"o{i}\nR={r:g}" for i, r in zip(x, rewards)], fontsize=8)
    top = max(1.0, float(np.abs(adv).max())) * 1.3
    ax.set_ylim(-top, top)
    ax.set_ylabel("advantage Â")
    how = {"group": "(R − μ)/(σ + eps)", "batch": "(R − μ)/(σ_batch + eps)", "none": "R − μ (Dr. GRPO)",
           "rank": "centred rank"}[scale]
    ax.set_title(f"μ = {mu:.3f}, σ = {sigma:.3f} (unbiased); Â = {how}", fontsize=10)
    return fig


def advantage_spread(p=(0.5, 0.2), num_generations=(2, 4, 8, 16, 32, 64), ax=None):
    """How much a right answer's Â varies from group to group, against G (lesson 02).

    For each success rate in ``p``: the mean of Â (line) and mean ± one standard deviation
    (band), from the exact distribution ``policy_gradient.advantage_distribution``; the dashed
    line is √((1 − p)/p), the value an infinitely large group would give.
    """
    from grpo_edu.core.policy_gradient import advantage_distribution

    fig, ax = axes_or_new(ax, (6.5, 3.2))
    ps = (p,) if np.isscalar(p) else tuple(p)
    Gs = np.asarray(num_generations)
    for q, color in zip(ps, (BLUE, ORANGE, GREEN, RED)):
        stats = [advantage_distribution(q, int(g))[1] for g in Gs]
        mean = np.array([s["mean"] for s in stats])
        std = np.array([s["std"] for s in stats])
        ax.fill_between(Gs, mean - std, mean + std, color=color, alpha=0.2, lw=0)
        ax.plot(Gs, mean, "o-", color=color, lw=2, label=f"p = {q:g}: mean of Â, ± 1 std")
        ax.axhline(stats[0]["limit"], color=color, ls="--", lw=1.2, label=f"p = {q:g}: G → ∞ limit √((1−p)/p)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(Gs, [str(g) for g in Gs])
    ax.set_xlabel("G (answers per group)")
    ax.set_ylabel("Â of a right answer")
    ax.set_title("A small group's μ and σ are noisy, and so is every Â computed from them", fontsize=10)
    ax.set_ylim(bottom=-0.9)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    return fig


# --- lesson 03: dead groups -------------------------------------------------------------

def dead_group_curves(num_generations=(2, 4, 8, 16), *, p=None, G=None, ax=None):
    """P(group is dead) = p^G + (1 − p)^G against the success rate p, one line per G (lesson 03).

    With ``p`` and ``G`` given, that point is marked.
    """
    fig, ax = axes_or_new(ax, (6.0, 3.2))
    ps = np.linspace(0, 1, 201)
    for g, color in zip(num_generations, [GREY, ORANGE, BLUE, GREEN, RED, "black"]):
        ax.plot(ps, dead_group_probability(ps, g), color=color, lw=2, label=f"G = {g}")
    if p is not None and G is not None:
        q = dead_group_probability(p, G)
        ax.plot([p], [q], "o", color="black", ms=7)
        left = p > 0.5                                  # keep the label inside the axes
        low = q < 0.15                                  # near the floor: lift the label clear of the curves
        ax.annotate(f"p = {p:g}, G = {G}: {q:.3f}", (p, q), xytext=(-10 if left else 10, 28 if low else 8),
                    textcoords="offset points", ha="right" if left else "left", fontsize=9,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85),
                    arrowprops=dict(arrowstyle="-", color="black", lw=0.8) if low else None)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("p: chance that one answer is correct")
    ax.set_ylabel("P(all G answers get the same reward)")
    ax.set_title("A group is dead when its answers are all right or all wrong", fontsize=10)
    ax.legend(fontsize=8)
    return fig


# --- lessons 04 and 04b: clipped objective, KL ------------------------------------------

def clip_curve(ratios, advantage, *, epsilon=0.2, epsilon_high=None, beta=0.0):
    """Per-token objective −L and whether the clip binds, for each ratio r (one token each).

    Each point is one call to ``grpo_loss`` on a single token with log π_θold = 0,
    log π_θ = log r and, when ``beta > 0``, π_ref = π_θold. Returns
    ``(objective, clipped)``, two arrays shaped like ``ratios``.
    """
    import torch

    from grpo_edu.core.losses import grpo_loss

    objective, clipped = [], []
    one = torch.ones(1, 1, dtype=torch.float64)
    zero = torch.zeros(1, 1, dtype=torch.float64)
    adv = torch.tensor([float(advantage)], dtype=torch.float64)
    for r in np.asarray(ratios, dtype=float):
        logprobs = torch.tensor([[np.log(r)]], dtype=torch.float64)
        loss, info = grpo_loss(logprobs, zero, adv, one, ref_logprobs=zero if beta > 0 else None, beta=beta,
                               epsilon=epsilon, epsilon_high=epsilon_high)
        objective.append(-float(loss))
        clipped.append(info["clip_fraction"] > 0)
    return np.array(objective), np.array(clipped)


def clip_objective(*, epsilon=0.2, epsilon_high=None, beta=0.0, ax=None):
    """The per-token GRPO objective min(r·Â, clip(r)·Â) against r, for Â = +1 and Â = −1 (lesson 04).

    Thick pale segments mark where the clip binds: there the policy gradient is 0. The
    shaded band is the trust region [1 − ε, 1 + ε_high]. With ``beta > 0`` the objective
    also includes −β·k3 (π_ref = π_θold here, as on the very first step).
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    fig, ax = axes_or_new(ax, (7.0, 3.4))
    ratios = np.linspace(0.3, 1.7, 141)
    ax.axvspan(1 - epsilon, 1 + eps_high, color=GREY, alpha=0.15, lw=0,
               label=f"[1 − ε, 1 + ε_high] = [{1 - epsilon:.2f}, {1 + eps_high:.2f}]")
    for adv, color in ((1.0, GREEN), (-1.0, RED)):
        objective, clipped = clip_curve(ratios, adv, epsilon=epsilon, epsilon_high=epsilon_high, beta=beta)
        ax.plot(ratios, objective, color=color, lw=2, label=f"Â = {adv:+g}")
        flat = np.where(clipped, objective, np.nan)
        ax.plot(ratios, flat, color=color, lw=7, alpha=0.3, solid_capstyle="butt")
    ax.plot([], [], color=GREY, lw=7, alpha=0.5, label="clip binds: policy gradient = 0")
    ax.axvline(1.0, color="black", lw=0.6, ls=":")
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_xlabel("r = π_θ / π_θold for one token")
    ax.set_ylabel("objective −L (higher is better)")
    extra = f", β = {beta:g}" if beta > 0 else ""
    ax.set_title(f"Clipped objective, ε = {epsilon:g}, ε_high = {eps_high:g}{extra}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def kl_estimator_hist(logprobs, ref_logprobs, *, exact=None, ax=None, bins=60):
    """Histograms of the per-sample k1, k2, k3 values (lesson 04b), with the exact KL marked.

    ``logprobs``/``ref_logprobs``: log π_θ and log π_ref of tokens sampled from π_θ, any
    shape (flattened here).
    """
    from grpo_edu.core.kl import kl_estimate

    fig, ax = axes_or_new(ax, (7.0, 3.2))
    values = {k: np.asarray(kl_estimate(logprobs, ref_logprobs, kind=k), dtype=float).ravel()
              for k in ("k1", "k2", "k3")}
    lo = min(v.min() for v in values.values())
    hi = max(v.max() for v in values.values())
    edges = np.linspace(lo, hi, bins + 1)
    for (kind, v), color in zip(values.items(), (ORANGE, BLUE, GREEN)):
        ax.hist(v, bins=edges, histtype="step", lw=2, color=color,
                label=f"{kind}: mean {v.mean():.4f}, std {v.std():.4f}")
    if exact is not None:
        ax.axvline(exact, color="black", ls="--", lw=1.2, label=f"exact KL = {exact:.4f}")
    ax.axvline(0, color=GREY, lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("per-token estimate")
    ax.set_ylabel("count (log scale)")
    ax.set_title("One sampled token, three estimators of KL(π_θ ‖ π_ref)", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def token_weights(weights, ax=None):
    """Grouped bars: the gradient weight of one token of each answer, per ``loss_type`` (lesson 04b).

    ``weights``: {loss_type: {answer label: weight per token}}, e.g. measured as
    −∂loss/∂logprob with Â = 1 (see lesson 04b).
    """
    fig, ax = axes_or_new(ax, (6.5, 3.0))
    types = list(weights)
    answers = list(dict.fromkeys(a for w in weights.values() for a in w))
    width = 0.8 / len(answers)
    x = np.arange(len(types))
    for j, (answer, color) in enumerate(zip(answers, (BLUE, ORANGE, GREEN, RED))):
        ax.bar(x + (j - (len(answers) - 1) / 2) * width, [weights[t][answer] for t in types], width,
               color=color, label=answer)
    ax.set_xticks(x, types)
    ax.set_ylabel("weight of one token")
    ax.set_title("How loss_type spreads the gradient over tokens", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def one_token_bandit(beta, *, steps=150, G=8, lr=0.2, seed=0):
    """A toy GRPO run on a one-token "question" with 4 possible answers (lesson 04b, β).

    Answer 0 is correct (reward 1, the others 0); the starting model π_ref gives it 20 %
    and 80 % to the three wrong answers.
    Each step samples G answers, takes ``group_advantages`` and one SGD step on
    ``grpo_loss`` (on-policy, with β·k3 against π_ref). Returns ``(p_correct, kl)``, one
    value per step, where kl is the exact KL(π_θ ‖ π_ref) = Σ_x π_θ(x)·k1(x).
    """
    import torch

    from grpo_edu.core.kl import kl_estimate
    from grpo_edu.core.losses import grpo_loss

    gen = torch.Generator().manual_seed(seed)
    ref_logits = torch.tensor([0.0, *[np.log(4 / 3)] * 3], dtype=torch.float64)  # π_ref = (0.2, 0.8/3, …)
    ref_logprobs = ref_logits.log_softmax(-1)                                  # (V,)
    logits = ref_logits.clone().requires_grad_(True)
    opt = torch.optim.SGD([logits], lr=lr)
    mask = torch.ones(G, 1, dtype=torch.float64)
    p_correct, kl = [], []
    for _ in range(steps):
        logprobs_all = logits.log_softmax(-1)                                  # (V,)
        answers = torch.multinomial(logprobs_all.exp().detach(), G, replacement=True, generator=gen)  # (G,)
        rewards = (answers == 0).to(torch.float64)                             # (G,)
        adv = group_advantages(rewards[None])[0]                               # (G,)
        logprobs = logprobs_all[answers][:, None]                              # (N=G, T=1)
        loss, _ = grpo_loss(logprobs, logprobs.detach(), adv, mask,
                            ref_logprobs=ref_logprobs[answers][:, None], beta=beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            now = logits.log_softmax(-1)
            p_correct.append(float(now[0].exp()))
            kl.append(float((now.exp() * kl_estimate(now, ref_logprobs, kind="k1")).sum()))
    return np.array(p_correct), np.array(kl)


def kl_leash(beta, *, compare=(0.0,), steps=150, seed=0):
    """Two panels from ``one_token_bandit``: P(correct) and KL to π_ref over the steps (lesson 04b).

    One line per β in ``compare`` plus the chosen ``beta``, all with the same seed.
    """
    fig = Figure(figsize=(8.0, 3.0), layout="constrained")
    ax_p, ax_kl = fig.subplots(1, 2)
    betas = list(dict.fromkeys([*compare, beta]))
    for b, color in zip(betas, (GREY, ORANGE, GREEN, RED, BLUE)):
        p, kl = one_token_bandit(b, steps=steps, seed=seed)
        style = dict(color=BLUE if b == beta else color, lw=2.2 if b == beta else 1.4, label=f"β = {b:g}")
        ax_p.plot(np.arange(1, steps + 1), p, **style)
        ax_kl.plot(np.arange(1, steps + 1), kl, **style)
    ax_p.set_ylim(0, 1.02)
    ax_p.set_xlabel("step")
    ax_p.set_ylabel("π_θ(correct answer)")
    ax_kl.set_xlabel("step")
    ax_kl.set_ylabel("KL(π_θ ‖ π_ref)")
    ax_p.legend(fontsize=8)
    fig.suptitle("β is a leash: a larger β keeps the policy closer to π_ref", fontsize=10)
    return fig


# --- lessons 05 and 08: one step's groups, training curves ------------------------------

def group_table(prompts, answers, completions, rewards, advantages):
    """One row per prompt: its right answer, then its G sampled answers with ✓/✗ and Â (lesson 05).

    ``prompts``/``answers``: the B prompts and their right answers; ``completions``: the
    N = B·G sampled answers, grouped by prompt (row b·G + g, as ``rollout.generate`` lays
    them out); ``rewards`` and ``advantages``: (B, G). A cell reads ``46 ✓ +0.93``: the
    answer text (``∅`` when empty), right or wrong, and its advantage.
    """
    rewards, advantages = np.asarray(rewards, dtype=float), np.asarray(advantages, dtype=float)
    B, G = rewards.shape
    if len(prompts) != B or len(answers) != B or len(completions) != B * G or advantages.shape != (B, G):
        raise ValueError(f"group_table: expected {B} prompts and answers, {B * G} completions and (B, G) "
                         f"advantages. Fix: pass one step's rollout, grouped by prompt.")
    rows = []
    for b in range(B):
        row = {"prompt": prompts[b], "right answer": answers[b]}
        for g in range(G):
            text = completions[b * G + g].strip() or "∅"
            mark = "✓" if rewards[b, g] > 0 else "✗"
            a = advantages[b, g]
            row[f"o{g + 1}"] = f"{text} {mark} {'0' if a == 0 else format(a, '+.2f')}"
        row["μ"] = float(rewards[b].mean())
        rows.append(row)
    return Table(rows, digits=3)


# the figures of training runs (lessons 05–12) live in viz_runs.py; a lesson reaches them here too, as viz.training_curves, ...
from grpo_edu.course.aids.viz_runs import (  # noqa: E402,F401
    LivePlot, training_curves, compare_runs, buffer_table, forgetting_curves,
    mix_bar, memory_bars, roofline_chart, token_entropy, length_histograms,
    token_push_rows, pass_at_k_curves, variant_weights, race_curves,
    paired_differences, CURVES, WEIGHT_VARIANTS,
)
