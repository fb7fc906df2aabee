"""Answer deltas merged while the client reads slowly (gateway/orchestrator.py, `merge_run_events`)."""

from __future__ import annotations

from trellis.canvas.v1 import events_pb2

from gateway.orchestrator import merge_run_events


def delta(text: str, seq: int, node: str = "Message:m") -> events_pb2.RunEvent:
    event = events_pb2.RunEvent(run_id="r1", node_id=node, seq=seq)
    event.message_delta.content = text
    return event


def test_two_deltas_of_a_node_become_one_new_event_and_neither_is_changed():
    a, b = delta("Hel", 3), delta("lo", 4)
    merged = merge_run_events(a, b)
    assert merged.message_delta.content == "Hello" and merged.seq == 4 and merged.node_id == "Message:m"
    # A new event: `a` lives in the memory of the message it came in, where a string set in place stays.
    assert merged is not a and a.message_delta.content == "Hel" and a.seq == 3


def test_deltas_of_different_nodes_or_think_markers_stay_apart():
    assert merge_run_events(delta("a", 1), delta("b", 2, node="Message:other")) is None
    thinking = delta("", 2)
    thinking.message_delta.start_to_think = True
    assert merge_run_events(delta("a", 1), thinking) is None
