"""A streamed request leaves no reference cycle in the gateway: reference counting frees its request, response
and stream writer the moment it ends, whether the run finished, failed in-band or the client left mid-stream. A
cycle would keep each request's objects until Python's next full collection, and the process's memory would
peak with them (docs/durability.md, "The soak").

The collector is told to keep what it frees (gc.DEBUG_SAVEALL) while the real app serves real HTTP; what it
found is then looked through for the gateway's and aiohttp's server-side objects."""

from __future__ import annotations

import asyncio
import gc

import aiohttp

from tests.support.waiting import eventually


def _requests(agent_id: str, query: str) -> dict[str, tuple[str, dict]]:
    return {
        "ragflow": ("/api/v1/agents/chat/completions", {"agent_id": agent_id, "query": query, "stream": True}),
        "openai": ("/v1/chat/completions", {"model": agent_id, "stream": True,
                                            "messages": [{"role": "user", "content": query}]}),
        "envelope": (f"/api/v1/agents/{agent_id}/stream", {"query": query}),
    }


def _server_side(obj: object) -> bool:
    module = type(obj).__module__
    return module.startswith("aiohttp.web") or module.startswith("gateway.")


async def _cyclic_garbage_of(requests) -> dict[str, int]:
    """What only the cycle collector frees of the server-side objects `requests` (a coroutine function) leaves."""
    await requests()  # warm: what a first request caches is not its garbage
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await requests()
        gc.collect()
        found: dict[str, int] = {}
        for obj in gc.garbage:
            if _server_side(obj):
                name = type(obj).__qualname__
                found[name] = found.get(name, 0) + 1
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_streams_read_to_their_end_leave_no_cycle(stack):
    agent = stack.fake.add_agent(stack.tenant_a)

    async def requests():
        async with aiohttp.ClientSession() as http:
            for query in ("hello", "refuse_late"):  # an answer; a refusal after the stream started (in-band)
                for dialect, (path, body) in _requests(agent.id, query).items():
                    async with http.post(stack.url + path, json=body, headers=stack.auth()) as resp:
                        assert resp.status == 200, dialect
                        await resp.read()

    assert await _cyclic_garbage_of(requests) == {}


async def test_a_client_that_leaves_mid_stream_leaves_no_cycle(stack):
    agent = stack.fake.add_agent(stack.tenant_a)

    async def requests():
        async with aiohttp.ClientSession() as http:
            for dialect, (path, body) in _requests(agent.id, "hang").items():
                stack.fake.run_cancelled = asyncio.Event()
                resp = await http.post(stack.url + path, json=body, headers=stack.auth())
                seen = b""
                while b"tick" not in seen:
                    seen += await resp.content.readany()
                resp.close()  # the client goes away mid-stream
                await stack.fake.run_cancelled.wait()
                await eventually(lambda: not stack.fake.active, what=f"the {dialect} run's end")

    assert await _cyclic_garbage_of(requests) == {}
