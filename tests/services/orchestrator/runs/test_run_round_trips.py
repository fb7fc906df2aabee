"""What a run costs in Redis round trips, fencing included (docs/durability.md): a fast run on a new session is
two round trips of its own, its start and its end; every other round trip it makes is its journal's."""

from __future__ import annotations

import hashlib
import json

import grpc
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.orchestrator.store import journal as journal_module
from tests.support.orchestrator import orchestrator
from tests.support.redis_round_trips import count_round_trips, quiet_replica

RUNS = 10


def cpn(name, down, params=None, up=()):
    return {"obj": {"component_name": name, "params": params or {}}, "downstream": down, "upstream": list(up)}


DSL = json.dumps({"components": {
    "begin": cpn("Begin", ["StringTransform:0"]),
    "StringTransform:0": cpn("StringTransform", ["Message:Out"],
                             {"method": "merge", "script": "{sys.query}", "delimiters": [","]}, ["begin"]),
    "Message:Out": cpn("Message", [], {"content": ["{StringTransform:0@result}"]}, ["StringTransform:0"]),
}})


def journal_only(round_trip) -> bool:
    """Whether a round trip (a pipeline's commands) carries journal batches and nothing else."""
    sha = hashlib.sha1(journal_module._APPEND.encode()).hexdigest()
    return isinstance(round_trip, list) and all(
        isinstance(args, tuple) and args[0] == "EVALSHA" and args[1] == sha for args in round_trip)


async def test_a_run_is_its_start_and_its_end_besides_its_journal_s_writes(redis_server, monkeypatch):
    quiet = quiet_replica(monkeypatch)  # the replica's own periodic work: only the runs' round trips count
    async with orchestrator(redis_server.url, run_lease_s=120.0, triggers=quiet) as orch:
        async with grpc.aio.insecure_channel(orch.addr) as channel:
            stub = canvas_grpc.CanvasServiceStub(channel)

            async def run() -> None:
                events = [e async for e in stub.Run(canvas_pb.RunRequest(tenant_id="t1", dsl_json=DSL, query="a,b"),
                                                      timeout=60)]
                assert events[-1].WhichOneof("kind") == "run_finished" and not events[-1].run_finished.error

            await run()  # connections open, scripts loaded
            sent = count_round_trips(monkeypatch)
            for _ in range(RUNS):
                await run()
    own = [round_trip for round_trip in sent if not journal_only(round_trip)]
    assert len(own) == 2 * RUNS, own
