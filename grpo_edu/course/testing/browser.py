"""The lessons in a real browser: a JupyterLab server and headless Chromium, for tests and screenshots.

``tests/test_browser.py`` uses this to open, run and play with every widget lesson the way a
student does, ``tests/test_site.py`` to open every page of the course's website; ``python -m grpo_edu.course.testing.screenshots`` uses it to photograph a live panel for the
README. It needs Debian's ``chromium`` and Playwright for Python (``pip install playwright``;
the system browser is used, nothing is downloaded). :func:`missing` says what is absent.

The server runs on 127.0.0.1 over a *copy* of the lessons, with its own settings, so
JupyterLab's autosave never touches the repository. Every cell is rendered (JupyterLab 4
renders only the visible ones by default), so the page holds the whole lesson.
"""

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

LESSONS = Path(__file__).resolve().parents[3] / "lessons"
TOKEN = "grpo-edu-browser"

KERNEL_IDLE = """() => { const w = window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle' &&
        ![...document.querySelectorAll('.jp-InputPrompt')].some(e => e.textContent.includes('*')); }"""
"""True when the notebook's kernel is idle and no cell waits to run (no [*] prompt)."""


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing():
    """None when the browser tooling is here, else what is missing and how to install it."""
    if chromium_path() is None:
        return "no chromium on PATH (Debian/Ubuntu: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright; the system chromium is used)"
    return None


@contextlib.contextmanager
def jupyterlab(work, lessons=LESSONS):
    """Start JupyterLab over a copy of ``lessons`` in folder ``work``; yield its base URL."""
    work = Path(work)
    shutil.copytree(lessons, work / "lessons")
    settings = work / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(work / "config"), JUPYTER_RUNTIME_DIR=str(work / "runtime"),
               JUPYTER_DATA_DIR=str(work / "data"), JUPYTERLAB_SETTINGS_DIR=str(work / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"),
               MPLBACKEND="module://matplotlib_inline.backend_inline")
    log_path = work / "server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", f"--IdentityProvider.token={TOKEN}",
             f"--ServerApp.root_dir={work / 'lessons'}", "--LabApp.expose_app_in_browser=True",
             "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(f"JupyterLab exited: {log_path.read_text()[-2000:]}") from None
                time.sleep(0.2)
        else:
            raise RuntimeError(f"JupyterLab did not answer within a minute: {log_path.read_text()[-2000:]}")
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


@contextlib.contextmanager
def static_site(folder):
    """Serve ``folder`` (a built site, e.g. ``grpo-edu site``'s) on 127.0.0.1 from a thread; yield its base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def chromium():
    """A headless Chromium (the system's) driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def open_lesson(page, base, lesson):
    """Open ``lesson`` (a stem, e.g. "01_batch_step_epoch"); wait for its kernel.

    The first lesson loads JupyterLab in a fresh, reset workspace. Later ones reuse the loaded
    app (loading it takes seconds): the open notebooks are closed, their kernels shut down and
    their edits dropped (the server's copy of the lessons is a scratch copy), and the lesson is
    opened in their place.
    """
    if page.evaluate("() => !!window.jupyterapp"):
        page.evaluate("""async (path) => { const app = window.jupyterapp;
            for (const w of [...app.shell.widgets('main')]) {
                if (w.context) { w.context.model.dirty = false;
                                 if (w.sessionContext) await w.sessionContext.shutdown(); }
                w.dispose(); }
            await app.commands.execute('docmanager:open', {path}); }""", f"{lesson}.ipynb")
    else:
        # a workspace of its own, reset: JupyterLab would otherwise reopen the lessons opened before
        page.goto(f"{base}/lab/workspaces/grpo-edu/tree/{lesson}.ipynb?reset&token={TOKEN}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                           "window.jupyterapp.shell.currentWidget.context && "
                           "window.jupyterapp.shell.currentWidget.context.isReady", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000, polling=250)


def run_to(page, source, *, run_all):
    """Run every cell (``run_all``), or every cell up to and including the one whose source is
    ``source``; return that cell's index."""
    index = page.evaluate("""(src) => { const nb = window.jupyterapp.shell.currentWidget.content;
        const i = nb.widgets.findIndex(c => c.model.sharedModel.getSource().trim() === src);
        if (i >= 0) nb.activeCellIndex = i; return i; }""", source)
    if index < 0:
        raise ValueError(f"source: no cell is exactly {source!r}")
    for command in ["notebook:run-all-cells"] if run_all else ["notebook:run-all-above", "notebook:run-cell"]:
        page.evaluate(f"() => window.jupyterapp.commands.execute('{command}')")
        page.wait_for_timeout(300)
        page.wait_for_function(KERNEL_IDLE, timeout=170_000, polling=500)
    return index


def notebook(page):
    """The open notebook (the current widget's), as a locator."""
    return page.locator(f"#{page.evaluate('() => window.jupyterapp.shell.currentWidget.content.node.id')}")


def cell(page, index):
    """The notebook cell at ``index``, scrolled into view."""
    found = notebook(page).locator(".jp-Cell").nth(index)
    found.scroll_into_view_if_needed()
    return found


def table_cells(cell_locator):
    """The first table in a cell's outputs, as rows of cell texts (what the student reads)."""
    return cell_locator.locator("table").first.evaluate(
        "t => [...t.querySelectorAll('tbody tr')].map(r => [...r.querySelectorAll('td')].map(td => td.textContent))")


def wait_for_table(page, index, rows, timeout=15_000):
    """Wait until the first table of cell ``index`` shows ``rows``."""
    page.wait_for_function("([i, rows]) => { const t = window.jupyterapp.shell.currentWidget.content.node"
                           ".querySelectorAll('.jp-Cell')[i]"
                           ".querySelector('table'); return !!t && JSON.stringify([...t.querySelectorAll("
                           "'tbody tr')].map(r => [...r.querySelectorAll('td')].map(td => td.textContent)))"
                           " === JSON.stringify(rows); }", arg=[index, rows], timeout=timeout)


def move(page, cell_locator, label, how, arg):
    """Move the control labelled ``label`` as a person would.

    ``how``: "arrow" (focus the slider's handle, press → for arg > 0 or ← for arg < 0),
    "type" (type ``arg`` into the slider's readout, then Enter), "text" (type into a text box,
    then Enter) or "select" (choose ``arg`` in a dropdown).
    """
    exact = re.compile(f"^{re.escape(label)}$")
    row = cell_locator.locator(".widget-label").filter(has_text=exact).first.locator("xpath=..")
    if how == "arrow":
        row.locator(".noUi-handle").first.focus()
        page.keyboard.press("ArrowRight" if arg > 0 else "ArrowLeft")
    elif how == "type":
        row.locator(".widget-readout").first.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(str(arg))
        page.keyboard.press("Enter")
    elif how == "text":
        box = row.locator("input").first
        box.fill(arg)
        box.press("Enter")
    elif how == "select":
        row.locator("select").first.select_option(arg)
    else:
        raise ValueError(f"how: unknown {how!r}. Fix: use 'arrow', 'type', 'text' or 'select'.")
