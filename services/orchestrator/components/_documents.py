"""Markdown content -> PDF, DOCX, plain text, Markdown or HTML bytes (DocGenerator).

The markdown is turned into HTML once (the `markdown` package: tables, fenced code); every binary format is
built from that tree: PDF by fpdf2's HTML renderer, DOCX by walking the tree into python-docx paragraphs,
tables and lists, text by the tree's text. A PDF needs a Unicode TTF font: DejaVu Sans from Debian's
fonts-dejavu-core, with Droid Sans Fallback (fonts-droid-fallback) for Chinese, Japanese and Korean
(scripts/install_system_deps.sh); without DejaVu, the PDF uses a core font and characters outside Latin-1
become "?".
"""
from __future__ import annotations

import html as html_lib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import markdown as md
from lxml import html as lxml_html

_FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
_FONT_FILES = {"": "DejaVuSans.ttf", "B": "DejaVuSans-Bold.ttf", "I": "DejaVuSans-Oblique.ttf",
               "BI": "DejaVuSans-BoldOblique.ttf"}
_MONO_FILE = "DejaVuSansMono.ttf"
_CJK_FILE = Path("/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf")


@dataclass(frozen=True)
class Decorations:
    """RAGFlow's DocGenerator page options."""

    font_size: int = 12
    header_text: str = ""
    footer_text: str = ""
    watermark_text: str = ""
    add_page_numbers: bool = True
    timestamp: str = ""  # "Generated: ..." when add_timestamp is on, else ""


def to_html_fragment(markdown_text: str) -> str:
    return md.markdown(markdown_text, extensions=["tables", "fenced_code", "sane_lists"], output_format="html")


def html_page(markdown_text: str, title: str, deco: Decorations) -> bytes:
    body = to_html_fragment(markdown_text)
    parts = [f"<header>{html_lib.escape(deco.header_text)}</header>" if deco.header_text else "",
             f"<p><em>{html_lib.escape(deco.timestamp)}</em></p>" if deco.timestamp else "",
             body,
             f"<footer>{html_lib.escape(deco.footer_text)}</footer>" if deco.footer_text else ""]
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html_lib.escape(title)}</title>"
            f"<style>body{{font-family:sans-serif;font-size:{deco.font_size}pt;max-width:50em;margin:auto}}"
            f"table{{border-collapse:collapse}}td,th{{border:1px solid #999;padding:4px}}</style></head>"
            f"<body>{''.join(parts)}</body></html>\n")
    return page.encode("utf-8")


def markdown_file(markdown_text: str, deco: Decorations) -> bytes:
    text = f"{deco.timestamp}\n\n{markdown_text}" if deco.timestamp else markdown_text
    return (text.rstrip("\n") + "\n").encode("utf-8")


def plain_text(markdown_text: str, deco: Decorations) -> bytes:
    root = lxml_html.fragment_fromstring(to_html_fragment(markdown_text) or "<p></p>", create_parent="div")
    blocks = [_text_of(el).strip() for el in root]
    text = "\n\n".join(b for b in blocks if b)
    if deco.timestamp:
        text = f"{deco.timestamp}\n\n{text}"
    return (text + "\n").encode("utf-8")


# ------------------------------------------------------------------------------------------------ PDF
def pdf(markdown_text: str, deco: Decorations) -> bytes:
    from fpdf import FPDF
    from fpdf.fonts import TextStyle

    unicode_font = all((_FONT_DIR / f).is_file() for f in (*_FONT_FILES.values(), _MONO_FILE))
    family = "DejaVu" if unicode_font else "helvetica"

    class _Pdf(FPDF):
        def header(self) -> None:
            if deco.watermark_text:
                self._watermark()
            if deco.header_text:
                self.set_font(family, "", 9)
                self.set_text_color(110)
                self.cell(0, 6, _fit(deco.header_text, unicode_font), align="C", new_x="LMARGIN", new_y="NEXT")
                self.set_text_color(0)
                self.ln(2)

        def footer(self) -> None:
            self.set_y(-14)
            self.set_font(family, "", 9)
            self.set_text_color(110)
            text = " | ".join(t for t in (deco.footer_text and _fit(deco.footer_text, unicode_font),
                                            f"Page {self.page_no()}/{{nb}}" if deco.add_page_numbers else "") if t)
            if text:
                self.cell(0, 8, text, align="C")
            self.set_text_color(0)

        def _watermark(self) -> None:
            self.set_font(family, "B", 48)
            self.set_text_color(225)
            with self.rotation(45, self.w / 2, self.h / 2):
                width = self.get_string_width(_fit(deco.watermark_text, unicode_font))
                self.text(self.w / 2 - width / 2, self.h / 2, _fit(deco.watermark_text, unicode_font))
            self.set_text_color(0)

    doc = _Pdf()
    if unicode_font:
        for style, name in _FONT_FILES.items():
            doc.add_font("DejaVu", style, str(_FONT_DIR / name))
        doc.add_font("DejaVuMono", "", str(_FONT_DIR / _MONO_FILE))
        if _CJK_FILE.is_file():  # glyphs DejaVu lacks (CJK) come from here
            doc.add_font("DroidFallback", "", str(_CJK_FILE))
            doc.set_fallback_fonts(["DroidFallback"], exact_match=False)
    doc.set_auto_page_break(True, margin=18)
    doc.add_page()
    doc.set_font(family, "", deco.font_size)
    source = f"*{deco.timestamp}*\n\n{markdown_text}" if deco.timestamp else markdown_text
    body = to_html_fragment(source if unicode_font else _fit(source, False))
    base, mono = deco.font_size, "DejaVuMono" if unicode_font else "courier"
    styles = {f"h{n}": TextStyle(font_family=family, font_style="B", font_size_pt=base + grow, color=0)
              for n, grow in ((1, 6), (2, 4), (3, 2), (4, 0), (5, 0), (6, 0))}
    styles.update(code=TextStyle(font_family=mono), pre=TextStyle(font_family=mono))
    doc.write_html(body, font_family=family, tag_styles=styles)
    return bytes(doc.output())


