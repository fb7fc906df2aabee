"""RAGFlow's agent, session, completion and task routes against the real orchestrator: the contract of its
api/apps/restful_apis/agent_api.py and task_api.py (codes, messages, shapes), case by case as its own
restful_api tests check them."""

from __future__ import annotations

import json

DSL = {"components": {
    "begin": {"obj": {"component_name": "Begin", "params": {"prologue": "Hi!"}}, "downstream": ["message"], "upstream": []},
    "message": {"obj": {"component_name": "Message", "params": {"content": ["{sys.query}"]}},
                "downstream": [], "upstream": ["begin"]}},
    "history": [], "retrieval": [], "path": [],
    "globals": {"sys.query": "", "sys.user_id": "", "sys.conversation_turns": 0, "sys.files": []}, "variables": {}}


async def _agent(live, title: str) -> str:
    res = await live.call("POST", "/api/v1/agents", json={"title": title, "dsl": DSL})
    assert res["code"] == 0, res
    return res["data"]["id"]


async def test_agents_crud_validation_contract(live):
    empty = await live.call("GET", "/api/v1/agents", params={"title": "missing_restful_agent"})
    assert empty["code"] == 0 and empty["data"] == {"canvas": [], "total": 0}
    paged = await live.call("GET", "/api/v1/agents", params={"title": "missing_restful_agent", "desc": "true", "page_size": 1})
    assert paged["code"] == 0

    missing_dsl = await live.call("POST", "/api/v1/agents", json={"title": "missing_dsl_agent"})
    assert (missing_dsl["code"], missing_dsl["message"]) == (101, "No DSL data in request.")
    missing_title = await live.call("POST", "/api/v1/agents", json={"dsl": DSL})
    assert (missing_title["code"], missing_title["message"]) == (101, "No title in request.")

    agent_id = await _agent(live, "restful_agent_crud")
    duplicate = await live.call("POST", "/api/v1/agents", json={"title": "restful_agent_crud", "dsl": DSL})
    assert (duplicate["code"], duplicate["message"]) == (102, "restful_agent_crud already exists.")
    invalid_update = await live.call("PUT", "/api/v1/agents/invalid-agent-id", json={"title": "updated", "dsl": DSL})
    assert (invalid_update["code"], invalid_update["message"]) == (103, "Make sure you have permission to access the agent.")

    got = await live.call("GET", f"/api/v1/agents/{agent_id}")
    assert got["code"] == 0 and got["data"]["id"] == agent_id and got["data"]["dsl"]["components"].keys() == DSL["components"].keys()
    updated = await live.call("PUT", f"/api/v1/agents/{agent_id}", json={"title": "restful_agent_crud_updated", "dsl": DSL})
    assert updated["code"] == 0 and updated["data"]["update_time"] >= got["data"]["update_time"]
    listed = await live.call("GET", "/api/v1/agents", params={"title": "restful_agent_crud_updated"})
    assert listed["data"]["total"] == 1 and listed["data"]["canvas"][0]["id"] == agent_id
    without_dsl = await live.call("GET", "/api/v1/agents", params={"dsl": "false"})
    assert "dsl" not in without_dsl["data"]["canvas"][0]

    invalid_delete = await live.call("DELETE", "/api/v1/agents/invalid-agent-id")
    assert (invalid_delete["code"], invalid_delete["message"]) == (103, "Only the owner of the agent is authorized for this operation.")
    other_tenant = await live.call("DELETE", f"/api/v1/agents/{agent_id}", key=live.key_b)
    assert other_tenant["code"] == 103
    assert await live.call("DELETE", f"/api/v1/agents/{agent_id}") == {"code": 0, "message": "success", "data": True}
    gone = await live.call("GET", f"/api/v1/agents/{agent_id}")
    assert (gone["code"], gone["message"]) == (102, "canvas not found.")


async def test_agent_sessions_crud(live):
    agent_id = await _agent(live, "restful_agent_sessions")
    created = await live.call("POST", f"/api/v1/agents/{agent_id}/sessions", json={"name": "agent_session_1"})
    assert created["code"] == 0 and created["data"]["name"] == "agent_session_1"
    session_id = created["data"]["id"]
    first = created["data"]["message"][0]
    assert (first["role"], first["content"]) == ("assistant", "Hi!")
    listed = await live.call("GET", f"/api/v1/agents/{agent_id}/sessions")
    assert isinstance(listed["data"], list) and any(s["id"] == session_id for s in listed["data"])
    got = await live.call("GET", f"/api/v1/agents/{agent_id}/sessions/{session_id}")
    assert got["code"] == 0 and got["data"]["id"] == session_id
    missing = await live.call("GET", f"/api/v1/agents/{agent_id}/sessions/nope")
    assert (missing["code"], missing["message"]) == (102, "Session not found!")
    no_agent = await live.call("GET", "/api/v1/agents/nope/sessions")
    assert (no_agent["code"], no_agent["message"]) == (103, "Make sure you have permission to access the agent.")
    assert (await live.call("DELETE", f"/api/v1/agents/{agent_id}/sessions/{session_id}"))["code"] == 0
    again = await live.call("DELETE", f"/api/v1/agents/{agent_id}/sessions/{session_id}")
    assert (again["code"], again["message"]) == (102, "Session not found!")

    ids = [(await live.call("POST", f"/api/v1/agents/{agent_id}/sessions", json={}))["data"]["id"] for _ in range(2)]
    partial = await live.call("DELETE", f"/api/v1/agents/{agent_id}/sessions", json={"ids": [ids[0], "nope"]})
    assert partial["code"] == 0 and partial["message"] == "Partially deleted 1 sessions with 1 errors"
    assert partial["data"] == {"success_count": 1, "errors": ["The agent doesn't own the session nope"]}
    assert (await live.call("DELETE", f"/api/v1/agents/{agent_id}/sessions", json={}))["code"] == 0
    assert len((await live.call("GET", f"/api/v1/agents/{agent_id}/sessions"))["data"]) == 1
    assert (await live.call("DELETE", f"/api/v1/agents/{agent_id}/sessions", json={"delete_all": True}))["code"] == 0
    assert (await live.call("GET", f"/api/v1/agents/{agent_id}/sessions"))["data"] == []


