"""Progress bars that read right after the run too: in a saved notebook, on GitHub, in nbviewer.

In a terminal this is tqdm's ordinary bar. In Jupyter it is tqdm's widget bar, with one
change: a widget bar's plain-text stand-in (what a view without live widgets shows) is
written when the bar *starts*, so a finished lesson read later said ``GRPO: 0%| | 0/1500``
beside the finished curves. Here the bar is displayed with a display id and, when it
closes, the display is replaced by the same widget with a final text, "GRPO: 1500/1500
steps, done". That text holds no timings, so a notebook's stored output is the same on
every run (nbval compares it).
"""


def display(obj, **kwargs):
    """IPython's ``display``, imported at the first notebook bar: a terminal, or a GPU machine, may have no IPython."""
    from IPython.display import display as ipython_display

    return ipython_display(obj, **kwargs)


def progress_bar(total, *, desc, initial=0, disable=False, mininterval=0.5, unit="step"):
    """A tqdm bar over ``total`` steps (a context manager; call ``update``, ``set_postfix``).

    ``mininterval``: seconds between redraws. In a notebook each redraw is a message to the
    front end, and a cell must not send more than ZMQ's default queue of 1000 (nbval then
    loses the cell's end), so long runs redraw at most every 0.5–1 s.
    """
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm as notebook_tqdm

    kwargs = dict(total=total, initial=initial, desc=desc, unit=unit, disable=disable, mininterval=mininterval)
    if issubclass(tqdm, notebook_tqdm) and not disable:          # tqdm.auto chose the notebook bar
        return _NotebookBar(**kwargs)
    return tqdm(dynamic_ncols=True, **kwargs)


def final_text(desc, n, total, unit="step"):
    """The plain text a closed bar leaves behind: "GRPO: 1500/1500 steps, done"."""
    state = "done" if total is not None and n >= total else "stopped"
    return f"{desc}: {n}/{total} {unit}s, {state}"


class _NotebookBar:
    """tqdm's notebook bar, displayed by us so that closing it can rewrite its text stand-in."""

    def __init__(self, **kwargs):
        from tqdm.notebook import tqdm as notebook_tqdm

        self._bar = notebook_tqdm(display=False, **kwargs)
        self._desc, self._unit = kwargs["desc"], kwargs["unit"]
        self._handle = display(self._bundle(f"{self._desc}: running"), raw=True, display_id=True)

    def _bundle(self, text):
        bundle = self._bar.container._repr_mimebundle_()    # the live widget
        bundle["text/plain"] = text
        return bundle

    def update(self, n=1):
        return self._bar.update(n)

    def set_postfix(self, *args, **kwargs):
        return self._bar.set_postfix(*args, **kwargs)

    def close(self):
        if getattr(self, "_closed", False):
            return
        self._closed = True
        self._bar.close()
        self._handle.update(self._bundle(final_text(self._desc, self._bar.n, self._bar.total, self._unit)), raw=True)

    @property
    def n(self):
        return self._bar.n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
