"""What ``diagnose``'s rules read and write: a run's :class:`Log` (its history cut into a start and an end
window), the :class:`Finding` a rule returns, the evidence a finding carries, and the fixes the rules suggest
(a config field, its change, and why), worded from the run's own settings.

The rules themselves, one per symptom, are in ``grpo_edu.beyond.symptoms``.
"""

import math
from dataclasses import dataclass

from grpo_edu.common import _checks


@dataclass(frozen=True)
class Finding:
    """One problem in a run. ``fixes`` are (config field, change, why); ``severity`` ranks findings."""

    name: str
    symptom: str
    evidence: dict
    causes: list
    fixes: list
    lesson: str
    severity: float


class Log:
    """A run's history cut into the start and end windows, with small helpers for the rules."""

    def __init__(self, rows, evals, config):
        n = len(rows)
        self.rows, self.evals, self.config, self.n = rows, evals, config, n
        self.head = rows[:max(3, math.ceil(n / 10))]
        self.tail = rows[n - max(3, math.ceil(n / 4)):]

    @staticmethod
    def points(rows, key):
        """[(step, value)] of the rows where ``key`` was measured."""
        return [(r["step"], float(r[key])) for r in rows if r.get(key) is not None]

    def mean(self, rows, key):
        values = [v for _, v in self.points(rows, key)]
        return sum(values) / len(values) if values else None

    def has(self, key):
        return any(r.get(key) is not None for r in self.rows)

    def span(self, rows):
        return f"steps {rows[0]['step']}–{rows[-1]['step']}"

    def change(self, field, factor, fallback):
        """A fix's suggested value: "2e-3 → 2e-4" when the config is known, else ``fallback``."""
        value = self.config.get(field)
        if not _checks.is_finite_number(value):
            return fallback
        new = max(1, round(value * factor)) if isinstance(value, int) else value * factor
        return f"{number(value)} → {number(new)}"


def number(x):
    """3e-4 as "3e-4", 0.1 as "0.1", 16 as "16"."""
    if isinstance(x, int):
        return str(x)
    if x == 0 or abs(x) >= 1e-2:
        return f"{x:.2g}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def evidence(metric, points, summary, threshold=None, **extra):
    return {"metric": metric, "steps": [s for s, _ in points], "values": [v for _, v in points],
            "threshold": threshold, "summary": summary, **extra}


def moving_average(values, window):
    """Trailing mean of the last ``window`` values at each point (fewer at the start)."""
    return [sum(values[max(0, i + 1 - window):i + 1]) / len(values[max(0, i + 1 - window):i + 1])
            for i in range(len(values))]


def low_temperature(log):
    tau = log.config.get("temperature")
    return _checks.is_finite_number(tau) and tau < 0.7


def raise_temperature(log, why):
    """Back to 1 from a low τ (lesson 09: τ 0.3 → 0.7 learns, G 8 → 16 does not); else a little higher."""
    if low_temperature(log):
        return ("temperature", f"{number(log.config['temperature'])} → 1.0", why)
    return ("temperature", log.change("temperature", 1.2, "raise it a little, e.g. 1.0 → 1.2"), why)


def lower_lr(log, factor, why):
    return ("learning_rate", log.change("learning_rate", 1 / factor, f"divide by {factor}"), why)


def raise_beta(log):
    beta = log.config.get("beta")
    change = ("0 → 0.04 (DeepSeekMath's value)" if beta == 0
              else log.change("beta", 2.5, "raise it, e.g. 0.04 → 0.1"))
    return ("beta", change, "a tighter leash: the KL penalty pulls the policy back toward π_ref")
