"""The lessons in a real browser, the way a student uses them: JupyterLab + headless Chromium.

A JupyterLab server runs on 127.0.0.1 over a copy of ``lessons/`` (so autosave cannot touch the
repository). For each lesson with a widget panel, Chromium (driven by Playwright):

1. opens the lesson *unrun* and checks what a student sees first: no "0%" progress bar, the
   panel's hint to run the cell, and a notebook JupyterLab does not mark modified;
2. runs it (every cell; the training lessons 06 and 07 only up to their first panel, which
   comes before any training: their run-dependent panels are tested in test_viz_widgets);
3. moves each control the way a person does (arrow keys on a slider, a typed slider readout,
   typing into a text box, choosing from a dropdown) and waits until the panel's table shows
   what the library computes for the new setting;
4. finds no error output in the notebook and no error in the browser console.

Needs Debian's ``chromium`` and Playwright for Python (``pip install playwright``; no
``playwright install``: the system browser is used). Without them the test skips and says how
to get them. ``.ci/run`` installs both, so CI runs it.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TOKEN = "grpo-edu-browser-test"

# lesson → (the panel's call, as written in its cell; moves: (control label, how, argument); run all cells?)
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


def _missing():
    if CHROMIUM is None:
        return "no chromium on PATH (Debian/Ubuntu: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright; the system chromium is used)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=f"browser test skipped: {_missing()}")


# --- the server and the browser -----------------------------------------------------------------
@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    work = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "lessons", work / "lessons")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = work / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # render every cell (JupyterLab 4 renders only the visible ones by default), so the page holds the whole lesson
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(work / "config"), JUPYTER_RUNTIME_DIR=str(work / "runtime"),
               JUPYTER_DATA_DIR=str(work / "data"), JUPYTERLAB_SETTINGS_DIR=str(work / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"), MPLBACKEND="module://matplotlib_inline.backend_inline")
    log = open(work / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={work / 'lessons'}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate"], stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=1)
            break
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited: {(work / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield browser, base, work
        browser.close()
    server.terminate()
    server.wait(timeout=20)


KERNEL_IDLE = """() => { const w = window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle' &&
        ![...document.querySelectorAll('.jp-InputPrompt')].some(e => e.textContent.includes('*')); }"""


def _open(page, base, lesson):
    # a workspace of its own, reset: JupyterLab would otherwise reopen the lessons opened before
    page.goto(f"{base}/lab/workspaces/{lesson}/tree/{lesson}.ipynb?reset&token={TOKEN}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                           "window.jupyterapp.shell.currentWidget.context && "
                           "window.jupyterapp.shell.currentWidget.context.isReady", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000, polling=250)


def _run(page, panel_call, run_all):
    """Run every cell, or every cell up to and including the panel's."""
    index = page.evaluate("""(call) => { const nb = window.jupyterapp.shell.currentWidget.content;
        const i = nb.widgets.findIndex(c => c.model.sharedModel.getSource().trim() === call);
        nb.activeCellIndex = i; return i; }""", panel_call)
    assert index >= 0, f"no cell is exactly {panel_call!r}"
    commands = ["notebook:run-all-cells"] if run_all else ["notebook:run-all-above", "notebook:run-cell"]
    for command in commands:
        page.evaluate(f"() => window.jupyterapp.commands.execute('{command}')")
        page.wait_for_timeout(300)
        page.wait_for_function(KERNEL_IDLE, timeout=170_000, polling=500)
    return index


def _cell(page, index):
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    return cell


def _browser_table(cell):
    """The panel's first table, as rows of cell texts, read from the page."""
    return cell.locator("table").first.evaluate(
        "t => [...t.querySelectorAll('tbody tr')].map(r => [...r.querySelectorAll('td')].map(td => td.textContent))")


def _library_table(panel):
    from grpo_edu import viz

    table = next(out for out in panel.outputs if isinstance(out, viz.Table))
    return table._cells()


def _move(page, cell, label, how, arg, control):
    """Move one control in the browser as a person would; return the value it should now hold."""
    import ipywidgets as W

    exact = re.compile(f"^{re.escape(label)}$")
    row = cell.locator(".widget-label").filter(has_text=exact).first.locator("xpath=..")   # the control's own box
    if how == "arrow":
        row.locator(".noUi-handle").first.focus()
        page.keyboard.press("ArrowRight" if arg > 0 else "ArrowLeft")
        if isinstance(control, W.SelectionSlider):
            options = list(control.options)
            return options[options.index(control.value) + arg]
        return round(control.value + arg * control.step, 10)
    if how == "type":                                  # the slider's readout is editable: type a number
        readout = row.locator(".widget-readout").first
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(str(arg))
        page.keyboard.press("Enter")
        return arg
    if how == "text":
        box = row.locator("input").first
        box.fill(arg)
        box.press("Enter")
        return arg
    if how == "select":
        row.locator("select").first.select_option(arg)
        return arg
    raise ValueError(how)


@pytest.mark.parametrize("lesson", list(PANELS))
def test_a_student_opens_runs_and_plays_with_the_panel(lab, lesson):
    from grpo_edu import widgets  # noqa: F401 (the panel calls below name it)

    browser, base, work = lab
    call, moves, run_all = PANELS[lesson]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    console_errors = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(str(e)))
    try:
        # 1. unrun: what a student sees first
        _open(page, base, lesson)
        text = page.locator(".jp-Notebook").inner_text()
        assert "0%|" not in text, "a progress bar reads 0% in a finished lesson"
        assert "Sliders appear here when this cell runs" in text or page.locator(".noUi-handle").count() > 0
        page.wait_for_timeout(1500)
        assert page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty") is False, \
            "JupyterLab marked the lesson modified just by opening it"
        # 2. run
        index = _run(page, call, run_all)
        cell = _cell(page, index)
        panel = eval(call)                              # the same panel in Python: the library's values
        assert _browser_table(cell) == _library_table(panel)
        # 3. move each control; the table must become the library's table for the new setting
        for label, how, arg in moves:
            name, control = next((n, c) for n, c in panel.controls.items() if c.description == label)
            control.value = _move(page, cell, label, how, arg, control)
            expected = _library_table(panel)
            page.wait_for_function("([i, rows]) => { const t = document.querySelectorAll('.jp-Notebook .jp-Cell')[i]"
                                   ".querySelector('table'); return t && JSON.stringify([...t.querySelectorAll("
                                   "'tbody tr')].map(r => [...r.querySelectorAll('td')].map(td => td.textContent)))"
                                   " === JSON.stringify(rows); }", arg=[index, expected], timeout=15_000)
            assert _browser_table(cell) == expected, (label, how, arg)
        # 4. no error anywhere
        stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        assert not any("Error" in t or "Traceback" in t for t in stderr.all_inner_texts())
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0
        assert page.locator(".widget-error").count() == 0
        assert not any("Error displaying widget:" in t for t in page.locator(".jp-OutputArea").all_inner_texts())
        assert console_errors == []
    finally:
        page.evaluate("() => window.jupyterapp && window.jupyterapp.commands.execute('kernelmenu:shutdown')")
        page.close()
