"""The course as a website that works offline: ``grpo-edu site [--out DIR]``.

Sphinx with MyST-NB and sphinx-book-theme builds one page per lesson (the notebooks *as stored*,
with their outputs: nothing is executed, nbval already proves them), one per ``docs/`` page, and a
front page from ``README.md``. Every script, font and image is a file of the site, so it works in
a classroom with no internet:

* math: MyST's ``dollarmath``/``amsmath`` read ``$…$``; MathJax is served from ``_static``
  (``sphinx-mathjax-offline``), not from a CDN;
* widgets: MyST-NB would load require.js and the ipywidgets manager from CDNs; ``nb_ipywidgets_js = {}``
  stops that, and each panel's place shows a note saying how to run the lesson to move its sliders;
* search in English and Chinese: Sphinx's ``zh`` search splits Chinese with jieba, but its
  language file names a ``ChineseStemmer`` that does not exist in the browser (its stemmer is the
  English one): :func:`_chinese_search` registers the same language with the stemmer's real name;
* Chinese on a machine without a CJK font: the site carries Noto Sans SC cut down to the course's characters
  (``site_font``), declared for Chinese alone;
* the theme starts in light mode (without a default it logs "invalid theme mode" on a new browser).

The build is ``sphinx-build -W -n``: a warning, a broken internal link or anchor included, is an
error. ``tests/test_site.py`` builds the site and opens every page in Chromium.

The build never leaves a mess (``site_folder``): ``--out`` is checked before anything is staged, claimed by one
build at a time, and named as half-built when a build was killed; sphinx-build dies with the build.
"""

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

from grpo_edu.course.classroom.site_folder import check_out, claim, run_tied, staging, sweep_staging
from grpo_edu.course.classroom.site_font import FONT, FONT_CSS

ROOT = Path(__file__).resolve().parents[3]
"""The checkout the site is built from: README.md, docs/, lessons/, assets/figures/."""

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

CONF = {
    "project": "grpo_edu",
    "author": "the grpo_edu authors",
    "copyright": "the grpo_edu authors, MIT licence",
    "language": "en",
    "root_doc": "index",
    "extensions": ["myst_nb", "sphinx-mathjax-offline"],
    "exclude_patterns": ["_build", "**/.ipynb_checkpoints", "jieba_terms.txt"],
    "nb_execution_mode": "off",                    # the lessons as stored: nbval proves their outputs
    "nb_ipywidgets_js": {},                        # no require.js / widget manager from a CDN
    "myst_enable_extensions": ["dollarmath", "amsmath", "colon_fence"],
    "myst_heading_anchors": 4,
    "myst_heading_slug_func": "grpo_edu.course.classroom.site.heading_anchor",
    "html_theme": "sphinx_book_theme",
    "html_title": "grpo_edu — learn GRPO on a laptop",
    "html_theme_options": {"show_toc_level": 2, "use_download_button": True, "home_page_in_toc": True},
    "html_context": {"default_mode": "light"},
    "html_search_language": "zh",
    "html_last_updated_fmt": None,
    # docs/FAQ.md puts its questions under ### (they read as a list of questions, not chapters); that
    # skipped level is style, not a broken page, so it alone is not an error
    "suppress_warnings": ["myst.header"],
}
"""Sphinx's settings, written into the build's ``conf.py``."""


def heading_anchor(text):
    """A heading's anchor as Jupyter writes it (spaces → hyphens, the rest kept), so that the links
    the docs pages make to a lesson's heading (``../lessons/03_zero_sigma.ipynb#9.-A-loss-of-0-…``)
    work on the site as they do in JupyterLab."""
    return "-".join(text.split())


def _chinese_search(app):
    """Sphinx's Chinese search (jieba splits the words) with a stemmer the browser can find."""
    from sphinx.search.zh import SearchChinese

    class ChineseWithEnglishStemmer(SearchChinese):
        language_name = "English"       # language_data.js then says Stemmer = EnglishStemmer, which it ships

    app.add_search_language(ChineseWithEnglishStemmer)


def sphinx_setup(app):
    """conf.py's ``setup``: the Chinese search fix and the site's small stylesheet."""
    _chinese_search(app)
    app.add_css_file("grpo_edu.css")


CSS = """/* a panel's place on a lesson page */
.grpo-widget-note { border-left: 4px solid #4c72b0; padding: 0.4em 0.8em; background: #f3f6fb; }
"""


