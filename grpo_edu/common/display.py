"""What a lesson shows beside its figures: the course's colours, tables, notes and the library's own code.

These are the plain display pieces every layer may use: ``diagnose`` draws its evidence in the
course's colours, ``memory`` prints a ``Table``, the lessons print ``show_source``. The figures
themselves live in ``grpo_edu.course.aids.viz``. Nothing here imports matplotlib.
"""

import html

import numpy as np

# Okabe–Ito colours: readable for colour-blind readers and in greyscale
BLUE, ORANGE, GREEN, RED, GREY = "#0072B2", "#E69F00", "#009E73", "#D55E00", "#999999"


def _fmt(value, digits):
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (float, np.floating)):
        text = format(float(value), f".{digits}g")
        return "0" if text in ("-0", "0", "-0.0") else text
    if value is None:
        return "—"
    return str(value)


class Table:
    """A small table: HTML in a notebook, aligned text everywhere else.

    ``rows`` is a list of dicts (one per row) or one dict (shown as quantity | value).
    Floats are shown with ``digits`` significant digits, so the output is the same on
    every run and every machine.
    """

    def __init__(self, rows, *, title=None, digits=4):
        if isinstance(rows, dict):
            rows = [{"quantity": k, "value": v} for k, v in rows.items()]
        self.rows = [dict(r) for r in rows]
        self.columns = list(dict.fromkeys(k for r in self.rows for k in r))
        self.title = title
        self.digits = digits

    def _cells(self):
        return [[_fmt(r.get(c), self.digits) for c in self.columns] for r in self.rows]

    def __repr__(self):
        cells = self._cells()
        widths = [max(len(c), *(len(row[j]) for row in cells)) for j, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths)).rstrip(),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
        return "\n".join(([self.title] if self.title else []) + lines)

    def _repr_html_(self):
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                       for row in self._cells())
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Note:
    """A short message (e.g. the library's error) shown in place of a table or figure."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text

    def _repr_html_(self):
        return (f'<div style="border-left:4px solid {RED};padding:4px 8px">'
                f"{html.escape(self.text)}</div>")


def show_source(obj, *, start=None, stop=None):
    """Print the library's own code for ``obj``, lines numbered from 1, so a lesson shows
    exactly what runs (never a pasted copy). ``start``/``stop``: print only from the first
    line containing ``start`` up to (not including) the first later line containing ``stop``.
    """
    import inspect

    lines = inspect.getsource(obj).splitlines()
    first = next((i for i, l in enumerate(lines) if start in l), 0) if start else 0
    last = next((i for i, l in enumerate(lines) if i > first and stop in l), len(lines)) if stop else len(lines)
    path = inspect.getsourcefile(obj).replace("\\", "/")
    where = path[path.rindex("grpo_edu/"):] if "grpo_edu/" in path else path
    print(f"# {where} · {obj.__qualname__}")
    for number, line in enumerate(lines[first:last], start=first + 1):
        print(f"{number:3d} | {line}")


def moving_average(values, window):
    """Trailing mean of the last ``window`` values at each point (fewer at the start)."""
    values = np.asarray(values, dtype=float)
    if window <= 1 or len(values) == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return (sums[1:] - sums[np.arange(1, len(values) + 1) - counts]) / counts


def axes_or_new(ax, figsize):
    """(figure, axes): the caller's axes, or a new one-panel Figure (matplotlib loads only here)."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()
