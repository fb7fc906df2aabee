"""Ambiguous writes against a real Redis: a TCP proxy (tests/support/tcp_proxy.py) lets Redis run a write of a
run's owner, then cuts the connection before the reply comes back; the client's retry rule
(store/redis_client.py) sends it again. Every such write is stored once: a run's start with its new session, a
journal batch, a run's end with its turn and trace, a take-over with its session claim and clean-up, a paused
run's answer copying its checkpoint, an answer's mark on the paused run; and a whole run through an
orchestrator whose writes lose their replies."""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc
from trellis.canvas.v1 import session_service_pb2 as session_pb

from services.orchestrator.engine.state import SessionState
from services.orchestrator.store import RunStore, SessionStore, keys, redis_client
from services.orchestrator.store import journal as journal_module
from services.orchestrator.store import run_scripts
from services.orchestrator.store import sessions as sessions_module
from services.orchestrator.store.journal import (JournalWriter, RunJournal, copy_checkpoint, drop_unfinished,
                                                 read_checkpoint, read_events)
from services.orchestrator.store.sessions import message
from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.tcp_proxy import TcpProxy, script_call


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def proxy(redis_server):
    async with TcpProxy("127.0.0.1", redis_server.port) as proxy:
        yield proxy


@pytest.fixture
async def cut_client(proxy):
    """The orchestrator's own Redis client, through the proxy."""
    client = redis_client.connect(proxy.url("redis", "/0"))
    yield client
    await client.aclose()


async def messages(redis, tenant: str, session: str) -> list[str]:
    return [m["content"] for m in (await SessionStore(redis).get(tenant, session)).messages]


async def test_a_start_and_its_new_session_sent_again_are_stored_once(proxy, cut_client, redis_client, tenant):
    sessions, runs = SessionStore(cut_client), RunStore(cut_client, owner="a")
    session, run = uuid.uuid4().hex, f"run-{uuid.uuid4().hex[:8]}"
    cut = proxy.cut_after(script_call(run_scripts.START))
    assert not await runs.start(tenant, run, session, "agent-1", before=lambda pipe: sessions.queue_create(
        pipe, tenant, agent_id="agent-1", session_id=session, messages=[message("assistant", "Hi!")]))
    assert cut.done() and proxy.cut_connections == 1  # Redis ran it, the caller never heard: sent again
    assert await messages(redis_client, tenant, session) == ["Hi!"]
    info = await RunStore(redis_client).status(tenant, run)
    assert (info["status"], info["attempts"], info["owner"]) == ("running", "1", "a")
    assert await redis_client.get(keys.session_active_run(tenant, session)) == run.encode()
    assert await redis_client.zrange(keys.session_runs(tenant, session), 0, -1) == [run.encode()]


async def test_a_journal_batch_sent_again_is_stored_once(proxy, cut_client, redis_client, tenant):
    run = f"run-{uuid.uuid4().hex[:8]}"
    await RunStore(redis_client, owner="a").start(tenant, run, "")
    await redis_client.script_load(journal_module._APPEND)  # (a Redis without it answers NOSCRIPT first)
    journal = RunJournal(JournalWriter(cut_client), tenant, run)
    cut = proxy.cut_after(script_call(journal_module._APPEND))
    journal.event(1, b"one", "n1")
    journal.event(2, b"two", "n1", record={"n": "n1"})
    await journal.aclose()
    assert cut.done()
    assert [(seq, f[b"e"]) for seq, f in await read_events(redis_client, tenant, run)] == [(1, b"one"), (2, b"two")]
    assert await read_checkpoint(redis_client, tenant, run) == [{"n": "n1"}]


async def test_an_end_with_its_turn_and_trace_sent_again_is_stored_once(proxy, cut_client, redis_client, tenant):
    session = (await SessionStore(redis_client).create(tenant, agent_id="agent-1")).id
    run = f"run-{uuid.uuid4().hex[:8]}"
    await RunStore(redis_client, owner="a").start(tenant, run, session, "agent-1")
    sessions, runs = SessionStore(cut_client), RunStore(cut_client, owner="a")
    for cut_on in (sessions_module._SAVE_TURN, run_scripts.END):  # the turn's reply lost, then the end's
        proxy.cut_after(script_call(cut_on))
    async with cut_client.pipeline(transaction=False) as pipe:  # as runs/ending.py sends it
        sessions.queue_save_turn(pipe, tenant, session, [message("user", "q"), message("assistant", "a")],
                                 SessionState.fresh({}), run_id=run, epoch=1)
        runs.queue_finish(pipe, tenant, run, session, status="succeeded", epoch=1,
                          tool_calls=[{"tool": "t"}], thoughts=[{"thought": "th"}])
        await pipe.execute()
    assert proxy.cut_connections == 2
    assert await messages(redis_client, tenant, session) == ["q", "a"]
    assert await runs.read_log(tenant, run, "tool_calls") == [{"tool": "t"}]
    assert await runs.read_log(tenant, run, "thoughts") == [{"thought": "th"}]
    assert (await runs.status(tenant, run))["status"] == "succeeded"
    assert not await redis_client.exists(keys.session_active_run(tenant, session))


