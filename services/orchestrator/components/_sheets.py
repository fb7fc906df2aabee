"""Spreadsheets as tables of records (ExcelProcessor): .xlsx read and written with openpyxl, CSV with the stdlib.

A table is a list of row dicts keyed by the header row, as pandas' `to_dict(orient="records")` gives RAGFlow;
empty cells are None, and a sheet's empty trailing rows are dropped.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any

from tabulate import tabulate

Table = list[dict[str, Any]]
MAX_SHEET_NAME = 31  # Excel's limit


def read_xlsx(content: bytes, selection: str = "all") -> dict[str, Table]:
    """The workbook's sheets (`selection`: "all", "first", or comma-separated names), in workbook order."""
    from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(content), read_only=True, data_only=True)
    try:
        names = workbook.sheetnames
        if selection == "first":
            names = names[:1]
        elif selection and selection != "all":
            wanted = [s.strip() for s in selection.split(",")]
            names = [n for n in wanted if n in workbook.sheetnames]
        return {name: _records(list(workbook[name].iter_rows(values_only=True))) for name in names}
    finally:
        workbook.close()


def read_csv(text: str) -> dict[str, Table]:
    rows = list(csv.reader(io.StringIO(text)))
    return {"Sheet1": _records([tuple(_number(c) for c in r) for r in rows])}


def _number(cell: str) -> Any:
    """CSV cells that are numbers become numbers (pandas' read_csv does the same)."""
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return None if cell == "" else cell


def _records(rows: list[tuple[Any, ...]]) -> Table:
    while rows and all(v is None for v in rows[-1]):
        rows.pop()
    if not rows:
        return []
    header = [str(h) if h is not None else f"Unnamed: {i}" for i, h in enumerate(rows[0])]
    return [dict(zip(header, (*row, *([None] * (len(header) - len(row)))))) for row in rows[1:]]


def columns(table: Table) -> list[str]:
    seen: dict[str, None] = {}
    for row in table:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def markdown(table: Table, limit: int | None = None) -> str:
    rows = table[:limit] if limit else table
    cols = columns(table)
    return tabulate([[r.get(c) for c in cols] for r in rows], headers=cols, tablefmt="pipe")


def concat(tables: list[Table]) -> Table:
    return [row for t in tables for row in t]


def outer_join(tables: list[Table], key: str) -> Table:
    """Rows matched on `key` across tables (pandas' `merge(on=key, how="outer")`), first-seen key order."""
    merged: dict[Any, dict[str, Any]] = {}
    for table in tables:
        for row in table:
            merged.setdefault(row.get(key), {key: row.get(key)}).update(row)
    cols = columns(list(merged.values()))
    return [{c: row.get(c) for c in cols} for row in merged.values()]


def write_xlsx(sheets: dict[str, Table]) -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.remove(workbook.active)
    used: set[str] = set()
    for name, table in sheets.items():
        title = _sheet_title(name, used)
        sheet = workbook.create_sheet(title)
        cols = columns(table)
        sheet.append(cols)
        for row in table:
            sheet.append([_cell(row.get(c)) for c in cols])
    if not workbook.sheetnames:
        workbook.create_sheet("Sheet1")
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def write_csv(table: Table) -> bytes:
    out = io.StringIO()
    cols = columns(table)
    writer = csv.writer(out)
    writer.writerow(cols)
    for row in table:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in cols])
    return out.getvalue().encode("utf-8")


def _sheet_title(name: str, used: set[str]) -> str:
    base = "".join("_" if ch in '/\\?*[]:' else ch for ch in str(name))[:MAX_SHEET_NAME] or "Sheet"
    title, n = base, 1
    while title in used:
        suffix = f"_{n}"
        title, n = base[:MAX_SHEET_NAME - len(suffix)] + suffix, n + 1
    used.add(title)
    return title


def _cell(value: Any) -> Any:
    """openpyxl writes numbers, text, booleans and None; a list or object goes in as JSON text."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
