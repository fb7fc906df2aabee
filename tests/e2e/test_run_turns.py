"""The gateway's runs on shared streams (gateway/orchestrator.py over services/common/turns/, and the
orchestrator's side in services/orchestrator/api/run_turns.py), HTTP to real orchestrators: each run behaves as a
Run call of its own."""

from __future__ import annotations

import asyncio
import json

import grpc
from prometheus_client import REGISTRY

from gateway.orchestrator import ORCHESTRATOR
from services.common import context as ctxvars
from services.orchestrator.runs.manager import RunManager
from tests.support.fake_openai import FakeOpenAI, Reply, text_chunks
from tests.support.pipeline import HEADERS, agent_canvas, create_agent, echo_canvas, pipeline


def run_calls(code: str) -> int:
    return int(REGISTRY.get_sample_value("trellis_grpc_requests_total", {
        "service": "orchestrator", "method": "/trellis.canvas.v1.CanvasService/Run", "code": code}) or 0)


def turns_of(p):
    return p.client.server.app[ORCHESTRATOR].turns


async def ask(p, agent_id: str, said: str, **headers) -> str:
    body = {"model": agent_id, "messages": [{"role": "user", "content": said}]}
    resp = await (await p.client.post("/v1/chat/completions", headers={**HEADERS, **headers}, json=body)).json()
    return resp["choices"][0]["message"]["content"] if "choices" in resp else json.dumps(resp)


async def test_concurrent_runs_share_one_stream_and_each_is_counted_as_a_run_call(redis_server):
    async with pipeline(redis_server.url) as p:
        agent_id = await create_agent(p.client, echo_canvas())
        before = run_calls("OK")
        answers = await asyncio.gather(*(ask(p, agent_id, f"q{i}") for i in range(40)))
        assert answers == [f"You said: q{i}" for i in range(40)]
        (stream,) = turns_of(p).streams
        assert stream.opened == 40  # one RunTurns stream carried them all
        assert run_calls("OK") - before == 40
        assert int(REGISTRY.get_sample_value("trellis_grpc_requests_total", {
            "service": "orchestrator", "method": "/trellis.canvas.internal.v1.RunTurnService/RunTurns",
            "code": "OK"}) or 0) == 0


async def test_a_client_that_goes_away_cancels_its_run_and_the_stream_goes_on(redis_server):
    fake = FakeOpenAI()
    await fake.start()
    fake.chat(Reply.stream(text_chunks("word " * 2000), delay_s=0.02))  # about 40 s unless cancelled
    try:
        async with pipeline(redis_server.url, openai_base_url=fake.base_url, openai_api_key="k") as p:
            agent_id = await create_agent(p.client, agent_canvas())
            cancelled = run_calls("CANCELLED")
            resp = await p.client.post(f"/api/v1/agents/{agent_id}/stream", headers=HEADERS, json={"query": "talk"})
            seen = b""
            while b"word" not in seen:
                seen += await asyncio.wait_for(resp.content.readany(), 30)
            (stream,) = turns_of(p).streams
            resp.close()  # the client hangs up mid-answer
            await asyncio.wait_for(fake.disconnected.wait(), 30)  # the run stopped, and its model request with it
            for _ in range(3000):  # until the orchestrator has counted the cancel (no time limit: the loop turns)
                if run_calls("CANCELLED") > cancelled:
                    break
                await asyncio.sleep(0.01)
            assert run_calls("CANCELLED") == cancelled + 1
            echo = await create_agent(p.client, echo_canvas())
            assert await ask(p, echo, "after") == "You said: after"
            assert turns_of(p).streams == [stream] and stream.failure is None  # the same stream went on
    finally:
        await fake.stop()


