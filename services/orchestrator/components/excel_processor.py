"""ExcelProcessor: reads, merges, transforms and writes spreadsheets (RAGFlow `agent/component/excel_processor.py`).

Params: `operation` ("read" default, "merge", "transform", "output"), `input_files` (references to files),
`sheet_selection` ("all", "first", or comma-separated sheet names), `merge_strategy` ("concat" or "join"),
`join_on` (the join column), `transform_instructions`, `transform_data` (a reference to the data),
`output_format` ("xlsx" or "csv"), `output_filename` (default "output").
Outputs: `data` ({"<file>" or "<file>_<sheet>": rows} for read, {"merged": rows} for merge), `summary`,
`markdown`, and for output `attachment`: RAGFlow's {doc_id, format, file_name} plus the download info
(attachments.py), so a Message that references it lists the file in its message_end `downloads`.

A file is what the run hands over (_files.py): a `sys.files` entry or a Begin file input, a data URI, or a
file another component of the tenant produced. Unlike RAGFlow, a file that cannot be read fails the
component naming it, instead of being skipped.
"""
from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from services.orchestrator.components import _sheets
from services.orchestrator.components._fields import FieldError, decode_json_container
from services.orchestrator.components._files import run_files
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params, validator
from services.orchestrator.store import attachments

