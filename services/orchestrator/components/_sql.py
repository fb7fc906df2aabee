"""ExeSQL's database side: where to connect (SSRF-checked), the drivers, and running statements.

Drivers are DB-API modules, each used in a worker thread (`run_statements` is blocking). Every statement
runs in a transaction of its own that the database keeps read-only, and is rolled back afterwards; what
starts that transaction (`_Session.prepare`) also sets the statement's time limit again, so a statement
that changed either for the session has no effect on the next one:
- mysql, mariadb, oceanbase: PyMySQL. `SET SESSION TRANSACTION READ ONLY` then `START TRANSACTION READ ONLY`
  (the session setting also covers the transaction a DDL statement's implicit commit starts). MariaDB caps
  a statement with `max_statement_time`, MySQL with `max_execution_time` (SELECT only); the client's read
  timeout backs both up.
- postgres: psycopg 3, `SET TRANSACTION READ ONLY` and `SET LOCAL statement_timeout` (and both as the
  connection's defaults).
- mssql: pymssql, its per-query `timeout`. SQL Server has no read-only transaction: the statement's
  transaction is only rolled back, which a T-SQL batch that commits itself escapes (docs/exesql.md).
- sqlite: the standard library, opened read-only, only under `EngineSettings.sql_sqlite_dir`; a progress
  handler stops a statement past the limit.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import ipaddress
import math
import os
import re
import socket
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from tabulate import tabulate

from services.orchestrator.egress.http import EgressPolicy, blocked_reason

NETWORK_TYPES = ("mysql", "mariadb", "oceanbase", "postgres", "mssql")
DB_TYPES = (*NETWORK_TYPES, "sqlite")
# RAGFlow also lists these; their drivers are not part of this deployment.
UNSUPPORTED_TYPES = ("IBM DB2", "trino")
DEFAULT_PORTS = {"mysql": 3306, "mariadb": 3306, "oceanbase": 2881, "postgres": 5432, "mssql": 1433}
CONNECT_TIMEOUT_S = 10

NO_RECORD = "No record in the database!"
WRITES_REFUSED = "For security reasons, INSERT, UPDATE, and DELETE statements are not supported."
READ_ONLY = "ExeSQL only reads: the database refused this statement in its read-only transaction"
_WRITE = re.compile(r"^(insert|update|delete)\b", re.IGNORECASE)
_CITATION = re.compile(r"\[ID:[0-9]+\]")


class SqlConnectionError(Exception):
    """The database could not be reached or refused the login."""


@dataclass(frozen=True, slots=True)
class Target:
    db_type: str
    host: str  # the checked IP address to connect to ("" for sqlite)
    port: int
    database: str  # for sqlite: the file path
    username: str
    password: str
    timeout_s: float
    host_name: str = ""  # the host as the params name it

    def where(self) -> str:
        if self.db_type == "sqlite":
            return self.database
        host = self.host if self.host_name in ("", self.host) else f"{self.host_name} ({self.host})"
        return f"{self.db_type} {self.database!r} at {host}:{self.port}"


async def checked_address(host: str, port: int, policy: EgressPolicy) -> str:
    """The IP to connect to for `host`: every address it resolves to must be public or allowed.

    Connecting to the checked IP (not the name again) leaves a DNS rebind nothing to slip through."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
        answers = [str(ip)]
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise SqlConnectionError(f"cannot resolve database host {host!r}: {exc.strerror}") from None
        answers = list(dict.fromkeys(info[4][0] for info in infos))
    if not policy.allows_host(host):
        for answer in answers:
            address = ipaddress.ip_address(answer.split("%", 1)[0])
            reason = blocked_reason(address)
            if reason and not policy.allows_ip(address):
                raise SqlConnectionError(
                    f"database host {host!r} is not allowed: {answer} is a {reason} address "
                    "(TRELLIS_SSRF_ALLOWLIST lists the hosts and networks that may be reached)")
    return answers[0]


