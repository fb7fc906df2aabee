"""Documents -> blocks of text and headings: plain text, Markdown, HTML (lxml) and PDF (pypdf).

`parse(name, mime_type, content)` is CPU work: call it through `asyncio.to_thread`. A document that
cannot be read raises `ParseError` with a sentence saying why; nothing else is raised on bad input.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

log = logging.getLogger(__name__)

TEXT, MARKDOWN, HTML, PDF = "text/plain", "text/markdown", "text/html", "application/pdf"

_MIME_ALIASES = {
    "text/plain": TEXT, "text/csv": TEXT, "application/json": TEXT, "text/x-rst": TEXT,
    "text/markdown": MARKDOWN, "text/x-markdown": MARKDOWN,
    "text/html": HTML, "application/xhtml+xml": HTML,
    "application/pdf": PDF,
}
_EXTENSIONS = {
    ".txt": TEXT, ".text": TEXT, ".log": TEXT, ".csv": TEXT, ".json": TEXT, ".rst": TEXT,
    ".md": MARKDOWN, ".markdown": MARKDOWN, ".mdx": MARKDOWN,
    ".html": HTML, ".htm": HTML, ".xhtml": HTML,
    ".pdf": PDF,
}
SUPPORTED = "plain text, Markdown, HTML or PDF"


class ParseError(Exception):
    """The document cannot be read; the message says why, for the document's `error` field."""


@dataclass(frozen=True)
class Block:
    text: str
    heading_level: int = 0  # > 0: a heading of that level (1 = top)
    page: int = 0  # PDF page, 1-based; 0 for other formats


def detect_type(name: str, mime_type: str, content: bytes) -> str:
    """The parser to use: the declared MIME type, else the file extension, else a look at the bytes."""
    declared = mime_type.split(";")[0].strip().lower()
    if declared in _MIME_ALIASES:
        return _MIME_ALIASES[declared]
    by_ext = _EXTENSIONS.get(PurePosixPath(name.lower()).suffix)
    if by_ext:
        return by_ext
    if content.startswith(b"%PDF-"):
        return PDF
    head = content[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return HTML
    if declared and not declared.startswith("text/") and declared != "application/octet-stream":
        raise ParseError(f"unsupported document type {mime_type!r}: expected {SUPPORTED}")
    return TEXT


def parse(name: str, mime_type: str, content: bytes) -> list[Block]:
    kind = detect_type(name, mime_type, content)
    if kind == PDF:
        blocks = _parse_pdf(content)
    else:
        text = decode_text(content)
        blocks = _parse_html(content) if kind == HTML else _parse_markdown(text) if kind == MARKDOWN else _parse_plain(text)
    if not any(b.text.strip() for b in blocks):
        raise ParseError("the document has no text")
    return blocks


def decode_text(content: bytes) -> str:
    if content.startswith((b"\xff\xfe", b"\xfe\xff")):
        return content.decode("utf-16")
    if b"\x00" in content[:4096]:
        raise ParseError(f"the document looks binary, not text: expected {SUPPORTED}")
    try:
        return content.decode("utf-8-sig")
    except UnicodeDecodeError:
        return content.decode("cp1252", errors="replace")


# ------------------------------------------------------------------------------------------- plain text
def _paragraphs(text: str, page: int = 0) -> list[Block]:
    return [Block(p.strip(), page=page) for p in re.split(r"\n\s*\n", text) if p.strip()]


def _parse_plain(text: str) -> list[Block]:
    return _paragraphs(text.replace("\r\n", "\n").replace("\r", "\n"))


# ------------------------------------------------------------------------------------------- Markdown
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _parse_markdown(text: str) -> list[Block]:
    blocks: list[Block] = []
    para: list[str] = []
    fence = ""

    def flush() -> None:
        if para:
            joined = "\n".join(para).strip()
            if joined:
                blocks.append(Block(joined))
            para.clear()

    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        m = _FENCE.match(line)
        if fence:  # inside a code block: keep it whole, headings inside are code
            para.append(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = ""
                flush()
            continue
        if m:
            flush()
            fence = m.group(1)
            para.append(line)
            continue
        atx = _ATX.match(line)
        if atx:
            flush()
            if (atx.group(2) or "").strip():
                blocks.append(Block(atx.group(2).strip(), heading_level=len(atx.group(1))))
            continue
        setext = _SETEXT.match(line)
        if setext and len(para) == 1 and para[0].strip():
            title = para.pop().strip()
            blocks.append(Block(title, heading_level=1 if setext.group(1)[0] == "=" else 2))
            continue
        if not line.strip():
            flush()
            continue
        para.append(line)
    flush()
    return blocks


# ------------------------------------------------------------------------------------------- HTML
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object", "button", "select"}
_BLOCK = {
    "p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "li", "ul", "ol", "dl", "dt",
    "dd", "pre", "blockquote", "table", "tr", "td", "th", "thead", "tbody", "figure", "figcaption", "caption",
    "form", "fieldset", "address", "details", "summary", "hr", "body",
}


def _parse_html(content: bytes) -> list[Block]:
    import lxml.html
    from lxml import etree

    try:
        root = lxml.html.fromstring(content)
    except (etree.ParserError, ValueError) as exc:
        raise ParseError(f"not readable as HTML: {exc}") from None
    blocks: list[Block] = []
    title = " ".join((root.findtext(".//title") or "").split())
    if title:
        blocks.append(Block(title, heading_level=1))
    shift = 1 if title else 0  # the page title sits above the page's own h1..h6
    buf: list[str] = []

    def flush() -> None:
        text = re.sub(r"[ \t\f\v]+", " ", "".join(buf))
        text = "\n".join(line.strip() for line in text.split("\n") if line.strip())
        if text:
            blocks.append(Block(text))
        buf.clear()

    def walk(el) -> None:
        tag = el.tag if isinstance(el.tag, str) else ""
        tag = tag.lower()
        if tag in _SKIP or not tag:  # comments and processing instructions have no str tag
            if el.tail:
                buf.append(el.tail)
            return
        if tag in _HEADINGS:
            flush()
            text = " ".join(el.text_content().split())
            if text:
                blocks.append(Block(text, heading_level=_HEADINGS[tag] + shift))
        else:
            is_block = tag in _BLOCK
            if is_block:
                flush()
            if tag == "br":
                buf.append("\n")
            if el.text:
                buf.append(el.text)
            for child in el:
                walk(child)
            if is_block:
                flush()
            elif tag in ("td", "th"):
                buf.append(" ")
        if el.tail:
            buf.append(el.tail)

    body = root.find(".//body")
    walk(body if body is not None else root)
    flush()
    return blocks


# ------------------------------------------------------------------------------------------- PDF
def _parse_pdf(content: bytes) -> list[Block]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(content))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ParseError("the PDF is encrypted with a password")
        blocks: list[Block] = []
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text() or ""
            blocks.extend(_paragraphs(text.replace("\r\n", "\n"), page=number))
    except ParseError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise ParseError(f"not a readable PDF: {exc}") from None
    except Exception as exc:  # pypdf raises assorted errors on damaged files; the message is what matters
        log.warning("pypdf failed on a document: %r", exc)
        raise ParseError(f"not a readable PDF: {exc}") from None
    if not blocks:
        raise ParseError("the PDF has no extractable text (scanned pages need OCR, which is not supported)")
    return blocks
