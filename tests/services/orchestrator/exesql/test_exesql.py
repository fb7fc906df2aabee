"""ExeSQL against real PostgreSQL and MariaDB servers (conftest.py), SQLite files, and a SQL Server port
with nothing behind it (no SQL Server is installable here: only its connection error is tested)."""
from __future__ import annotations

import sqlite3

import pytest

from services.orchestrator.components import _tools
from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.exesql import ExeSQL
from services.orchestrator.engine.dsl import ValidationIssue
from services.orchestrator.engine.events import NodeFinished, RunError, ToolCallFinished
from services.orchestrator.engine.settings import EngineSettings
from tests.support.canvas import cpn, of, run_canvas, services
from tests.support.llm_gateway import llm_gateway
from tests.support.net import free_port
from tests.support.sql_servers import DATABASE, Database

LOOPBACK = EngineSettings(ssrf_allowlist=("127.0.0.1",))


@pytest.fixture(params=["postgres", "mariadb"])
def db(request) -> Database:
    return request.getfixturevalue(f"{request.param}_db")


async def run_sql(params: dict, settings: EngineSettings = LOOPBACK, cid: str = "ExeSQL:q") -> NodeContext:
    ctx = NodeContext.for_test(params, settings=settings, component_id=cid, component_name="ExeSQL")
    await ExeSQL(cid, params).run(ctx)
    return ctx


async def test_rows_come_back_as_json_records_and_a_markdown_table(db):
    ctx = await run_sql(db.params(sql="SELECT id, name, unit_price, added FROM products WHERE id <= 3 ORDER BY id"))
    [records] = ctx.outputs["json"]
    assert records == [
        {"id": 1, "name": "Trail shoe", "unit_price": 89.9, "added": "2025-01-05"},
        {"id": 2, "name": "Rain jacket", "unit_price": 129.0, "added": "2025-02-11"},
        {"id": 3, "name": "Wool socks", "unit_price": 12.5, "added": None}]
    lines = ctx.outputs["formalized_content"].splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["id", "name", "unit_price", "added"]
    assert "| Wool socks" in lines[4] and "12.500000" in lines[4]  # RAGFlow's floatfmt ".6f"
    assert len(lines) == 5


async def test_max_records_caps_the_rows_of_each_statement(db):
    ctx = await run_sql(db.params(sql="SELECT id FROM products ORDER BY id; SELECT id FROM orders ORDER BY id",
                                  max_records=2))
    assert ctx.outputs["json"] == [[{"id": 1}, {"id": 2}], [{"id": 10}, {"id": 11}]]
    assert len(ctx.outputs["formalized_content"].split("\n\n")) == 2


async def test_a_bad_statement_is_reported_and_the_next_one_still_runs(db):
    ctx = await run_sql(db.params(sql="```SELECT count(*) AS n FROM products; SELECT no_such_column FROM products;"
                                      " SELECT count(*) AS n FROM orders WHERE status = 'Completed'```"))
    first, bad, last = ctx.outputs["json"]
    assert first == [{"n": 4}] and last == [{"n": 3}]  # PostgreSQL's aborted transaction was rolled back
    assert bad["content"].startswith("SQL Execution Failed: SELECT no_such_column FROM products\n")
    assert "no_such_column" in bad["content"].split("\n", 1)[1]
    assert bad["content"] in ctx.outputs["formalized_content"]


async def test_writes_are_refused_and_change_nothing(db):
    ctx = await run_sql(db.params(sql="DELETE FROM products; SELECT count(*) AS n FROM products"))
    assert ctx.outputs["json"] == [
        {"content": "For security reasons, INSERT, UPDATE, and DELETE statements are not supported."}, [{"n": 4}]]


async def test_no_rows_says_so(db):
    ctx = await run_sql(db.params(sql="SELECT * FROM products WHERE id > 100"))
    assert ctx.outputs["json"] == [{"content": "No record in the database!"}]
    assert ctx.outputs["formalized_content"] == "No record in the database!"


@pytest.mark.parametrize("sleep", {"postgres": "SELECT pg_sleep(30)", "mariadb": "SELECT SLEEP(30) AS s"}.items(),
                         ids=["postgres", "mariadb"])
