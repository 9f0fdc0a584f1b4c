"""Interactive panels for the lessons: sliders that redraw a table or a figure.

A panel is a box of controls plus its results. The results are ordinary notebook outputs
(a table, a figure), shown once under the controls with a display id and replaced in
place whenever a control moves. So a notebook executed without a browser (nbval,
nbconvert, a static viewer) still stores the default table and figure in the cell's own
outputs, and a live notebook updates them. No ``ipywidgets.Output`` is used: what it
captures is not saved when a notebook runs headless.

Panels compute nothing themselves. Every number comes from the library modules
(``schedule``, ``advantages``, ``kl``, ``losses``), mostly through ``grpo_edu.course.aids.viz``.
Each builder returns a ``Panel``; ``panel.outputs`` holds what it shows right now and
``panel.params`` the control values, so tests can compare them with the library.
"""

import ipywidgets as W
from IPython.display import display

from grpo_edu.core.advantages import dead_group_probability, group_advantages, group_stats, rank_advantages
from grpo_edu.core.schedule import TrainingSchedule, micro_batch_sizes
from grpo_edu.course.aids import viz

_STYLE = {"description_width": "170px"}     # one label width: every slider's track starts at the same place
_LAYOUT = {"width": "460px"}                # and has the same length


STATIC_HINT = ("▶ Sliders appear here when this cell runs in Jupyter (Run ▸ Run All Cells). After reopening a "
               "saved notebook, run the cell again if it says \"Error displaying widget\".")
"""Shown in place of a panel's controls wherever they cannot render: an unrun or untrusted
notebook, GitHub, nbviewer, a notebook reopened without its widget state."""


class Panel(W.VBox):
    """Controls (a VBox) whose results are displayed, and updated, as separate outputs."""

    def __init__(self, name, controls, compute):
        super().__init__(children=list(controls.values()))
        self._name = name
        self.controls = controls
        """{parameter name: control widget}."""
        self._compute = compute
        self.outputs = compute(**self.params)
        """What the panel shows now: a list of ``viz.Table``, ``viz.Note`` or Figures."""
        self._shown = []  # one list of display handles per time the panel was displayed
        for control in controls.values():
            control.observe(self._refresh, names="value")

    @property
    def params(self):
        """{parameter name: current control value}."""
        return {name: control.value for name, control in self.controls.items()}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self._name}({args})"

    def _ipython_display_(self):
        bundle = super()._repr_mimebundle_()      # the live controls (needs a browser)
        bundle["text/plain"] = f"{self!r}\n{STATIC_HINT}"  # what a view without live widgets shows
        display(bundle, raw=True)
        self._shown.append([display(out, display_id=True) for out in self.outputs])

    def _refresh(self, change=None):
        try:
            self.outputs = self._compute(**self.params)
        except ValueError as err:                  # the library's message says what to fix
            self.outputs = [viz.Note(str(err))] + [viz.Note("(change the setting above)")] * (
                len(self.outputs) - 1)
        for handles in self._shown:
            for handle, out in zip(handles, self.outputs):
                handle.update(out)


def _int(name, value, lo, hi, step=1):
    return W.IntSlider(value=value, min=min(lo, value), max=max(hi, value), step=step, description=name,
                       continuous_update=False, style=_STYLE, layout=_LAYOUT)


def _float(name, value, lo, hi, step):
    return W.FloatSlider(value=value, min=min(lo, value), max=max(hi, value), step=step, description=name,
                         continuous_update=False, readout_format=".2f", style=_STYLE, layout=_LAYOUT)


# --- lesson 01 ----------------------------------------------------------------------------

