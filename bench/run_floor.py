"""The floor of one run's path, each hop a separate process like the real one it bounds:

    python bench/run_floor.py grpc --port P --redis-port R
        a bare grpc.aio server: /floor.Run/Run makes N Redis round trips (N in the request, a 4-byte
        little-endian int; one small command each, with the same client library the orchestrator uses) and
        streams 3 events back: the least a run's orchestrator side can cost with that many round trips;
    python bench/run_floor.py http --port P --upstream 127.0.0.1:G
        a bare aiohttp handler: POST /v1/chat/completions reads the JSON body, makes one server-streaming call
        to the gRPC floor (N from the body's `model`, "rt-<N>") and answers with the events' text as JSON: the
        least the gateway side of a non-streamed run can cost.

The pipeline bench drives them with the same closed loop of clients as the real pipeline, in the same run,
and reports runs/s, p99 and CPU ms per request of each process beside the pipeline's.
"""

from __future__ import annotations

import argparse
import json
import struct
import uuid

import grpc
import redis.asyncio as aioredis
from aiohttp import web
from google.protobuf.wrappers_pb2 import StringValue

from services.common import event_loop  # the floors run on the loop the services run on

METHOD = "/floor.Run/Run"
EVENTS = 3


def _run_handler(redis: aioredis.Redis):
    async def run(request: bytes, context):
        (round_trips,) = struct.unpack("<I", request)
        key = f"floor:{{{uuid.uuid4().hex}}}"
        for i in range(round_trips):
            await redis.hset(key, f"f{i}", "v")
        if round_trips:
            await redis.delete(key)
        for i in range(EVENTS):
            yield StringValue(value=f"qz {i}")

    return run


async def grpc_server(port: int, redis_port: int) -> None:
    redis = aioredis.Redis(port=redis_port)
    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(_run_handler(redis),
                                                   response_serializer=StringValue.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Run", {"Run": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def http_app(upstream: str) -> web.Application:
    app = web.Application()
    channel_key = web.AppKey("channel", grpc.aio.Channel)

    async def channel_ctx(app: web.Application):
        app[channel_key] = grpc.aio.insecure_channel(upstream)
        yield
        await app[channel_key].close()

    async def chat(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        round_trips = int(str(body.get("model", "rt-0")).removeprefix("rt-") or 0)
        call = request.app[channel_key].unary_stream(METHOD, request_serializer=None,
                                                     response_deserializer=StringValue.FromString)
        text = "".join([event.value async for event in call(struct.pack("<I", round_trips))])
        return web.json_response({"object": "chat.completion",
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                               "finish_reason": "stop"}]})

    app.cleanup_ctx.append(channel_ctx)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("grpc", "http"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-port", type=int, default=0)
    parser.add_argument("--upstream", default="")
    args = parser.parse_args()
    if args.kind == "grpc":
        event_loop.run(grpc_server(args.port, args.redis_port))
    else:
        web.run_app(http_app(args.upstream), host="127.0.0.1", port=args.port, print=None, access_log=None,
                    loop=event_loop.new_loop())


if __name__ == "__main__":
    main()