async def test_a_statement_past_the_time_limit_is_stopped_by_the_server(request, sleep):
    db_type, sql = sleep
    db = request.getfixturevalue(f"{db_type}_db")
    settings = EngineSettings(ssrf_allowlist=("127.0.0.1",), sql_timeout_s=1)
    ctx = await run_sql(db.params(sql=f"{sql}; SELECT count(*) AS n FROM products"), settings)
    stopped, after = ctx.outputs["json"]
    assert after == [{"n": 4}]
    assert stopped["content"].startswith("SQL Execution Failed:")
    assert any(w in stopped["content"] for w in ("statement timeout", "max_statement_time"))


async def test_a_wrong_password_fails_the_node_naming_it_and_the_database(db):
    with pytest.raises(RuntimeError) as err:
        await run_sql({**db.params(sql="SELECT 1"), "password": "wrong"})
    text = str(err.value)
    assert text.startswith("ExeSQL:q: database connection failed: cannot connect to")
    assert f"{db.db_type} '{DATABASE}' at 127.0.0.1:{db.port}" in text


async def test_the_ssrf_guard_refuses_a_loopback_host_unless_allowed(postgres_db):
    with pytest.raises(RuntimeError, match="database host '127.0.0.1' is not allowed: 127.0.0.1 is a loopback"):
        await run_sql(postgres_db.params(sql="SELECT 1"), EngineSettings())
    with pytest.raises(RuntimeError, match="database host 'localhost' is not allowed"):
        await run_sql({**postgres_db.params(sql="SELECT 1"), "host": "localhost"}, EngineSettings())
    allowed = EngineSettings(ssrf_allowlist=("localhost",))
    with pytest.raises(RuntimeError, match=rf"cannot connect to postgres 'shop' at localhost \(.+\):{postgres_db.port}"):
        await run_sql({**postgres_db.params(sql="SELECT 1"), "host": "localhost", "password": "wrong"}, allowed)


async def test_missing_connection_fields_name_the_field(postgres_db):
    with pytest.raises(ValueError, match=r"ExeSQL:q: params.host: IP Address is required"):
        await run_sql({**postgres_db.params(sql="SELECT 1"), "host": ""})
    with pytest.raises(ValueError, match=r"params.sql: SQL for `ExeSQL` MUST not be empty"):
        await run_sql(postgres_db.params(sql="  ;  "))


async def test_sql_server_unreachable_gives_a_clear_connection_error():
    params = {"db_type": "mssql", "host": "127.0.0.1", "port": free_port(), "database": "sales", "username": "sa",
              "password": "x", "sql": "SELECT 1"}
    with pytest.raises(RuntimeError) as err:
        await run_sql(params)
    assert str(err.value).startswith("ExeSQL:q: database connection failed: cannot connect to mssql 'sales' at 127.0.0.1:")


