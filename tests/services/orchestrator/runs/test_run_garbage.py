"""A finished run leaves no reference cycle behind: reference counting frees its pump, engine and plan the moment
it ends. A cycle would keep all of it, and everything it reaches, until Python's next full collection; in a
process that serves runs all day those peaks keep pymalloc arenas, which is RSS that does not come back
(docs/durability.md, "The soak").

The collector is told to keep what it frees (gc.DEBUG_SAVEALL) while runs go through a real orchestrator and LLM
gateway; what it found is then looked through for the run's own objects."""

from __future__ import annotations

import asyncio
import gc
import json
from contextlib import asynccontextmanager

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.orchestrator.engine.settings import EngineSettings
from tests.services.orchestrator.runs.test_durable_runs import SCRIPTS, SLOW_DSL, cpn, run_all
from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.waiting import eventually

# The classes of one run's objects; the engine's and the run path's own, not the libraries'.
RUN_OBJECTS = {"Pump", "Running", "Execution", "RunEnv", "RunJournal", "Plan", "BodyPlan", "NodePlan", "Graph",
               "SessionState", "RunRequest", "RunSpec", "TurnRecord", "Inbox"}


@asynccontextmanager
async def _stack(redis_url: str, engine: EngineSettings | None = None):
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_url, llm_gateway_addr=llm.addr,
                                                          engine=engine) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            yield canvas_grpc.CanvasServiceStub(channel)


@pytest.fixture
async def stub(redis_server):
    async with _stack(redis_server.url) as stub:
        yield stub


@pytest.fixture
async def impatient_stub(redis_server):
    """Every LLM component times out: one may take a tenth of a second, and the slow model's answer takes 0.4 s
    (8 chunks 50 ms apart)."""
    async with _stack(redis_server.url, EngineSettings(component_timeouts={"LLM": 0.1})) as stub:
        yield stub


def _pumps_running() -> list[str]:
    """The tasks of runs' pumps (named after their run) still going."""
    return [name for t in asyncio.all_tasks()
            if (name := t.get_name()).startswith("run-") and name not in ("run-heartbeat", "run-reaper")]


async def _cyclic_garbage_of(runs) -> dict[str, int]:
    """What only the cycle collector frees of the objects `runs` (a coroutine function) leaves, by class."""
    await runs()  # warm: what a first run caches is not its garbage
    await eventually(lambda: not _pumps_running(), what="the warm-up run's pump to end")
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await runs()
        await eventually(lambda: not _pumps_running(), what="the runs' pumps to end")
        gc.collect()
        found: dict[str, int] = {}
        for obj in gc.garbage:
            name = type(obj).__name__
            if name in RUN_OBJECTS:
                found[name] = found.get(name, 0) + 1
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_a_finished_run_leaves_no_cycle(stub) -> None:
    async def runs():
        for _ in range(3):
            events = await run_all(stub, dsl_json=SLOW_DSL, query="hi")
            assert events[-1].WhichOneof("kind") == "run_finished"

    assert await _cyclic_garbage_of(runs) == {}


async def test_a_run_whose_caller_left_leaves_no_cycle(stub) -> None:

    async def runs():
        call = stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=SLOW_DSL, query="q"))
        async for event in call:
            if event.WhichOneof("kind") == "message_delta":
                break
        call.cancel()

    assert await _cyclic_garbage_of(runs) == {}


FAILING_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Gone"]),
    "LLM:Gone": cpn("LLM", ["Message:Out"], {"llm_id": "no-such-model@Scripted", "sys_prompt": "S.",
                                              "prompts": [{"role": "user", "content": "{sys.query}"}]}, ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Gone@content}"]}, ["LLM:Gone"]),
}})


async def test_a_failed_run_leaves_no_cycle(stub) -> None:
    async def runs():
        events = await run_all(stub, dsl_json=FAILING_DSL, query="q")
        assert events[-1].run_finished.error

    assert await _cyclic_garbage_of(runs) == {}


async def test_a_run_whose_component_timed_out_leaves_no_cycle(impatient_stub) -> None:
    async def runs():
        events = await run_all(impatient_stub, dsl_json=SLOW_DSL, query="q")
        assert "Deadline Exceeded" in events[-1].run_finished.error  # (the model call carries the time left)

    assert await _cyclic_garbage_of(runs) == {}
