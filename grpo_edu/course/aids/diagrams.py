"""Concept diagrams: the pictures of GRPO's ideas, drawn by code (lessons 00, 02, 04, 04b, 06).

Four diagrams, each a pure function that returns a ``matplotlib.figure.Figure`` with a title and a one-line
caption under it:

* :func:`grpo_loop`: prompts → the policy samples a group of G answers → a reward program scores them → the
  group advantage → the update → repeat (lesson 00);
* :func:`three_policies`: π_θ, π_θold and π_ref, and what each one is for (lessons 04 and 04b);
* :func:`advantage_flow`: one group's rewards → their mean and σ → Â = (r − mean)/σ, computed by
  ``grpo_edu.core.advantages`` (lesson 02);
* :func:`replay_mix`: one step's training rows, fresh answers plus answers replayed from the buffer, counted
  by ``grpo_edu.training.trainers.replay.replay_count`` (lesson 06).

Every number a diagram shows comes from a library call or from its arguments; the default arguments are
``GRPOConfig``'s defaults (``tests/test_diagrams.py`` keeps them so). ``python -m grpo_edu.course.aids.diagrams
--out assets/figures`` writes the four as PNG files (``concept_*.png``).
"""

import argparse
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from grpo_edu.common.display import BLUE, GREEN, GREY, ORANGE, RED
from grpo_edu.core.advantages import group_advantages, group_stats
from grpo_edu.training.trainers.replay import replay_count

CAPTION_SIZE = 9

LOOP_STAGES = ("prompts", "sample", "score", "advantage", "update")
"""The stages of one GRPO step, in the order ``GRPOTrainer.step`` runs them (then the loop repeats)."""


def _canvas(figsize, title, caption, *, width=10.0, height=6.0):
    """A blank figure whose one axes spans (0, width) × (0, height), with ``title`` above and ``caption`` below."""
    fig = Figure(figsize=figsize)
    ax = fig.add_axes((0.01, 0.09, 0.98, 0.80))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    fig.suptitle(title, fontsize=13, fontweight="bold", y=0.97)
    fig.text(0.5, 0.025, caption, ha="center", va="bottom", fontsize=CAPTION_SIZE, style="italic", color="#333333")
    return fig, ax


def _box(ax, center, size, text, color, *, fontsize=10):
    """A rounded box of ``size`` (w, h) at ``center`` with ``text`` in it."""
    (x, y), (w, h) = center, size
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.15",
                                facecolor=color, alpha=0.18, edgecolor=color, linewidth=2))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, linespacing=1.5)