def _fit(text: str, unicode_font: bool) -> str:
    return text if unicode_font else text.encode("latin-1", "replace").decode("latin-1")


# ------------------------------------------------------------------------------------------------ DOCX
def docx(markdown_text: str, deco: Decorations) -> bytes:
    from docx import Document
    from docx.enum.text import WD_ALIGN_PARAGRAPH
    from docx.shared import Pt, RGBColor

    document = Document()
    document.styles["Normal"].font.size = Pt(deco.font_size)
    section = document.sections[0]
    if deco.header_text or deco.watermark_text:
        head = section.header.paragraphs[0]
        head.text = deco.header_text
        head.alignment = WD_ALIGN_PARAGRAPH.CENTER
        if deco.watermark_text:  # a faint line in the page header: python-docx draws no rotated shapes
            mark = section.header.add_paragraph().add_run(deco.watermark_text)
            mark.font.color.rgb = RGBColor(0xC8, 0xC8, 0xC8)
            mark.font.size = Pt(28)
            section.header.paragraphs[-1].alignment = WD_ALIGN_PARAGRAPH.CENTER
    if deco.footer_text or deco.add_page_numbers:
        foot = section.footer.paragraphs[0]
        foot.alignment = WD_ALIGN_PARAGRAPH.CENTER
        if deco.footer_text:
            foot.add_run(deco.footer_text + ("  |  " if deco.add_page_numbers else ""))
        if deco.add_page_numbers:
            foot.add_run("Page ")
            _page_field(foot.add_run())
    if deco.timestamp:
        document.add_paragraph().add_run(deco.timestamp).italic = True
    root = lxml_html.fragment_fromstring(to_html_fragment(markdown_text) or "<p></p>", create_parent="div")
    for el in root:
        _block(document, el, deco)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _page_field(run) -> None:
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    for kind, text in (("begin", None), (None, "PAGE"), ("end", None)):
        if kind:
            el = OxmlElement("w:fldChar")
            el.set(qn("w:fldCharType"), kind)
        else:
            el = OxmlElement("w:instrText")
            el.set(qn("xml:space"), "preserve")
            el.text = text
        run._r.append(el)


def _block(document, el, deco: Decorations) -> None:
    tag = el.tag if isinstance(el.tag, str) else ""
    if re.fullmatch(r"h[1-6]", tag):
        _inline(document.add_heading(level=min(int(tag[1]), 9)), el)
    elif tag in ("ul", "ol"):
        _list(document, el, tag, 1)
    elif tag == "table":
        _table(document, el)
    elif tag == "pre":
        run = document.add_paragraph().add_run(el.text_content().rstrip("\n"))
        run.font.name = "Courier New"
    elif tag == "blockquote":
        for child in el:
            paragraph = document.add_paragraph(style="Quote")
            _inline(paragraph, child)
    elif tag == "hr":
        document.add_paragraph("_" * 40)
    else:
        _inline(document.add_paragraph(), el)


def _list(document, el, tag: str, depth: int) -> None:
    style = ("List Bullet" if tag == "ul" else "List Number") + (f" {depth}" if depth > 1 else "")
    for li in el.findall("li"):
        paragraph = document.add_paragraph(style=style if depth <= 3 else style.rsplit(" ", 1)[0])
        _inline(paragraph, li, skip=("ul", "ol"))
        for sub in li:
            if sub.tag in ("ul", "ol"):
                _list(document, sub, sub.tag, min(depth + 1, 3))


def _table(document, el) -> None:
    rows = el.findall(".//tr")
    if not rows:
        return
    width = max(len(r.findall("th") + r.findall("td")) for r in rows)
    table = document.add_table(rows=len(rows), cols=max(width, 1))
    table.style = "Table Grid"
    for r, row in enumerate(rows):
        for c, cell in enumerate(row.findall("th") + row.findall("td")):
            paragraph = table.cell(r, c).paragraphs[0]
            _inline(paragraph, cell, bold=cell.tag == "th")


def _inline(paragraph, el, *, bold: bool = False, italic: bool = False, mono: bool = False,
            skip: tuple[str, ...] = ()) -> None:
    """`el`'s text and inline children as runs of `paragraph` (strong/b, em/i, code kept)."""
    if el.text:
        _run(paragraph, el.text, bold, italic, mono)
    for child in el:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag not in skip:
            if tag == "br":
                paragraph.add_run().add_break()
            else:
                _inline(paragraph, child, bold=bold or tag in ("strong", "b", "th"),
                        italic=italic or tag in ("em", "i"), mono=mono or tag == "code")
        if child.tail:
            _run(paragraph, child.tail, bold, italic, mono)


def _run(paragraph, text: str, bold: bool, italic: bool, mono: bool) -> None:
    run = paragraph.add_run(text)
    run.bold = bold or None
    run.italic = italic or None
    if mono:
        run.font.name = "Courier New"


def _text_of(el) -> str:
    tag = el.tag if isinstance(el.tag, str) else ""
    if tag in ("ul", "ol"):
        return "\n".join(f"- {_text_of(li).strip()}" for li in el.findall("li"))
    if tag == "table":
        return "\n".join("\t".join(c.text_content().strip() for c in r.findall("th") + r.findall("td"))
                         for r in el.findall(".//tr"))
    return el.text_content()

