"""ExeSQL: runs SQL on a database and returns the rows (RAGFlow `agent/tools/exesql.py`).

Params (RAGFlow's): `sql` (text with {refs}; as an Agent tool, the model's `sql` argument), `db_type`
("mysql", "mariadb", "postgres", "mssql", "oceanbase", and the Trellis addition "sqlite"), `database`,
`username`, `host`, `port` (3306), `password`, `max_records` (1024: rows kept per statement).
Connection fields may be empty in a shared template: they are checked when the node runs.

Outputs: `formalized_content` (one markdown table per statement, blank-line separated) and `json`
(per statement: its records, or {"content": message}). Statements are split on ';'. INSERT, UPDATE
and DELETE are refused, as RAGFlow does, and each statement runs in a read-only transaction that is rolled
back after it, so any other write (DDL, a CTE with DML...) is refused by the database (SQL Server has no
read-only transaction: docs/exesql.md). A statement that fails is reported in both outputs as
"SQL Execution Failed: <sql>\\n<error>" and the next one runs; a statement with no rows gives
"No record in the database!" (RAGFlow stops at it; here the later statements still run). A database
that cannot be reached fails the node with an error naming it. Each statement is limited to
`EngineSettings.sql_timeout_s` on the server. The database host goes through the SSRF guard.
Drivers and statement handling: `_sql.py`.
"""
from __future__ import annotations

import asyncio
from typing import Any

from ..http_client import EgressPolicy
from . import _sql
from .base import Component, NodeContext, ValidationIssue, register

ALL_TYPES = (*_sql.DB_TYPES, *_sql.UNSUPPORTED_TYPES)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


@register
class ExeSQL(Component):
    component_name = "ExeSQL"

    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
        return {"name": "execute_sql", "description": "This is a tool that can execute SQL.",
                "parameters": {"sql": {"type": "string", "description": "The SQL needs to be executed.",
                                       "default": "{sys.query}", "required": True}}}

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        issues = []
        db_type = params.get("db_type", "mysql")
        if db_type not in ALL_TYPES:
            issues.append(ValidationIssue(cpn_id, "params.db_type", f"must be one of {', '.join(ALL_TYPES)}; "
                                          f"got {db_type!r}"))
        elif db_type in _sql.UNSUPPORTED_TYPES:
            issues.append(ValidationIssue(cpn_id, "params.db_type", f"{db_type!r} is not supported here "
                                          f"(supported: {', '.join(_sql.DB_TYPES)})"))
        for name in ("port", "max_records"):
            if params.get(name) not in (None, "") and _positive_int(params[name]) is None:
                issues.append(ValidationIssue(cpn_id, f"params.{name}",
                                              f"must be a positive integer, got {params[name]!r}"))
        return issues

    def thoughts(self, ctx: NodeContext) -> str:
        return "Query sent—waiting for the data."

    async def run(self, ctx: NodeContext) -> None:
        cid, p = ctx.component_id, self.params
        sql = await ctx.render(str(p.get("sql") or ""))
        ctx.set_input("sql", sql)
        statements = _sql.split_statements(sql)
        if not statements:
            raise ValueError(f"{cid}: params.sql: SQL for `ExeSQL` MUST not be empty.")
        target = await self._target(ctx)
        max_records = _positive_int(p.get("max_records")) or 1024
        try:
            results = await asyncio.to_thread(_sql.run_statements, target, statements, max_records, cid)
        except _sql.SqlConnectionError as exc:
            raise RuntimeError(f"{cid}: database connection failed: {exc}") from None
        ctx.set_output("json", results.json)
        ctx.set_output("formalized_content", "\n\n".join(results.markdown))

    async def _target(self, ctx: NodeContext) -> _sql.Target:
        cid, p = ctx.component_id, self.params
        db_type = p.get("db_type") or "mysql"
        if db_type not in _sql.DB_TYPES:
            raise ValueError(f"{cid}: params.db_type: {db_type!r} is not supported (supported: "
                             f"{', '.join(_sql.DB_TYPES)})")
        fields = {k: str(p.get(k) or "").strip() for k in ("database", "username", "host", "password")}
        timeout = ctx.settings.sql_timeout_s
        if db_type == "sqlite":
            if not fields["database"]:
                raise ValueError(f"{cid}: params.database: the SQLite file is required")
            try:
                path = _sql.sqlite_path(fields["database"], ctx.settings.sql_sqlite_dir)
            except _sql.SqlConnectionError as exc:
                raise RuntimeError(f"{cid}: {exc}") from None
            return _sql.Target("sqlite", "", 0, path, "", "", timeout)
        for name, label in (("database", "Database name"), ("username", "database username"), ("host", "IP Address")):
            if not fields[name]:
                raise ValueError(f"{cid}: params.{name}: {label} is required")
        port = _positive_int(p.get("port")) or _sql.DEFAULT_PORTS[db_type]
        try:
            host = await _sql.checked_address(fields["host"], port, self._policy(ctx))
        except _sql.SqlConnectionError as exc:
            raise RuntimeError(f"{cid}: {exc}") from None
        return _sql.Target(db_type, host, port, fields["database"], fields["username"], fields["password"], timeout,
                           fields["host"])

    @staticmethod
    def _policy(ctx: NodeContext) -> EgressPolicy:
        if ctx.http is not None:
            return ctx.http.policy
        try:
            return EgressPolicy.from_entries(ctx.settings.ssrf_allowlist)
        except ValueError as exc:
            raise RuntimeError(f"{ctx.component_id}: engine setting ssrf_allowlist: {exc}") from None