def chinese_terms(glossary):
    """The Chinese terms of the glossary's tables (docs/glossary.md), each a word of two or more characters.

    jieba, which splits Chinese text into words for the search index, does not know the course's terms:
    it cuts 优势值 (advantage) into 优势 + 值, so a search for 优势值 would find nothing. Given as jieba's user
    dictionary, each term stays whole (and its parts are indexed too)."""
    terms = []
    for line in glossary.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2:
            terms += re.findall(r"[\u4e00-\u9fff]{2,}", cells[1])
    return list(dict.fromkeys(terms))


def _commands(readme):
    """The README's two commands (main job, tests), read from their marked blocks."""
    found = {}
    for label in ("main-command", "test-command"):
        m = re.search(rf"<!-- {label} -->\s*```(?:bash|sh)\n(.+?)\n```", readme, re.S)
        if not m:
            raise ValueError(f"README.md: no '<!-- {label} -->' command block. Fix: keep the two marked commands")
        found[label] = m.group(1).strip()
    return found


def _how_to_run(stem, commands):
    return (":::{admonition} Run this lesson yourself\n:class: tip\n"
            "This page is the lesson as stored, with its outputs; its sliders move only in Jupyter. "
            "From a checkout of the course, this installs it and runs the main job:\n\n"
            f"```bash\n{commands['main-command']}\n```\n\n"
            "and this runs every test, this lesson included:\n\n"
            f"```bash\n{commands['test-command']}\n```\n\n"
            "Then copy the lessons into a folder of your own and open this one:\n\n"
            f"```bash\n.venv/bin/grpo-edu lessons my_lessons\n.venv/bin/jupyter lab my_lessons/{stem}.ipynb\n```\n:::")


def _panel_note(stem):
    return (f'<div class="grpo-widget-note"><p><strong>An interactive panel goes here.</strong> In Jupyter, the '
            f'sliders of this panel redraw the table and figure below. Run the lesson to move them: '
            f'<code>grpo-edu lessons my_lessons</code>, then open <code>my_lessons/{stem}.ipynb</code>.</p></div>')


def stage_lesson(path, commands):
    """A lesson's notebook for the site: as stored, with a "run this lesson" note under its opening,
    each panel's live controls replaced by a note, and each progress bar by its final text."""
    from grpo_edu.course.aids.widgets import STATIC_HINT

    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    stem = Path(path).stem
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            plain = "".join(data.get("text/plain", ""))
            out["data"] = ({"text/html": _panel_note(stem)} if plain.endswith(STATIC_HINT)
                           else {"text/plain": plain})
    nb["metadata"].pop("widgets", None)
    nb["cells"].insert(1, {"cell_type": "markdown", "id": "grpo-edu-site-run-this-lesson", "metadata": {},
                           "source": _how_to_run(stem, commands)})
    return nb


def _docs_in_readme_order(root, readme):
    """docs/*.md in the order the README first links them; pages it does not link follow, by name."""
    pages = sorted(p.name for p in (root / "docs").glob("*.md"))
    linked = [name for name in dict.fromkeys(re.findall(r"\(docs/([\w.-]+\.md)\)", readme)) if name in pages]
    return linked + [name for name in pages if name not in linked]


