"""Figures of training runs (lessons 05–12): curves, comparisons, replay, memory, long answers, the variants' race.

Split from ``viz`` (the figures of the math, lessons 01–04b), which re-exports every name here, so a lesson
writes ``viz.training_curves`` either way. The same rules hold: plain ``matplotlib.figure.Figure`` objects,
``ax=None`` for one-panel figures, every number from a library call or a run's own history.
"""

import numpy as np
from matplotlib.figure import Figure

from grpo_edu.common.display import BLUE, GREEN, GREY, ORANGE, RED, Table, axes_or_new, moving_average


CURVES = {
    "reward_mean": "mean reward",
    "heldout_accuracy": "held-out accuracy (τ = 1)",
    "kl": "KL(π_θ ‖ π_ref), k3",
    "entropy": "entropy per token (nats)",
    "dead_group_fraction": "dead-group fraction",
    "completion_length": "completion length (tokens)",
    "grad_norm": "gradient norm (before clipping)",
    "accuracy": "accuracy of the step's answers",
    "completion_length_correct": "length of right answers (tokens)",
    "completion_length_wrong": "length of wrong answers (tokens)",
    "truncated_fraction": "share cut at max_completion_length",
}
"""Metric key (a trainer history key, or "heldout_accuracy" from ``trainer.evals``) → axis label.
A reward component's mean, ``reward/<name>`` (lesson 07), may be drawn too."""


def _draw_metric(ax, key, history, evals, *, color, label=None, smooth=20, raw=True, faint=False):
    """One metric of one run on ``ax``: faint per-step values and their moving average.
    ``faint``: draw the run thin and pale (another run is the one in focus)."""
    lw, alpha = (0.9, 0.35) if faint else (1.8, 1.0)
    if key == "heldout_accuracy":
        if evals:
            ax.plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "o-", color=color,
                    lw=lw - 0.2, ms=4, alpha=alpha, label=label)
        return
    steps = [m["step"] for m in history]
    values = [np.nan if m.get(key) is None else m[key] for m in history]   # a metric not measured: a gap
    if raw and smooth > 1 and not faint:
        ax.plot(steps, values, color=color, lw=0.6, alpha=0.3)
    ax.plot(steps, moving_average(values, smooth), color=color, lw=lw, alpha=alpha, label=label)


def training_curves(history, evals=None, *, smooth=20, title=None, figsize=(10.0, 5.2)):
    """Six panels against the step: reward and held-out accuracy, KL, entropy, dead groups,
    completion length and gradient norm (lessons 05, 08 and 09). ``figsize`` in inches.

    ``history``: the trainer's per-step metrics (``trainer.history``); ``evals``: its
    held-out accuracies (``trainer.evals``), drawn as dots on the first panel. Faint lines
    are the per-step values, bold lines their moving average over ``smooth`` steps.
    """
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    ax = axes[0]
    if history:
        _draw_metric(ax, "reward_mean", history, None, color=BLUE, smooth=smooth,
                     label=f"mean reward on the batch (avg of {smooth} steps)")
    _draw_metric(ax, "heldout_accuracy", history, evals, color=ORANGE, label="held-out accuracy (τ = 1)")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("reward / accuracy")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    for ax, key, color in zip(axes[1:], ("kl", "entropy", "dead_group_fraction", "completion_length",
                                         "grad_norm"), (RED, GREEN, GREY, BLUE, ORANGE)):
        if history:
            _draw_metric(ax, key, history, None, color=color, smooth=smooth)
            if key in ("kl", "grad_norm"):     # one spike should not flatten the rest of the curve
                values = np.array([np.nan if m.get(key) is None else m[key] for m in history], dtype=float)
                if np.isfinite(values).any():
                    top = max(np.nanpercentile(values, 99.5), np.nanmax(moving_average(values, smooth)))
                    ax.set_ylim(min(0.0, np.nanmin(values)), top * 1.1 + 1e-9)
        ax.set_ylabel(CURVES[key], fontsize=8)
    for ax in axes:
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
    axes[3].set_ylim(-0.02, 1.02)
    last = history[-1]["step"] if history else 0
    fig.suptitle(title or f"GRPO training curves, step {last}", fontsize=10)
    return fig