def schedule_panel(dataset_size=2000, batch_size=4, num_generations=8, total_epochs=3,
                   total_training_steps=1000, micro_batch_size=8):
    """Sliders for a ``TrainingSchedule``; shows its ``summary()`` and ``viz.schedule_timeline``.

    The defaults are the seed's worked example (2000 prompts, batch 4, G 8, 1000 steps).
    ``micro_batch_size`` must divide the step's batch_size × G completions, so its slider
    offers only those divisors, and follows when batch_size or G moves (it keeps the largest
    divisor not above its value). Every slider position is then a valid schedule; lesson 01
    shows the error for an invalid one separately.
    """
    start = TrainingSchedule(dataset_size=dataset_size, batch_size=batch_size, num_generations=num_generations,
                             total_epochs=total_epochs, total_training_steps=total_training_steps,
                             micro_batch_size=micro_batch_size)       # the library's checks, before any widget
    micro = W.SelectionSlider(options=micro_batch_sizes(start.completions_per_step), value=micro_batch_size,
                              description="micro_batch_size", continuous_update=False, style=_STYLE,
                              layout=_LAYOUT)
    controls = {
        "dataset_size": _int("dataset_size", dataset_size, 100, 5000, 100),
        "batch_size": _int("batch_size", batch_size, 1, 64),
        "num_generations": _int("num_generations (G)", num_generations, 2, 16),
        "total_epochs": _int("total_epochs", total_epochs, 1, 20),
        "total_training_steps": _int("total_training_steps", total_training_steps, 100, 5000, 100),
        "micro_batch_size": micro,
    }

    def follow(change):
        # runs before the panel redraws (registered first): keep micro_batch_size a divisor of B × G
        options = micro_batch_sizes(controls["batch_size"].value * controls["num_generations"].value)
        keep = max(d for d in options if d <= micro.value)
        micro.options = options               # a valid schedule at every moment: options first, then value
        micro.value = keep

    controls["batch_size"].observe(follow, names="value")
    controls["num_generations"].observe(follow, names="value")

    def compute(**params):
        schedule = TrainingSchedule(**params)
        return [viz.Table(schedule.summary(), title="TrainingSchedule(...).summary()"),
                viz.schedule_timeline(schedule)]

    return Panel("SchedulePanel", controls, compute)


# --- lesson 02 ----------------------------------------------------------------------------

def _parse_rewards(text):
    try:
        return [float(x) for x in text.replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"rewards: could not read {text!r} as numbers. "
                         "Fix: type numbers separated by commas, e.g. 1, 0, 0, 1.") from None


def advantage_panel(rewards=(1, 0, 0, 1, 0, 0, 0, 1), scale="group"):
    """Edit one group's rewards; shows ``viz.advantage_bars`` and a table of R, R − μ, Â."""
    controls = {
        "rewards": W.Text(value=", ".join(f"{r:g}" for r in rewards), description="rewards",
                          continuous_update=False, style=_STYLE, layout=_LAYOUT),
        "scale": W.Dropdown(options=["group", "none", "rank"], value=scale, description="scale",
                            style=_STYLE, layout=_LAYOUT),
    }

    def compute(rewards, scale):
        values = _parse_rewards(rewards)
        centred = group_advantages([values], scale="none")[0]          # R − μ
        adv = rank_advantages([values])[0] if scale == "rank" else group_advantages([values], scale=scale)[0]
        mu, sigma = (float(x[0]) for x in group_stats([values]))
        rows = [{"completion": f"o{i}", "reward R": r, "R − μ": c, "advantage Â": a}
                for i, (r, c, a) in enumerate(zip(values, centred, adv), start=1)]
        title = f"μ = {mu:.4g}, σ (unbiased) = {sigma:.4g}, scale = {scale!r}"
        if scale == "group":
            title += "; Â = (R − μ)/(σ + eps), eps = 1e-4: a little under (R − μ)/σ"
        return [viz.advantage_bars(values, scale=scale), viz.Table(rows, title=title, digits=5)]

    return Panel("AdvantagePanel", controls, compute)


# --- lesson 03 ----------------------------------------------------------------------------

