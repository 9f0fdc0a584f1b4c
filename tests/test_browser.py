"""The lessons in a real browser, the way a student uses them: JupyterLab + headless Chromium.

For each lesson with a widget panel, Chromium (driven by Playwright, through grpo_edu.course.testing.browser):

1. opens the lesson *unrun* and checks what a student sees first: no "0%" progress bar, the
   panel's hint to run the cell, and a notebook JupyterLab does not mark modified;
2. runs it (every cell; the training lessons 06 and 07 only up to their first panel, which
   comes before any training: their run-dependent panels are tested in test_viz_widgets);
3. moves each control the way a person does (arrow keys on a slider, a typed slider readout,
   typing into a text box, choosing from a dropdown) and waits until the panel's table shows
   what the library computes for the new setting;
4. finds no error output in the notebook and no error in the browser console.

Needs Debian's ``chromium`` and Playwright for Python (a dev extra; no ``playwright install``:
the system browser is used). Without them the test skips and says how to get them. ``.ci/run``
installs chromium, so CI runs it.
"""

import pytest

from grpo_edu.course.testing import browser

# lesson → (the panel's call, exactly as its cell reads; moves: (control label, how, argument); run every cell?)
PANELS = {
    "01_batch_step_epoch": ("widgets.schedule_panel()",
                            [("batch_size", "arrow", +1), ("micro_batch_size", "arrow", +1),
                             ("num_generations (G)", "arrow", -1), ("dataset_size", "type", 1500)], True),
    "02_group_advantage": ("widgets.advantage_panel()",
                           [("rewards", "text", "1, 0, 0, 0"), ("scale", "select", "rank")], True),
    "03_zero_sigma": ("widgets.dead_group_panel(p=0.9, num_generations=4, batch_size=4)",
                      [("num_generations (G)", "arrow", +1), ("p (success rate)", "arrow", -1)], True),
    "04_clipped_loss": ("widgets.clip_panel(epsilon=0.2, epsilon_high=0.28)",
                        [("ε (epsilon)", "arrow", +1), ("ε_high (epsilon_high)", "type", 0.35)], True),
    "04b_kl_and_loss_types": ("widgets.kl_panel(beta=0.3)", [("β (beta)", "arrow", -1)], True),
    "06_data_replay": ("widgets.replay_mix_panel(num_new=128, replay_ratio=0.3, buffer_size=10_000)",
                       [("replay_ratio", "arrow", +1), ("samples in the buffer", "arrow", -1)], False),
    "07_reward_design": ("widgets.reward_weights_panel(correct=0.6, brevity=0.2, fmt=0.2)",
                         [("w · brevity", "arrow", +1), ("w · correctness", "type", 0.3)], False),
}

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=f"browser test skipped: {browser.missing()}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab, one browser page: each lesson opens in the loaded app, as a student's next tab."""
    with browser.jupyterlab(tmp_path_factory.mktemp("lab")) as base, browser.chromium() as chrome:
        page = chrome.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        yield page, base, errors
        page.close()


def _library_table(panel):
    from grpo_edu.course.aids import viz

    return next(out for out in panel.outputs if isinstance(out, viz.Table))._cells()


def _expected_value(control, how, arg):
    """The value the Python control must take to match the browser's move."""
    import ipywidgets as W

    if how != "arrow":
        return arg
    if isinstance(control, W.SelectionSlider):
        options = list(control.options)
        return options[options.index(control.value) + arg]
    return round(control.value + arg * control.step, 10)


@pytest.mark.parametrize("lesson", list(PANELS))
def test_a_student_opens_runs_and_plays_with_the_panel(lab, lesson):
    from grpo_edu.course.aids import widgets  # noqa: F401 (the panel calls below name it)

    page, base, console_errors = lab
    call, moves, run_all = PANELS[lesson]
    console_errors.clear()
    # 1. unrun: what a student sees first
    browser.open_lesson(page, base, lesson)
    text = browser.notebook(page).inner_text()
    assert "0%|" not in text, "a progress bar reads 0% in a finished lesson"
    assert "Sliders appear here when this cell runs" in text or page.locator(".noUi-handle").count() > 0
    page.wait_for_timeout(500)                       # JupyterLab marks a changed model at once
    assert page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty") is False, \
        "JupyterLab marked the lesson modified just by opening it"
    # 2. run
    index = browser.run_to(page, call, run_all=run_all)
    cell = browser.cell(page, index)
    panel = eval(call)                              # the same panel in Python: the library's values
    assert browser.table_cells(cell) == _library_table(panel)
    # 3. move each control; the table must become the library's table for the new setting
    for label, how, arg in moves:
        control = next(c for c in panel.controls.values() if c.description == label)
        value = _expected_value(control, how, arg)
        browser.move(page, cell, label, how, arg)
        control.value = value
        browser.wait_for_table(page, index, _library_table(panel))
    # 4. no error anywhere
    nb = browser.notebook(page)
    stderr = nb.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert not any("Error" in t or "Traceback" in t for t in stderr.all_inner_texts())
    assert nb.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0
    assert nb.locator(".widget-error").count() == 0
    assert not any("Error displaying widget:" in t for t in nb.locator(".jp-OutputArea").all_inner_texts())
    assert console_errors == []
