"""grpo_edu.common.progress: a notebook bar leaves a final, timing-free text behind (not "0%")."""

from grpo_edu.common import progress


def test_final_text_has_no_timings():
    assert progress.final_text("GRPO", 1500, 1500) == "GRPO: 1500/1500 steps, done"
    assert progress.final_text("GRPO", 700, 1500) == "GRPO: 700/1500 steps, stopped"


def test_a_closed_notebook_bar_rewrites_its_text(monkeypatch):
    shown = []

    class Handle:
        def update(self, obj, raw=False):
            shown.append(("update", obj))

    def fake_display(obj, raw=False, display_id=None):
        shown.append(("display", obj))
        return Handle()

    monkeypatch.setattr(progress, "display", fake_display)
    with progress._NotebookBar(total=3, initial=0, desc="GRPO", unit="step", disable=False, mininterval=0) as bar:
        for _ in range(3):
            bar.update(1)
        assert bar.n == 3
    (kind0, first), (kind1, last) = shown
    assert (kind0, kind1) == ("display", "update")
    assert first["text/plain"] == "GRPO: running"
    assert last["text/plain"] == "GRPO: 3/3 steps, done"
    assert last["application/vnd.jupyter.widget-view+json"] == first["application/vnd.jupyter.widget-view+json"]


def test_outside_a_notebook_it_is_tqdms_plain_bar():
    from tqdm.auto import tqdm

    bar = progress.progress_bar(5, desc="x", disable=True)
    assert isinstance(bar, tqdm)
    bar.close()


def test_a_terminal_bar_needs_no_ipython():
    """A GPU machine's Python may lack IPython (the H200 image does): a terminal run's bars must not import it."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['IPython'] = None\n"
            "from grpo_edu.common.progress import progress_bar\n"
            "with progress_bar(2, desc='x') as bar: bar.update(2)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