OPERATIONS = ("read", "merge", "transform", "output")
FORMATS = {"xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "csv": "text/csv"}
_THOUGHTS = {"read": "Reading Excel files...", "merge": "Merging Excel data...",
             "transform": "Transforming data...", "output": "Generating Excel output..."}


def _operation(op: Any) -> Any:
    if str(op or "read").lower() not in OPERATIONS:
        raise ValueError(f"must be one of {', '.join(OPERATIONS)}, got {op!r}")
    return op


def _format(fmt: Any) -> Any:
    if fmt and (not isinstance(fmt, str) or fmt not in FORMATS):
        raise ValueError(f"must be xlsx or csv, got {fmt!r}")
    return fmt


def _files(files: Any) -> Any:
    if not isinstance(files, (list, str)):
        raise ValueError("must be a list of references")
    return files


class ExcelProcessorParams(Params):
    operation: Annotated[Any, validator(_operation)] = "read"
    input_files: Annotated[Any, validator(_files)] = []  # references to files (or one)
    sheet_selection: Any = "all"
    merge_strategy: Literal["concat", "join", ""] | None = "concat"
    join_on: Any = None
    transform_instructions: Any = None
    transform_data: Any = None
    output_format: Annotated[Any, validator(_format)] = "xlsx"
    output_filename: Any = None


@register
class ExcelProcessor(Component):
    component_name = "ExcelProcessor"
    params_model = ExcelProcessorParams
    params: ExcelProcessorParams

    def thoughts(self, ctx: NodeContext) -> str:
        return _THOUGHTS.get(str(self.params.operation or "read").lower(), "Processing Excel...")

    async def run(self, ctx: NodeContext) -> None:
        op = str(self.params.operation or "read").lower()
        await {"read": self._read, "merge": self._merge, "transform": self._transform, "output": self._output}[op](ctx)

    # -- read / merge
    async def _sheets_of_inputs(self, ctx: NodeContext) -> list[tuple[str, dict[str, _sheets.Table]]]:
        refs = self.params.input_files or []
        refs = [refs] if isinstance(refs, str) else refs
        out = []
        selection = str(self.params.sheet_selection or "all")
        for ref in refs:
            ref = str(ref).strip().strip("{}")
            value = await ctx.value(ref)
            ctx.set_input(ref, str(value)[:200] if value else "")
            for name, content in await run_files(ctx, ref, value, "params.input_files", data_name="uploaded.xlsx",
                                                    text_name="uploaded.csv"):
                try:
                    if name.lower().endswith(".csv"):
                        sheets = _sheets.read_csv(content.decode("utf-8-sig"))
                    else:
                        sheets = await asyncio.to_thread(_sheets.read_xlsx, content, selection)
                except Exception as exc:  # openpyxl's many errors for a file that is no workbook
                    raise FieldError(ctx.component_id, "params.input_files",
                                     f"{name} (from {ref}) is not a readable .xlsx or .csv file: {exc}") from None
                out.append((name, sheets))
        return out

    async def _read(self, ctx: NodeContext) -> None:
        data: dict[str, _sheets.Table] = {}
        summaries, parts = [], []
        for filename, sheets in await self._sheets_of_inputs(ctx):
            for sheet, table in sheets.items():
                key = f"{filename}_{sheet}" if len(sheets) > 1 else filename
                data[key] = table
                cols = _sheets.columns(table)
                summaries.append(f"**{key}**: {len(table)} rows, {len(cols)} columns "
                                 f"({', '.join(cols[:5])}{'...' if len(cols) > 5 else ''})")
                parts.append(f"### {key}\n\n{_sheets.markdown(table, 10)}\n")
        ctx.set_output("data", data)
        ctx.set_output("summary", "\n".join(summaries) if summaries else "No Excel files found")
        ctx.set_output("markdown", "\n\n".join(parts) if parts else "No data")

    async def _merge(self, ctx: NodeContext) -> None:
        tables = [t for _, sheets in await self._sheets_of_inputs(ctx) for t in sheets.values()]
        if not tables:
            ctx.set_output("data", {})
            ctx.set_output("summary", "No data to merge")
            return
        key = str(self.params.join_on or "")
        merged = (_sheets.outer_join(tables, key) if self.params.merge_strategy == "join" and key
                  else _sheets.concat(tables))
        ctx.set_output("data", {"merged": merged})
        ctx.set_output("summary", f"Merged {len(tables)} sources into {len(merged)} rows, "
                                  f"{len(_sheets.columns(merged))} columns")
        ctx.set_output("markdown", _sheets.markdown(merged, 20))

    # -- transform / output
    async def _data(self, ctx: NodeContext) -> Any:
        ref = str(self.params.transform_data or "").strip().strip("{}")
        if not ref:
            return None
        data = decode_json_container(await ctx.value(ref))
        ctx.set_input(ref, str(data)[:300] if data else "")
        return data

    async def _transform(self, ctx: NodeContext) -> None:
        if not self.params.transform_data:
            ctx.set_output("summary", "No transform data reference provided")
            return
        data = await self._data(ctx)
        if data is None:
            ctx.set_output("summary", "Transform data is empty")
            return
        sheets = _as_sheets(data)
        if sheets is None:
            ctx.set_output("data", {"raw": str(data)})
            ctx.set_output("markdown", str(data))
        elif isinstance(data, dict) and all(isinstance(v, list) for v in data.values()):
            ctx.set_output("data", data)
            ctx.set_output("markdown", "\n\n".join(f"### {k}\n\n{_sheets.markdown(t)}" for k, t in sheets.items()))
        else:
            ctx.set_output("data", sheets["Sheet1"])
            ctx.set_output("markdown", _sheets.markdown(sheets["Sheet1"]))
        ctx.set_output("summary", "Transformed data ready for processing")

    async def _output(self, ctx: NodeContext) -> None:
        if not self.params.transform_data:
            ctx.set_output("summary", "No data reference for output")
            return
        data = await self._data(ctx)
        if data is None:
            ctx.set_output("summary", "No data to output")
            return
        sheets = _as_sheets(data)
        if sheets is None:
            raise FieldError(ctx.component_id, "params.transform_data",
                             f"needs rows (a list of objects) or {{sheet: rows}} to write, got {type(data).__name__}")
        fmt = self.params.output_format or "xlsx"
        filename = f"{self.params.output_filename or 'output'}.{fmt}"
        if fmt == "csv":  # one sheet only, as RAGFlow
            content = _sheets.write_csv(next(iter(sheets.values())))
        else:
            content = await asyncio.to_thread(_sheets.write_xlsx, sheets)
        info = await attachments.save(ctx, filename, FORMATS[fmt], content)
        ctx.set_output("attachment", {"doc_id": info["doc_id"], "format": fmt, "file_name": filename, **info})
        rows = sum(len(t) for t in sheets.values())
        ctx.set_output("summary", f"Generated {filename} with {len(sheets)} sheet(s), {rows} total rows")
        ctx.set_output("data", sheets)


def _as_sheets(data: Any) -> dict[str, _sheets.Table] | None:
    """{sheet: rows} from the shapes RAGFlow accepts: {sheet: [rows]}, [rows], or one row {col: value}."""
    if isinstance(data, dict):
        if data and all(isinstance(v, list) for v in data.values()):
            return {str(k): [r if isinstance(r, dict) else {"value": r} for r in v] for k, v in data.items()}
        return {"Sheet1": [data]}
    if isinstance(data, list):
        return {"Sheet1": [r if isinstance(r, dict) else {"value": r} for r in data]}
    return None
