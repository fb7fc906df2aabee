"""A component that starts again after a take-over (NodeStarted `restarted`), in each dialect: RAGFlow's
node_started says `restarted` (also in a session's stream, never on the legacy route), the envelope says
`node_restarted`, OpenAI's chunks carry nothing of it (gateway/README.md, "Rejoining a run")."""

from __future__ import annotations

from trellis.canvas.v1 import events_pb2

from gateway.dialects.envelope import EnvelopeRun
from gateway.dialects.openai import OpenAIRun
from gateway.dialects.ragflow import Mode, RagflowRun


def node_started(restarted: bool) -> events_pb2.RunEvent:
    return events_pb2.RunEvent(run_id="r1", session_id="s1", node_id="LLM:Slow", seq=7, node_started=events_pb2.NodeStarted(
        component_name="Slow", component_type="LLM", restarted=restarted))


def test_ragflow_node_started_says_restarted_in_every_mode_but_legacy() -> None:
    out = RagflowRun(Mode.WORKFLOW).forward(node_started(True))
    assert out["event"] == "node_started" and out["data"]["restarted"] is True
    assert out["data"]["component_id"] == "LLM:Slow"
    assert "restarted" not in RagflowRun(Mode.WORKFLOW).forward(node_started(False))["data"]  # RAGFlow's shape
    session = RagflowRun(Mode.SESSION)
    assert session.forward(node_started(False)) is None  # a session's stream has no node_started...
    assert session.forward(node_started(True))["data"]["restarted"] is True  # ...but this one
    assert RagflowRun(Mode.LEGACY).forward(node_started(True)) is None  # the SDK reads data.content of all


def test_envelope_says_node_restarted() -> None:
    [started] = EnvelopeRun().convert(node_started(False))
    [restarted] = EnvelopeRun().convert(node_started(True))
    assert started["data"]["status"] == "node_started"
    assert restarted["type"] == "status" and restarted["node_name"] == "LLM:Slow"
    assert restarted["data"]["status"] == "node_restarted" and restarted["data"]["component_type"] == "LLM"


def test_openai_adds_nothing_for_a_restart() -> None:
    assert OpenAIRun(model="m", completion_id="c").delta(node_started(True)) is None