def dead_group_panel(p=0.5, num_generations=8, batch_size=4):
    """Sliders for p, G and B; shows P(group dead), P(step dead) and ``viz.dead_group_curves``.

    P(step dead) = P(group dead)^B assumes every prompt in the batch has the same p.
    """
    controls = {
        "p": _float("p (success rate)", p, 0.0, 1.0, 0.01),
        "num_generations": _int("num_generations (G)", num_generations, 2, 64),
        "batch_size": _int("batch_size (B)", batch_size, 1, 64),
    }

    def compute(p, num_generations, batch_size):
        dead = dead_group_probability(p, num_generations)
        table = viz.Table({
            "P(group dead) = p^G + (1 − p)^G": dead,
            "expected dead groups per step = B · P": batch_size * dead,
            "P(whole step dead) = P^B (same p for all prompts)":
                dead_group_probability(p, num_generations, batch_size=batch_size),
        })
        curves = tuple(sorted({2, 4, 8, 16, num_generations}))
        return [table, viz.dead_group_curves(curves, p=p, G=num_generations)]

    return Panel("DeadGroupPanel", controls, compute)


# --- lesson 04 ----------------------------------------------------------------------------

CLIP_TABLE_RATIOS = (0.6, 0.8, 1.0, 1.2, 1.28, 1.4)
"""The ratios r listed in ``clip_panel``'s table."""


def clip_panel(epsilon=0.2, epsilon_high=0.2):
    """Sliders for ε and ε_high; shows ``viz.clip_objective`` and the objective at a few r."""
    controls = {
        "epsilon": _float("ε (epsilon)", epsilon, 0.05, 0.5, 0.01),
        "epsilon_high": _float("ε_high (epsilon_high)", epsilon_high, 0.05, 0.5, 0.01),
    }

    def compute(epsilon, epsilon_high):
        pos, pos_clip = viz.clip_curve(CLIP_TABLE_RATIOS, 1.0, epsilon=epsilon, epsilon_high=epsilon_high)
        neg, neg_clip = viz.clip_curve(CLIP_TABLE_RATIOS, -1.0, epsilon=epsilon, epsilon_high=epsilon_high)
        rows = [{"r": r, "objective, Â=+1": a, "clipped, Â=+1": ac, "objective, Â=−1": b, "clipped, Â=−1": bc}
                for r, a, ac, b, bc in zip(CLIP_TABLE_RATIOS, pos, pos_clip, neg, neg_clip)]
        return [viz.clip_objective(epsilon=epsilon, epsilon_high=epsilon_high), viz.Table(rows)]

    return Panel("ClipPanel", controls, compute)


# --- lesson 04b ---------------------------------------------------------------------------

def kl_panel(beta=0.04, steps=150):
    """A β slider on the one-token toy run (``viz.one_token_bandit``), compared with β = 0."""
    controls = {"beta": _float("β (beta)", beta, 0.0, 1.0, 0.01)}

    def compute(beta):
        rows = []
        for b in dict.fromkeys((0.0, beta)):
            p, kl = viz.one_token_bandit(b, steps=steps)
            rows.append({"β": b, f"π_θ(correct) after {steps} steps": p[-1], "KL(π_θ ‖ π_ref)": kl[-1]})
        return [viz.kl_leash(beta, steps=steps), viz.Table(rows)]

    return Panel("KLPanel", controls, compute)


# --- lesson 06 ----------------------------------------------------------------------------

def replay_mix_panel(num_new=128, replay_ratio=0.3, buffer_size=10_000):
    """Sliders for a step's new samples, the replay ratio and the buffer's size; shows
    ``replay.replay_composition`` and ``viz.mix_bar``."""
    from grpo_edu.training.trainers.replay import replay_composition

    controls = {
        "num_new": _int("new samples per step (B·G)", num_new, 8, 512, 8),
        "replay_ratio": _float("replay_ratio", replay_ratio, 0.0, 0.9, 0.05),
        "buffer_size": _int("samples in the buffer", buffer_size, 0, 20_000, 100),
    }

    def compute(num_new, replay_ratio, buffer_size):
        composition = replay_composition(num_new, replay_ratio, buffer_size)
        return [viz.mix_bar(composition), viz.Table(composition, title="one step at these settings")]

    return Panel("ReplayMixPanel", controls, compute)


