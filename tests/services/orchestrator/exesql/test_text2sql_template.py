"""RAGFlow's `text2sql_data_expert` template (tests/data) end to end: three Retrievals find the
schema, samples and table descriptions in a REAL retrieval service, the Agent (a scripted model in the real
llm_gateway) writes the SQL, ExeSQL runs it on the REAL MariaDB server (conftest.py) and the Message shows
the table.

The template runs as shipped except what it cannot know: the Retrievals' `kb_ids` (empty in the template)
become the test's dataset and the ExeSQL connection fields (empty) point at the test server. The Agent's
model is scripted, or the template's own `qwen-max@Tongyi-Qianwen` on a real-shaped provider, or the model
fallback (tests/support/template_models.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import MessageDelta, NodeFinished, RunError, RunFinished
from services.orchestrator.engine.runner import run
from services.orchestrator.engine.settings import EngineSettings, Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.engine.validate import compile_plan
from tests.support.canvas import of
from tests.support.retrieval import embedding_gateway, running_stack
from tests.support.template_models import MODES, template_models

TEMPLATE = Path(__file__).resolve().parents[3] / "data" / "templates" / "text2sql_data_expert.json"  # see NOTICE.md
AGENT, EXESQL, MESSAGE = "Agent:WickedGoatsDivide", "ExeSQL:TiredShirtsPull", "Message:ShaggyMasksAttend"
KNOWLEDGE = """# Shop database

## Schema
CREATE TABLE products (id INT PRIMARY KEY, name VARCHAR(64), category VARCHAR(32), unit_price DECIMAL(10,2), added DATE)
CREATE TABLE orders (id INT PRIMARY KEY, product_id INT, quantity INT, status VARCHAR(16), order_date DATE)

## Samples
Question: how many completed orders per product? SQL: SELECT product_id, COUNT(*) FROM orders WHERE status = 'Completed' GROUP BY product_id

## Meanings
products.unit_price is the price of one item in euros; orders.quantity is the number of items ordered.
"""
SQL = ("SELECT p.name, SUM(o.quantity * p.unit_price) AS revenue\nFROM products p\nJOIN orders o ON o.product_id = p.id\n"
       "WHERE o.status = 'Completed'\nGROUP BY p.name\nORDER BY revenue DESC")


def shipped_template(dataset_id: str, db_params: dict[str, Any]) -> dict[str, Any]:
    dsl = json.loads(TEMPLATE.read_text(encoding="utf-8"))["dsl"]
    for cpn in dsl["components"].values():
        obj = cpn["obj"]
        if obj["component_name"] == "Retrieval":
            obj["params"]["kb_ids"] = [dataset_id]
        elif obj["component_name"] == "ExeSQL":
            obj["params"].update(db_params)
    return dsl


@pytest.mark.parametrize("mode", MODES)
async def test_text2sql_data_expert_answers_with_the_rows_of_the_models_query(tmp_path, mariadb_db, mode):
    db_params = {k: v for k, v in mariadb_db.params().items() if k != "db_type"}  # keeps the template's "mysql"
    async with embedding_gateway() as embed_addr, running_stack("sqlite", tmp_path, embed_addr) as kb:
        ds = await kb.dataset("shop", size=64, overlap=0)
        doc = await kb.ingest(ds.id, "shop.md", KNOWLEDGE)
        assert doc.status == rr_pb.DOCUMENT_STATUS_DONE, doc.error
        dsl = shipped_template(ds.id, db_params)
        async with template_models(mode, {"sqlwriter": [SQL]}, {"qwen-max@Tongyi-Qianwen": "sqlwriter"}) as tm:
            svc = Services(settings=EngineSettings(ssrf_allowlist=("127.0.0.1",)), llm=tm.llm.client,
                           retrieval=kb.client)
            req = RunRequest(run_id="run-1", session_id="s-1", query="Revenue of completed orders per product?",
                             tenant_id=kb.tenant)
            events = [e async for e in run(compile_plan(load_canvas(tm.dsl(dsl))), req, None, svc)]
            [call] = tm.calls_to("sqlwriter")
    assert isinstance(events[-1], RunFinished) and events[-1].error is None, events[-1].error
    tm.check(events)
    assert not of(events, RunError)
    # The model saw what the Retrievals found (the template's user prompt) and wrote MySQL for it.
    prompt = call.messages[-1].content
    assert prompt.startswith("User's query: Revenue of completed orders per product?")
    labels = ["Schema:", "Samples about question to SQL:", "Description about meanings of tables and files:"]
    starts = [prompt.index(label) for label in labels] + [len(prompt)]
    for begin, end in zip(starts, starts[1:]):  # each Retrieval found the document
        assert "├── Title: shop.md" in prompt[begin:end], prompt[begin:end]
    assert "SELECT product_id, COUNT(*) FROM orders WHERE status = 'Completed'" in prompt
    assert call.messages[0].content.startswith("### ROLE\nYou are a Text-to-SQL assistant.")
    [exesql] = of(events, NodeFinished, EXESQL)
    assert exesql.error is None and exesql.inputs["sql"] == SQL
    assert exesql.outputs["json"] == [[{"name": "Trail shoe", "revenue": pytest.approx(269.7)},
                                       {"name": "Rain jacket", "revenue": pytest.approx(129.0)}]]
    shown = "".join(d.content for d in of(events, MessageDelta, MESSAGE))
    lines = shown.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["name", "revenue"]
    assert [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]] == [
        ["Trail shoe", "269.700000"], ["Rain jacket", "129.000000"]]