def _arrow(ax, start, end, label=None, *, rad=0.0, color="#333333", offset=(0.0, 0.18), fontsize=9):
    """An arrow from ``start`` to ``end`` (curved by ``rad``), with ``label`` beside its middle."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=18, linewidth=1.8, color=color,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=0, shrinkB=0))
    if label:
        mid = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        ax.text(*mid, label, ha="center", va="center", fontsize=fontsize, color=color,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5})


# --- lesson 00: the loop --------------------------------------------------------------------------

def grpo_loop(batch_size=16, num_generations=8):
    """The GRPO loop, one step once round: B prompts → G answers each → rewards → Â → update → repeat."""
    B, G = batch_size, num_generations
    fig, ax = _canvas((10.0, 5.6), "The GRPO loop",
                      f"One step goes once round the loop: {B} prompts × {G} answers = {B * G} scored answers, "
                      "one update; a run repeats the step.")
    size = (2.9, 1.45)
    stages = {
        "prompts": ((1.7, 4.5), f"1. prompts\na batch of B = {B} questions\nsuch as  23+45=", BLUE),
        "sample": ((5.0, 4.5), r"2. the policy $\pi_\theta$ samples" + f"\na group of G = {G} answers\n"
                                                                        "to each prompt:  68, 68, 6+8, 67, …", BLUE),
        "score": ((8.3, 4.5), "3. a reward program\nscores each answer\n1 if right, 0 if wrong", ORANGE),
        "advantage": ((8.3, 1.4), "4. group advantage\n" + r"$\hat{A} = (r - \mathrm{mean}) \,/\, \sigma$"
                                  + "\nwithin each group of G", GREEN),
        "update": ((5.0, 1.4), "5. update " + r"$\pi_\theta$" + "\nanswers with " + r"$\hat{A} > 0$"
                               + " more likely,\n" + r"$\hat{A} < 0$" + " less likely", RED),
    }
    assert tuple(stages) == LOOP_STAGES
    for center, text, color in stages.values():
        _box(ax, center, size, text, color)
    half_w, half_h = size[0] / 2, size[1] / 2
    (px, py), (sx, sy), (rx, ry) = stages["prompts"][0], stages["sample"][0], stages["score"][0]
    (ax_, ay), (ux, uy) = stages["advantage"][0], stages["update"][0]
    _arrow(ax, (px + half_w, py), (sx - half_w, sy))
    _arrow(ax, (sx + half_w, sy), (rx - half_w, ry))
    _arrow(ax, (rx, ry - half_h), (ax_, ay + half_h), "rewards r", offset=(0.55, 0.0))
    _arrow(ax, (ax_ - half_w, ay), (ux + half_w, uy))
    _arrow(ax, (ux - half_w, uy), (px, py - half_h), "6. repeat with\nthe next batch", rad=-0.35,
           offset=(-0.95, -0.35))
    return fig


# --- lessons 04 and 04b: the three policies ----------------------------------------------------------

def three_policies(epsilon=0.2, beta=0.04):
    """π_θ (trained), π_θold (sampled this step's answers) and π_ref (the start, frozen): what each is for."""
    fig, ax = _canvas((10.0, 5.8), r"Three policies: $\pi_\theta$, $\pi_{\theta_{old}}$ and $\pi_{ref}$",
                      r"The gradient changes only $\pi_\theta$; the ratio and its clip keep one step near "
                      r"$\pi_{\theta_{old}}$, the KL penalty keeps the whole run near $\pi_{ref}$.")
    size = (3.3, 1.75)
    ref, old, theta = (1.9, 4.3), (8.1, 4.3), (5.0, 1.3)
    _box(ax, ref, size, r"$\pi_{ref}$: the reference" + "\nthe model before GRPO,\nfrozen for the whole run",
         GREY)
    _box(ax, old, size, r"$\pi_{\theta_{old}}$: the sampler" + "\nthe policy that sampled this\nstep's answers "
                        "(a snapshot)", ORANGE)
    _box(ax, theta, size, r"$\pi_\theta$: the policy" + "\nthe one being trained: the only\none the gradient "
                          "changes", BLUE)
    hw, hh = size[0] / 2, size[1] / 2
    _arrow(ax, (ref[0] + 0.4, ref[1] - hh), (theta[0] - hw, theta[1] + 0.25), "copied once,\nat the start",
           rad=0.25, color=GREY, offset=(-0.55, -0.2))
    _arrow(ax, (theta[0] + hw, theta[1] + 0.25), (old[0] - 0.4, old[1] - hh), "snapshot at\neach sampling",
           rad=0.25, color=ORANGE, offset=(0.55, -0.2))
    ax.text(5.0, 4.55, "what each is for in the loss", ha="center", va="center", fontsize=10, fontweight="bold")
    ax.text(5.0, 3.75, r"ratio $r = \pi_\theta \,/\, \pi_{\theta_{old}}$, clipped to"
            + f"\n[1 − ε, 1 + ε] = [{1 - epsilon:g}, {1 + epsilon:g}]: one step\ncannot move an answer too far",
            ha="center", va="center", fontsize=9, color=ORANGE)
    ax.text(5.0, 2.65, r"KL$(\pi_\theta \,\Vert\, \pi_{ref})$ × β" + f" (β = {beta:g}):\nthe leash that keeps the run "
            "near\nthe model it started from", ha="center", va="center", fontsize=9, color="#555555")
    return fig


# --- lesson 02: from a group's rewards to its advantages -----------------------------------------------

def advantage_flow(rewards=(1, 0, 0, 1, 0, 0, 0, 1), *, eps=1e-4):
    """One group: its rewards r_i, their mean and σ, and Â_i = (r_i − mean)/(σ + eps), by ``group_advantages``."""
    rewards = np.asarray(rewards, dtype=float)
    adv = group_advantages(rewards[None, :], eps=eps)[0]                  # (G,)
    mu, sigma = (float(x[0]) for x in group_stats(rewards[None, :]))      # the group's mean and unbiased σ
    G = len(rewards)
    fig = Figure(figsize=(10.0, 4.4))
    grid = fig.add_gridspec(1, 3, width_ratios=(3, 2, 3), left=0.06, right=0.98, top=0.80, bottom=0.20, wspace=0.08)
    left, middle, right = (fig.add_subplot(grid[0, i]) for i in range(3))
    fig.suptitle("From a group's rewards to its advantages", fontsize=13, fontweight="bold", y=0.97)
    fig.text(0.5, 0.025, f"The G = {G} answers to one prompt are compared with each other: above the group's "
             "mean, Â > 0 (pushed up); below it, Â < 0 (pushed down).", ha="center", va="bottom",
             fontsize=CAPTION_SIZE, style="italic", color="#333333")
    slots = np.arange(1, G + 1)
    left.bar(slots, rewards, color=[GREEN if r > mu else RED for r in rewards], alpha=0.8)
    left.axhline(mu, color="#333333", ls="--", lw=1.5)
    left.text(0.5 + G / 2, mu + 0.03, f"mean = {mu:.3f}", va="bottom", ha="center", fontsize=9,
              bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    left.set_title(r"rewards $r_i$ of one group", fontsize=10)
    left.set_xlabel(r"answer $i$")
    left.set_xticks(slots)
    left.set_ylim(min(0.0, rewards.min()) - 0.1, max(1.0, rewards.max()) + 0.25)
    middle.set_axis_off()
    middle.set_xlim(0, 1)
    middle.set_ylim(0, 1)
    middle.text(0.5, 0.72, f"mean = {mu:.3f}\n" + r"$\sigma$" + f" = {sigma:.3f}", ha="center", va="center",
                fontsize=11, linespacing=1.6)
    middle.text(0.5, 0.34, r"$\hat{A}_i = \dfrac{r_i - \mathrm{mean}}{\sigma}$", ha="center", va="center",
                fontsize=13)
    middle.add_patch(FancyArrowPatch((0.05, 0.52), (0.95, 0.52), arrowstyle="-|>", mutation_scale=20, lw=1.8,
                                     color="#333333"))
    right.bar(slots, adv, color=[GREEN if a > 0 else RED if a < 0 else GREY for a in adv], alpha=0.8)
    right.axhline(0, color="#333333", lw=1)
    for i, a in zip(slots, adv):
        right.text(i, a + (0.08 if a >= 0 else -0.08), f"{a:+.2f}", ha="center", va="bottom" if a >= 0 else "top",
                   fontsize=8)
    right.set_title(r"advantages $\hat{A}_i$", fontsize=10)
    right.set_xlabel(r"answer $i$")
    right.set_xticks(slots)
    span = max(1.0, float(np.abs(adv).max())) + 0.45
    right.set_ylim(-span, span)
    return fig


# --- lesson 06: replay's mix ----------------------------------------------------------------------------

def replay_mix(batch_size=16, num_generations=8, replay_ratio=0.3):
    """One step's training rows at ``replay_ratio``: B·G fresh answers in B groups, plus k replayed ones."""
    B, G = batch_size, num_generations
    fresh = B * G
    k = replay_count(fresh, replay_ratio)                  # k / (fresh + k) = replay_ratio, rounded
    fig, ax = _canvas((10.0, 5.0), "Replay's mix: what one step trains on",
                      f"At replay_ratio = {replay_ratio:g}, {k} of the step's {fresh + k} rows "
                      f"({k / (fresh + k):.0%}) come from the buffer; each keeps the Â it had when it was stored.",
                      width=10.0, height=5.4)
    cell = min(0.26, 5.6 / (B + 2 + int(np.ceil(k / G))))    # one square per answer, columns of G
    x0, y0 = 0.3, 1.9
    for b in range(B):
        for g in range(G):
            ax.add_patch(Rectangle((x0 + b * cell, y0 + g * cell), cell * 0.9, cell * 0.9, color=BLUE, alpha=0.75))
    rx = x0 + (B + 1.5) * cell
    for j in range(k):
        ax.add_patch(Rectangle((rx + (j // G) * cell, y0 + (j % G) * cell), cell * 0.9, cell * 0.9, color=ORANGE,
                               alpha=0.85))
    top, fresh_mid = y0 + G * cell + 0.2, x0 + B * cell / 2
    right_edge = rx + np.ceil(k / G) * cell
    ax.text(fresh_mid, top, f"fresh: B = {B} prompts × G = {G}\n= {fresh} answers sampled now\n"
            "(one column is one group)", ha="center", va="bottom", fontsize=9, color=BLUE)
    ax.text((rx + right_edge) / 2, top, f"replayed: k = {k} past\nanswers from the buffer", ha="center",
            va="bottom", fontsize=9, color=ORANGE)
    _box(ax, (8.1, y0 + G * cell / 2), (3.2, 1.5), "the replay buffer\npast answers that beat their\ngroup by the "
                                                   r"most (high $\hat{A}$)", ORANGE, fontsize=9)
    _box(ax, (fresh_mid, 0.75), (3.6, 1.0), r"the policy $\pi_\theta$ samples the fresh answers" + "\nand is "
                                            "updated on all the rows", BLUE, fontsize=9)
    _arrow(ax, (8.1 - 1.6, y0 + G * cell / 2), (right_edge + 0.15, y0 + G * cell / 2), "k drawn", color=ORANGE,
           offset=(0.0, 0.25))
    _arrow(ax, (fresh_mid, 1.25), (fresh_mid, y0 - 0.1), color=BLUE)
    _arrow(ax, (fresh_mid + 1.8, 0.75), (8.1, y0 + G * cell / 2 - 0.75), "good answers stored", rad=0.25,
           color=ORANGE, offset=(0.6, -0.35))
    return fig


DIAGRAMS = {"concept_loop.png": grpo_loop, "concept_policies.png": three_policies,
            "concept_advantage.png": advantage_flow, "concept_replay.png": replay_mix}
"""File name under assets/figures/ → the function that draws it (with its default arguments)."""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.aids.diagrams",
                                     description="Draw the course's concept diagrams as PNG files.")
    parser.add_argument("--out", default="assets/figures", help="folder to write into (default: assets/figures)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not out.is_dir():
        parser.error(f"--out: {out} is not a folder. Fix: create it first, or name an existing folder")
    for name, draw in DIAGRAMS.items():
        draw().savefig(out / name, dpi=100, metadata={"Software": None})
        print(out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
