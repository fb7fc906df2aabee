"""Several orchestrator replicas on one Redis, as `trellis up` runs them: a session's turns are served by
different replicas with its history intact, and a cancel sent to any replica stops the run wherever it runs."""

from __future__ import annotations

import asyncio

from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb

from gateway.config import CONFIG
from tests.support.fake_openai import FakeOpenAI, Reply, text_chunks
from tests.support.pipeline import HEADERS, agent_canvas, create_agent, echo_canvas, pipeline


async def test_a_sessions_turns_spread_over_replicas_and_keep_its_history(redis_server):
    async with pipeline(redis_server.url, replicas=2) as p:
        agent_id = await create_agent(p.client, echo_canvas())
        session_id = ""
        for turn in range(8):
            body = {"model": agent_id, "messages": [{"role": "user", "content": f"q{turn}"}]}
            if session_id:
                body["session_id"] = session_id
            resp = await (await p.client.post("/v1/chat/completions", headers=HEADERS, json=body)).json()
            assert resp["choices"][0]["message"]["content"] == f"You said: q{turn}", resp
            session_id = resp["id"]
            await p.client.get("/v1/models", headers=HEADERS)  # one more call between turns shifts round_robin
        served = {i for i, runs in enumerate(p.runs) if session_id in runs}
        assert served == {0, 1}, p.runs
        listed = await (await p.client.get(f"/api/v1/agents/{agent_id}/sessions", headers=HEADERS,
                                           params={"id": session_id})).json()
        messages = [(m["role"], m["content"]) for m in listed["data"][0]["messages"]]
        expected = [m for t in range(8) for m in (("user", f"q{t}"), ("assistant", f"You said: q{t}"))]
        assert messages[-16:] == expected


async def test_a_cancel_sent_to_the_other_replica_stops_the_run(redis_server):
    fake = FakeOpenAI()
    await fake.start()
    fake.chat(Reply.stream(text_chunks("word " * 2000), delay_s=0.02))  # about 40 s unless cancelled
    try:
        async with pipeline(redis_server.url, replicas=2, openai_base_url=fake.base_url, openai_api_key="k") as p:
            agent_id = await create_agent(p.client, agent_canvas())
            run = p.canvas[0].Run(canvas_pb.RunRequest(
                tenant_id=await _tenant(p), agent=canvas_pb.AgentTarget(agent_id=agent_id, draft=True), query="talk"))
            session_id = ""
            async for event in run:
                session_id = session_id or event.session_id
                if event.WhichOneof("kind") == "message_delta":
                    break  # the model is streaming on replica 0
            cancelled = await p.canvas[1].Cancel(canvas_pb.CancelRequest(tenant_id=await _tenant(p), session_id=session_id))
            assert cancelled.cancelled
            last = None
            async with asyncio.timeout(30):
                async for event in run:
                    last = event
            assert last is not None and last.WhichOneof("kind") == "run_finished" and last.run_finished.cancelled
            assert p.runs[0] and not p.runs[1] and p.cancels == [0, 1]
            await asyncio.wait_for(fake.disconnected.wait(), 10)  # the model request was dropped too
    finally:
        await fake.stop()


async def _tenant(p) -> str:
    """The tenant of the pipeline's API key: direct gRPC calls name it themselves."""
    return next(iter(p.client.server.app[CONFIG].api_keys.values()))
