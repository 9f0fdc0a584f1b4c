"""The README's pictures, made from the real lessons and the real main job.

``python -m grpo_edu.course.testing.screenshots`` writes into ``assets/figures/``:

* ``lesson01_panel.png``: lesson 01's schedule panel live in JupyterLab (headless Chromium,
  through :mod:`grpo_edu.course.testing.browser`, the tooling of the browser test), after a student's two moves:
  batch_size 4 → 5 with the arrow key, and 1500 typed into dataset_size's readout.
* ``site_lesson.png``: a lesson page of the course's website (``grpo-edu site``) in Chromium: lesson 04's
  §3 down to its table, with typeset math, a figure, a table and Chinese text (docs/site.md).
* ``main_job_curves.png``: ``viz.training_curves`` of the main job, ``grpo-edu train``'s
  defaults (1500 steps, seed 0), trained here; about 2 minutes on a 2-core CPU.

``--only panel``, ``--only curves`` or ``--only site`` makes one of them.
"""

import argparse
import sys
import tempfile
from pathlib import Path

from grpo_edu.training.model.models import ASSETS

FIGURES = ASSETS / "figures"


def panel_screenshot(out=FIGURES / "lesson01_panel.png"):
    from grpo_edu.course.testing import browser
    from grpo_edu.course.aids import viz, widgets

    problem = browser.missing()
    if problem:
        raise SystemExit(f"cannot take the screenshot: {problem}")
    with tempfile.TemporaryDirectory() as work, browser.jupyterlab(work) as base, browser.chromium() as chrome:
        page = chrome.new_page(viewport={"width": 1100, "height": 1400}, device_scale_factor=1)
        browser.open_lesson(page, base, "01_batch_step_epoch")
        index = browser.run_to(page, "widgets.schedule_panel()", run_all=True)
        cell = browser.cell(page, index)
        browser.move(page, cell, "batch_size", "arrow", +1)
        browser.move(page, cell, "dataset_size", "type", 1500)
        panel = widgets.schedule_panel()                  # the same two moves in Python: the library's table
        panel.controls["batch_size"].value = 5
        panel.controls["dataset_size"].value = 1500
        browser.wait_for_table(page, index, next(o for o in panel.outputs if isinstance(o, viz.Table))._cells())
        page.wait_for_timeout(1000)                       # let the figure redraw too
        out.parent.mkdir(parents=True, exist_ok=True)
        cell.locator(".jp-Cell-outputWrapper").screenshot(path=str(out))
    return out


SECTION_TO_TABLE = """(id) => {
    const section = document.getElementById(id), table = section && section.querySelector('table');
    if (!table) return null;
    const top = section.getBoundingClientRect().top + window.scrollY;
    const box = section.getBoundingClientRect(), end = table.getBoundingClientRect().bottom + window.scrollY;
    return {x: box.left - 8, y: top - 8, width: box.width + 16, height: end - top + 24};
}"""
"""A page's section from its heading down to its first table."""


def site_screenshot(out=FIGURES / "site_lesson.png", lesson="04_clipped_loss", section="the-ratio-and-the-clip"):
    """A lesson page of ``grpo-edu site`` in Chromium, one section from its heading to its first table: in lesson 04's
    §3, the formula, a term in Chinese, a figure and a table. Chinese needs a CJK font on this machine
    (Debian: apt-get install fonts-wqy-microhei)."""
    from grpo_edu.course.testing import browser
    from grpo_edu.course.classroom import site

    problem = browser.missing()
    if problem:
        raise SystemExit(f"cannot take the screenshot: {problem}")
    with tempfile.TemporaryDirectory() as work:
        site.build(Path(work) / "html")
        with browser.static_site(Path(work) / "html") as base, browser.chromium() as chrome:
            page = chrome.new_page(viewport={"width": 1500, "height": 900}, device_scale_factor=1)
            page.goto(f"{base}/lessons/{lesson}.html", wait_until="load")
            page.evaluate("async () => { if (window.MathJax) await MathJax.startup.promise; }")
            clip = page.evaluate(SECTION_TO_TABLE, section)
            if clip is None:
                raise SystemExit(f"section: {lesson}'s page has no section {section!r} with a table")
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), clip=clip, full_page=True)
    return out


def main_job_curves(out=FIGURES / "main_job_curves.png"):
    from grpo_edu.course.aids import viz
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    trainer = GRPOTrainer(GRPOConfig())                   # exactly grpo-edu train's defaults
    trainer.train(progress=True)
    before, after = trainer.evals[0]["accuracy"], trainer.evals[-1]["accuracy"]
    fig = viz.training_curves(trainer.history, trainer.evals, figsize=(10, 5.2),
                              title=f"grpo-edu train (defaults, seed 0): held-out accuracy {before:.1%} → {after:.1%}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80, bbox_inches="tight")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.testing.screenshots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("panel", "curves", "site"))
    args = parser.parse_args(argv)
    if args.only in (None, "panel"):
        print("wrote", panel_screenshot())
    if args.only in (None, "curves"):
        print("wrote", main_job_curves())
    if args.only in (None, "site"):
        print("wrote", site_screenshot())
    return 0


if __name__ == "__main__":
    sys.exit(main())
