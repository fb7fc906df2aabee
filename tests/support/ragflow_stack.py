"""The whole stack behind one HTTP port, run on a loop of its own in a background thread, for clients that
block (RAGFlow's own `requests`-based tests in tests/ragflow_restful/):

    with threaded_stack(redis_server.url, tmp_path, port=port, api_key="k") as url:
        requests.get(f"{url}/api/v1/datasets", headers={"Authorization": "Bearer k"})

The llm_gateway serves scripted models under the names RAGFlow's CI gives its tenant (an embedding model of
the "Builtin" factory as the default, "glm-4-flash" of ZHIPU-AI's "CI" instance as the default chat model,
a rerank model), so answers that name a model read as they do there. The retrieval service stores in SQLite.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from aiohttp import web

from services.common import event_loop

EMBEDDING = ("BAAI/bge-small-en-v1.5", "Builtin")
OTHER_EMBEDDINGS = (("BAAI/bge-small-en-v1.5@Local", "Builtin"), ("embedding-3@CI", "ZHIPU-AI"),
                    ("embedding-3", "ZHIPU-AI"), ("BAAI/bge-m3", "SILICONFLOW"))
CHAT = ("glm-4-flash@CI", "ZHIPU-AI")
RERANK = ("BAAI/bge-reranker-v2-m3@CI", "SILICONFLOW")
# Script names: each model above is served by the scripted provider under its own name.
SCRIPTS = {
    "embedding": {name: {"dimension": 256} for name, _ in (EMBEDDING, *OTHER_EMBEDDINGS)},
    "chat": {CHAT[0]: ["ok"]},
    "rerank": {RERANK[0]: {}},
}


async def _serve(redis_url: str, data: Path, port: int, api_key: str, ready: asyncio.Event,
                 stop: asyncio.Event) -> None:
    from gateway.app import create_app
    from gateway.config import GatewayConfig
    from tests.support.llm_gateway import llm_gateway
    from tests.support.net import free_port
    from tests.support.orchestrator import orchestrator
    from tests.support.retrieval import running_stack

    async with AsyncExitStack() as stack:
        llm = await stack.enter_async_context(llm_gateway(SCRIPTS))
        registry, scripted = llm.gateway.registry, llm.scripted
        for name, factory in (EMBEDDING, *OTHER_EMBEDDINGS):
            registry.add_model(name, factory, "embedding", scripted, name)
        registry.add_model(CHAT[0], CHAT[1], "chat", scripted, CHAT[0])
        registry.add_model(RERANK[0], RERANK[1], "rerank", scripted, RERANK[0])
        registry.set_default("embedding", "@".join(EMBEDDING))
        registry.set_default("chat", "@".join(CHAT))
        kb = await stack.enter_async_context(running_stack("sqlite", data, llm.addr))
        orch = await stack.enter_async_context(orchestrator(redis_url, llm_gateway_addr=llm.addr,
                                                            retrieval_addr=f"127.0.0.1:{kb.port}"))
        cfg = GatewayConfig(host="127.0.0.1", port=port, health_timeout_s=1.0, api_keys={api_key: "ragflow-ci"},
                            upstreams={"orchestrator": orch.addr, "retrieval": f"127.0.0.1:{kb.port}",
                                       "llm_gateway": llm.addr, "sandbox": f"127.0.0.1:{free_port()}"})
        runner = web.AppRunner(create_app(cfg), handler_cancellation=True)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await stop.wait()


@contextmanager
def threaded_stack(redis_url: str, data: Path, *, port: int, api_key: str) -> Iterator[str]:
    """The stack serving on 127.0.0.1:`port` until the block ends; yields its base URL."""
    loop = event_loop.new_loop()
    ready, failed = threading.Event(), []
    stop: asyncio.Event | None = None

    def run() -> None:
        nonlocal stop
        asyncio.set_event_loop(loop)
        stop = asyncio.Event()
        started = asyncio.Event()

        async def main() -> None:
            task = asyncio.ensure_future(_serve(redis_url, data, port, api_key, started, stop))
            waiter = asyncio.ensure_future(started.wait())
            await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
            ready.set()
            if task.done():
                waiter.cancel()
            await task

        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # reported to the caller, which waits on `ready`
            failed.append(exc)
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="ragflow-stack", daemon=True)
    thread.start()
    ready.wait(120)
    if failed:
        raise RuntimeError(f"the stack did not start: {failed[0]!r}") from failed[0]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(60)
