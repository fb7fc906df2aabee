"""RAGFlow's agent API on the gateway: CRUD, versions, sessions, non-stream answers, cancel, tenants."""

from __future__ import annotations

import asyncio

DSL = {"components": {"begin": {"obj": {"component_name": "Begin", "params": {"prologue": "Hi!"}}}}, "graph": {}}


async def _json(resp) -> dict:
    assert resp.status == 200
    return await resp.json()


async def test_agent_crud_round_trip(stack):
    c = stack.client
    body = await _json(await c.post("/api/v1/agents", json={"title": "Helper", "dsl": DSL, "description": "d"},
                                    headers=stack.auth()))
    assert body["code"] == 0
    agent = body["data"]
    assert agent["title"] == "Helper" and agent["dsl"] == DSL and agent["user_id"] == stack.tenant_a
    assert isinstance(agent["create_time"], int) and agent["create_date"].endswith("GMT")

    listed = await _json(await c.get("/api/v1/agents", headers=stack.auth()))  # RAGFlow: data.canvas, data.total
    assert [a["id"] for a in listed["data"]["canvas"]] == [agent["id"]] and listed["data"]["total"] == 1
    by_id = await _json(await c.get("/api/v1/agents", params={"id": agent["id"]}, headers=stack.auth()))
    assert by_id["data"]["canvas"][0]["title"] == "Helper"
    by_title = await _json(await c.get("/api/v1/agents", params={"title": "missing"}, headers=stack.auth()))
    assert by_title["data"] == {"canvas": [], "total": 0}

    updated = await _json(await c.put(f"/api/v1/agents/{agent['id']}", json={"title": "Renamed"}, headers=stack.auth()))
    assert updated["code"] == 0 and isinstance(updated["data"]["update_time"], int)
    got = await _json(await c.get(f"/api/v1/agents/{agent['id']}", headers=stack.auth()))
    assert got["data"]["title"] == "Renamed" and got["data"]["dsl"] == DSL

    assert (await _json(await c.delete(f"/api/v1/agents/{agent['id']}", headers=stack.auth())))["data"] is True
    gone = await _json(await c.get(f"/api/v1/agents/{agent['id']}", headers=stack.auth()))
    assert gone == {"code": 102, "message": "canvas not found.", "data": False}


async def test_duplicate_title_and_invalid_dsl_get_ragflow_codes(stack):
    c = stack.client
    await c.post("/api/v1/agents", json={"title": "Helper", "dsl": DSL}, headers=stack.auth())
    dup = await _json(await c.post("/api/v1/agents", json={"title": "Helper", "dsl": DSL}, headers=stack.auth()))
    assert dup == {"code": 102, "message": "Helper already exists.", "data": False}

    bad = {"components": {"Agent:A": {"obj": {"component_name": "Agent", "params": {}}}}}
    invalid = await _json(await c.post("/api/v1/agents", json={"title": "Other", "dsl": bad}, headers=stack.auth()))
    assert invalid["code"] == 101
    assert invalid["message"] == "canvas is not valid: component Agent:A: field `llm_id` is required"

    agent_id = next(iter(stack.fake.agents))[1]
    upd = await _json(await c.put(f"/api/v1/agents/{agent_id}", json={"dsl": bad}, headers=stack.auth()))
    assert upd["code"] == 101 and "Agent:A" in upd["message"]
    assert stack.fake.agents[(stack.tenant_a, agent_id)].dsl_json != "", "the stored DSL is untouched"


async def test_versions_publish_list_get_delete(stack):
    c = stack.client
    agent = (await _json(await c.post("/api/v1/agents", json={"title": "V", "dsl": DSL, "release": True},
                                      headers=stack.auth())))["data"]
    assert agent["release"] is True and agent["latest_version_id"]
    v2 = (await _json(await c.post(f"/api/v1/agents/{agent['id']}/versions", json={"title": "launch"},
                                   headers=stack.auth())))["data"]
    assert v2["number"] == 2 and v2["title"] == "launch" and v2["dsl"] == DSL
    listed = await _json(await c.get(f"/api/v1/agents/{agent['id']}/versions", headers=stack.auth()))
    assert [v["number"] for v in listed["data"]] == [2, 1]
    one = await _json(await c.get(f"/api/v1/agents/{agent['id']}/versions/{v2['id']}", headers=stack.auth()))
    assert one["data"]["id"] == v2["id"]
    assert (await _json(await c.delete(f"/api/v1/agents/{agent['id']}/versions/{v2['id']}", headers=stack.auth())))["data"]
    missing = await _json(await c.get(f"/api/v1/agents/{agent['id']}/versions/{v2['id']}", headers=stack.auth()))
    assert missing["code"] == 102