async def test_a_run_past_the_gateways_deadline_is_told_so_and_stopped(redis_server):
    fake = FakeOpenAI()
    await fake.start()
    fake.chat(Reply.stream(text_chunks("word " * 2000), delay_s=0.02))
    try:
        async with pipeline(redis_server.url, openai_base_url=fake.base_url, openai_api_key="k") as p:
            agent_id = await create_agent(p.client, agent_canvas())
            p.client.server.app[ORCHESTRATOR].run_timeout_s = 1.0
            stopped = run_calls("DEADLINE_EXCEEDED") + run_calls("CANCELLED")
            answer = await ask(p, agent_id, "talk")
            assert "did not answer in time" in answer
            await asyncio.wait_for(fake.disconnected.wait(), 30)  # the run stopped, and its model request with it
            # The turn ends at the orchestrator by its own deadline or by the gateway's cancel, whichever comes first.
            for _ in range(3000):
                if run_calls("DEADLINE_EXCEEDED") + run_calls("CANCELLED") > stopped:
                    break
                await asyncio.sleep(0.01)
            assert run_calls("DEADLINE_EXCEEDED") + run_calls("CANCELLED") == stopped + 1
    finally:
        await fake.stop()


async def test_a_run_carries_the_callers_request_id_to_the_orchestrator(redis_server, monkeypatch):
    seen: list[str] = []
    execute = RunManager.execute

    def spy(self, spec):
        seen.append(ctxvars.request_id.get())
        return execute(self, spec)

    monkeypatch.setattr(RunManager, "execute", spy)
    async with pipeline(redis_server.url) as p:
        agent_id = await create_agent(p.client, echo_canvas())
        assert await ask(p, agent_id, "hi", **{"X-Request-ID": "req-run-turn-1"}) == "You said: hi"
    assert seen == ["req-run-turn-1"]


async def test_a_draining_replica_finishes_its_runs_ends_its_stream_and_new_runs_go_to_the_other(redis_server):
    """Shutdown: the replica's running run finishes, its stream ends (so the grace period waits for runs, not
    for streams), and a run opened meanwhile goes to the other replica."""
    fake = FakeOpenAI()
    await fake.start()
    fake.chat(Reply.stream(text_chunks("one two three four five six"), delay_s=0.2))
    try:
        async with pipeline(redis_server.url, replicas=2, openai_base_url=fake.base_url, openai_api_key="k") as p:
            slow_agent, echo = await create_agent(p.client, agent_canvas()), await create_agent(p.client, echo_canvas())
            resp = await p.client.post(f"/api/v1/agents/{slow_agent}/stream", headers=HEADERS, json={"query": "talk"})
            seen = b""
            while b"one" not in seen:
                seen += await asyncio.wait_for(resp.content.readany(), 30)
            (busy,) = [stream for stream in turns_of(p).streams if stream.turns]
            draining = next(i for i, runs in enumerate(p.runs) if runs)
            await p.run_turns[draining].turns.drain()
            served = [len(runs) for runs in p.runs]
            for i in range(4):  # whichever lane each takes, every run is served by the other replica
                assert await ask(p, echo, f"elsewhere {i}") == f"You said: elsewhere {i}"
            assert len(p.runs[draining]) == served[draining] and len(p.runs[1 - draining]) == served[1 - draining] + 4
            seen += await asyncio.wait_for(resp.content.read(), 30)
            assert b"six" in seen  # the running run finished during the drain
            # The replica ended the stream itself once its last run was done (OK); a stream left to the grace
            # period would have been cut by the stop instead.
            assert await asyncio.wait_for(busy.call.code(), 30) == grpc.StatusCode.OK  # (a guard against a hang)
    finally:
        await fake.stop()


async def test_a_run_the_orchestrator_ends_as_unimplemented_is_started_once(redis_server):
    """A run's own UNIMPLEMENTED is its answer: it is not started again."""
    async with pipeline(redis_server.url) as p:
        agent_id = await create_agent(p.client, echo_canvas())
        starts = []

        async def unimplemented(spec):
            starts.append(spec.session_id)
            raise NotImplementedError("some feature")
            yield  # (events, as execute streams them)

        p.servicers[0].runs.execute = unimplemented
        answer = await asyncio.wait_for(ask(p, agent_id, "x"), 20)
        assert "not implemented" in answer and len(starts) == 1
        assert [stream.failure for stream in turns_of(p).streams] == [None]  # the stream goes on
