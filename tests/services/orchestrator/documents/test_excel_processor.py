"""ExcelProcessor: real workbooks read (openpyxl), merged, transformed, and written back as the run's attachment."""

from __future__ import annotations

import base64
import io

import pytest
from openpyxl import Workbook, load_workbook

from services.orchestrator.components import get_class, is_available
from services.orchestrator.components._fields import FieldError
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine.settings import Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.store.attachments import AttachmentStore

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _workbook(sheets: dict[str, list[list]]) -> bytes:
    wb = Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        for row in rows:
            ws.append(row)
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def _file(name: str, content: bytes) -> dict:
    """A file as the run hands it over (convert.py: a binary file is a base64 data URI)."""
    return {"name": name, "mime_type": XLSX, "content": f"data:{XLSX};base64,{base64.b64encode(content).decode()}"}


SALES = _workbook({"Q1": [["region", "sales"], ["EMEA", 120], ["APAC", 95]], "Q2": [["region", "sales"], ["EMEA", 130]]})
TARGETS = _workbook({"Targets": [["region", "target"], ["EMEA", 125], ["AMER", 80]]})


@pytest.fixture
async def store(redis_client):
    return AttachmentStore(redis_client)


async def _run(store, params, outputs=None, globals_=None):
    ctx = NodeContext.for_test(params, component_id="ExcelProcessor:x", component_name="ExcelProcessor",
                               outputs=outputs, globals_=globals_, services=Services(attachments=store),
                               request=RunRequest(run_id="run-test", tenant_id="tenant-a"))
    await get_class("ExcelProcessor")("ExcelProcessor:x", params).run(ctx)
    return ctx.outputs


def test_registered():
    assert is_available("ExcelProcessor")


async def test_read_every_sheet_of_an_uploaded_workbook(store):
    out = await _run(store, {"operation": "read", "input_files": ["{begin@sheet}"]},
                     outputs={"begin": {"sheet": _file("sales.xlsx", SALES)}})
    assert out["data"] == {"sales.xlsx_Q1": [{"region": "EMEA", "sales": 120}, {"region": "APAC", "sales": 95}],
                           "sales.xlsx_Q2": [{"region": "EMEA", "sales": 130}]}
    assert "**sales.xlsx_Q1**: 2 rows, 2 columns (region, sales)" in out["summary"]
    assert "| EMEA     |     120 |" in out["markdown"]


async def test_read_first_sheet_and_csv_from_sys_files(store):
    files = [_file("sales.xlsx", SALES), {"name": "extra.csv", "content": "region,sales\nLATAM,7\n"}]
    out = await _run(store, {"operation": "read", "input_files": ["sys.files"], "sheet_selection": "first"},
                     globals_={"sys.files": files})
    assert out["data"] == {"sales.xlsx": [{"region": "EMEA", "sales": 120}, {"region": "APAC", "sales": 95}],
                           "extra.csv": [{"region": "LATAM", "sales": 7}]}


async def test_merge_concat_and_join(store):
    outputs = {"begin": {"a": _file("sales.xlsx", SALES), "b": _file("targets.xlsx", TARGETS)}}
    concat = await _run(store, {"operation": "merge", "input_files": ["{begin@a}"], "sheet_selection": "Q1,Q2"},
                        outputs=outputs)
    assert [r["sales"] for r in concat["data"]["merged"]] == [120, 95, 130]
    joined = await _run(store, {"operation": "merge", "input_files": ["{begin@a}", "{begin@b}"], "sheet_selection": "Q1,Targets",
                                "merge_strategy": "join", "join_on": "region"}, outputs=outputs)
    assert joined["data"]["merged"] == [{"region": "EMEA", "sales": 120, "target": 125},
                                        {"region": "APAC", "sales": 95, "target": None},
                                        {"region": "AMER", "sales": None, "target": 80}]
    assert joined["summary"] == "Merged 2 sources into 3 rows, 3 columns"


async def test_output_writes_a_workbook_the_owner_can_read_back(store):
    data = {"Summary": [{"region": "EMEA", "total": 250}], "Detail": [{"region": "EMEA", "q": "Q1", "sales": 120}]}
    out = await _run(store, {"operation": "output", "transform_data": "{Code:c@result}", "output_filename": "report"},
                     outputs={"Code:c": {"result": data}})
    att = out["attachment"]
    assert (att["format"], att["file_name"], att["filename"], att["mime_type"]) == ("xlsx", "report.xlsx", "report.xlsx", XLSX)
    stored = await store.get("tenant-a", att["doc_id"])
    assert await store.get("tenant-b", att["doc_id"]) is None
    wb = load_workbook(io.BytesIO(stored.content))
    assert wb.sheetnames == ["Summary", "Detail"]
    assert [list(r) for r in wb["Detail"].iter_rows(values_only=True)] == [["region", "q", "sales"], ["EMEA", "Q1", 120]]
    assert out["summary"] == "Generated report.xlsx with 2 sheet(s), 2 total rows"


async def test_output_csv_from_json_text_rows(store):
    out = await _run(store, {"operation": "output", "output_format": "csv", "transform_data": "{LLM:l@content}"},
                     outputs={"LLM:l": {"content": '[{"name": "Ada", "age": 36}, {"name": "Alan", "age": 41}]'}})
    stored = await store.get("tenant-a", out["attachment"]["doc_id"])
    assert stored.content.decode() == "name,age\r\nAda,36\r\nAlan,41\r\n" and stored.filename == "output.csv"


async def test_transform_renders_tables(store):
    out = await _run(store, {"operation": "transform", "transform_data": "{Code:c@result}"},
                     outputs={"Code:c": {"result": [{"a": 1, "b": 2}]}})
    assert out["data"] == [{"a": 1, "b": 2}] and "|   a |   b |" in out["markdown"]


async def test_a_file_that_is_no_workbook_is_a_clear_error(store):
    with pytest.raises(FieldError) as err:
        await _run(store, {"operation": "read", "input_files": ["{begin@f}"]},
                   outputs={"begin": {"f": _file("broken.xlsx", b"not a zip")}})
    assert "ExcelProcessor:x: params.input_files: broken.xlsx (from begin@f) is not a readable" in str(err.value)


def test_validation_names_the_field():
    issues = get_class("ExcelProcessor").check("E:x", {"operation": "pivot", "output_format": "ods"})
    assert {i.field for i in issues} == {"params.operation", "params.output_format"}
