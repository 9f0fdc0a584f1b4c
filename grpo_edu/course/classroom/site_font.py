"""The site's own Chinese font: Noto Sans SC cut down to the characters the course writes.

Every lesson opens and closes in Chinese, and the glossary names each term in Chinese. A browser draws
those characters with a font of the reader's machine; a Linux laptop without a CJK font (a fresh Debian,
many classroom images) draws boxes instead. So the site carries its own: Noto Sans SC (SIL Open Font
License 1.1, © Adobe and Google), reduced to the characters of ``lessons/``, ``docs/`` and ``README.md``
(about two thousand glyphs, under a megabyte, where the whole font is 10 MB). The OFL allows subsetting;
a modified font may not keep the reserved name, so the subset is renamed ``grpo_edu SC``.

The stylesheet (:data:`FONT_CSS`) declares it for Chinese and full-width punctuation only (``unicode-range``),
so Latin text keeps the theme's fonts and a machine with its own CJK font still downloads nothing else.

Make it again after new Chinese text (``tests/test_site.py`` says when a character is missing)::

    npm pack @expo-google-fonts/noto-sans-sc@0.4.3          # the font, fetched alone; nothing is installed
    tar xzf expo-google-fonts-noto-sans-sc-0.4.3.tgz package/400Regular/NotoSansSC_400Regular.ttf package/LICENSE_FONT
    python -m grpo_edu.course.classroom.site_font --source package/400Regular/NotoSansSC_400Regular.ttf \\
        --license package/LICENSE_FONT

It writes ``assets/fonts/grpo-edu-sc.woff`` and the licence beside it; same source, same characters, same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FONT = ROOT / "assets" / "fonts" / "grpo-edu-sc.woff"
"""The subset the site serves from ``_static``."""
FAMILY = "grpo_edu SC"
SOURCE_SHA256 = "d45f67f0a7c0ca3f256950777ce6a61cc7ce5f9696d02900cbbaac25f8aa7d16"
"""``NotoSansSC_400Regular.ttf`` of ``@expo-google-fonts/noto-sans-sc`` 0.4.3, the font this subset is cut from."""
CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")
"""What the subset must draw: CJK punctuation, ideographs (and extension A), full-width forms."""
UNICODE_RANGE = "U+3000-303F, U+3400-4DBF, U+4E00-9FFF, U+FF00-FFEF"
FONT_CSS = f"""/* the course's Chinese, drawn with the site's own font where the reader's machine has none */
@font-face {{ font-family: "{FAMILY}"; src: url("grpo-edu-sc.woff") format("woff"); font-display: swap;
             unicode-range: {UNICODE_RANGE}; }}
html {{ --pst-font-family-base: var(--pst-font-family-base-system), "{FAMILY}", sans-serif;
        --pst-font-family-heading: var(--pst-font-family-base-system), "{FAMILY}", sans-serif; }}
"""


def course_characters(root=ROOT) -> str:
    """Every CJK character (:data:`CJK`) in the lessons, the docs and the README, sorted, once each."""
    root = Path(root)
    files = sorted(root.glob("lessons/*.ipynb")) + sorted(root.glob("docs/*.md")) + [root / "README.md"]
    found = set()
    for path in files:
        if path.is_file():
            found.update(CJK.findall(path.read_text(encoding="utf-8")))
    return "".join(sorted(found))


def missing_characters(font=FONT, root=ROOT) -> str:
    """The course's CJK characters that ``font`` cannot draw (empty when the subset is up to date)."""
    from fontTools.ttLib import TTFont

    cmap = TTFont(str(font)).getBestCmap()
    return "".join(c for c in course_characters(root) if ord(c) not in cmap)


def make_subset(source, out=FONT, *, characters=None, license_file=None):
    """Cut ``source`` (Noto Sans SC, checked by its hash) down to ``characters`` (the course's by default), rename
    it :data:`FAMILY` (the OFL's reserved-name rule), and write it as WOFF to ``out``; returns ``(out, info)``."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    source = Path(source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        raise ValueError(f"source: {source} has sha256 {digest[:16]}…, not the Noto Sans SC this subset is made "
                         f"from ({SOURCE_SHA256[:16]}…). Fix: take NotoSansSC_400Regular.ttf from "
                         "@expo-google-fonts/noto-sans-sc 0.4.3 (this module's docstring has the commands)")
    characters = course_characters() if characters is None else characters
    text = characters + "".join(chr(c) for c in range(0x20, 0x7f))          # and ASCII, for the fallback's metrics
    options = subset.Options()
    options.flavor = "woff"
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]
    options.drop_tables += ["DSIG"]
    font = TTFont(str(source), recalcTimestamp=False)         # the source's date: same input, same bytes
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=text)
    subsetter.subset(font)
    for record in font["name"].names:                                      # the OFL: a modified font is renamed
        if record.nameID in (1, 4, 16):
            record.string = FAMILY
        elif record.nameID == 6:
            record.string = FAMILY.replace(" ", "-")
        elif record.nameID == 3:
            record.string = f"{FAMILY}; subset of Noto Sans SC Regular"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff"
    font.save(str(out))
    if license_file:
        (out.parent / "OFL.txt").write_text(Path(license_file).read_text(encoding="utf-8"), encoding="utf-8")
    info = {"characters": len(characters), "bytes": out.stat().st_size, "source_sha256": digest}
    (out.parent / "grpo-edu-sc.json").write_text(json.dumps(
        {"command": "python -m grpo_edu.course.classroom.site_font --source NotoSansSC_400Regular.ttf "
                    "--license LICENSE_FONT", "family": FAMILY, **info}, indent=1) + "\n", encoding="utf-8")
    return out, info


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m grpo_edu.course.classroom.site_font",
                                     description="Cut Noto Sans SC down to the course's Chinese characters.")
    parser.add_argument("--source", required=True, help="NotoSansSC_400Regular.ttf (see this module's docstring)")
    parser.add_argument("--license", help="the font's OFL text, copied beside the subset")
    parser.add_argument("--out", default=str(FONT))
    args = parser.parse_args(argv)
    if not Path(args.source).is_file():
        parser.error(f"--source: {args.source} is not a file. Fix: fetch it first (this module's docstring)")
    out, info = make_subset(args.source, args.out, license_file=args.license)
    print(f"wrote {out}: {info['characters']} characters, {info['bytes']:,} bytes")


if __name__ == "__main__":
    main()