async def test_sessions_create_with_prologue_list_get_delete(stack):
    c = stack.client
    agent = stack.fake.add_agent(stack.tenant_a)
    created = await _json(await c.post(f"/api/v1/agents/{agent.id}/sessions", json={"user_id": "u1"}, headers=stack.auth()))
    s = created["data"]
    assert s["agent_id"] == agent.id and s["user_id"] == "u1" and s["source"] == "agent"
    assert s["message"] == [{"role": "assistant", "content": "Hi! I am your assistant, can I help you?",
                             "id": s["message"][0]["id"], "created_at": s["message"][0]["created_at"]}]
    assert stack.fake.sessions[(stack.tenant_a, s["id"])].version_id == "", "RAGFlow runs the draft unless release"
    await c.post(f"/api/v1/agents/{agent.id}/sessions", headers=stack.auth())  # user defaults to the tenant

    listed = await _json(await c.get(f"/api/v1/agents/{agent.id}/sessions", headers=stack.auth()))
    assert listed["total"] == 2 and {x["user_id"] for x in listed["data"]} == {"u1", stack.tenant_a}
    only_u1 = await _json(await c.get(f"/api/v1/agents/{agent.id}/sessions", params={"user_id": "u1"}, headers=stack.auth()))
    assert [x["id"] for x in only_u1["data"]] == [s["id"]]
    got = await _json(await c.get(f"/api/v1/agents/{agent.id}/sessions/{s['id']}", headers=stack.auth()))
    assert got["data"]["messages"][0]["role"] == "assistant"

    assert (await _json(await c.delete(f"/api/v1/agents/{agent.id}/sessions/{s['id']}", headers=stack.auth())))["data"]
    deleted = await _json(await c.delete(f"/api/v1/agents/{agent.id}/sessions", json={"delete_all": True}, headers=stack.auth()))
    assert deleted["code"] == 0
    assert not [k for k in stack.fake.sessions if k[0] == stack.tenant_a]
    # RAGFlow: neither ids nor delete_all deletes nothing and succeeds; an unknown id is an error.
    assert (await _json(await c.delete(f"/api/v1/agents/{agent.id}/sessions", json={}, headers=stack.auth())))["code"] == 0
    unknown = await _json(await c.delete(f"/api/v1/agents/{agent.id}/sessions", json={"ids": ["x"]}, headers=stack.auth()))
    assert unknown == {"code": 102, "message": "The agent doesn't own the session x", "data": False}


async def test_release_session_runs_the_published_version(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    await stack.client.post(f"/api/v1/agents/{agent.id}/versions", headers=stack.auth())
    s = (await _json(await stack.client.post(f"/api/v1/agents/{agent.id}/sessions", json={"release": True},
                                             headers=stack.auth())))["data"]
    assert s["version_id"] == agent.latest_version_id != ""
    await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(),
                            json={"agent_id": agent.id, "query": "hi", "session_id": s["id"]})
    target = stack.fake.run_requests[-1].agent
    assert target.agent_id == agent.id and target.version_id == agent.latest_version_id


async def test_non_stream_workflow_returns_the_last_event_with_content(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    body = await _json(await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(),
                                               json={"agent_id": agent.id, "query": "hi", "inputs": {"x": {"value": 1}}}))
    assert body["code"] == 0
    final = body["data"]
    assert final["event"] == "workflow_finished"
    assert final["data"]["content"] == "Hello world"
    assert final["data"]["reference"]["doc_aggs"]["doc.pdf"]["doc_id"] == "d1"
    assert final["data"]["structured"] == {"Agent:A": {"answer": 42}}
    assert final["data"]["usage"]["total_tokens"] == 7
    req = stack.fake.run_requests[-1]
    assert req.tenant_id == stack.tenant_a and req.user_id == stack.tenant_a and req.agent.draft
    assert req.inputs_json == '{"x": {"value": 1}}'


async def test_non_stream_session_returns_message_end_the_sdk_reads(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id)
    body = await _json(await stack.client.post(f"/api/v1/agents/{agent.id}/completions", headers=stack.auth(),
                                               json={"question": "hi", "session_id": session.id, "stream": False,
                                                     "return_trace": True}))
    final = body["data"]
    assert final["event"] == "message_end" and final["session_id"] == session.id
    assert final["data"]["content"] == "Hello world"  # what ragflow-sdk reads: data.data.content
    assert final["data"]["usage"]["calls"] == 1
    assert [t["component_id"] for t in final["data"]["trace"]] == ["begin", "Agent:A"]


