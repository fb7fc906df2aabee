"""Records stored before the keys had hash tags are found again after an upgrade (store/layout.py)."""

from __future__ import annotations

import uuid

import pytest

from services.common.errors import NotFound
from services.orchestrator.engine.state import SessionState
from services.orchestrator.store import AgentStore, SessionStore, keys, layout
from services.orchestrator.store.mcp_servers import McpServerStore
from services.orchestrator.store.sessions import message

DSL = '{"components": {"begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": [], "upstream": []}}}'


@pytest.fixture
def tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:8]}"


async def _to_old_layout(redis, tenant: str, run_id: str) -> list[str]:
    """Rename the tenant's and the run's keys to what the layout before hash tags called them."""
    today = {raw.decode() for pattern in (f"t:*{tenant}*", f"run:*{run_id}*")
             async for raw in redis.scan_iter(match=pattern)}
    olds = []
    for key in sorted(today):
        olds.append(key.replace("{", "").replace("}", ""))
        await redis.rename(key, olds[-1])
    return olds


async def test_agents_sessions_mcp_servers_and_run_keys_stored_before_are_found_after_the_upgrade(redis_client, tenant):
    agents, sessions, mcps = AgentStore(redis_client), SessionStore(redis_client, 3600), McpServerStore(redis_client)
    agent = await agents.create(tenant, title="Helper", dsl_json=DSL)
    version = await agents.publish(tenant, agent.id, "v1")
    session = await sessions.create(tenant, agent_id=agent.id, user_id="ann@example.com", name="chat")
    await sessions.save_turn(tenant, session.id, [message("user", "hi"), message("assistant", "hello")], SessionState())
    mcp = await mcps.create(tenant, name="calc", url="http://127.0.0.1:9/mcp", server_type="sse")
    run_id = uuid.uuid4().hex
    await redis_client.set(keys.cancel_flag(run_id), "1", ex=60)
    await redis_client.hset(keys.run(tenant, run_id), mapping={"status": "done"})

    old = await _to_old_layout(redis_client, tenant, run_id)
    assert all(layout.new_name(key) for key in old) and len(old) >= 10, old
    await redis_client.delete(layout.MARKER)
    with pytest.raises(NotFound):
        await agents.get(tenant, agent.id)  # the old key is not where today's code looks

    done = await layout.upgrade(redis_client)
    assert done.moved >= len(old) and done.kept == 0

    assert (await agents.get(tenant, agent.id)).title == "Helper"
    listed, total = await agents.list(tenant)
    assert [a.id for a in listed] == [agent.id] and total == 1
    assert [s.id for s in (await sessions.list(tenant, agent.id, user_id="ann@example.com"))[0]] == [session.id]
    assert [v.id for v in await agents.list_versions(tenant, agent.id)] == [version.id]
    found = await sessions.get(tenant, session.id)
    assert [m["content"] for m in found.messages] == ["hi", "hello"] and found.user_id == "ann@example.com"
    assert (await mcps.get(tenant, mcp.id)).name == "calc"
    assert await redis_client.get(keys.cancel_flag(run_id)) == b"1"
    assert await redis_client.ttl(keys.cancel_flag(run_id)) > 0  # a rename keeps the key's expiry
    assert await redis_client.hget(keys.run(tenant, run_id), "status") == b"done"

    assert await layout.upgrade(redis_client) == layout.Upgrade()  # marked current: nothing scanned again


async def test_an_old_key_whose_new_name_is_taken_is_kept_not_overwritten(redis_client, tenant):
    new = keys.agent(tenant, "a1")
    old = new.replace("{", "").replace("}", "")
    await redis_client.hset(new, "title", "today's")
    await redis_client.hset(old, "title", "before")
    await redis_client.delete(layout.MARKER)
    done = await layout.upgrade(redis_client)
    assert done.kept >= 1
    assert await redis_client.hget(new, "title") == b"today's"
    assert await redis_client.hget(old, "title") == b"before"
    await redis_client.delete(old, new)  # so another test's upgrade does not meet it


@pytest.mark.parametrize("key, expected", [
    ("t:T1:agent:A:versions", "t:{T1}:agent:A:versions"),
    ("t:T1:agent::user:ann@example.com:sessions", "t:{T1}:agent::user:ann@example.com:sessions"),
    ("t:T1:session:S1:messages", "t:T1:session:{S1}:messages"),
    ("t:T1:run:R1", "t:T1:run:{R1}"),
    ("run:R1:lease", "run:{R1}:lease"),
    ("t:T1:attachment:X", None),  # attachments did not move
    ("t:{T1}:agent:A", None),  # already today's
])
def test_new_names(key, expected):
    assert layout.new_name(key) == expected