def stage(root, src):
    """Lay out the site's sources in ``src``: index.md (the README and the table of contents),
    lessons/ (every lessons/*.ipynb, by name), docs/, assets/figures/, conf.py."""
    root, src = Path(root), Path(src)
    needed = [root / "README.md", root / "docs", root / "lessons"]
    absent = [str(p) for p in needed if not p.exists()]
    if absent:
        raise ValueError(f"source: {', '.join(absent)} not found. Fix: build the site from a checkout of the course "
                         "(git clone …; cd grpo_edu; grpo-edu site)")
    readme = (root / "README.md").read_text(encoding="utf-8")
    commands = _commands(readme)
    lessons = sorted((root / "lessons").glob("*.ipynb"))
    (src / "lessons").mkdir(parents=True)
    for path in lessons:
        (src / "lessons" / path.name).write_text(json.dumps(stage_lesson(path, commands), indent=1,
                                                            ensure_ascii=False) + "\n", encoding="utf-8")
    shutil.copytree(root / "docs", src / "docs")
    for page in (src / "docs").glob("*.md"):            # the README is the site's front page, index.md
        text = page.read_text(encoding="utf-8")
        page.write_text(text.replace("](../README.md)", "](../index.md)"), encoding="utf-8")
    if (root / "assets" / "figures").is_dir():
        shutil.copytree(root / "assets" / "figures", src / "assets" / "figures")
    docs = _docs_in_readme_order(root, readme)
    toc = ("\n\n```{toctree}\n:caption: Lessons\n:hidden:\n\n" + "\n".join(f"lessons/{p.stem}" for p in lessons)
           + "\n```\n\n```{toctree}\n:caption: Documentation\n:hidden:\n\n"
           + "\n".join(f"docs/{Path(name).stem}" for name in docs) + "\n```\n")
    (src / "index.md").write_text(readme + toc, encoding="utf-8")
    glossary = root / "docs" / "glossary.md"
    terms = chinese_terms(glossary.read_text(encoding="utf-8")) if glossary.exists() else []
    (src / "jieba_terms.txt").write_text("".join(f"{t} 100000\n" for t in terms), encoding="utf-8")
    (src / "_static").mkdir()
    css = CSS
    if FONT.is_file():                                  # the course's Chinese, even where the reader has no CJK font
        shutil.copy(FONT, src / "_static" / FONT.name)
        css += FONT_CSS
    (src / "_static" / "grpo_edu.css").write_text(css, encoding="utf-8")
    settings = dict(CONF, html_search_options={"dict": str((src / "jieba_terms.txt").resolve())})
    conf = "\n".join(f"{key} = {value!r}" for key, value in settings.items())
    (src / "conf.py").write_text(f'"""Written by grpo_edu.course.classroom.site."""\n{conf}\nhtml_static_path = ["_static"]\n\n\n'
                                 "def setup(app):\n    from grpo_edu.course.classroom.site import sphinx_setup\n\n"
                                 "    sphinx_setup(app)\n", encoding="utf-8")
    return {"lessons": [p.stem for p in lessons], "docs": docs}


def build(out, *, root=ROOT, jobs=1):
    """Build the site into ``out`` (``sphinx-build -W -n``); return {"pages", "seconds", "bytes", ...}.

    ``out`` must be a new or empty folder that can be written (the build never deletes files of yours);
    it is checked before anything is staged, and claimed for this build alone while it runs
    (``site_folder.claim``).
    """
    out = Path(out)
    sweep_staging()                                    # what killed builds left in the temporary folder
    check_out(out)
    missing = [m for m in ("sphinx", "myst_nb", "sphinx_book_theme", "jieba") if _absent(m)]
    if missing:
        raise ValueError(f"the site's packages are not installed ({', '.join(missing)}). Fix: "
                         "pip install -e \".[site]\" (the dev extra brings them too)")
    start = time.perf_counter()
    with claim(out), staging() as work:
        src = work / "src"
        staged = stage(root, src)
        result = run_tied("sphinx", ["-W", "-n", "--keep-going", "-q", "-b", "html", "-j", str(jobs),
                                     "-d", str(work / "doctrees"), str(src), str(out)])
        if result.returncode != 0:
            raise RuntimeError(f"sphinx-build failed (warnings are errors):\n{result.stderr[-6000:]}")
    pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html")
                   if not p.relative_to(out).as_posix().startswith("_"))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"pages": pages, "seconds": time.perf_counter() - start, "bytes": size, **staged}


def _absent(module):
    from importlib.util import find_spec

    return find_spec(module) is None


def main(argv=None):
    from grpo_edu.common import command_line

    parser = argparse.ArgumentParser(prog="grpo-edu site", description="Build the course as a website that works "
                                     "offline: every lesson as stored (with its outputs), the docs pages and the "
                                     "glossary, with search in English and Chinese. Open OUT/index.html.")
    parser.add_argument("--out", default="site", metavar="DIR", help="a new or empty folder (default: site)")
    parser.add_argument("--jobs", type=int, default=1, metavar="INT", help="Sphinx processes (default: 1)")
    args = command_line.parse_args(parser, argv)
    if args.jobs < 1:
        parser.error(f"--jobs: is {args.jobs}. Fix: give 1 or more")
    try:
        info = build(args.out, jobs=args.jobs)
    except (ValueError, RuntimeError) as err:
        print(f"grpo-edu site: error: {err}", file=sys.stderr)
        return 2
    print(f"{len(info['pages'])} pages ({len(info['lessons'])} lessons, {len(info['docs'])} docs pages) in "
          f"{info['seconds']:.0f} s, {info['bytes'] / 1e6:.1f} MB: open {Path(args.out) / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
