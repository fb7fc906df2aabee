"""Redis persistence: agents, immutable versions, sessions (atomic turns), runs and cross-replica cancel."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.orchestrator.engine.state import SessionState
from services.orchestrator.store import AgentStore, RunStore, SessionStore, keys
from services.orchestrator.store.cancels import CancelListener
from services.orchestrator.store.sessions import message
from tests.support.redis_round_trips import count_round_trips

DSL = '{"components": {"begin": {"obj": {"component_name": "Begin", "params": {}}, "downstream": [], "upstream": []}}}'


@pytest.fixture
def tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:8]}"


async def test_agent_crud_and_duplicate_title(redis_client, tenant):
    agents = AgentStore(redis_client)
    a = await agents.create(tenant, title="Helper", dsl_json=DSL, description="d")
    assert (await agents.get(tenant, a.id)).title == "Helper"
    with pytest.raises(AlreadyExists, match="Helper already exists."):
        await agents.create(tenant, title="Helper", dsl_json=DSL)
    b = await agents.create(tenant, title="Other", dsl_json=DSL)
    listed, total = await agents.list(tenant)
    assert total == 2 and [x.id for x in listed] == [b.id, a.id]  # newest update first
    await agents.update(tenant, a.id, title="Renamed", description=None)
    listed, _ = await agents.list(tenant)
    assert listed[0].id == a.id and listed[0].title == "Renamed" and listed[0].description == "d"
    await agents.create(tenant, title="Helper", dsl_json=DSL)  # the old title is free again
    page, total = await agents.list(tenant, page=2, page_size=2)
    assert total == 3 and len(page) == 1
    assert [x.title for x in (await agents.list(tenant, keywords="rena"))[0]] == ["Renamed"]
    await agents.delete(tenant, a.id)
    with pytest.raises(NotFound):
        await agents.get(tenant, a.id)


async def test_tenants_never_see_each_other(redis_client, tenant):
    agents = AgentStore(redis_client)
    a = await agents.create(tenant, title="Mine", dsl_json=DSL)
    other = tenant + "-b"
    with pytest.raises(NotFound):
        await agents.get(other, a.id)
    with pytest.raises(NotFound):
        await agents.update(other, a.id, title="stolen")
    with pytest.raises(NotFound):
        await agents.delete(other, a.id)
    assert (await agents.list(other))[1] == 0
    await agents.create(other, title="Mine", dsl_json=DSL)  # titles are unique per tenant only


async def test_published_versions_are_immutable_and_numbered(redis_client, tenant):
    agents = AgentStore(redis_client)
    a = await agents.create(tenant, title="V", dsl_json='{"v": 1}')
    assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 1}', "")  # nothing published: the draft
    v1 = await agents.publish(tenant, a.id)
    await agents.update(tenant, a.id, dsl_json='{"v": 2}')
    v2 = await agents.publish(tenant, a.id, title="second")
    await agents.update(tenant, a.id, dsl_json='{"v": 3}')
    assert (v1.number, v2.number, v2.title) == (1, 2, "second")
    assert (await agents.get_version(tenant, a.id, v1.id)).dsl_json == '{"v": 1}'
    assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 2}', v2.id)
    assert await agents.resolve_dsl(tenant, a.id, draft=True) == ('{"v": 3}', "")
    assert await agents.resolve_dsl(tenant, a.id, version_id=v1.id) == ('{"v": 1}', v1.id)
    assert [v.number for v in await agents.list_versions(tenant, a.id)] == [2, 1]
    await agents.delete_version(tenant, a.id, v2.id)
    assert (await agents.get(tenant, a.id)).latest_version_id == v1.id
    v3 = await agents.publish(tenant, a.id)
    assert v3.number == 2 and v3.id != v2.id


async def test_a_run_reads_its_agent_in_one_round_trip_whatever_it_runs(redis_client, tenant, monkeypatch):
    agents = AgentStore(redis_client)
    a = await agents.create(tenant, title="R", dsl_json='{"v": 1}')
    v1 = await agents.publish(tenant, a.id)
    await agents.update(tenant, a.id, dsl_json='{"v": 2}')
    assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 1}', v1.id)  # this process learns the latest id
    sent = count_round_trips(monkeypatch)
    for how, expected in (({}, ('{"v": 1}', v1.id)), ({"draft": True}, ('{"v": 2}', "")),
                          ({"version_id": v1.id}, ('{"v": 1}', v1.id))):
        sent.clear()
        assert await agents.resolve_dsl(tenant, a.id, **how) == expected
        assert len(sent) == 1, how
    # Another replica publishes: the guess is checked in the same round trip, found stale, and read again once.
    v2 = await AgentStore(redis_client).publish(tenant, a.id)
    sent.clear()
    assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 2}', v2.id)
    assert len(sent) == 2
    sent.clear()
    assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 2}', v2.id)
    assert len(sent) == 1
    for v in (v2, v1):  # nothing published any more: the draft, whatever was guessed
        await AgentStore(redis_client).delete_version(tenant, a.id, v.id)
    for _ in range(2):  # once with the stale guess, once knowing nothing is published
        sent.clear()
        assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 2}', "")
    assert len(sent) == 1


async def test_resolving_an_agent_names_what_is_missing(redis_client, tenant):
    agents = AgentStore(redis_client)
    a = await agents.create(tenant, title="M", dsl_json='{"v": 1}')
    b = await agents.create(tenant, title="N", dsl_json='{"v": 9}')
    vb = await agents.publish(tenant, b.id)
    with pytest.raises(NotFound, match="agent 'nope' not found"):
        await agents.resolve_dsl(tenant, "nope")
    with pytest.raises(NotFound, match="agent 'nope' not found"):
        await agents.resolve_dsl(tenant, "nope", version_id=vb.id)
    with pytest.raises(NotFound, match=f"version '{vb.id}' of agent '{a.id}' not found"):
        await agents.resolve_dsl(tenant, a.id, version_id=vb.id)  # another agent's version
    with pytest.raises(NotFound, match="version 'gone' of agent"):
        await agents.resolve_dsl(tenant, a.id, version_id="gone")
    with pytest.raises(InvalidArgument, match="invalid version id"):
        await agents.resolve_dsl(tenant, a.id, version_id="a:b")
    v = await agents.publish(tenant, a.id)
    await agents.delete_version(tenant, a.id, v.id)  # nothing published any more: the draft runs
    assert await agents.resolve_dsl(tenant, a.id) == ('{"v": 1}', "")
    assert await agents.resolve_dsl(tenant, b.id) == ('{"v": 9}', vb.id)  # (its latest id is guessed from now on)
    await agents.delete(tenant, b.id)
    with pytest.raises(NotFound, match=f"agent '{b.id}' not found"):
        await agents.resolve_dsl(tenant, b.id)


async def test_concurrent_publishes_get_distinct_numbers(redis_client, tenant):
    agents = AgentStore(redis_client)
    a = await agents.create(tenant, title="C", dsl_json=DSL)
    versions = await asyncio.gather(*(agents.publish(tenant, a.id) for _ in range(8)))
    assert sorted(v.number for v in versions) == list(range(1, 9))


async def test_session_turns_and_user_separation(redis_client, tenant):
    sessions = SessionStore(redis_client)
    s1 = await sessions.create(tenant, agent_id="ag", user_id="alice", messages=[message("assistant", "Hi!")])
    s2 = await sessions.create(tenant, agent_id="ag", user_id="bob")
    state = SessionState.fresh()
    state.history.append(["user", "q1"])
    await sessions.save_turn(tenant, s1.id, [message("user", "q1"), message("assistant", "a1")], state)
    got = await sessions.get(tenant, s1.id)
    assert [m["content"] for m in got.messages] == ["Hi!", "q1", "a1"]
    assert got.state().history == [["user", "q1"]]
    assert (await sessions.get(tenant, s2.id)).messages == []
    alice, total = await sessions.list(tenant, "ag", user_id="alice")
    assert total == 1 and alice[0].id == s1.id
    assert (await sessions.list(tenant, "ag"))[1] == 2
    with pytest.raises(NotFound):
        await sessions.get(tenant + "-x", s1.id)
    await sessions.delete(tenant, s1.id)
    assert (await sessions.list(tenant, "ag"))[1] == 1


async def test_session_survives_redis_restart(redis_server, tenant):
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_server.url)
    sessions = SessionStore(client)
    s = await sessions.create(tenant, agent_id="ag", user_id="u", messages=[message("assistant", "prologue")])
    await sessions.save_turn(tenant, s.id, [message("user", "hello")], SessionState.fresh())
    await client.aclose()
    redis_server.restart()
    client = aioredis.from_url(redis_server.url)
    try:
        got = await SessionStore(client).get(tenant, s.id)
        assert [m["content"] for m in got.messages] == ["prologue", "hello"]
    finally:
        await client.aclose()


async def test_cancel_reaches_a_listener_and_sets_the_flag(redis_client, tenant):
    runs = RunStore(redis_client)
    seen: list[str] = []
    got = asyncio.Event()

    def on_cancel(run_id: str) -> None:
        seen.append(run_id)
        got.set()

    listener = CancelListener(redis_client, on_cancel)
    await listener.start()
    try:
        await runs.start(tenant, "run-1", "sess-1")
        assert await runs.request_cancel(tenant, session_id="sess-1")
        await asyncio.wait_for(got.wait(), 30)  # a lost cancel hangs
        assert seen == ["run-1"] and await runs.is_cancelled("run-1")
        await runs.finish(tenant, "run-1", "sess-1", status="cancelled")
        assert not await runs.request_cancel(tenant, run_id="run-1")  # no longer running
        assert not await runs.request_cancel(tenant, session_id="sess-1")
        assert (await runs.status(tenant, "run-1"))["status"] == "cancelled"
    finally:
        await listener.stop()


async def test_tool_call_log_is_kept_per_run(redis_client, tenant):
    runs = RunStore(redis_client)
    await runs.append_log(tenant, "run-9", "tool_calls", [{"tool_name": "execute_code_0", "result": "42"}])
    await runs.append_log(tenant, "run-9", "tool_calls", [])
    assert await runs.read_log(tenant, "run-9", "tool_calls") == [{"tool_name": "execute_code_0", "result": "42"}]
    assert await runs.read_log(tenant + "-other", "run-9", "tool_calls") == []
    assert await runs.read_log(tenant, "run-9", "thoughts") == []


async def test_a_turn_saved_after_its_session_was_deleted_does_not_resurrect_it(redis_client, tenant):
    sessions = SessionStore(redis_client)
    s = await sessions.create(tenant, agent_id="ag", user_id="u")
    await sessions.delete(tenant, s.id)
    with pytest.raises(NotFound):
        await sessions.save_turn(tenant, s.id, [message("user", "late")], SessionState.fresh())
    assert not await redis_client.exists(keys.session(tenant, s.id), keys.session_messages(tenant, s.id))


async def test_updates_racing_a_delete_do_not_recreate_the_agent(redis_client, tenant):
    agents = AgentStore(redis_client)
    a = await agents.create(tenant, title="Gone soon", dsl_json=DSL)
    await agents.delete(tenant, a.id)
    for write in (agents.update(tenant, a.id, description="x"), agents.publish(tenant, a.id)):
        with pytest.raises(NotFound):
            await write
    assert not await redis_client.exists(keys.agent(tenant, a.id))


async def test_sessions_expire_when_unused_and_leave_the_list(redis_client, tenant):
    sessions = SessionStore(redis_client, ttl_s=1)
    s = await sessions.create(tenant, agent_id="ag", user_id="u", messages=[message("assistant", "hi")])
    assert 0 < await redis_client.ttl(keys.session_messages(tenant, s.id)) <= 1
    await asyncio.sleep(1.2)
    assert (await sessions.list(tenant, "ag")) == ([], 0)
    assert (await sessions.list(tenant, "ag")) == ([], 0)  # the stale index entry was pruned


async def test_deleting_an_agents_sessions_leaves_nothing_behind(redis_client, tenant):
    sessions = SessionStore(redis_client)
    for user in ("a", "b", "a"):
        s = await sessions.create(tenant, agent_id="ag", user_id=user, messages=[message("assistant", "hi")])
    other = await sessions.create(tenant, agent_id="other", user_id="a")
    assert await sessions.delete_for_agent(tenant, "ag") == 3
    left = [k async for k in redis_client.scan_iter(f"*{tenant}*") if b"agent:other" not in k]
    assert left == [keys.session(tenant, other.id).encode()]
    assert (await sessions.get(tenant, other.id)).agent_id == "other"
    with pytest.raises(NotFound):
        await sessions.get(tenant, s.id)


async def test_ids_that_could_name_other_keys_are_refused(redis_client, tenant):
    from services.common.errors import InvalidArgument

    sessions = SessionStore(redis_client)
    s = await sessions.create(tenant, agent_id="ag", user_id="u")
    for bad in (f"{s.id}:messages", "", "a b", "x" * 200):
        with pytest.raises(InvalidArgument, match="invalid session id"):
            await sessions.get(tenant, bad)
    with pytest.raises(InvalidArgument, match="invalid user id"):
        await sessions.create(tenant, agent_id="ag", user_id="evil:user")
    with pytest.raises(InvalidArgument, match="invalid tenant id"):
        await AgentStore(redis_client).list("a:b")


