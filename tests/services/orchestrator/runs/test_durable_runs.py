"""Durable runs through a real orchestrator (gRPC, Redis) and llm_gateway (scripted): UserFillUp pauses a run
and the next request resumes it without running anything twice; a caller that leaves can rejoin a run that
goes on; a run's status, its session's runs, and cancel of a waiting run; a replica whose event loop stalls past
its runs' leases goes on with them (nobody else took them over), rather than resume them from their start."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator
from tests.support.waiting import eventually

SCRIPTS = {"chat": {
    "planner": ["plan: search the web"],
    "writer": ["final answer for {last_user}"],
    "slow": {"turns": [{"reply": "one two three four five six seven eight", "chunk_delay_s": 0.05}]},
}}


def cpn(name, down, params=None, up=(), parent=None):
    entry = {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}
    if parent:
        entry["parent_id"] = parent
    return entry


FILL_UP_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Plan"]),
    "LLM:Plan": cpn("LLM", ["UserFillUp:Ask"], {"llm_id": "planner@Scripted", "sys_prompt": "Plan.",
                                                 "prompts": [{"role": "user", "content": "{sys.query}"}]}, ["begin"]),
    "UserFillUp:Ask": cpn("UserFillUp", ["LLM:Write"], {
        "enable_tips": True, "tips": "Here is my plan: {LLM:Plan@content}. OK?",
        "inputs": {"feedback": {"name": "feedback", "type": "paragraph", "optional": False, "options": []}}},
        ["LLM:Plan"]),
    "LLM:Write": cpn("LLM", ["Message:Out"], {"llm_id": "writer@Scripted", "sys_prompt": "Write.",
                                                "prompts": [{"role": "user", "content": "{UserFillUp:Ask@feedback}"}]},
                     ["UserFillUp:Ask"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Write@content}"]}, ["LLM:Write"]),
}})

SLOW_DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["LLM:Slow"]),
    "LLM:Slow": cpn("LLM", ["Message:Out"], {"llm_id": "slow@Scripted", "sys_prompt": "S.",
                                              "prompts": [{"role": "user", "content": "{sys.query}"}]}, ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["{LLM:Slow@content}"]}, ["LLM:Slow"]),
}})


@pytest.fixture
async def stack(redis_server):
    async with llm_gateway(SCRIPTS) as llm, orchestrator(redis_server.url, llm_gateway_addr=llm.addr,
                                                          run_lease_s=2.0) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            yield canvas_grpc.CanvasServiceStub(channel), llm.scripted


async def run_all(stub, **fields) -> list:
    return [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id="t1", **fields))]


def kinds(events) -> list[str]:
    return [e.WhichOneof("kind") for e in events]


def answer(events) -> str:
    return "".join(e.message_delta.content for e in events if e.WhichOneof("kind") == "message_delta")


async def test_user_fill_up_pauses_and_the_next_request_resumes_without_rerunning(stack) -> None:
    stub, provider = stack
    first = await run_all(stub, dsl_json=FILL_UP_DSL, query="trellis")
    assert kinds(first)[-1] == "run_finished" and first[-1].run_finished.waiting_for_user
    [asked] = [e for e in first if e.WhichOneof("kind") == "user_input_required"]
    assert asked.user_input_required.tips == "Here is my plan: plan: search the web. OK?"
    assert set(json.loads(asked.user_input_required.inputs_json)) == {"feedback"}
    assert [e.seq for e in first] == list(range(1, len(first) + 1))
    session_id, paused_run = first[0].session_id, first[0].run_id
    status = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=paused_run))).run
    assert status.status == "waiting_for_user" and status.waiting_for == "UserFillUp:Ask"
    assert list(status.path) == ["begin", "LLM:Plan"]

    with pytest.raises(grpc.aio.AioRpcError) as err:  # no answer: told what is expected
        await run_all(stub, session_id=session_id, dsl_json=FILL_UP_DSL)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "UserFillUp:Ask" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await run_all(stub, session_id=session_id, dsl_json=FILL_UP_DSL, inputs_json=json.dumps({"other": 1}))
    assert "feedback" in err.value.details()

    planner_calls = sum(1 for model, _ in provider.calls if model.startswith("planner"))
    second = await run_all(stub, session_id=session_id, dsl_json=FILL_UP_DSL,
                           inputs_json=json.dumps({"feedback": {"type": "paragraph", "value": "go ahead"}}))
    assert second[-1].run_finished.error == "" and not second[-1].run_finished.waiting_for_user
    assert answer(second) == "final answer for go ahead"
    assert sum(1 for model, _ in provider.calls if model.startswith("planner")) == planner_calls  # not again
    started = [e.node_id for e in second if e.WhichOneof("kind") == "node_started"]
    assert "begin" not in started and "LLM:Plan" not in started and started[0] == "UserFillUp:Ask"
    resumed = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=second[0].run_id))).run
    assert resumed.status == "succeeded" and resumed.parent_run_id == paused_run
    runs = (await stub.ListRuns(canvas_pb.ListRunsRequest(tenant_id="t1", session_id=session_id))).runs
    assert [r.run_id for r in runs] == [second[0].run_id, paused_run]

    third = await run_all(stub, session_id=session_id, dsl_json=FILL_UP_DSL, query="again")  # a fresh turn
    assert third[-1].run_finished.waiting_for_user


async def test_cancelling_a_waiting_run_frees_the_session(stack) -> None:
    stub, _ = stack
    first = await run_all(stub, dsl_json=FILL_UP_DSL, query="x")
    session_id = first[0].session_id
    assert (await stub.Cancel(canvas_pb.CancelRequest(tenant_id="t1", session_id=session_id))).cancelled
    info = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=first[0].run_id))).run
    assert info.status == "cancelled"
    again = await run_all(stub, session_id=session_id, dsl_json=FILL_UP_DSL, query="new question")
    assert again[-1].run_finished.waiting_for_user  # a new turn from Begin, not a resume


async def test_a_run_outlives_its_caller_and_the_caller_rejoins_where_it_left(stack) -> None:
    stub, _ = stack
    call = stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=SLOW_DSL, query="q", continue_on_disconnect=True))
    seen = []
    async for event in call:
        seen.append(event)
        if event.WhichOneof("kind") == "message_delta":
            break
    call.cancel()  # the caller goes away mid-answer
    run_id = seen[0].run_id
    rest = [e async for e in stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=run_id,
                                                                      after_seq=seen[-1].seq))]
    assert rest[0].seq == seen[-1].seq + 1 and kinds(rest)[-1] == "run_finished"
    assert answer(seen) + answer(rest) == "one two three four five six seven eight"
    whole = [e async for e in stub.WatchRun(canvas_pb.WatchRunRequest(tenant_id="t1", run_id=run_id))]
    assert answer(whole) == "one two three four five six seven eight"  # once, from the start
    assert (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=run_id))).run.status == "succeeded"


async def test_a_replica_stalled_past_its_lease_goes_on_with_its_run(stack) -> None:
    stub, provider = stack
    call = stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=SLOW_DSL, query="q"))
    seen = []
    async for event in call:
        seen.append(event)
        if event.WhichOneof("kind") == "message_delta":
            break
    time.sleep(3.0)  # the orchestrator's event loop (this one) stalls past the run's 2 s lease
    seen += [event async for event in call]
    assert kinds(seen)[-1] == "run_finished" and seen[-1].run_finished.error == ""
    assert answer(seen) == "one two three four five six seven eight"  # once: nothing ran again
    run = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=seen[0].run_id))).run
    assert run.status == "succeeded" and run.attempts == 1  # its lease was taken again, not the run over
    assert sum(1 for name, _ in provider.calls if name.startswith("slow")) == 1


async def test_a_caller_that_leaves_cancels_the_run_by_default(stack) -> None:
    stub, _ = stack
    call = stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=SLOW_DSL, query="q"))
    async for event in call:
        if event.WhichOneof("kind") == "message_delta":
            run_id = event.run_id
            break
    call.cancel()

    async def ended():
        info = (await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t1", run_id=run_id))).run
        return info if info.status != "running" else None

    assert (await eventually(ended, what="the run's end")).status == "cancelled"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetRun(canvas_pb.GetRunRequest(tenant_id="t2", run_id=run_id))  # another tenant sees nothing
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_components_and_runs_are_counted_for_prometheus(stack) -> None:
    from services.orchestrator import metrics
    stub, _ = stack

    def count(name: str, **labels: str) -> float:
        return sum(s.value for m in (metrics.COMPONENTS, metrics.RUNS) for s in m.collect()[0].samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    before_llm = count("trellis_component_runs_total", component_type="LLM", outcome="succeeded")
    before_runs = count("trellis_runs_total", status="succeeded")
    events = await run_all(stub, dsl_json=SLOW_DSL, query="q")
    assert events[-1].run_finished.error == ""
    assert count("trellis_component_runs_total", component_type="LLM", outcome="succeeded") == before_llm + 1
    # the run's status is counted as its turn is stored, just after its last event
    await eventually(lambda: count("trellis_runs_total", status="succeeded") >= before_runs + 1, what="the run counted")
    assert count("trellis_runs_total", status="succeeded") == before_runs + 1
