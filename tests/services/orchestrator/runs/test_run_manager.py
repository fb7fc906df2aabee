"""The engine hands a run's events to their one owner in batches (runner.start): a reader that stalls misses
nothing, and the run's own RunFinished comes last, once. (The run manager's side, over gRPC:
test_canvas_service.py.)"""

from __future__ import annotations

from contextlib import aclosing

from services.orchestrator.engine.events import NodeFinished, NodeStarted, RunFinished
from services.orchestrator.engine.runner import start
from services.orchestrator.engine.state import RunRequest
from tests.support.canvas import cpn, plan_of
from tests.support.waiting import eventually

CHAIN = [f"StringTransform:{i}" for i in range(40)]


def chain_plan():
    ids = ["begin", *CHAIN, "Message:m"]
    comps = {"begin": cpn("Begin", [ids[1]])}
    for i, cid in enumerate(CHAIN, start=1):
        comps[cid] = cpn("StringTransform", [ids[i + 1]], {"method": "merge", "script": f"{i}: {{sys.query}}"},
                         up=[ids[i - 1]])
    comps["Message:m"] = cpn("Message", [], {"content": [f"{{{CHAIN[-1]}@result}}"]}, up=[CHAIN[-1]])
    return plan_of(comps)


async def test_a_reader_that_pauses_gets_every_event_in_order_and_the_end_once():
    running = start(chain_plan(), RunRequest(run_id="r-1", session_id="s-1", query="q"))
    got: list = []
    batches_seen = 0
    async with aclosing(running.batches()) as batches:
        async for batch in batches:
            batches_seen += 1
            got.extend(batch)
            if batches_seen == 1:  # the reader stalls until the engine has answered; its events wait for it
                await eventually(lambda: running.answer == "40: q", what="the engine's answer")
    assert [e.node_id for e in got if isinstance(e, NodeStarted)] == ["begin", *CHAIN, "Message:m"]
    assert [e.node_id for e in got if isinstance(e, NodeFinished)] == ["begin", *CHAIN, "Message:m"]
    assert [type(e) for e in got].count(RunFinished) == 1 and isinstance(got[-1], RunFinished)
    assert not got[-1].error and running.answer == "40: q"
