"""DocGenerator: writes its (markdown) content to a PDF, DOCX, TXT, Markdown or HTML file, an attachment of the run.

Params (RAGFlow `agent/component/docs_generator.py`): `output_format` ("pdf" default, "docx", "txt",
"markdown", "html"), `content` (markdown with {references}; `<think>` sections dropped), `filename` (default
`document_<time>_<id>.<ext>`), `header_text`, `footer_text`, `watermark_text`, `add_page_numbers` (true),
`add_timestamp` (true), `include_download_info_in_content` (false), `font_size` (at least 12).
Outputs: `doc_id`, `filename`, `mime_type`, `size`, and `download`: the download info as JSON text, which a
Message referencing it lists in its message_end `downloads` (attachments.py). RAGFlow converts with pandoc;
here the markdown goes through one HTML tree (_documents.py), so no TeX or pandoc is needed.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from services.orchestrator.components._documents import Decorations, docx, html_page, markdown_file, pdf, plain_text
from services.orchestrator.components._fields import as_bool
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params, validator
from services.orchestrator.store import attachments

# format -> (extension, mime type, writer)
FORMATS: dict[str, tuple[str, str, Any]] = {
    "pdf": ("pdf", "application/pdf", pdf),
    "docx": ("docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", docx),
    "txt": ("txt", "text/plain", plain_text),
    "markdown": ("md", "text/markdown", markdown_file),
    "html": ("html", "text/html", None),  # html_page also takes the title
}
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def sanitize_filename(name: str, extension: str) -> str:
    """RAGFlow's rule: path and control characters become spaces, at most 180 characters, the format's extension."""
    name = re.sub(r'[\\/\x00-\x1f?#%*:|<>"]', " ", str(name or "").strip())
    name = re.sub(r"\s+", " ", name).strip(" .")
    base = os.path.splitext(name)[0][:180].rstrip() if name else ""
    return f"{base or 'file'}.{extension}"


def _font_size(value: Any) -> int | None:
    try:
        size = int(float(value))
    except (TypeError, ValueError):
        return None
    return size if size >= 12 else None


def _content(content: Any) -> Any:
    if not isinstance(content, str) or not content.strip():
        raise ValueError("a DocGenerator needs content (markdown text)")
    return content


def _format(fmt: Any) -> Any:
    if fmt and (not isinstance(fmt, str) or fmt not in FORMATS):
        raise ValueError(f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def _size(value: Any) -> Any:
    if _font_size(value) is None:
        raise ValueError(f"must be a number of at least 12, got {value!r}")
    return value


class DocGeneratorParams(Params):
    content: Annotated[Any, validator(_content), Field(validate_default=True)] = None  # markdown, {refs} expanded
    output_format: Annotated[Any, validator(_format)] = "pdf"
    font_size: Annotated[Any, validator(_size)] = 12
    filename: Any = None
    header_text: Any = None
    footer_text: Any = None
    watermark_text: Any = None
    add_page_numbers: Any = True
    add_timestamp: Any = True
    include_download_info_in_content: Any = False


@register
class DocGenerator(Component):
    component_name = "DocGenerator"
    params_model = DocGeneratorParams
    params: DocGeneratorParams

    def thoughts(self, ctx: NodeContext) -> str:
        return f"Generating {(self.params.output_format or 'pdf').upper()} document with markdown conversion..."

    async def run(self, ctx: NodeContext) -> None:
        p = self.params
        fmt = p.output_format or "pdf"
        extension, mime, writer = FORMATS[fmt]
        content = _THINK.sub("", await ctx.render(p.content)).strip()
        for ref in ctx.refs(p.content):
            ctx.set_input(ref, str(await ctx.value(ref))[:200])
        if p.filename:
            filename = sanitize_filename(await ctx.render(str(p.filename)), extension)
        else:
            filename = f"document_{datetime.now().strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:8]}.{extension}"
        deco = Decorations(
            font_size=_font_size(p.font_size) or 12,
            header_text=await ctx.render(str(p.header_text or "")),
            footer_text=await ctx.render(str(p.footer_text or "")),
            watermark_text=await ctx.render(str(p.watermark_text or "")),
            add_page_numbers=as_bool(p.add_page_numbers),
            timestamp=(f"Generated: {time.strftime('%Y-%m-%d %H:%M:%S')}"
                       if as_bool(p.add_timestamp) else ""),
        )
        try:
            if writer is None:
                data = await asyncio.to_thread(html_page, content, os.path.splitext(filename)[0], deco)
            else:
                data = await asyncio.to_thread(writer, content, deco)
        except Exception as exc:  # a library's failure on odd content: say which component and format
            raise RuntimeError(f"{ctx.component_id}: {fmt.upper()} generation failed: {exc}") from exc
        info = await attachments.save(ctx, filename, mime, data)
        info["include_download_info_in_content"] = as_bool(p.include_download_info_in_content)
        ctx.set_output("doc_id", info["doc_id"])
        ctx.set_output("filename", filename)
        ctx.set_output("mime_type", mime)
        ctx.set_output("size", len(data))
        ctx.set_output("download", json.dumps(info, ensure_ascii=False))
