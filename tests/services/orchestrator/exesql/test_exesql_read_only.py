"""ExeSQL only reads: writes the first-word check misses (DDL, comments first, CTEs with DML, REPLACE,
statements that undo the session's read-only mode or time limit) are refused by the real PostgreSQL and
MariaDB servers of conftest.py, and the data is unchanged afterwards."""
from __future__ import annotations

import pytest

from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.exesql import ExeSQL
from services.orchestrator.engine.settings import EngineSettings

LOOPBACK = EngineSettings(ssrf_allowlist=("127.0.0.1",))
REFUSED = "ExeSQL:q: refused: ExeSQL only reads: the database refused this statement in its read-only transaction"
INSERT = "INSERT INTO products VALUES (9, 'Stolen', 'x', 1.00, NULL)"
WRITES = {
    "both": [
        f"/* a comment first */ {INSERT}",
        "-- a comment first\nUPDATE products SET unit_price = 0",
        "CREATE TABLE evil (x INT)",
        "DROP TABLE orders",
        "TRUNCATE TABLE orders",
        "ALTER TABLE products ADD COLUMN z INT",
        "CREATE INDEX evil_idx ON products (name)",
    ],
    "postgres": [
        "WITH gone AS (DELETE FROM orders RETURNING id) SELECT count(*) AS n FROM gone",
        "SELECT * INTO evil FROM products",
    ],
    "mariadb": [
        "REPLACE INTO products VALUES (1, 'Stolen', 'x', 1.00, NULL)",
        "CREATE TABLE evil AS SELECT * FROM products",
        "RENAME TABLE orders TO gone",
    ],
}
# A statement that turns the session read-write, or commits, and the write that would then go through.
ESCAPES = {
    "postgres": ["SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", "SET default_transaction_read_only = off",
                 "COMMIT", "BEGIN READ WRITE"],
    "mariadb": ["SET SESSION TRANSACTION READ WRITE", "SET SESSION tx_read_only = 0", "COMMIT",
                "START TRANSACTION READ WRITE", "SET autocommit = 1"],
}


@pytest.fixture(params=["postgres", "mariadb"])
def db(request):
    return request.getfixturevalue(f"{request.param}_db")


async def run_sql(params: dict, settings: EngineSettings = LOOPBACK) -> NodeContext:
    ctx = NodeContext.for_test(params, settings=settings, component_id="ExeSQL:q", component_name="ExeSQL")
    await ExeSQL("ExeSQL:q", params).run(ctx)
    return ctx


def snapshot(db) -> dict[str, list[tuple]]:
    """Every table of the test database and its rows, read with the driver directly."""
    p = db.params()
    if db.db_type == "postgres":
        import psycopg

        with psycopg.connect(host=p["host"], port=p["port"], user=p["username"], password=p["password"],
                             dbname=p["database"], autocommit=True) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
            tables = {n: sorted(conn.execute(f'SELECT * FROM "{n}"').fetchall()) for n in names}
            indexes = [r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")]
    else:
        import pymysql

        with pymysql.connect(host=p["host"], port=p["port"], user=p["username"], password=p["password"],
                             database=p["database"], autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
            names = [r[0] for r in cur.fetchall()]
            tables = {}
            for n in names:
                cur.execute(f"SELECT * FROM `{n}`")
                tables[n] = sorted(cur.fetchall())
            cur.execute("SELECT DISTINCT index_name FROM information_schema.statistics "
                        "WHERE table_schema = DATABASE()")
            indexes = [r[0] for r in cur.fetchall()]
    return {"tables": sorted(tables.items()), "indexes": sorted(indexes)}  # type: ignore[dict-item]


def assert_refused(result, statement: str) -> None:
    assert isinstance(result, dict), f"{statement!r} ran: {result}"
    assert result["content"].startswith(f"SQL Execution Failed: {statement}\n{REFUSED} ("), result["content"]


@pytest.mark.parametrize("db_type, statement", [(t, s) for t in ("postgres", "mariadb") for s in WRITES["both"] + WRITES[t]])
async def test_writes_the_first_word_check_misses_are_refused_by_the_database(request, db_type, statement):
    db = request.getfixturevalue(f"{db_type}_db")
    before = snapshot(db)
    ctx = await run_sql(db.params(sql=f"{statement}; SELECT count(*) AS n FROM products"))
    refused, after = ctx.outputs["json"]
    assert_refused(refused, statement)
    assert after == [{"n": 4}]
    assert snapshot(db) == before
    assert refused["content"] in ctx.outputs["formalized_content"]


@pytest.mark.parametrize("db_type, escape", [(t, s) for t, escapes in ESCAPES.items() for s in escapes])
async def test_a_statement_leaving_read_only_mode_does_not_let_the_next_one_write(request, db_type, escape):
    db = request.getfixturevalue(f"{db_type}_db")
    before = snapshot(db)
    ctx = await run_sql(db.params(sql=f"{escape}; DROP TABLE orders; CREATE TABLE evil (x INT); {INSERT}"))
    _, drop, create, insert = ctx.outputs["json"]
    assert_refused(drop, "DROP TABLE orders")
    assert_refused(create, "CREATE TABLE evil (x INT)")
    assert insert == {"content": "For security reasons, INSERT, UPDATE, and DELETE statements are not supported."}
    assert snapshot(db) == before


async def test_a_select_then_a_drop_in_one_text(db):
    before = snapshot(db)
    ctx = await run_sql(db.params(sql="SELECT 1 AS one; DROP TABLE products"))
    rows, drop = ctx.outputs["json"]
    assert rows == [{"one": 1}]
    assert_refused(drop, "DROP TABLE products")
    assert snapshot(db) == before


@pytest.mark.parametrize("db_type, unlimit, sleep", [
    ("postgres", "SET statement_timeout = 0", "SELECT pg_sleep(3) AS s"),
    ("mariadb", "SET SESSION max_statement_time = 0", "SELECT SLEEP(3) AS s"),
], ids=["postgres", "mariadb"])
async def test_a_statement_lifting_the_time_limit_does_not_lift_it_for_the_next(request, db_type, unlimit, sleep):
    db = request.getfixturevalue(f"{db_type}_db")
    settings = EngineSettings(ssrf_allowlist=("127.0.0.1",), sql_timeout_s=1)
    ctx = await run_sql(db.params(sql=f"{unlimit}; {sleep}"), settings)
    _, stopped = ctx.outputs["json"]
    assert isinstance(stopped, dict) and stopped["content"].startswith(f"SQL Execution Failed: {sleep}\n")
    assert any(w in stopped["content"] for w in ("statement timeout", "max_statement_time"))


async def test_sqlite_names_the_component_when_it_refuses_a_write(tmp_path):
    import sqlite3

    with sqlite3.connect(tmp_path / "geo.db") as conn:
        conn.execute("CREATE TABLE cities (name TEXT)")
    settings = EngineSettings(sql_sqlite_dir=str(tmp_path))
    ctx = await run_sql({"db_type": "sqlite", "database": "geo.db", "sql": "/* x */ INSERT INTO cities VALUES ('a')"},
                        settings)
    [refused] = ctx.outputs["json"]
    assert_refused(refused, "/* x */ INSERT INTO cities VALUES ('a')")
    assert "readonly" in refused["content"]