def compare_runs(histories, metrics=("reward_mean", "entropy"), *, evals=None, smooth=10, title=None, highlight=None):
    """One panel per metric, one line per run, for comparing settings (lesson 05).

    ``histories``: {label: trainer.history}; ``evals``: {label: trainer.evals}, needed for
    the metric "heldout_accuracy". Lines are moving averages over ``smooth`` steps. Metric
    names are keys of :data:`CURVES`. ``highlight``: one label drawn bold, the others faint.
    """
    metrics = list(metrics)
    unknown = [m for m in metrics if m not in CURVES and not m.startswith("reward/")]
    if unknown:
        raise ValueError(f"metrics: unknown {unknown}. Fix: use names from viz.CURVES: {list(CURVES)}.")
    ncols = 2 if len(metrics) == 4 else min(len(metrics), 3)
    nrows = -(-len(metrics) // ncols)
    fig = Figure(figsize=(4.0 * ncols, 2.9 * nrows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    palette = (BLUE, RED, GREEN, ORANGE, GREY, "black")
    for ax, key in zip(axes, metrics):
        for (label, history), color in zip(histories.items(), palette):
            _draw_metric(ax, key, history, (evals or {}).get(label), color=color, label=label,
                         smooth=smooth, raw=False, faint=highlight is not None and label != highlight)
        ax.set_xlabel("step")
        ax.set_ylabel(CURVES.get(key, f"mean {key}"), fontsize=9)
        if key in ("reward_mean", "heldout_accuracy", "dead_group_fraction", "accuracy", "truncated_fraction"):
            ax.set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


class LivePlot:
    """A trainer callback that redraws :func:`training_curves` every ``every`` steps.

    Pass it in ``GRPOTrainer(..., callbacks=[live])`` (or append it to
    ``trainer.callbacks``). In a live notebook the figure is shown once, with a display
    id, and replaced in place at each redraw; ``finish()`` draws the final figure there,
    so it stays in the cell as an ordinary output. ``evals``: a list the trainer fills
    (``trainer.evals``), read at each redraw, so held-out accuracy appears as it is measured.
    Outside IPython nothing is displayed; ``figure`` still holds the latest drawing.
    """

    def __init__(self, every=50, *, evals=None, smooth=20):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every: must be an integer ≥ 1, got {every!r}. Fix: redraw every 25–100 steps.")
        self.every, self.evals, self.smooth = every, evals, smooth
        self.history = []
        """The metrics dicts received so far."""
        self.figure = None
        """The latest Figure drawn (None before the first redraw)."""
        self._handle = None

    def __call__(self, metrics):
        self.history.append(dict(metrics))
        if metrics["step"] % self.every == 0:
            self.redraw()

    def redraw(self):
        """Draw the curves now and show them (in place of the previous drawing)."""
        self.figure = training_curves(self.history, self.evals, smooth=self.smooth)
        self._show()
        return self.figure

    def finish(self, evals=None):
        """Final drawing, with ``evals`` if given (e.g. after the last held-out evaluation)."""
        if evals is not None:
            self.evals = evals
        self.redraw()

    def _show(self):
        self._handle = _show_in_place(self.figure, self._handle)


def _show_in_place(figure, handle):
    """Show ``figure`` in a notebook: as a new output, or in place of ``handle``'s. Returns the handle.

    Outside IPython (a script, the tests) it shows nothing and returns None.
    """
    from IPython import get_ipython
    from IPython.display import display

    if get_ipython() is None:
        return None
    if handle is None:
        return display(figure, display_id=True)
    handle.update(figure)
    return handle


# --- lesson 06: replay ------------------------------------------------------------------------
def buffer_table(buffer, *, title=None):
    """A replay buffer's samples in the order they would leave it (first row = evicted next).

    The order is the buffer's rule: lowest advantage first, then the oldest round, then the
    earliest added (``grpo_edu.training.trainers.replay``).
    """
    from grpo_edu.training.trainers.replay import eviction_order

    rows = [{"leaves": i, "question": s.question, "answer": s.answer, "advantage Â": s.advantage,
             "reward R": s.reward, "round": r} for i, (s, r) in enumerate(eviction_order(buffer), start=1)]
    return Table(rows or [{"buffer": "(empty)"}], title=title or f"{len(buffer)} of {buffer.capacity} places used")


def forgetting_curves(results, *, highlight=None, tasks=None, title=None):
    """Held-out accuracy of each task against the phase-B step, one line per replay ratio.

    ``results``: ``{replay_ratio: {"steps": [...], "accuracy": {task: [...]}}}`` (what
    ``grpo_edu.course.experiments.forgetting.run_phase_b`` records). ``highlight``: the ratio drawn bold, the
    others faint (the lesson's slider picks it).
    """
    ratios = sorted(results)
    tasks = tasks or list(results[ratios[0]]["accuracy"])
    fig = Figure(figsize=(4.2 * len(tasks), 3.1), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(tasks)))
    palette = (GREY, BLUE, GREEN, ORANGE, RED, "black")
    for ax, task in zip(axes, tasks):
        for ratio, color in zip(ratios, palette):
            r = results[ratio]
            bold = highlight is None or ratio == highlight
            ax.plot(r["steps"], r["accuracy"][task], color=color, lw=2.4 if bold else 1.0,
                    alpha=1.0 if bold else 0.35, marker="o" if bold else None, ms=3,
                    label=f"replay {ratio:.0%}")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("phase-B step")
        ax.set_ylabel(f"held-out accuracy on {task}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title or "Phase B: learning the new task (right) while keeping the old one (left)", fontsize=10)
    return fig


def mix_bar(composition, ax=None):
    """One step's training rows as a bar: new (blue) then replayed (orange), from ``replay_composition``."""
    fig, ax = axes_or_new(ax, (6.0, 1.3))
    new, replayed = composition["new samples"], composition["replayed samples"]
    ax.barh([0], [new], color=BLUE, label=f"new: {new}")
    ax.barh([0], [replayed], left=[new], color=ORANGE, label=f"replayed: {replayed}")
    ax.set_yticks([])
    ax.set_xlim(0, max(new + replayed, 1))
    ax.set_xlabel("completions trained on in one step")
    ax.legend(fontsize=8, loc="lower right", ncols=2)
    return fig


def memory_bars(rows, ax=None):
    """GPU memory per GPU as stacked bars, one per row of ``grpo_edu.beyond.memory.memory_table()``: each
    part (weights, gradients, optimizer, reference model, KV cache, logits) a colour, the total at the end."""
    rows = list(rows)
    parts = [k for k in rows[0] if k not in ("model", "GPUs", "ZeRO stage", "total GiB per GPU")]
    fig, ax = axes_or_new(ax, (9.0, 0.55 * len(rows) + 1.6))
    labels = [f"{r['model']}, {r['GPUs']} GPU{'s' if r['GPUs'] > 1 else ''}, ZeRO {r['ZeRO stage']}" for r in rows]
    y = np.arange(len(rows))[::-1]                                   # the first row on top
    left = np.zeros(len(rows))
    for part, color in zip(parts, (BLUE, "#56B4E9", ORANGE, GREEN, RED, GREY)):
        widths = np.array([r[part] for r in rows], dtype=float)
        ax.barh(y, widths, left=left, color=color, label=part)
        left += widths
    for yi, total in zip(y, left):
        ax.text(total, yi, f" {total:.1f} GiB", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0, left.max() * 1.15)
    ax.set_xlabel("GiB per GPU (activations not included)")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def roofline_chart(machines, ax=None):
    """The roofline (Williams et al. 2009) of one or more machines, with a step's parts placed on it.

    ``machines``: {name: (table, info, flops_per_s)} where ``(table, info)`` is ``beyond.roofline.roofline``'s
    answer and ``flops_per_s`` the machine's matmul rate F. Each machine's roof: attainable FLOP/s =
    min(F, I·W) over arithmetic intensity I (FLOPs per byte), with W = F / ridge. Each part sits at its
    intensity: a filled marker at the rate its measured time gives (where the table holds one), a hollow one
    on the roof (its limit)."""
    fig, ax = axes_or_new(ax, (8.0, 4.6))
    markers = {"sampling": "o", "reference": "s", "policy": "D", "optimizer": "^"}
    intensities = [row["intensity"] for table, _, _ in machines.values() for row in table.values() if row["flops"]]
    low, high = min(intensities + [0.1]) / 3, max(intensities + [1e3]) * 3
    x = np.geomspace(low, high, 200)
    for (name, (table, info, rate)), color in zip(machines.items(), (BLUE, ORANGE, GREEN, RED)):
        bandwidth = rate / info["ridge_flops_per_byte"]
        ax.plot(x, np.minimum(rate, x * bandwidth), color=color, lw=2,
                label=f"{name}: {rate / 1e9:,.0f} GFLOP/s, {bandwidth / 1e9:,.0f} GB/s")
        for part, row in table.items():
            if not row["flops"]:
                continue
            ax.plot(row["intensity"], row["flops"] / row["limit_s"], markers.get(part, "o"), color=color,
                    mfc="none", ms=8)
            if "seconds" in row and row["seconds"] > 0:
                ax.plot(row["intensity"], row["flops"] / row["seconds"], markers.get(part, "o"), color=color, ms=7)
                ax.annotate(part, (row["intensity"], row["flops"] / row["seconds"]), fontsize=7,
                            xytext=(4, -10), textcoords="offset points")
            else:
                ax.annotate(part, (row["intensity"], row["flops"] / row["limit_s"]), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("hollow: a part's limit on the roof; filled: the rate its measured time gives", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def token_entropy(tokens, entropy, *, title=None, ax=None):
    """Bars: the entropy H(π(·|q, o_<t)) the model had before writing each token of one answer (lesson 11).

    ``tokens``: the answer's tokens as strings; ``entropy``: one number (nats) per token.
    """
    if len(tokens) != len(entropy):
        raise ValueError(f"entropy: has {len(entropy)} values for {len(tokens)} tokens. Fix: pass one per token.")
    fig, ax = axes_or_new(ax, (min(12.0, 1.2 + 0.28 * len(tokens)), 2.6))
    ax.bar(range(len(tokens)), entropy, color=BLUE)
    ax.set_xticks(range(len(tokens)), tokens, fontsize=8)
    ax.set_ylabel("entropy (nats)", fontsize=9)
    ax.set_title(title or "How unsure the model was before each token", fontsize=10)
    return fig


def length_histograms(panels, *, max_length=None):
    """Histograms of answer lengths, right answers against wrong ones, one panel per model (lesson 11).

    ``panels``: {title: {"right": [lengths], "wrong": [lengths]}}, lengths in tokens; every panel
    shares one set of bins, one per whole token from 1 to ``max_length`` (default: the longest given),
    so a bar's height is the number of answers of exactly that length. A mean hides what this shows:
    two humps, bare answers of 3–4 tokens and worked ones of 8 or more.
    """
    if not panels:
        raise ValueError("panels: is empty. Fix: pass {title: {'right': [...], 'wrong': [...]}}, one entry per model.")
    for title, kinds in panels.items():
        if set(kinds) != {"right", "wrong"}:
            raise ValueError(f"panels[{title!r}]: has keys {sorted(kinds)}. Fix: give exactly 'right' and 'wrong'.")
    longest = max((max(v) for kinds in panels.values() for v in kinds.values() if len(v)), default=1)
    top = int(max_length or longest)
    edges = np.arange(0.5, top + 1.5)                                 # one bin per whole token
    fig = Figure(figsize=(4.2 * len(panels) + 0.6, 3.0), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (title, kinds) in zip(axes, panels.items()):
        for kind, color in (("right", GREEN), ("wrong", RED)):
            values = np.asarray(kinds[kind], dtype=float)
            ax.hist(values, bins=edges, histtype="stepfilled", alpha=0.45, color=color, edgecolor=color,
                    label=f"{kind} ({len(values)})")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("answer length (tokens, <eos> included)")
        ax.set_xlim(0, top + 1)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("answers")
    return fig


def token_push_rows(rows, *, scale=None, title=None):
    """Answers drawn token by token, each token's box coloured by its push (lesson 11).

    ``rows``: {label: (tokens, push)}, one row per answer: ``tokens`` its tokens as strings,
    ``push`` one number per token from :func:`grpo_edu.core.losses.token_push` (positive: the step
    raises the token, blue; negative: it lowers it, red; 0: white). All rows share one colour scale,
    symmetric around 0, so equal colours are equal pushes: ``scale`` is the push drawn at full
    colour (default: the largest |push| given); larger pushes saturate. Each row's total push,
    Σ_t push, is written at its right end.
    """
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    if not rows:
        raise ValueError("rows: is empty. Fix: pass {label: (tokens, push)}, one entry per answer.")
    for label, (tokens, push) in rows.items():
        if len(tokens) != len(push):
            raise ValueError(f"rows[{label!r}]: has {len(push)} pushes for {len(tokens)} tokens. "
                             "Fix: pass one push per token.")
    if scale is not None and not scale > 0:
        raise ValueError(f"scale: is {scale}. Fix: pass a push > 0 to draw at full colour, or None for the largest.")
    top = scale or max((abs(float(p)) for _, push in rows.values() for p in push), default=0.0) or 1.0
    colors = ScalarMappable(norm=Normalize(vmin=-top, vmax=top, clip=True), cmap="RdBu")
    width = max(len(tokens) for tokens, _ in rows.values())
    fig = Figure(figsize=(min(14.0, 4.4 + 0.3 * width), 0.55 * len(rows) + 1.3), layout="constrained")
    ax = fig.add_subplot()
    for r, (label, (tokens, push)) in enumerate(rows.items()):
        y = len(rows) - 1 - r                                          # the first row on top
        for t, (token, p) in enumerate(zip(tokens, push)):
            ax.add_patch(_token_box(t, y, colors.to_rgba(float(p))))
            ax.text(t + 0.5, y + 0.45, token, ha="center", va="center", fontsize=8, family="monospace")
        ax.text(len(tokens) + 0.3, y + 0.45, f"total {sum(float(p) for p in push):+.3g}", va="center", fontsize=8)
    ax.set_xlim(0, width + 4)
    ax.set_ylim(-0.1, len(rows))
    ax.set_yticks([len(rows) - 1 - r + 0.45 for r in range(len(rows))], list(rows), fontsize=8)
    ax.set_xticks([])
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    fig.colorbar(colors, ax=ax, label="push per token", shrink=0.8, pad=0.01, extend="both" if scale else "neither")
    ax.set_title(title or "How hard one step pushes each token (red: down, blue: up)", fontsize=10)
    return fig


def _token_box(x, y, color):
    """One token's box of :func:`token_push_rows`: a unit square at (x, y), slightly inset."""
    from matplotlib.patches import Rectangle

    return Rectangle((x + 0.04, y), 0.92, 0.9, facecolor=color, edgecolor=GREY, lw=0.4)


def pass_at_k_curves(curves, ax=None, *, title="pass@k against k, before and after RL"):
    """pass@k against k (log scale), one line per model: ``curves`` = {label: {k: pass@k}} (lesson 11)."""
    fig, ax = axes_or_new(ax, (5.0, 3.0))
    ax.set_title(title, fontsize=10)
    for (label, curve), color in zip(curves.items(), (GREY, BLUE, RED, GREEN)):
        ks = sorted(curve)
        ax.plot(ks, [curve[k] for k in ks], "o-", color=color, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (answers sampled per prompt)")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    return fig


# --- lesson 12: GRPO's variants -------------------------------------------------------------

WEIGHT_VARIANTS = {
    "grpo (token clip, ε = 0.2)": dict(loss_type="grpo"),
    "gspo (sequence clip, ε = 3e-4 / 4e-4)": dict(loss_type="grpo", importance_sampling_level="sequence",
                                                    epsilon=3e-4, epsilon_high=4e-4),
    "cispo (weight capped at ε_max = 5)": dict(loss_type="cispo", epsilon_high=5.0),
    "sapo (soft gate, τ = 1 / 1.05)": dict(loss_type="sapo"),
}
"""The variants :func:`variant_weights` draws: label → settings of ``grpo_loss``."""


def variant_weights(ratios=None, variants=None):
    """How hard each variant pushes a token once the policy has moved: the push −∂L/∂log π of a
    one-token answer (``token_push`` with ``ratio=r``), divided by Â, against r = π_θ / π_θold.
    Left Â = +1, right Â = −1. On-policy (r = 1) every variant gives 1: the same gradient.
    (For GSPO the x axis is the answer's sequence ratio s_i; with one token s_i = r.)"""
    from grpo_edu.core.losses import token_push

    ratios = np.linspace(0.2, 3.0, 281) if ratios is None else np.asarray(ratios, dtype=float)
    variants = WEIGHT_VARIANTS if variants is None else variants
    fig = Figure(figsize=(10.0, 3.4), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    mask = np.ones((len(ratios), 1))
    for ax, adv in zip(axes, (1.0, -1.0)):
        styles = ((BLUE, 3.5, "-"), (GREY, 1.8, "--"), (GREEN, 1.6, "-"), (RED, 1.6, "-"))
        for (label, settings), (color, width, dash) in zip(variants.items(), styles):
            # N one-token answers, one per ratio; × N undoes the mean over answers ("grpo", "sapo")
            # or over tokens ("cispo"), so each point is one answer's own push per unit of Â
            push, _ = token_push(np.full(len(ratios), adv), mask, ratio=ratios[:, None], **settings)
            ax.plot(ratios, push[:, 0].numpy() * len(ratios) / adv, color=color, lw=width, ls=dash, label=label,
                    alpha=0.85)
        ax.axvline(1.0, color="black", lw=0.6, ls=":")
        ax.set_xlabel("r = π_θ / π_θold (GSPO: s_i)")
        ax.set_title(f"Â = {adv:+g}", fontsize=10)
    axes[0].set_ylabel("push on log π, per unit of Â")
    axes[1].legend(fontsize=8, loc="upper left")
    return fig


def race_curves(results, *, key="curve", ax=None, title="training reward per step, each setting's median over its runs"):
    """The race's training-reward curves (lesson 12): one line per variant, the median over its runs
    at each step, with the runs' [min, max] band for ``grpo``. ``results``: {variant: [rows]} as
    ``grpo_edu.course.experiments.variants.stored_race`` returns."""
    fig, ax = axes_or_new(ax, (8.0, 3.6))
    ax.set_title(title, fontsize=10)
    palette = (BLUE, ORANGE, GREEN, RED, GREY, "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#9467bd")
    if len(results) > len(palette):
        raise ValueError(f"results: {len(results)} variants, but race_curves has {len(palette)} colours. "
                         "Fix: pass at most that many variants.")
    for (name, rows), color in zip(results.items(), palette):
        curves = np.array([row[key] for row in rows], dtype=float)          # (runs, steps)
        steps = np.arange(1, curves.shape[1] + 1)
        ax.plot(steps, np.median(curves, axis=0), color=color, lw=3 if name == "grpo" else 1.4, label=name)
        if name == "grpo":
            ax.fill_between(steps, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.15, lw=0,
                            label=f"grpo, [min, max] over {len(rows)} runs")
    ax.set_xlabel("step")
    ax.set_ylabel("training reward (median over runs)")
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    return fig


def paired_differences(differences, *, resolved=0.10, label="held-out accuracy", ax=None,
                       title="each setting minus the baseline on the same seed"):
    """Each variant's per-seed difference against the baseline, in points, as dots (one per seed,
    labelled with it), with their mean as a bar (lesson 12). The grey band, |mean| < ``resolved``,
    is where a few seeds cannot tell the variants apart. ``differences``: {variant: {seed: difference}}
    (``grpo_edu.course.experiments.variants.paired_differences``; a difference is a share, drawn × 100)."""
    fig, ax = axes_or_new(ax, (8.0, 0.42 * len(differences) + 1.3))
    ax.set_title(f"{label}: {title}", fontsize=10)
    names = list(differences)
    ax.axvspan(-100 * resolved, 100 * resolved, color=GREY, alpha=0.15, lw=0,
               label=f"|mean| < {100 * resolved:g} points: unresolved")
    ax.axvline(0.0, color="black", lw=0.8)
    seeds = sorted({seed for diffs in differences.values() for seed in diffs})
    markers = dict(zip(seeds, "os^Dvp<>"))
    for y, name in enumerate(names):
        diffs = differences[name]
        if not diffs:
            continue
        mean = 100 * sum(diffs.values()) / len(diffs)
        ax.plot([mean, mean], [y - 0.32, y + 0.32], color=BLUE, lw=3, label="mean over seeds" if y == 0 else None)
        for seed, d in diffs.items():
            ax.plot(100 * d, y, markers.get(seed, "o"), color=ORANGE, ms=6, mec="black", mew=0.5, ls="none",
                    label=f"seed {seed}" if y == 0 else None)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel(f"{label}: variant − baseline on the same seed (points)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