def sqlite_path(database: str, root: str | None) -> str:
    """The SQLite file `database` names, which must lie under `root`."""
    if not root:
        raise SqlConnectionError("db_type 'sqlite' is disabled on this deployment "
                                 "(TRELLIS_EXESQL_SQLITE_DIR names the directory its files may be in)")
    base = os.path.realpath(root)
    path = os.path.realpath(os.path.join(base, database))
    if os.path.commonpath([base, path]) != base:
        raise SqlConnectionError(f"SQLite database {database!r} is outside {root}")
    if not os.path.isfile(path):
        raise SqlConnectionError(f"SQLite database {database!r} does not exist")
    return path


# ------------------------------------------------------------------------------------ drivers
@dataclass(slots=True)
class _Session:
    conn: Any  # the DB-API connection
    prepare: Callable[[Any], None]  # on a cursor, before each statement: its read-only transaction


def connect(t: Target) -> _Session:
    """An open session; SqlConnectionError when the database cannot be reached."""
    try:
        return _CONNECT[t.db_type](t)
    except SqlConnectionError:
        raise
    except Exception as exc:  # each driver has its own error classes
        raise SqlConnectionError(f"cannot connect to {t.where()}: {_first_line(exc)}") from None


def _mysql(t: Target) -> _Session:
    import pymysql

    conn = pymysql.connect(host=t.host, port=t.port, user=t.username, password=t.password, database=t.database,
                           charset="utf8mb4", connect_timeout=CONNECT_TIMEOUT_S, autocommit=False,
                           read_timeout=math.ceil(t.timeout_s) + 5, write_timeout=math.ceil(t.timeout_s) + 5)
    if "mariadb" in conn.get_server_info().lower():
        limit = f"SET SESSION max_statement_time = {float(t.timeout_s)!r}"
    else:
        limit = f"SET SESSION max_execution_time = {int(t.timeout_s * 1000)}"
    setup = ["SET SESSION TRANSACTION READ ONLY", limit, "START TRANSACTION READ ONLY"]
    try:
        with conn.cursor() as cur:
            cur.execute(limit)
    except pymysql.MySQLError:  # a MySQL-compatible server without the variable: the read timeout still holds
        setup.remove(limit)

    def prepare(cur: Any) -> None:
        for sql in setup:
            cur.execute(sql)

    return _Session(conn, prepare)


def _postgres(t: Target) -> _Session:
    import psycopg

    ms = int(t.timeout_s * 1000)
    conn = psycopg.connect(host=t.host, port=t.port, dbname=t.database, user=t.username, password=t.password,
                           connect_timeout=CONNECT_TIMEOUT_S, autocommit=False,
                           options=f"-c statement_timeout={ms} -c default_transaction_read_only=on")

    def prepare(cur: Any) -> None:  # psycopg has just begun the transaction: these come first in it
        cur.execute("SET TRANSACTION READ ONLY")
        cur.execute(f"SET LOCAL statement_timeout = {ms}")

    return _Session(conn, prepare)


def _mssql(t: Target) -> _Session:
    import pymssql

    conn = pymssql.connect(server=t.host, port=str(t.port), user=t.username, password=t.password,
                           database=t.database, login_timeout=CONNECT_TIMEOUT_S, timeout=math.ceil(t.timeout_s),
                           autocommit=False)
    return _Session(conn, lambda cur: None)


def _sqlite(t: Target) -> _Session:
    conn = sqlite3.connect(f"file:{t.database}?mode=ro", uri=True, timeout=t.timeout_s, check_same_thread=False)
    deadline = _Deadline(t.timeout_s)
    conn.set_progress_handler(deadline.passed, 10_000)
    conn.set_authorizer(_no_attach)
    return _Session(conn, lambda cur: deadline.restart())


def _no_attach(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_DENY if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH) else sqlite3.SQLITE_OK


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = 0.0

    def restart(self) -> None:
        self.end = time.monotonic() + self.seconds

    def passed(self) -> int:
        return 1 if time.monotonic() > self.end else 0  # non-zero interrupts the statement


_CONNECT = {"mysql": _mysql, "mariadb": _mysql, "oceanbase": _mysql, "postgres": _postgres, "mssql": _mssql,
            "sqlite": _sqlite}


