"""A TCP proxy a test controls, between its clients and one upstream (a Redis): it passes bytes both ways, or
cuts every connection, drops the upstream's replies, holds everything (a pause: a partition that closes
nothing), refuses new connections, or cuts a connection right after the upstream answered a chosen command,
its reply never delivered (an ambiguous write: Redis ran it, the caller was never told).

    async with TcpProxy("127.0.0.1", redis_port) as proxy:
        client = redis_client.connect(proxy.url("redis"))
        proxy.cut()                 # every open connection closed now (new ones pass)
        proxy.drop_replies()        # the upstream's bytes thrown away (callers time out) until `heal`
        proxy.pause()               # nothing forwarded either way, connections kept open, until `heal`
        proxy.refuse()              # new connections closed at once until `heal`
        proxy.heal()                # pass again
        cut = proxy.cut_after(script_call(SOME_LUA))   # or any test of the command: lambda command: ...
        command = await cut         # the next such command ran upstream; its connection was then cut

Commands and replies are read as RESP (hiredis) to find the reply of the command `cut_after` waits for:
what a connection sends is counted against what comes back, one reply per command, so `cut_after` is for
request/reply connections (not one subscribed, or tracking keys, whose pushes are not replies). A command the
upstream answered before the cut, on the same connection, may lose its reply with it, as on a real network.

The control methods run on the proxy's event loop; `threadsafe(method, *args)` calls one from another thread
(a chaos driver with a loop of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import hiredis

Command = list[bytes]


def script_call(text: str) -> Callable[[Command], bool]:
    """Whether a command runs this Lua script: EVAL with its text, or EVALSHA with its digest."""
    body, sha = text.encode(), hashlib.sha1(text.encode()).hexdigest().encode()
    return lambda command: ((command[0].upper() == b"EVAL" and command[1] == body)
                            or (command[0].upper() == b"EVALSHA" and command[1] == sha))


@dataclass(eq=False)
class _Cut:
    matches: Callable[[Command], bool]
    done: asyncio.Future


@dataclass(eq=False)
class _Connection:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    commands: hiredis.Reader = field(default_factory=hiredis.Reader)
    replies: hiredis.Reader = field(default_factory=hiredis.Reader)
    sent: int = 0  # commands forwarded upstream
    answered: int = 0  # replies read from upstream
    cut_at: int = 0  # the number of the command whose reply ends the connection (0: none)
    cut: _Cut | None = None
    cut_command: Command | None = None

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            writer.transport.abort()


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host, self.port = host, port
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: set[_Connection] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._dropping = False
        self._refusing = False
        self._cuts: list[_Cut] = []
        self._tasks: set[asyncio.Task] = set()
        self.connections = 0  # accepted so far
        self.commands = 0  # forwarded so far (all connections)
        self.cut_connections = 0  # closed by the proxy so far

    # ------------------------------------------------------------------ life
    async def start(self) -> TcpProxy:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        self.heal()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def url(self, scheme: str = "redis", path: str = "") -> str:
        return f"{scheme}://{self.host}:{self.port}{path}"

    # ------------------------------------------------------------------ control
    def cut(self) -> None:
        """Close every open connection now (both sides, with a reset); new ones are accepted as the mode says."""
        for conn in list(self._connections):
            self._close(conn)

    def drop_replies(self) -> None:
        """Throw the upstream's bytes away until `heal`: commands still reach it, no caller hears back."""
        self._dropping = True

    def pause(self) -> None:
        """Forward nothing either way until `heal`; connections stay open (a partition that closes nothing)."""
        self._flowing.clear()

    def refuse(self) -> None:
        """Close new connections at once until `heal` (open ones are left as they are)."""
        self._refusing = True

    def heal(self) -> None:
        """Pass everything again (an armed `cut_after` stays armed)."""
        self._dropping = self._refusing = False
        self._flowing.set()

    def cut_after(self, matches: Callable[[Command], bool]) -> asyncio.Future:
        """Arm a cut: the next command for which `matches(command)` is true (its name and arguments, as bytes)
        goes upstream; once its reply is back, its connection is closed, that reply (and any other read with it)
        never delivered. The future's result is that command."""
        done = asyncio.get_running_loop().create_future()
        self._cuts.append(_Cut(matches, done))
        return done

    def threadsafe(self, method: Callable[..., Any], *args: Any) -> None:
        """Call a control method from another thread."""
        assert self._loop is not None, "the proxy is not started"
        self._loop.call_soon_threadsafe(method, *args)

    # ------------------------------------------------------------------ forwarding
    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.transport.abort()
            return
        conn = _Connection(client_writer, upstream_writer)
        self._connections.add(conn)
        self.connections += 1
        pumps = [asyncio.ensure_future(self._to_upstream(conn, client_reader)),
                 asyncio.ensure_future(self._to_client(conn, upstream_reader))]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            self._connections.discard(conn)
            conn.close()

    async def _to_upstream(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                self._watch_commands(conn, data)
                conn.upstream.write(data)
                await conn.upstream.drain()

    async def _to_client(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                if self._cut_now(conn, data) or self._dropping:
                    continue
                conn.client.write(data)
                await conn.client.drain()

    def _watch_commands(self, conn: _Connection, data: bytes) -> None:
        conn.commands.feed(data)
        while (command := conn.commands.gets()) is not False:
            conn.sent += 1
            self.commands += 1
            if conn.cut_at or not isinstance(command, list):
                continue
            for cut in self._cuts:
                if not cut.done.done() and cut.matches(command):
                    self._cuts.remove(cut)
                    conn.cut_at, conn.cut, conn.cut_command = conn.sent, cut, command
                    break

    def _cut_now(self, conn: _Connection, data: bytes) -> bool:
        """Whether `data` brings the reply the connection's armed cut waits for: then it is closed, `data` dropped."""
        conn.replies.feed(data)
        while (reply := conn.replies.gets()) is not False:
            if not isinstance(reply, hiredis.PushNotification):
                conn.answered += 1
        if not conn.cut_at or conn.answered < conn.cut_at:
            return False
        if conn.cut is not None and not conn.cut.done.done():
            conn.cut.done.set_result(conn.cut_command)
        self._close(conn)
        return True

    def _close(self, conn: _Connection) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            self.cut_connections += 1
        conn.close()
