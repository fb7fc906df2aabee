"""The floors of the pipeline's pieces, each a separate process like the real hop it bounds:

    python bench/stream_floors.py relay --port P --upstream http://127.0.0.1:M
        a bare aiohttp SSE relay: POST /v1/chat/completions is forwarded to the model server and every chunk
        read from it is written on at once (no parsing): the least an HTTP hop in Python costs;
    python bench/stream_floors.py grpc --port P
        a bare grpc.aio server stream: /floor.Bench/Tokens streams N messages of one token each (N in the
        request, a 4-byte little-endian int): the least a gRPC hop of one token per message costs;
    python bench/stream_floors.py grpc-relay --port P --upstream http://127.0.0.1:M | 127.0.0.1:G
        a bare grpc.aio server stream /floor.Relay/Chat: the request is a chat completion body, forwarded to the
        model server (each network read becomes one message) or to another grpc-relay (each message passed on);
    python bench/stream_floors.py http-grpc --port P --upstream 127.0.0.1:G
        a bare aiohttp handler: POST /v1/chat/completions calls a grpc-relay and writes each message as it comes.
    http-grpc -> grpc-relay -> grpc-relay -> model server is the pipeline's own shape (gateway, orchestrator,
    llm_gateway) with nothing but the hops: the floor of that topology in Python.
"""

from __future__ import annotations

import argparse
import asyncio
import struct

import aiohttp
import grpc
from aiohttp import web
from google.protobuf.wrappers_pb2 import BytesValue, StringValue

from services.common import event_loop  # the floors run on the loop the services run on

GRPC_METHOD = "/floor.Bench/Tokens"
RELAY_METHOD = "/floor.Relay/Chat"


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


async def grpc_first_message_ms(port: int, n: int, gap_s: float) -> list[float]:
    """`n` calls of one message each to the floor server, `gap_s` apart: ms from each call to its message. With a
    gap both processes sleep between calls, as every process of an idle pipeline does before a request."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_stream(GRPC_METHOD, request_serializer=None, response_deserializer=StringValue.FromString)
        loop = asyncio.get_running_loop()
        times = []
        for _ in range(n + 5):  # the first five warm the channel
            start = loop.time()
            async for _ in call(struct.pack("<I", 1)):
                times.append((loop.time() - start) * 1000)
            await asyncio.sleep(gap_s)
        return times[5:]


def _relay_call(channel: grpc.aio.Channel):
    return channel.unary_stream(RELAY_METHOD, request_serializer=BytesValue.SerializeToString,
                                response_deserializer=BytesValue.FromString)


async def grpc_relay_server(port: int, upstream: str) -> None:
    session: aiohttp.ClientSession | None = None
    channel = None if upstream.startswith("http") else grpc.aio.insecure_channel(upstream)

    async def chat(request: BytesValue, context):
        nonlocal session
        if channel is not None:
            async for message in _relay_call(channel)(request):
                yield message
            return
        session = session or aiohttp.ClientSession()
        async with session.post(upstream + "/v1/chat/completions", data=request.value,
                                headers={"Content-Type": "application/json"}) as up:
            async for chunk in up.content.iter_any():
                yield BytesValue(value=chunk)

    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(chat, request_deserializer=BytesValue.FromString,
                                                   response_serializer=BytesValue.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Relay", {"Chat": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def http_grpc_app(upstream: str) -> web.Application:
    app = web.Application()

    async def startup(app: web.Application) -> None:
        app["channel"] = grpc.aio.insecure_channel(upstream)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        async for message in _relay_call(request.app["channel"])(BytesValue(value=body)):
            await resp.write(message.value)
        await resp.write_eof()
        return resp

    app.on_startup.append(startup)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("relay", "grpc", "grpc-relay", "http-grpc"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", default="")
    args = parser.parse_args()
    if args.kind == "relay":
        web.run_app(relay_app(args.upstream), host="127.0.0.1", port=args.port, print=None, access_log=None,
                    loop=event_loop.new_loop())
    elif args.kind == "http-grpc":
        web.run_app(http_grpc_app(args.upstream), host="127.0.0.1", port=args.port, print=None, access_log=None,
                    loop=event_loop.new_loop())
    elif args.kind == "grpc-relay":
        event_loop.run(grpc_relay_server(args.port, args.upstream))
    else:
        event_loop.run(grpc_server(args.port))


if __name__ == "__main__":
    main()