# ------------------------------------------------------------------------------------ running
@dataclass(slots=True)
class Results:
    """RAGFlow's two outputs: `json` (per statement: its records, or {"content": message}) and the
    markdown of each statement joined by blank lines (`formalized_content`)."""

    json: list[Any]
    markdown: list[str]


def split_statements(sql: str) -> list[str]:
    """RAGFlow's split: on ';', code fences and [ID:n] citations removed, empty parts dropped."""
    out = []
    for part in sql.split(";"):
        part = _CITATION.sub("", part.replace("```", "").strip())
        if part:
            out.append(part)
    return out


def run_statements(t: Target, statements: list[str], max_records: int, component: str = "ExeSQL") -> Results:
    """Connect, run each statement in a read-only transaction rolled back after it, close. A failing
    statement is reported (naming `component` when the database refused a write) and the next one runs."""
    results = Results([], [])
    session = connect(t)
    conn = session.conn
    try:
        cursor = conn.cursor()
        for sql in statements:
            if _WRITE.match(sql):
                results.json.append({"content": WRITES_REFUSED})
                results.markdown.append(WRITES_REFUSED)
                continue
            try:
                session.prepare(cursor)
            except Exception as exc:  # fail closed: no statement runs outside its read-only transaction
                raise SqlConnectionError(f"cannot start a read-only transaction on {t.where()}: "
                                         f"{_first_line(exc)}") from None
            try:
                cursor.execute(sql)
                rows = cursor.fetchmany(max_records) if cursor.description else []
                columns = [str(d[0]) for d in cursor.description] if rows else []
            except Exception as exc:
                msg = f"SQL Execution Failed: {sql}\n{_error_text(exc, t, component)}"
                results.json.append({"content": msg})
                results.markdown.append(msg)
                continue
            finally:
                _rollback(conn)
            if not rows:
                results.json.append({"content": NO_RECORD})
                results.markdown.append(NO_RECORD)
                continue
            records = [[_plain(v) for v in row] for row in rows]
            results.json.append([dict(zip(columns, r)) for r in records])
            results.markdown.append(tabulate(records, headers=columns, tablefmt="pipe", floatfmt=".6f",
                                             missingval=""))
    finally:
        try:
            conn.close()
        except Exception:
            pass
    return results


def _rollback(conn: Any) -> None:
    """End the statement's transaction, undoing whatever it did (PostgreSQL also refuses every later
    statement of a failed one until then)."""
    try:
        conn.rollback()
    except Exception:
        pass


def _plain(v: Any) -> Any:
    """A JSON value, as RAGFlow writes cells: datetimes as dates, decimals as floats, NaN as null."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, decimal.Decimal):
        return None if not v.is_finite() else float(v)
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d")
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        raw = bytes(v)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.hex()
    if isinstance(v, (uuid.UUID, dt.timedelta)):
        return str(v)
    if isinstance(v, (list, dict)):
        return v
    return str(v)


def _error_text(exc: Exception, t: Target, component: str) -> str:
    text = _first_line(exc)
    if isinstance(exc, sqlite3.OperationalError) and "interrupted" in text:
        return f"the statement ran past its {t.timeout_s:g} s limit (interrupted)"
    if _is_read_only_refusal(exc):
        return f"{component}: refused: {READ_ONLY} ({text})"
    return text


def _is_read_only_refusal(exc: Exception) -> bool:
    if getattr(exc, "sqlstate", None) == "25006":  # PostgreSQL: read_only_sql_transaction
        return True
    args = getattr(exc, "args", ())
    if args and args[0] == 1792:  # MySQL/MariaDB: ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
        return True
    return (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_READONLY  # extended codes too


def _first_line(exc: Exception) -> str:
    """The driver's message (PyMySQL's is a tuple `(code, text)`), cut to a readable length."""
    args = getattr(exc, "args", ())
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
        return f"({args[0]}) {args[1]}"[:2000]
    return (str(exc).strip() or type(exc).__name__)[:2000]
