"""`trellis run FILE`: run a canvas through the orchestrator and print its answer as it streams."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict
from trellis.canvas.v1 import canvas_service_pb2 as canvas_pb
from trellis.canvas.v1 import canvas_service_pb2_grpc as canvas_grpc

from services.common.channels import open_channel, outbound_metadata
from services.common.config import peer_address


def parse_inputs(pairs: list[str]) -> dict[str, str]:
    inputs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"trellis run: --input expects key=value, got {pair!r}")
        inputs[key] = value
    return inputs


def _event_json(event) -> str:
    data = MessageToDict(event, preserving_proto_field_name=True)
    for kind in data.values():  # decode the *_json fields so each line is plain JSON all the way down
        if isinstance(kind, dict):
            for key in [k for k in kind if k.endswith("_json")]:
                kind[key[: -len("_json")]] = json.loads(kind.pop(key)) if kind[key] else None
    return json.dumps(data, ensure_ascii=False)


async def run_canvas(path: Path, query: str, inputs: dict[str, str], jsonl: bool, address: str, tenant: str) -> int:
    try:
        dsl_json = path.read_text()
    except OSError as exc:
        print(f"trellis run: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    request = canvas_pb.RunRequest(
        dsl_json=dsl_json, tenant_id=tenant, query=query, inputs_json=json.dumps(inputs), run_id=uuid.uuid4().hex,
        user_id="cli",
    )
    failed = False
    async with open_channel(address) as channel:
        stub = canvas_grpc.CanvasServiceStub(channel)
        try:
            async for event in stub.Run(request, metadata=outbound_metadata()):
                kind = event.WhichOneof("kind")
                if jsonl:
                    print(_event_json(event), flush=True)
                elif kind == "message_delta":
                    print(event.message_delta.content, end="", flush=True)
                elif kind == "message_end":
                    print(flush=True)
                elif kind == "error":
                    print(f"error in {event.error.component_id or 'run'}: {event.error.message}", file=sys.stderr)
                if kind == "run_finished" and event.run_finished.error:
                    failed = True
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                print(f"trellis run: no orchestrator at {address} (start one with `trellis up`)", file=sys.stderr)
            else:
                print(f"trellis run: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    return 1 if failed else 0


def main(args) -> int:
    address = peer_address("orchestrator")
    return asyncio.run(run_canvas(Path(args.file), args.query, parse_inputs(args.input), args.jsonl, address, args.tenant))