async def test_chat_completion_validation_nonstream_stream_and_openai_mode(live):
    missing = await live.call("POST", "/api/v1/agents/chat/completions", json={"query": "hello", "stream": False})
    assert (missing["code"], missing["message"]) == (101, "`agent_id` is required.")
    agent_id = await _agent(live, "restful_agent_completions")
    session_id = (await live.call("POST", f"/api/v1/agents/{agent_id}/sessions", json={"name": "s"}))["data"]["id"]

    answer = await live.call("POST", "/api/v1/agents/chat/completions",
                             json={"agent_id": agent_id, "query": "hello", "stream": False, "session_id": session_id})
    assert answer["code"] == 0 and answer["data"]["session_id"] == session_id
    assert "hello" in answer["data"]["data"]["content"]

    resp = await live.client.post("/api/v1/agents/chat/completions", headers=live.auth(), json={
        "agent_id": agent_id, "query": "hello", "stream": True, "session_id": session_id, "return_trace": True})
    assert "text/event-stream" in resp.headers["Content-Type"]
    events = [line[5:] for line in (await resp.text()).splitlines() if line.startswith("data:")]
    assert events[-1].strip() == "[DONE]" and all(isinstance(json.loads(e), dict) for e in events[:-1])

    empty = await live.call("POST", "/api/v1/agents/chat/completions",
                            json={"agent_id": agent_id, "openai-compatible": True, "model": "model", "messages": []})
    assert (empty["code"], empty["message"]) == (102, "You must provide at least one message.")
    compat = await live.call("POST", "/api/v1/agents/chat/completions", json={
        "agent_id": agent_id, "openai-compatible": True, "model": "model", "messages": [{"role": "user", "content": "hello"}],
        "stream": False})
    assert compat["object"] == "chat.completion" and compat["choices"][0]["message"]["content"] == "hello"
    streamed = await live.client.post("/api/v1/agents/chat/completions", headers=live.auth(), json={
        "agent_id": agent_id, "openai-compatible": True, "messages": [{"role": "user", "content": "hello"}], "stream": True})
    assert "text/event-stream" in streamed.headers["Content-Type"]

    other = await live.call("POST", "/api/v1/agents/chat/completions", json={"agent_id": agent_id, "query": "x"}, key=live.key_b)
    assert (other["code"], other["message"]) == (103, "Make sure you have permission to access the agent.")
    wrong_session = await live.call("POST", "/api/v1/agents/chat/completions",
                                    json={"agent_id": agent_id, "query": "x", "session_id": "nope"})
    assert (wrong_session["code"], wrong_session["message"]) == (102, "Session not found!")


async def test_versions_logs_and_tasks(live):
    agent_id = await _agent(live, "restful_agent_support")
    versions = await live.call("GET", f"/api/v1/agents/{agent_id}/versions")
    assert versions["code"] == 0 and isinstance(versions["data"], list)
    missing_version = await live.call("GET", f"/api/v1/agents/{agent_id}/versions/nope")
    assert (missing_version["code"], missing_version["message"]) == (102, "Version not found.")
    logs = await live.call("GET", f"/api/v1/agents/{agent_id}/logs/missing_message")
    assert logs == {"code": 0, "message": "success", "data": {}}

    assert await live.call("POST", "/api/v1/tasks/missing_task/cancel") == {"code": 0, "message": "success", "data": True}
    pause = await live.call("PATCH", "/api/v1/tasks/missing_task", json={"action": "pause"})
    assert (pause["code"], pause["message"]) == (101, "Invalid action 'pause'. Only 'stop' is supported.")
    for path, method in [("/api/v1/tasks/missing_task/cancel", "POST"), ("/api/v1/tasks/missing_task", "PATCH")]:
        resp = await live.client.request(method, path, json={"action": "stop"})
        assert resp.status == 401 and (await resp.json())["code"] == 401
