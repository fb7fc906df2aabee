"""ExeSQL's database side: where to connect (SSRF-checked), the drivers, and running statements.

Drivers are DB-API modules, each used in a worker thread (`run_statements` is blocking):
- mysql, mariadb, oceanbase: PyMySQL. MariaDB caps a statement with `max_statement_time`, MySQL with
  `max_execution_time` (SELECT only); the client's read timeout backs both up.
- postgres: psycopg 3, `statement_timeout` set for the connection.
- mssql: pymssql, its per-query `timeout`.
- sqlite: the standard library, read-only, only under `EngineSettings.sql_sqlite_dir`; a progress
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
from typing import Any

from tabulate import tabulate

from ..http_client import EgressPolicy, blocked_reason

NETWORK_TYPES = ("mysql", "mariadb", "oceanbase", "postgres", "mssql")
DB_TYPES = (*NETWORK_TYPES, "sqlite")
# RAGFlow also lists these; their drivers are not part of this deployment.
UNSUPPORTED_TYPES = ("IBM DB2", "trino")
DEFAULT_PORTS = {"mysql": 3306, "mariadb": 3306, "oceanbase": 2881, "postgres": 5432, "mssql": 1433}
CONNECT_TIMEOUT_S = 10

NO_RECORD = "No record in the database!"
WRITES_REFUSED = "For security reasons, INSERT, UPDATE, and DELETE statements are not supported."
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
def connect(t: Target) -> Any:
    """An open DB-API connection; SqlConnectionError when the database cannot be reached."""
    try:
        return _CONNECT[t.db_type](t)
    except SqlConnectionError:
        raise
    except Exception as exc:  # each driver has its own error classes
        raise SqlConnectionError(f"cannot connect to {t.where()}: {_first_line(exc)}") from None


def _mysql(t: Target) -> Any:
    import pymysql

    conn = pymysql.connect(host=t.host, port=t.port, user=t.username, password=t.password, database=t.database,
                           charset="utf8mb4", connect_timeout=CONNECT_TIMEOUT_S,
                           read_timeout=math.ceil(t.timeout_s) + 5, write_timeout=math.ceil(t.timeout_s) + 5)
    mariadb = "mariadb" in conn.get_server_info().lower()
    try:
        with conn.cursor() as cur:
            if mariadb:
                cur.execute("SET SESSION max_statement_time = %s", (t.timeout_s,))
            else:
                cur.execute("SET SESSION max_execution_time = %s", (int(t.timeout_s * 1000),))
    except pymysql.MySQLError:  # a MySQL-compatible server without the variable: the read timeout still holds
        pass
    return conn


def _postgres(t: Target) -> Any:
    import psycopg

    return psycopg.connect(host=t.host, port=t.port, dbname=t.database, user=t.username, password=t.password,
                           connect_timeout=CONNECT_TIMEOUT_S, options=f"-c statement_timeout={int(t.timeout_s * 1000)}")


def _mssql(t: Target) -> Any:
    import pymssql

    return pymssql.connect(server=t.host, port=str(t.port), user=t.username, password=t.password,
                           database=t.database, login_timeout=CONNECT_TIMEOUT_S, timeout=math.ceil(t.timeout_s))


class _SqliteConnection(sqlite3.Connection):
    deadline: _Deadline  # restarted before each statement by run_statements


def _sqlite(t: Target) -> Any:
    conn = sqlite3.connect(f"file:{t.database}?mode=ro", uri=True, timeout=t.timeout_s, check_same_thread=False,
                           factory=_SqliteConnection)
    conn.deadline = _Deadline(t.timeout_s)
    conn.set_progress_handler(conn.deadline.passed, 10_000)
    conn.set_authorizer(_no_attach)
    return conn


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


def run_statements(t: Target, statements: list[str], max_records: int) -> Results:
    """Connect, run each statement, close. A failing statement is reported and the next one runs."""
    results = Results([], [])
    conn = connect(t)
    try:
        cursor = conn.cursor()
        for sql in statements:
            if _WRITE.match(sql):
                results.json.append({"content": WRITES_REFUSED})
                results.markdown.append(WRITES_REFUSED)
                continue
            deadline = getattr(conn, "deadline", None)
            if deadline is not None:
                deadline.restart()
            try:
                cursor.execute(sql)
                rows = cursor.fetchmany(max_records) if cursor.description else []
            except Exception as exc:
                try:  # PostgreSQL refuses every later statement of an aborted transaction
                    conn.rollback()
                except Exception:
                    pass
                msg = f"SQL Execution Failed: {sql}\n{_error_text(exc, t)}"
                results.json.append({"content": msg})
                results.markdown.append(msg)
                continue
            if not rows:
                results.json.append({"content": NO_RECORD})
                results.markdown.append(NO_RECORD)
                continue
            columns = [str(d[0]) for d in cursor.description]
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


def _error_text(exc: Exception, t: Target) -> str:
    text = _first_line(exc)
    if isinstance(exc, sqlite3.OperationalError) and "interrupted" in text:
        return f"the statement ran past its {t.timeout_s:g} s limit (interrupted)"
    return text


def _first_line(exc: Exception) -> str:
    """The driver's message (PyMySQL's is a tuple `(code, text)`), cut to a readable length."""
    args = getattr(exc, "args", ())
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
        return f"({args[0]}) {args[1]}"[:2000]
    return (str(exc).strip() or type(exc).__name__)[:2000]
