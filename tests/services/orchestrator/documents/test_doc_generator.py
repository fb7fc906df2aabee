"""DocGenerator: each format is a real file, parsed back (pypdf, python-docx), stored as the run's attachment."""

from __future__ import annotations

import io
import json

import pytest
from docx import Document
from pypdf import PdfReader

from services.orchestrator.components import get_class, is_available
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.store.attachments import AttachmentStore

CONTENT = """# Quarterly report

Revenue grew **12%** in Q3, led by *Zürich* and 東京.

| region | sales |
|---|---|
| EMEA | 120 |
| APAC | 95 |

- first point
- second point
"""


@pytest.fixture
async def store(redis_client):
    return AttachmentStore(redis_client)


def _ctx(store, params, tenant="tenant-a"):
    return NodeContext.for_test(params, component_id="DocGenerator:report", component_name="DocGenerator",
                                outputs={"LLM:writer": {"content": CONTENT}},
                                services=Services(attachments=store),
                                request=RunRequest(run_id="run-test", tenant_id=tenant))


async def _generate(store, **params):
    params = {"content": "{LLM:writer@content}", **params}
    ctx = _ctx(store, params)
    await get_class("DocGenerator")("DocGenerator:report", params).run(ctx)
    stored = await store.get("tenant-a", ctx.outputs["doc_id"])
    assert stored is not None and stored.run_id == "run-test"
    assert len(stored.content) == ctx.outputs["size"]
    return ctx.outputs, stored


def test_registered_and_no_longer_pending():
    assert is_available("DocGenerator")


async def test_pdf_holds_the_text_header_footer_and_page_number(store):
    out, stored = await _generate(store, output_format="pdf", filename="Q3 report", header_text="ACME confidential",
                                  footer_text="Finance", watermark_text="DRAFT")
    assert (out["filename"], out["mime_type"]) == ("Q3 report.pdf", "application/pdf")
    text = "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(stored.content)).pages)
    for needle in ("Quarterly report", "Revenue grew", "Zürich", "東京", "EMEA", "second point", "ACME confidential",
                   "Finance", "Page 1/1", "Generated:"):
        assert needle in text, needle


async def test_docx_has_heading_table_list_and_page_field(store):
    out, stored = await _generate(store, output_format="docx", add_timestamp=False, footer_text="Finance")
    assert out["filename"].startswith("document_") and out["filename"].endswith(".docx")
    doc = Document(io.BytesIO(stored.content))
    paragraphs = [(p.style.name, p.text) for p in doc.paragraphs]
    assert ("Heading 1", "Quarterly report") in paragraphs
    assert ("List Bullet", "first point") in paragraphs
    grew = next(p for p in doc.paragraphs if p.text.startswith("Revenue grew"))
    assert [r.text for r in grew.runs if r.bold] == ["12%"] and "東京" in grew.text
    assert [[c.text for c in row.cells] for row in doc.tables[0].rows] == [["region", "sales"], ["EMEA", "120"],
                                                                          ["APAC", "95"]]
    footer_xml = doc.sections[0].footer._element.xml
    assert "Finance" in footer_xml and "PAGE" in footer_xml
    assert not any(p.text.startswith("Generated:") for p in doc.paragraphs)


@pytest.mark.parametrize("fmt,ext,mime,needles", [
    ("markdown", "md", "text/markdown", ["# Quarterly report", "| EMEA | 120 |"]),
    ("html", "html", "text/html", ["<h1>Quarterly report</h1>", "<td>EMEA</td>", "<strong>12%</strong>"]),
    ("txt", "txt", "text/plain", ["Quarterly report", "EMEA\t120", "- first point"]),
])
async def test_text_formats(store, fmt, ext, mime, needles):
    out, stored = await _generate(store, output_format=fmt, filename="notes")
    assert (out["filename"], out["mime_type"]) == (f"notes.{ext}", mime)
    text = stored.content.decode("utf-8")
    for needle in needles:
        assert needle in text, needle
    assert "**12%**" not in text if fmt != "markdown" else "**12%**" in text


async def test_download_output_is_ragflows_download_info(store):
    out, _ = await _generate(store, output_format="markdown", include_download_info_in_content=True)
    info = json.loads(out["download"])
    assert {k: info[k] for k in ("doc_id", "filename", "mime_type", "size")} == {
        k: out[k] for k in ("doc_id", "filename", "mime_type", "size")}
    assert info["download_url"].startswith(f"/api/v1/agents/attachments/{out['doc_id']}/download")
    assert info["include_download_info_in_content"] is True


async def test_think_sections_are_dropped_and_filenames_sanitized(store):
    ctx = _ctx(store, {})
    params = {"content": "<think>private</think>Public text", "output_format": "markdown", "filename": "a/b:c?.txt"}
    await get_class("DocGenerator")("DocGenerator:report", params).run(ctx)
    stored = await store.get("tenant-a", ctx.outputs["doc_id"])
    assert "private" not in stored.content.decode() and "Public text" in stored.content.decode()
    assert ctx.outputs["filename"] == "a b c.md"


def test_validation_names_the_field():
    issues = get_class("DocGenerator").check("DocGenerator:x", {"content": "", "output_format": "odt", "font_size": 9})
    assert {(i.field) for i in issues} == {"params.content", "params.output_format", "params.font_size"}
    assert any("odt" in i.message for i in issues)
