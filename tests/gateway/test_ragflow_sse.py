"""The RAGFlow agent SSE wire format, byte for byte (reference/ragflow.md 4.2 and 5.2)."""

from __future__ import annotations

import re

T = 1756364483  # the fake's event time

BEGIN_STARTED = ('{"inputs": null, "created_at": 1756364483, "component_id": "begin", "component_name": "begin", '
                 '"component_type": "Begin", "thoughts": ""}')
BEGIN_FINISHED = ('{"inputs": {}, "outputs": {"_created_time": 1.5, "_elapsed_time": 0.25}, "component_id": "begin", '
                  '"component_name": "begin", "component_type": "Begin", "error": null, "elapsed_time": 0.25, '
                  '"created_at": 1756364483.0}')
AGENT_STARTED = ('{"inputs": null, "created_at": 1756364483, "component_id": "Agent:A", "component_name": "Agent A", '
                 '"component_type": "Agent", "thoughts": ""}')
REFERENCE = ('{"reference": {"chunks": {"7": {"id": "c1", "content": "Trellis runs canvases.", "document_name": "doc.pdf"}}, '
             '"doc_aggs": {"doc.pdf": {"doc_name": "doc.pdf", "doc_id": "d1", "count": 1}}}}')
AGENT_FINISHED = ('{"inputs": {"query": "hi"}, "outputs": {"content": "Hello world", "structured": {"answer": 42}}, '
                  '"component_id": "Agent:A", "component_name": "Agent A", "component_type": "Agent", "error": null, '
                  '"elapsed_time": 0.5, "created_at": 1756364483.0}')
USAGE = '{"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "calls": 1}'


def line(event: str, run_id: str, session_id: str, data: str) -> str:
    return (f'data:{{"event": "{event}", "message_id": "{run_id}", "created_at": {T}, "task_id": "{session_id}", '
            f'"data": {data}, "session_id": "{session_id}"}}\n\n')


async def _stream(stack, path: str, body: dict) -> tuple[str, str, str]:
    resp = await stack.client.post(path, json=body, headers=stack.auth())
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["X-Accel-Buffering"] == "no"
    raw = (await resp.read()).decode()
    ids = re.search(r'"message_id": "([^"]+)", "created_at": \d+, "task_id": "([^"]+)"', raw)
    return raw, ids.group(1) if ids else "", ids.group(2) if ids else ""


async def test_new_workflow_run_streams_every_event_byte_for_byte(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    raw, run, sid = await _stream(stack, "/api/v1/agents/chat/completions",
                                  {"agent_id": agent.id, "query": "hi", "stream": True})
    expected = "".join([
        line("workflow_started", run, sid, '{"inputs": {}}'),
        line("node_started", run, sid, BEGIN_STARTED),
        line("node_finished", run, sid, BEGIN_FINISHED),
        line("node_started", run, sid, AGENT_STARTED),
        line("message", run, sid, '{"content": "Hello"}'),
        line("message", run, sid, '{"content": " world"}'),
        line("message_end", run, sid, REFERENCE),
        line("node_finished", run, sid, AGENT_FINISHED),
        # the Switch pruned by a branch is not sent: RAGFlow never runs it
        line("workflow_finished", run, sid,
             f'{{"inputs": {{}}, "outputs": {{"content": "Hello world"}}, "elapsed_time": 0.75, '
             f'"created_at": 1756364483.0, "usage": {USAGE}}}'),
        "data:[DONE]\n\n",
    ])
    assert raw == expected
    assert sid in {s.id for (_, _), s in stack.fake.sessions.items() if s.source == "workflow"}


async def test_agent_session_path_drops_start_events_and_reduces_workflow_finished(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id, source="agent")
    raw, run, sid = await _stream(stack, "/api/v1/agents/chat/completions",
                                  {"agent_id": agent.id, "query": "hi", "stream": True, "session_id": session.id})
    assert sid == session.id
    assert raw == "".join([
        line("node_finished", run, sid, BEGIN_FINISHED),
        line("message", run, sid, '{"content": "Hello"}'),
        line("message", run, sid, '{"content": " world"}'),
        line("message_end", run, sid, REFERENCE),
        line("node_finished", run, sid, AGENT_FINISHED),
        line("workflow_finished", run, sid, f'{{"usage": {USAGE}}}'),
        "data:[DONE]\n\n",
    ])


async def test_workflow_session_resumed_sends_every_event(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id, source="workflow")
    raw, _, sid = await _stream(stack, "/api/v1/agents/chat/completions",
                                {"agent_id": agent.id, "query": "hi", "stream": True, "session_id": session.id})
    assert sid == session.id
    assert raw.startswith('data:{"event": "workflow_started"')
    assert raw.count('"event": "node_started"') == 2


async def test_mid_stream_error_is_the_error_object_then_done(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    raw, run, sid = await _stream(stack, "/api/v1/agents/chat/completions",
                                  {"agent_id": agent.id, "query": "explode", "stream": True})
    assert raw == "".join([
        line("workflow_started", run, sid, '{"inputs": {}}'),
        line("message", run, sid, '{"content": "partial"}'),
        'data:{"code": 500, "message": "LLM provider failed: boom (component Agent:A)", "data": false}\n\n',
        "data:[DONE]\n\n",
    ])


async def test_run_that_emits_nothing_still_sends_the_session_frame(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id, source="agent")
    raw, _, _ = await _stream(stack, "/api/v1/agents/chat/completions",
                              {"agent_id": agent.id, "query": "quiet", "stream": True, "session_id": session.id})
    assert raw == f'data:{{"session_id": "{session.id}", "data": {{}}}}\n\ndata:[DONE]\n\n'


async def test_legacy_route_streams_by_default_only_messages_and_message_end(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id)
    raw, run, sid = await _stream(stack, f"/api/v1/agents/{agent.id}/completions",
                                  {"question": "hi", "session_id": session.id})
    assert raw == "".join([
        line("message", run, sid, '{"content": "Hello"}'),
        line("message", run, sid, '{"content": " world"}'),
        line("message_end", run, sid, REFERENCE),
        "data:[DONE]\n\n",
    ])
    assert stack.fake.run_requests[-1].query == "hi"


async def test_return_trace_adds_the_cumulative_trace_to_node_finished(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id)
    raw, run, sid = await _stream(stack, f"/api/v1/agents/{agent.id}/completions",
                                  {"question": "hi", "session_id": session.id, "return_trace": True})
    first_trace = f'[{{"component_id": "begin", "trace": [{BEGIN_FINISHED}]}}]'
    assert raw.startswith(line("node_finished", run, sid, BEGIN_FINISHED[:-1] + f', "trace": {first_trace}}}'))
    assert raw.count('"component_id": "begin", "trace"') == 2  # begin's entry is repeated in Agent:A's trace
    assert stack.fake.run_requests[-1].return_trace is True


async def test_think_markers_and_user_inputs(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    raw, run, sid = await _stream(stack, "/api/v1/agents/chat/completions",
                                  {"agent_id": agent.id, "query": "think", "stream": True})
    assert line("message", run, sid, '{"content": "", "start_to_think": true}') in raw
    assert line("message", run, sid, '{"content": "", "end_to_think": true}') in raw
    raw, run, sid = await _stream(stack, "/api/v1/agents/chat/completions",
                                  {"agent_id": agent.id, "query": "ask", "stream": True})
    assert line("user_inputs", run, sid, '{"inputs": {"name": {"name": "Name", "type": "line", "optional": false}}, '
                                         '"tips": "What is your name?"}') in raw