async def test_non_stream_run_failure_is_an_error_envelope(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    body = await _json(await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(),
                                               json={"agent_id": agent.id, "query": "explode"}))
    assert body == {"code": 500, "message": "LLM provider failed: boom (component Agent:A)", "data": False}


async def test_cancel_task_stops_the_running_session(stack):
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id)
    run = asyncio.create_task(stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(),
                                                json={"agent_id": agent.id, "query": "hang", "session_id": session.id}))
    for _ in range(100):
        if session.id in stack.fake.active:
            break
        await asyncio.sleep(0.01)
    other = await _json(await stack.client.post(f"/api/v1/tasks/{session.id}/cancel", headers=stack.auth(stack.key_b)))
    assert other["data"] is True  # RAGFlow answers true for any task id...
    assert stack.fake.cancel_requests[-1].tenant_id == stack.tenant_b and session.id in stack.fake.active  # ...A's runs on
    done = await _json(await stack.client.post(f"/api/v1/tasks/{session.id}/cancel", headers=stack.auth()))
    assert done == {"code": 0, "message": "success", "data": True}
    body = await _json(await asyncio.wait_for(run, 5))
    assert body["data"]["data"]["content"] == "tick"
    assert stack.fake.cancel_requests[-1].session_id == session.id
    stopped = await _json(await stack.client.patch(f"/api/v1/tasks/{session.id}", json={"action": "stop"}, headers=stack.auth()))
    assert stopped == {"code": 0, "message": "success", "data": True}
    wrong = await _json(await stack.client.patch(f"/api/v1/tasks/{session.id}", json={"action": "pause"}, headers=stack.auth()))
    assert (wrong["code"], wrong["message"]) == (101, "Invalid action 'pause'. Only 'stop' is supported.")
    missing = await _json(await stack.client.patch(f"/api/v1/tasks/{session.id}", json={}, headers=stack.auth()))
    assert (missing["code"], missing["message"]) == (101, "required argument are missing: action; ")
    unknown = await _json(await stack.client.post("/api/v1/tasks/missing_task/cancel", headers=stack.auth()))
    assert unknown == {"code": 0, "message": "success", "data": True}


async def test_tenant_b_cannot_see_or_touch_tenant_a(stack):
    c, b = stack.client, stack.auth(stack.key_b)
    agent = stack.fake.add_agent(stack.tenant_a)
    session = stack.fake.add_session(stack.tenant_a, agent.id)
    assert (await _json(await c.get("/api/v1/agents", headers=b)))["data"] == {"canvas": [], "total": 0}
    for resp in [
        await c.get(f"/api/v1/agents/{agent.id}", headers=b),
        await c.post("/api/v1/agents/chat/completions", json={"agent_id": agent.id, "query": "hi", "session_id": session.id},
                     headers=b),
    ]:
        body = await _json(resp)
        assert body["code"] == 102 and body["data"] is False, body
    for resp in [  # RAGFlow's 103: the agent is not the caller's to reach
        await c.post("/api/v1/agents/chat/completions", json={"agent_id": agent.id, "query": "hi"}, headers=b),
        await c.put(f"/api/v1/agents/{agent.id}", json={"title": "x"}, headers=b),
        await c.delete(f"/api/v1/agents/{agent.id}", headers=b),
        await c.post(f"/api/v1/agents/{agent.id}/sessions", headers=b),
        await c.get(f"/api/v1/agents/{agent.id}/sessions/{session.id}", headers=b),
        await c.get(f"/api/v1/agents/{agent.id}/sessions", headers=b),
    ]:
        body = await _json(resp)
        assert body["code"] == 103 and body["data"] is False, body
    assert stack.fake.agents[(stack.tenant_a, agent.id)].title == "Helper"
    assert all(r.tenant_id == stack.tenant_b for r in stack.fake.run_requests)


async def test_session_of_another_agent_is_refused(stack):
    a1, a2 = stack.fake.add_agent(stack.tenant_a, "one"), stack.fake.add_agent(stack.tenant_a, "two")
    session = stack.fake.add_session(stack.tenant_a, a1.id)
    body = await _json(await stack.client.post("/api/v1/agents/chat/completions", headers=stack.auth(),
                                               json={"agent_id": a2.id, "query": "hi", "session_id": session.id}))
    assert body == {"code": 103, "message": "Session does not belong to the requested agent.", "data": False}
    assert not stack.fake.run_requests
