"""A rejoin (WatchRun, a client's Last-Event-ID) against a real Redis: one that lands past a take-over's gap may
have seen events its old owner never stored (it died first), so each component's first NodeStarted after the
gap says `restarted`; a rejoin inside one owner's stretch, or from the start, gets the stream as stored."""

from __future__ import annotations

import uuid

from services.orchestrator.api.convert import ProtoEventCodec
from services.orchestrator.engine import events as ev
from services.orchestrator.engine.checkpoint import node_key
from services.orchestrator.runs.queries import RunQueries
from services.orchestrator.runs.resume import TAKE_OVER_GAP
from services.orchestrator.runs.stream import Numbered
from services.orchestrator.store import RunStore, SessionStore
from services.orchestrator.store.journal import JournalWriter, RunJournal

CODEC = ProtoEventCodec()


def started(run: str, node: str) -> ev.NodeStarted:
    return ev.NodeStarted.make(run_id=run, session_id="", node_id=node, timestamp=0.0, component_name=node,
                               component_type="LLM")


def delta(run: str, node: str, text: str) -> ev.MessageDelta:
    return ev.MessageDelta.make(run_id=run, session_id="", node_id=node, timestamp=0.0, content=text)


async def test_a_rejoin_past_a_gap_is_told_each_component_starts_again(redis_client):
    tenant, run = "t1", f"run-{uuid.uuid4().hex[:8]}"
    runs = RunStore(redis_client, owner="b", lease_s=30)
    assert not await runs.start(tenant, run, "", "agent-1")
    journal = RunJournal(JournalWriter(redis_client), tenant, run)
    # The old owner stored 1-3 (and gave its caller 4-5, X's start and a delta, before it died); the new owner
    # numbers its events past the gap and runs X again.
    first_of_new = 4 + TAKE_OVER_GAP
    stream = [(1, ev.RunStarted.make(run_id=run, session_id="", node_id="", timestamp=0.0, inputs={})),
              (2, started(run, "W")), (3, delta(run, "W", "w")),
              (first_of_new, started(run, "X")), (first_of_new + 1, delta(run, "X", "x")),
              (first_of_new + 2, started(run, "Y")),
              (first_of_new + 3, ev.RunFinished.make(run_id=run, session_id="", node_id="", timestamp=0.0,
                                                      outputs={}, elapsed_s=0.0))]
    for seq, event in stream:
        journal.event(seq, CODEC.encode(Numbered(seq, event)), node_key(event.path, event.node_id) if event.node_id
                      else "")
    await journal.aclose()
    await runs.finish(tenant, run, "", status="succeeded", notify=False)
    queries = RunQueries(SessionStore(redis_client), runs, CODEC)

    async def rejoin(after: int) -> list[tuple[str, str, bool]]:
        out = []
        async for data in queries.watch(tenant, run, after):
            event = CODEC.decode(data)
            out.append((type(event).__name__, event.node_id, getattr(event, "restarted", False)))
        return out

    past_gap = await rejoin(5)  # it saw 4 and 5, which were never stored
    assert [e for e in past_gap if e[0] == "NodeStarted"] == [("NodeStarted", "X", True), ("NodeStarted", "Y", True)]
    assert [e[0] for e in past_gap] == ["NodeStarted", "MessageDelta", "NodeStarted", "RunFinished"]
    inside = await rejoin(1)  # inside the old owner's stretch: the stream as stored
    assert [e for e in inside if e[0] == "NodeStarted"] == [("NodeStarted", "W", False), ("NodeStarted", "X", False),
                                                            ("NodeStarted", "Y", False)]
    assert not any(e[2] for e in await rejoin(0))
