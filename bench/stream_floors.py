"""The floors of the pipeline's pieces, each a separate process like the real hop it bounds:

    python bench/stream_floors.py relay --port P --upstream http://127.0.0.1:M
        a bare aiohttp SSE relay: POST /v1/chat/completions is forwarded to the model server and every chunk
        read from it is written on at once (no parsing): the least an HTTP hop in Python costs;
    python bench/stream_floors.py grpc --port P
        a bare grpc.aio server stream: /floor.Bench/Tokens streams N messages of one token each (N in the
        request, a 4-byte little-endian int): the least a gRPC hop of one token per message costs;
    python bench/stream_floors.py grpc-relay --port P --upstream U
        a bare grpc.aio server stream /floor.Relay/Chat: the request is a chat completion body, forwarded to its
        upstream U: the model server (http://127.0.0.1:M; each network read becomes one message), another
        grpc-relay (127.0.0.1:G: a call per chat, each message passed on) or a grpc-mux-relay (mux:127.0.0.1:G);
    python bench/stream_floors.py grpc-mux-relay --port P --upstream U
        the same relay with every chat of its callers multiplexed on one long-lived bidirectional stream
        (/floor.Relay/Many) instead of a call per chat; what queues up while a message is sent goes out in the
        next, whichever chats it belongs to (bench/mux_floor.py);
    python bench/stream_floors.py http-grpc --port P --upstream U
        a bare aiohttp handler: POST /v1/chat/completions is sent to U (a grpc-relay or mux:<grpc-mux-relay>)
        and each chunk written as it comes.
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
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))  # no cap on held streams

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
    chunks = upstream_chunks(upstream)

    async def chat(request: BytesValue, context):
        async for chunk in chunks(request.value):
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
        app["chunks"] = upstream_chunks(upstream)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        async for chunk in request.app["chunks"](body):
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    app.on_startup.append(startup)
    app.router.add_post("/v1/chat/completions", chat)
    return app


MUX_METHOD = "/floor.Relay/Many"
# A multiplexed stream's message holds whatever queued up while the last was sent: with thousands of chats that
# passes gRPC's default 4 MiB cap, which would end the stream and every chat on it.
UNCAPPED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
_FRAME = struct.Struct("<QBI")  # a frame: the chat's id, 0 (data) or 1 (the chat ended), the data's length


def _frame(chat: int, data: bytes = b"", ended: bool = False) -> bytes:
    return _FRAME.pack(chat, 1 if ended else 0, len(data)) + data


def _frames(message: bytes):
    at = 0
    while at < len(message):
        chat, ended, size = _FRAME.unpack_from(message, at)
        at += _FRAME.size
        yield chat, bool(ended), message[at:at + size]
        at += size


class _Batches:
    """Frames for one side of a multiplexed stream: sent at once when no write is in flight; those that queue
    up meanwhile go out together, in one message, when it is done (the pipeline's coalescing rule)."""

    def __init__(self) -> None:
        self._queued: list[bytes] = []
        self._ready = asyncio.Event()

    def put(self, frame: bytes) -> None:
        self._queued.append(frame)
        self._ready.set()

    async def next(self) -> bytes:
        await self._ready.wait()
        self._ready.clear()
        queued, self._queued = self._queued, []
        return b"".join(queued)


class MuxClient:
    """Chats multiplexed on one bidirectional stream to a grpc-mux-relay: no call per chat. Nothing more than
    the floor needs: no deadlines, cancels or errors per chat."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._call = channel.stream_stream(MUX_METHOD, request_serializer=None, response_deserializer=None)()
        self._chats: dict[int, asyncio.Queue] = {}
        self._ids = 0
        self._out = _Batches()
        self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._write())]

    async def _write(self) -> None:
        while True:
            await self._call.write(await self._out.next())

    async def _read(self) -> None:
        while (message := await self._call.read()) is not grpc.aio.EOF:
            for chat, ended, data in _frames(message):
                queue = self._chats.get(chat)
                if queue is not None:
                    queue.put_nowait(None if ended else data)

    async def chat(self, body: bytes):
        self._ids += 1
        chat = self._ids
        queue = self._chats[chat] = asyncio.Queue()
        try:
            self._out.put(_frame(chat, body))
            while (chunk := await queue.get()) is not None:
                yield chunk
        finally:
            del self._chats[chat]


def upstream_chunks(upstream: str):
    """`chunks(body)`: the chunks a chat's upstream sends back, made lazily on the relay's loop. `upstream` is the
    model server (`http://host:port`), a grpc-relay (`host:port`: a call per chat) or a grpc-mux-relay
    (`mux:host:port`: every chat on one stream)."""
    session: aiohttp.ClientSession | None = None
    channel: grpc.aio.Channel | None = None
    mux: MuxClient | None = None

    async def chunks(body: bytes):
        nonlocal session, channel, mux
        if upstream.startswith("http"):
            session = session or aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))  # no cap on streams
            async with session.post(upstream + "/v1/chat/completions", data=body,
                                    headers={"Content-Type": "application/json"}) as up:
                async for chunk in up.content.iter_any():
                    yield chunk
        elif upstream.startswith("mux:"):
            mux = mux or MuxClient(grpc.aio.insecure_channel(upstream[4:], options=UNCAPPED))
            async for chunk in mux.chat(body):
                yield chunk
        else:
            channel = channel or grpc.aio.insecure_channel(upstream)
            async for message in _relay_call(channel)(BytesValue(value=body)):
                yield message.value

    return chunks


async def grpc_mux_relay_server(port: int, upstream: str) -> None:
    chunks = upstream_chunks(upstream)

    async def many(messages, context):
        out = _Batches()
        tasks: set[asyncio.Task] = set()

        async def relay(chat: int, body: bytes) -> None:
            async for chunk in chunks(body):
                out.put(_frame(chat, chunk))
            out.put(_frame(chat, ended=True))

        async def take() -> None:
            async for message in messages:
                for chat, _, body in _frames(message):
                    task = asyncio.ensure_future(relay(chat, body))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

        taking = asyncio.ensure_future(take())
        try:
            while True:
                yield await out.next()
        finally:
            taking.cancel()

    server = grpc.aio.server(options=UNCAPPED)
    handler = grpc.stream_stream_rpc_method_handler(many, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Relay", {"Many": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("relay", "grpc", "grpc-relay", "http-grpc", "grpc-mux-relay"))
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
    elif args.kind == "grpc-mux-relay":
        event_loop.run(grpc_mux_relay_server(args.port, args.upstream))
    else:
        event_loop.run(grpc_server(args.port))


if __name__ == "__main__":
    main()