def forgetting_panel(results, replay_ratio=None):
    """A slider over the replay ratios a lesson ran; redraws ``viz.forgetting_curves`` with that
    ratio in bold and tabulates its start and end accuracies. Nothing is retrained."""
    ratios = sorted(results)
    controls = {"replay_ratio": W.SelectionSlider(options=[(f"{r:.0%}", r) for r in ratios],
                                                 value=ratios[0] if replay_ratio is None else replay_ratio,
                                                 description="replay_ratio", continuous_update=False,
                                                 style=_STYLE, layout=_LAYOUT)}

    def compute(replay_ratio):
        r = results[replay_ratio]
        rows = [{"task": task, "before phase B": acc[0], "after phase B": acc[-1], "change": acc[-1] - acc[0]}
                for task, acc in r["accuracy"].items()]
        return [viz.forgetting_curves(results, highlight=replay_ratio),
                viz.Table(rows, title=f"replay_ratio {replay_ratio:.0%}: held-out accuracy", digits=3)]

    return Panel("ForgettingPanel", controls, compute)


# --- lesson 07 ----------------------------------------------------------------------------

REWARD_GROUP = ("46", "47", "146", "4", "", "x6", "46", "9")
"""Lesson 07's fixed group: G = 8 answers to 12+34= (two right, wrong numbers, junk, an empty answer)."""


def reward_weights_panel(completions=REWARD_GROUP, answer="46", correct=0.6, brevity=0.2, fmt=0.2):
    """Sliders over the weights of correctness, brevity and format; shows each component, the
    weighted reward R and the group advantages Â of one fixed group (``rewards.combine``)."""
    from grpo_edu.training.task.rewards import brevity_reward, combine, correctness, format_reward

    controls = {
        "correct": _float("w · correctness", correct, 0.0, 1.0, 0.05),
        "brevity": _float("w · brevity", brevity, 0.0, 1.0, 0.05),
        "fmt": _float("w · format", fmt, 0.0, 1.0, 0.05),
    }

    def compute(correct, brevity, fmt):
        reward = combine(correctness=(correctness, correct), brevity=(brevity_reward(4), brevity),
                         format=(format_reward(3), fmt))
        G = len(completions)
        parts = reward.components(["12+34="] * G, list(completions), answer=[answer] * G)
        total = reward(["12+34="] * G, list(completions), answer=[answer] * G)
        adv = group_advantages([total])[0].tolist()
        rows = [{"answer": repr(c), **{k: v[i] for k, v in parts.items()}, "R": total[i], "Â": adv[i]}
                for i, c in enumerate(completions)]
        best = completions[max(range(G), key=lambda i: adv[i])]
        return [viz.advantage_bars(total), viz.Table(rows, title=f"largest Â: {best!r}", digits=3)]

    return Panel("RewardWeightsPanel", controls, compute)


def runs_panel(histories, evals, metrics=("reward_mean", "heldout_accuracy", "completion_length"), selected=None):
    """A slider over runs the lesson executed: redraws ``viz.compare_runs`` with that run in bold
    and tabulates its first and last held-out accuracy. Nothing is retrained."""
    labels = list(histories)
    controls = {"run": W.SelectionSlider(options=labels, value=selected or labels[0], description="run",
                                        continuous_update=False, style=_STYLE, layout=_LAYOUT)}

    def compute(run):
        e = evals[run]
        rows = {"held-out accuracy, start": e[0]["accuracy"], "held-out accuracy, end": e[-1]["accuracy"],
                "mean reward, first 10 steps": sum(m["reward_mean"] for m in histories[run][:10]) / 10,
                "mean reward, last 10 steps": sum(m["reward_mean"] for m in histories[run][-10:]) / 10}
        return [viz.compare_runs(histories, metrics, evals=evals, highlight=run,
                                 title=f"{len(labels)} runs side by side, {run!r} in bold"),
                viz.Table(rows, title=run, digits=3)]

    return Panel("RunsPanel", controls, compute)