async def test_a_take_over_and_its_clean_up_sent_again_happen_once(proxy, cut_client, redis_client, tenant):
    session = (await SessionStore(redis_client).create(tenant, agent_id="agent-1")).id
    run = f"run-{uuid.uuid4().hex[:8]}"
    await RunStore(redis_client, owner="a").start(tenant, run, session, "agent-1")
    died = RunJournal(JournalWriter(redis_client), tenant, run)
    died.event(1, b"started", "n1")  # a component that never finished
    await died.aclose()
    await redis_client.delete(keys.run_lease(run))  # its owner died: the lease ran out
    other = RunStore(cut_client, owner="b")
    for cut_on in (run_scripts.TAKE_OVER, run_scripts.RECLAIM, journal_module._DROP):
        await redis_client.script_load(cut_on)  # (sent as EVALSHA: a Redis without it answers NOSCRIPT first)
        proxy.cut_after(script_call(cut_on))
    assert await other.take_over(tenant, run) == 2  # not "another replica was faster"
    assert await other.claim_session(tenant, session, run, 2)
    assert await drop_unfinished(cut_client, tenant, run, 2) == (1, {"n1"})
    assert proxy.cut_connections == 3
    info = await other.status(tenant, run)
    assert (info["attempts"], info["owner"], info["resuming"]) == ("2", "b", "")
    assert await read_events(redis_client, tenant, run) == []


async def test_a_checkpoint_copy_sent_again_is_copied_once(proxy, cut_client, redis_client, tenant):
    parent, child = f"run-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    records = RunJournal(JournalWriter(redis_client), tenant, parent)
    for seq in (1, 2):
        records.event(seq, b"e", f"n{seq}", record={"n": f"n{seq}"})
    await records.aclose()
    await RunStore(redis_client, owner="a").start(tenant, child, "")
    cut = proxy.cut_after(script_call(journal_module._COPY))
    assert await copy_checkpoint(cut_client, tenant, parent, child, 1) == 2
    assert cut.done()
    assert await read_checkpoint(redis_client, tenant, child) == [{"n": "n1"}, {"n": "n2"}]


async def test_an_answer_marked_again_after_its_reply_was_lost_is_still_its_own(proxy, cut_client, redis_client,
                                                                                tenant):
    run = f"run-{uuid.uuid4().hex[:8]}"
    await redis_client.hset(keys.run(tenant, run), "status", "waiting_for_user")
    await redis_client.script_load(run_scripts.MARK_ANSWERED)
    cut = proxy.cut_after(script_call(run_scripts.MARK_ANSWERED))
    assert await RunStore(cut_client).mark_answered(tenant, run, "answer-1")  # not "answered already"
    assert cut.done()
    assert not await RunStore(redis_client).mark_answered(tenant, run, "answer-2")


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Answer"]),
    "LLM:Answer": cpn("LLM", ["Message:Out"], {"llm_id": "writer@Scripted", "sys_prompt": "W.",
                                               "prompts": [{"role": "user", "content": "{sys.query}"}]}, ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Answer@content}"]}, ["LLM:Answer"]),
}})


async def test_a_run_whose_writes_lose_their_replies_is_stored_once(proxy, redis_server, redis_client):
    await redis_client.script_load(journal_module._APPEND)  # (a Redis without it answers NOSCRIPT first)
    for cut_on in (run_scripts.START, journal_module._APPEND, sessions_module._SAVE_TURN):
        proxy.cut_after(script_call(cut_on))
    async with llm_gateway({"chat": {"writer": ["the answer"]}}) as llm, \
            orchestrator(proxy.url("redis", "/0"), llm_gateway_addr=llm.addr) as orch, \
            grpc.aio.insecure_channel(orch.addr) as channel:
        stub = canvas_grpc.CanvasServiceStub(channel)
        events = [e async for e in stub.Run(canvas_pb.RunRequest(
            tenant_id="t1", dsl_json=DSL, query="q",
            history=[session_pb.ChatMessage(role="user", content="earlier"),
                     session_pb.ChatMessage(role="assistant", content="before")]), timeout=60)]
    assert events[-1].WhichOneof("kind") == "run_finished" and not events[-1].run_finished.error
    assert proxy.cut_connections == 3  # each of those writes ran, and its reply was lost
    run_id, session_id = events[0].run_id, events[0].session_id
    assert await messages(redis_client, "t1", session_id) == ["earlier", "before", "q", "the answer"]
    stored = await read_events(redis_client, "t1", run_id)
    assert [seq for seq, _ in stored] == [e.seq for e in events]  # every event the caller got, once
    info = await RunStore(redis_client).status("t1", run_id)
    assert (info["status"], info["attempts"]) == ("succeeded", "1")


async def test_the_proxy_pauses_drops_refuses_and_cuts_as_told(proxy):
    """The proxy's other faults, as the chaos suite uses them (tests/support/tcp_proxy.py)."""
    client = aioredis.from_url(proxy.url("redis", "/0"), socket_timeout=0.5, retry=None)
    try:
        assert await client.ping()
        proxy.pause()  # held, not closed: the call waits until the proxy heals
        waiting = asyncio.ensure_future(client.ping())
        await asyncio.sleep(0.1)
        assert not waiting.done()
        proxy.heal()
        assert await waiting
        proxy.drop_replies()  # the command reaches Redis; no answer comes back
        with pytest.raises(RedisTimeout):
            await client.set("proxy-dropped", "1")
        proxy.heal()
        await client.aclose()
        client = aioredis.from_url(proxy.url("redis", "/0"), socket_timeout=0.5, retry=None)
        assert await client.get("proxy-dropped") == b"1"
        proxy.cut()
        with pytest.raises(RedisConnectionError):
            await client.ping()
        assert await client.ping()  # a new connection passes
        proxy.refuse()
        proxy.cut()
        with pytest.raises(RedisConnectionError):
            await client.ping()
        proxy.heal()
        assert await client.ping()
    finally:
        await client.aclose()
