"""Diagnose a GRPO run from its logged metrics: what went wrong, the numbers that show it, what to change.

``diagnose(history)`` reads a run's per-step metrics and returns a list of :class:`Finding`,
the most severe first; a healthy run gives an empty list. Each finding names the symptom, the
numbers that triggered it, likely causes, fixes (as ``GRPOConfig`` fields) and the lesson
that explains it.

``history`` may be any form ``grpo_edu.beyond.run_log.load_run`` reads: the trainer's
``history``, the JSONL of ``grpo-edu train --metrics-out`` (pass held-out evaluations as
``evals``), a checkpoint's ``trainer_state.json`` (its evaluations and config are used too),
or TRL's ``trainer_state.json`` (its names translated through ``run_log.TRL_NAMES``).

The rules themselves, one per symptom with its threshold, are in ``grpo_edu.beyond.symptoms``.

The loss is not checked: it is no measure of progress. With μ = 1 and loss_type "grpo" its
policy term is 0 on every step (the advantages of a group sum to 0; lesson 03 §9), so the
logged loss is β times the KL, which the KL rule reads.
"""

import math

from grpo_edu.beyond.run_log import checked_config, checked_evals, load_run
from grpo_edu.beyond.symptom_log import Log
from grpo_edu.beyond.symptoms import RULES


def _prepare(history, evals, config):
    rows, file_evals, file_config = load_run(history)
    evals = checked_evals(evals) if evals is not None else (checked_evals(file_evals) if file_evals else None)
    config = checked_config(config) if config is not None else checked_config(file_config)
    return Log(rows, evals, config)


def diagnose(history, evals=None, *, config=None):
    """Findings about a run, the most severe first; [] for a healthy run.

    ``history``: see the module docstring (a list of metrics dicts, our ``--metrics-out``
    JSONL, a checkpoint's or TRL's ``trainer_state.json``). ``evals``: held-out evaluations
    ``[{"step", "accuracy"}]`` (``trainer.evals``) or a file of them. ``config``: the run's
    GRPOConfig (or dict), which turns fixes into concrete values and enables the rules that
    need it (truncation, clipping with μ = 1). A checkpoint file supplies both.
    """
    log = _prepare(history, evals, config)
    findings = []
    for rule, _, needs in RULES:
        if all(log.has(key) for key in needs):         # a metric not logged: the rule is skipped (see coverage)
            finding = rule(log)
            if finding is not None:
                findings.append(finding)
    return sorted(findings, key=lambda f: -f.severity)   # stable: equal severities keep the RULES order


def coverage(history, evals=None, *, config=None):
    """What ``diagnose`` checked on this run, and what it could not (a metric not logged), as lines of text."""
    log = _prepare(history, evals, config)
    lines = []
    for _, what, needs in RULES:
        missing = [k for k in needs if not log.has(k)]
        lines.append(f"not checked: {what} (no {', '.join(missing)} logged)" if missing else f"checked: {what}")
    if not log.evals:
        lines.append("held-out accuracy: none given (pass evals); the per-step checker accuracy was used if logged")
    if not log.config:
        lines.append("no config given: truncation by mean length and the μ = 1 clip check were skipped")
    return lines


def format_findings(findings):
    """Readable text: each finding's symptom, evidence, causes, fixes and lesson, most severe first."""
    if not findings:
        return "no problems found"
    lines = [f"{len(findings)} finding{'s' if len(findings) > 1 else ''}, most severe first"]
    for i, f in enumerate(findings, start=1):
        lines += ["", f"{i}. {f.name} (severity {f.severity:g}) · lesson {f.lesson}", f"   {f.symptom}",
                  f"   evidence: {f.evidence['summary']}", "   likely causes:"]
        lines += [f"     - {cause}" for cause in f.causes]
        lines.append("   try:")
        lines += [f"     - {field}: {change} — {why}" for field, change, why in f.fixes]
    return "\n".join(lines)


def plot_evidence(history, findings):
    """A Figure with one panel per metric behind the findings (at most 6): the metric over the
    run (faint: per step; bold: moving average), the points that triggered the rule in red, and
    the rule's threshold dashed."""
    from matplotlib.figure import Figure

    from grpo_edu.common.display import BLUE, GREY, RED, moving_average

    rows = load_run(history)[0]
    panels = {}
    for f in findings:
        panels.setdefault(f.evidence["metric"], f)
    panels = list(panels.items())[:6] or [("reward_mean", None)]
    fig = Figure(figsize=(3.6 * min(3, len(panels)), 2.8 * math.ceil(len(panels) / 3)), layout="constrained")
    axes = fig.subplots(math.ceil(len(panels) / 3), min(3, len(panels)), squeeze=False).ravel()
    for ax, (metric, finding) in zip(axes, panels):
        points = Log.points(rows, metric)
        if metric == "heldout_accuracy" and finding:
            points = list(zip(finding.evidence["steps"], finding.evidence["values"]))
        if points:
            steps, values = zip(*points)
            ax.plot(steps, values, color=BLUE, lw=0.6, alpha=0.35)
            ax.plot(steps, moving_average(values, max(3, len(rows) // 20)), color=BLUE, lw=1.8)
        if finding:
            ax.plot(finding.evidence["steps"], finding.evidence["values"], "o", color=RED, ms=3,
                    label="evidence")
            if "peak" in finding.evidence:
                peak = finding.evidence["peak"]
                ax.plot([peak["step"]], [peak["value"]], "^", color=RED, ms=7, label="peak (moving average)")
            if finding.evidence.get("threshold") is not None:
                ax.axhline(finding.evidence["threshold"], color=GREY, ls="--", lw=1.2, label="rule's threshold")
            ax.set_title(finding.name, fontsize=9)
            ax.legend(fontsize=7)
        else:
            ax.set_title("no problems found", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel(metric, fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return fig
