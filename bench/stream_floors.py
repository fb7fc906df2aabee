"""The floors of the pipeline's pieces, each a separate process like the real hop it bounds:

    python bench/stream_floors.py relay --port P --upstream http://127.0.0.1:M
        a bare aiohttp SSE relay: POST /v1/chat/completions is forwarded to the model server and every chunk
        read from it is written on at once (no parsing): the least an HTTP hop in Python costs;
    python bench/stream_floors.py grpc --port P
        a bare grpc.aio server stream: /floor.Bench/Tokens streams N messages of one token each (N in the
        request, a 4-byte little-endian int): the least a gRPC hop of one token per message costs.
"""

from __future__ import annotations

import argparse
import asyncio
import struct

import aiohttp
import grpc
from aiohttp import web
from google.protobuf.wrappers_pb2 import StringValue

GRPC_METHOD = "/floor.Bench/Tokens"


def relay_app(upstream: str) -> web.Application:
    app = web.Application()

    async def startup(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession()

    async def cleanup(app: web.Application) -> None:
        await app["session"].close()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with request.app["session"].post(upstream + "/v1/chat/completions", data=body,
                                               headers={"Content-Type": "application/json"}) as up:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _tokens(request: bytes, context):
    (n,) = struct.unpack("<I", request)
    for _ in range(n):
        yield StringValue(value="qz ")


async def grpc_server(port: int) -> None:
    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(_tokens, response_serializer=StringValue.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Bench", {"Tokens": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def grpc_tokens_per_s(port: int, n: int) -> float:
    """One stream of `n` one-token messages from the floor server, read with protobuf parsing: tokens/s."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_stream(GRPC_METHOD, request_serializer=None, response_deserializer=StringValue.FromString)
        loop = asyncio.get_running_loop()
        start = loop.time()
        count = 0
        async for _ in call(struct.pack("<I", n)):
            count += 1
        return count / (loop.time() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("relay", "grpc"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", default="")
    args = parser.parse_args()
    if args.kind == "relay":
        web.run_app(relay_app(args.upstream), host="127.0.0.1", port=args.port, print=None, access_log=None)
    else:
        asyncio.run(grpc_server(args.port))


if __name__ == "__main__":
    main()
