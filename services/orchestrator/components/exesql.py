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
from typing import Annotated, Any

from services.orchestrator.components import _sql
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params, validator
from services.orchestrator.egress.http import EgressPolicy

ALL_TYPES = (*_sql.DB_TYPES, *_sql.UNSUPPORTED_TYPES)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _db_type(db_type: Any) -> Any:
    if db_type not in ALL_TYPES:
        raise ValueError(f"must be one of {', '.join(ALL_TYPES)}; got {db_type!r}")
    if db_type in _sql.UNSUPPORTED_TYPES:
        raise ValueError(f"{db_type!r} is not supported here (supported: {', '.join(_sql.DB_TYPES)})")
    return db_type


def _count(value: Any) -> Any:
    if value not in (None, "") and _positive_int(value) is None:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return value


class ExeSQLParams(Params):
    sql: Any = None  # {refs} expanded; ';' separates statements
    db_type: Annotated[Any, validator(_db_type)] = "mysql"
    database: Any = None  # connection fields may be empty in a shared template: checked when the node runs
    username: Any = None
    host: Any = None
    password: Any = None
    port: Annotated[Any, validator(_count)] = None
    max_records: Annotated[Any, validator(_count)] = None


@register
class ExeSQL(Component):
    component_name = "ExeSQL"
    params_model = ExeSQLParams
    params: ExeSQLParams

    @classmethod
    def tool_meta(cls, params: ExeSQLParams) -> dict[str, Any]:
        return {"name": "execute_sql", "description": "This is a tool that can execute SQL.",
                "parameters": {"sql": {"type": "string", "description": "The SQL needs to be executed.",
                                       "default": "{sys.query}", "required": True}}}

    def thoughts(self, ctx: NodeContext) -> str:
        return "Query sent—waiting for the data."

    async def run(self, ctx: NodeContext) -> None:
        cid, p = ctx.component_id, self.params
        sql = await ctx.render(str(p.sql or ""))
        ctx.set_input("sql", sql)
        statements = _sql.split_statements(sql)
        if not statements:
            raise ValueError(f"{cid}: params.sql: SQL for `ExeSQL` MUST not be empty.")
        target = await self._target(ctx)
        max_records = _positive_int(p.max_records) or 1024
        try:
            results = await asyncio.to_thread(_sql.run_statements, target, statements, max_records, cid)
        except _sql.SqlConnectionError as exc:
            raise RuntimeError(f"{cid}: database connection failed: {exc}") from None
        ctx.set_output("json", results.json)
        ctx.set_output("formalized_content", "\n\n".join(results.markdown))

    async def _target(self, ctx: NodeContext) -> _sql.Target:
        cid, p = ctx.component_id, self.params
        db_type = p.db_type or "mysql"  # one of _sql.DB_TYPES (ExeSQLParams)
        fields = {k: str(getattr(p, k) or "").strip() for k in ("database", "username", "host", "password")}
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
        port = _positive_int(p.port) or _sql.DEFAULT_PORTS[db_type]
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