def make_sqlite(path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE cities (name TEXT, population INTEGER)")
        conn.executemany("INSERT INTO cities VALUES (?, ?)", [("Lyon", 522000), ("Nantes", 320000)])


async def test_sqlite_reads_files_under_the_configured_directory_only(tmp_path):
    make_sqlite(tmp_path / "geo.db")
    settings = EngineSettings(sql_sqlite_dir=str(tmp_path), sql_timeout_s=1)
    ctx = await run_sql({"db_type": "sqlite", "database": "geo.db",
                         "sql": "SELECT name FROM cities ORDER BY population DESC; CREATE TABLE t (x INT)"}, settings)
    rows, write = ctx.outputs["json"]
    assert rows == [{"name": "Lyon"}, {"name": "Nantes"}]
    assert write["content"].startswith("SQL Execution Failed: CREATE TABLE t") and "readonly" in write["content"]
    with pytest.raises(RuntimeError, match="is outside"):
        await run_sql({"db_type": "sqlite", "database": "../etc.db", "sql": "SELECT 1"}, settings)
    with pytest.raises(RuntimeError, match="TRELLIS_EXESQL_SQLITE_DIR"):
        await run_sql({"db_type": "sqlite", "database": "geo.db", "sql": "SELECT 1"}, EngineSettings())
    ctx = await run_sql({"db_type": "sqlite", "database": "geo.db", "sql": f"ATTACH '{tmp_path / 'geo.db'}' AS x"},
                        settings)
    assert "not authorized" in ctx.outputs["json"][0]["content"]


async def test_sqlite_statement_past_the_limit_is_interrupted(tmp_path):
    make_sqlite(tmp_path / "geo.db")
    forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    ctx = await run_sql({"db_type": "sqlite", "database": "geo.db", "sql": forever},
                        EngineSettings(sql_sqlite_dir=str(tmp_path), sql_timeout_s=0.3))
    assert "ran past its 0.3 s limit" in ctx.outputs["json"][0]["content"]


def test_validation_names_bad_fields_but_accepts_a_template_without_connection_details():
    assert ExeSQL.check("ExeSQL:x", {"db_type": "mysql", "host": "", "database": "", "port": 3306}) == []
    issues = ExeSQL.check("ExeSQL:x", {"db_type": "oracle", "port": "abc", "max_records": 0})
    assert [i.field for i in issues] == ["params.db_type", "params.port", "params.max_records"]
    assert ExeSQL.check("ExeSQL:x", {"db_type": "trino"}) == [ValidationIssue(
        "ExeSQL:x", "params.db_type", "'trino' is not supported here (supported: mysql, mariadb, oceanbase, "
        "postgres, mssql, sqlite)")]


def test_the_model_sees_ragflows_tool_meta():
    [spec] = _tools.build_toolset("Agent:a", [{"component_name": "ExeSQL", "name": "ExeSQL", "params": {}}])
    assert spec.function == "execute_sql_0"
    assert spec.schema.description == "This is a tool that can execute SQL."
    assert spec.schema.parameters == {"type": "object", "required": ["sql"], "properties": {
        "sql": {"type": "string", "description": "The SQL needs to be executed."}}}


async def test_an_agent_queries_the_database_through_the_tool(mariadb_db):
    tool = {"component_name": "ExeSQL", "name": "ExeSQL", "params": mariadb_db.params(sql="{sys.query}")}
    dsl = {"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", ["Message:m"], {"llm_id": "analyst@Scripted", "sys_prompt": "Answer from data.",
                                               "prompts": [{"role": "user", "content": "{sys.query}"}],
                                               "tools": [tool]}, ["begin"]),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}, ["Agent:a"])}}
    scripts = {"chat": {"analyst": [
        {"tool_calls": [{"name": "execute_sql_0", "arguments": {
            "sql": "SELECT category, count(*) AS n FROM products GROUP BY category ORDER BY n DESC, category"}}]},
        "Data says: {last_tool}"]}}
    async with llm_gateway(scripts) as llm:
        events = await run_canvas(dsl, services(llm, settings=LOOPBACK), query="Products per category?")
    assert events[-1].error is None, events[-1].error
    [call] = of(events, ToolCallFinished, "Agent:a")
    assert call.error is None and call.tool_name == "execute_sql_0"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in call.result.splitlines()[2:]]
    assert rows == [["accessories", "2"], ["outerwear", "1"], ["shoes", "1"]]
    [msg] = of(events, NodeFinished, "Message:m")
    assert msg.outputs["content"].startswith("Data says: | category")


async def test_as_a_canvas_node_a_dead_database_fails_the_run_naming_the_component(mariadb_db):
    params = {**mariadb_db.params(sql="SELECT 1"), "port": free_port()}
    dsl = {"components": {"begin": cpn("Begin", ["ExeSQL:s"]),
                          "ExeSQL:s": cpn("ExeSQL", ["Message:m"], params, ["begin"]),
                          "Message:m": cpn("Message", [], {"content": ["{ExeSQL:s@formalized_content}"]}, ["ExeSQL:s"])}}
    events = await run_canvas(dsl, services(settings=LOOPBACK), query="q")
    [err] = of(events, RunError)
    assert err.component_id == "ExeSQL:s"
    assert "ExeSQL:s: database connection failed: cannot connect to mariadb 'shop'" in err.message

