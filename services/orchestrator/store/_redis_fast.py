"""Every use of redis-py's (and asyncio's) private names in Trellis, in this one module: a faster client for
the orchestrator's Redis, and what its agent cache needs of a connection. Why it is worth the risk, measured
against redis-py through its public API: docs/speed-policies.md ("The Redis client"). redis-py is pinned
exactly (pyproject.toml); tests/services/orchestrator/store/test_redis_internals.py fails, naming the internal,
when one of those it relies on (`INTERNALS`) moves.

What the rest of the store calls: `fast_client` (redis_client.connect), `Fast` (redis_client's Sentinel
connection), `on_invalidation`, `unread` and `fileno` (agent_cache.py), `fast_cluster` and `KeptCommands`
(_redis_cluster.py). Each redis-py class below keeps redis-py's
behaviour for anything outside its fast path."""

from __future__ import annotations

import asyncio
import collections
import inspect
import math
import time
from typing import Any, Awaitable, Callable

import hiredis
import redis
import redis.asyncio as aioredis
from redis._parsers import AsyncCommandsParser, _AsyncHiredisParser
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.asyncio.retry import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

# A pooled connection idle this long is closed (Pool); the next burst opens what it needs again.
IDLE_CLOSE_S = 60.0
PINNED_REDIS = "8.1.0"  # the version every internal below was read from (pyproject.toml pins it)


class NotRetried(RedisConnectionError):
    """A shared connection's failure its pipelines do not retry: the client closed, or connecting failed
    (redis-py's connect has retried that already)."""


class _Parser(_AsyncHiredisParser):
    """hiredis's reply parser, bounding each wait for the socket with `read_timeout` when the connection sets
    it: a reply that is already buffered (every reply of a pipeline after the first, mostly) needs no timer."""

    __slots__ = ("read_timeout",)

    def __init__(self, socket_read_size: int) -> None:
        super().__init__(socket_read_size)
        self.read_timeout: float | None = None

    async def read_from_socket(self) -> bool:
        if self.read_timeout is None:
            return await super().read_from_socket()
        try:
            async with asyncio.timeout(self.read_timeout):
                return await super().read_from_socket()
        except TimeoutError:
            raise RedisTimeout(f"Timeout reading from the socket ({self.read_timeout} s)") from None


class Fast:
    """What this module's connections change in redis-py's asyncio connection, whatever it connects over (TCP,
    TLS, to the primary Sentinel names). Three costs every command pays (a run reads about eighteen replies),
    and a lost cancellation:

    - its arguments are packed by hiredis, as redis-py's sync client packs them;
    - a write is just written; only one that fills the socket's buffer waits for it to drain, bounded by
      `socket_timeout`. redis-py bounds every write with `asyncio.wait_for`, which on Python 3.11 runs it in a
      task of its own, and, when its caller is cancelled just as that write completes, returns as if nothing
      happened: the cancellation is lost (a task that was told to stop goes on; one that waits for it waits
      for ever). `asyncio.timeout` loses none;
    - redis-py arms a timer around every reply it reads; here `socket_timeout` bounds each wait for the socket
      instead (as the sync client's socket timeout does), so a reply already received costs none.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", _Parser)
        super().__init__(**kwargs)

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str) and " " in args[0]:  # "CONFIG GET": redis-py sends the words apart
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:  # what hiredis does not pack (a memoryview, a bad type): redis-py's way and its errors
            return super().pack_command(*args)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if isinstance(command, str):
            command = command.encode()
        if isinstance(command, bytes):
            command = [command]
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()
        writer = self._writer
        transport = writer.transport
        try:
            writer.writelines(command)
            if transport.is_closing() or transport.get_write_buffer_size() >= transport.get_write_buffer_limits()[1]:
                async with asyncio.timeout(self.socket_timeout):
                    await writer.drain()  # (a connection lost: it raises)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeout("Timeout writing to socket") from None
        except OSError as exc:
            await self.disconnect(nowait=True)
            raise RedisConnectionError(f"Error while writing to Redis: {exc or type(exc).__name__}") from exc
        except BaseException:
            await self.disconnect(nowait=True)
            raise

    async def read_response(self, disable_decoding: bool = False, timeout: float | None = None, *,
                            disconnect_on_error: bool = True, push_request: bool | None = False) -> Any:
        parser = self._parser
        if timeout is not None or self.socket_timeout is None or not isinstance(parser, _Parser):
            return await super().read_response(disable_decoding, timeout, disconnect_on_error=disconnect_on_error,
                                               push_request=push_request)
        parser.read_timeout = self.socket_timeout  # math.inf: redis-py arms no timer of its own
        try:
            return await super().read_response(disable_decoding, math.inf, disconnect_on_error=disconnect_on_error,
                                               push_request=push_request)
        finally:
            parser.read_timeout = None


class Connection(Fast, aioredis.Connection):
    """redis-py's asyncio TCP connection, made faster and losing no cancellation (`Fast`)."""


class SSLConnection(Fast, aioredis.SSLConnection):
    """redis-py's asyncio TLS connection, made faster and losing no cancellation (`Fast`)."""


def fast_connection_class(base: type) -> type:
    """This module's connection class for redis-py's `base` (TCP or TLS); `base` subclassed with `Fast`
    for another (Sentinel's)."""
    if base is aioredis.Connection:
        return Connection
    if base is aioredis.SSLConnection:
        return SSLConnection
    return type(f"Fast{base.__name__}", (Fast, base), {"__doc__": f"{base.__name__} made faster (`Fast`)."})


def closed_by_peer(conn: aioredis.Connection) -> bool:
    """Whether Redis closed (a restart, a failover, CLIENT KILL) or reset this connection while it sat idle.
    redis-py's own check before reuse sees a close only when nothing is buffered (a RESP3 push may be) and
    never sees a reset, so the first command after one would fail."""
    stream = conn._reader
    return stream is not None and (stream._eof or stream.exception() is not None)


class SharedConnection:
    """One connection that every lean pipeline of the process shares (auto-pipelining). A pipeline goes out at
    once when none is in flight; those sent while one is in flight wait for its replies and then go out
    together, in one write, as a stream's deltas do (services/common/coalesce.py). Redis answers a
    connection's commands in order, so one reader hands each pipeline its replies in that order. A burst of
    runs then costs this process and Redis a write and a read per round trip, not per pipeline.

    Replies come straight from hiredis (a command's error is its reply; RESP3 push messages go to the parser's
    handler, as redis-py's read does); redis-py reads each through six coroutine frames and runs per-pipeline
    hooks. Each wait for the socket is bounded by `socket_timeout`. A caller cancelled before its write sends
    nothing; one cancelled after it has its replies read and dropped. A failed connection fails every pipeline
    on it; each is sent again on a new connection by the client's retry rule (`round_trip`)."""

    def __init__(self, pool: aioredis.ConnectionPool, retry: Retry) -> None:
        self._pool = pool
        self._retry = retry
        self._conn: Connection | None = None
        self._opening: asyncio.Future[Connection] | None = None
        self._queued: list[tuple[list[bytes], int, asyncio.Future]] = []  # for the next write
        self._inflight: collections.deque[tuple[int, list[Any], asyncio.Future]] = collections.deque()
        self._reader: asyncio.Task | None = None
        self.writes = 0  # how many writes carried the pipelines (bench/pipeline_bench.py counts round trips)

    async def round_trip(self, commands: list[tuple]) -> list[Any]:
        """The commands' replies, in one round trip; one that fails on a lost connection is sent again on a new
        one by the client's retry rule (redis_client.retry), as redis-py's pipelines are."""
        return await self._retry.call_with_retry(lambda: self._round_trip(commands), _nothing,
                                                 is_retryable=lambda exc: not isinstance(exc, NotRetried))

    async def _round_trip(self, commands: list[tuple]) -> list[Any]:
        conn = self._conn
        if conn is None or not conn.is_connected or (not self._inflight and self._closed_by_peer(conn)):
            conn = await self._connect()
        packed: list[bytes] = []
        for args in commands:
            packed += conn.pack_command(*args)
        loop = asyncio.get_running_loop()
        replies = loop.create_future()
        self._queued.append((packed, len(commands), replies))
        if not self._inflight:  # an idle connection: at once; else with the next write
            self._write(conn)
        return await replies

    def _closed_by_peer(self, conn: Connection) -> bool:
        """Whether Redis closed or reset this idle connection (`closed_by_peer`): dropped then, and the next
        pipeline connects anew. Nothing was sent on it since its last reply, so nothing is lost; a connection
        lost with pipelines in flight fails them."""
        if not closed_by_peer(conn):
            return False
        self._conn = None
        conn._close()
        return True

    async def _connect(self) -> Connection:
        """The connection, made once for every pipeline that needs it meanwhile: one attempt, one outcome (a
        Redis that does not answer fails them all after one connect timeout, not one after the other)."""
        opening = self._opening
        if opening is None:
            opening = self._opening = asyncio.ensure_future(self._open())
            opening.add_done_callback(self._opened)
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            if opening.cancelled() and not asyncio.current_task().cancelling():  # the client closed, not the caller
                raise NotRetried("The Redis client was closed while connecting") from None
            raise
        except RedisConnectionError as exc:
            raise NotRetried(str(exc)) from exc

    async def _open(self) -> Connection:
        conn = self._pool.make_connection()
        try:
            await conn.connect()
        except BaseException:
            conn._close()  # a handshake cut short (a timeout, the client closing) leaves no socket open
            raise
        self._conn = conn
        return conn

    def _opened(self, opening: asyncio.Future) -> None:
        self._opening = None
        if not opening.cancelled():
            opening.exception()  # each waiter raised it; none left is no error to report

    def _write(self, conn: Connection) -> None:
        queued, self._queued = self._queued, []
        queued = [q for q in queued if not q[2].done()]  # cancelled before the write: not sent
        if not queued:
            return
        writer = conn._writer
        if conn is not self._conn or writer is None or writer.transport.is_closing():
            for _, _, replies in queued:
                if not replies.done():
                    replies.set_exception(RedisConnectionError("Connection to Redis lost before the write"))
            return
        writer.writelines([chunk for packed, _, _ in queued for chunk in packed])
        self.writes += 1
        self._inflight.extend((n, [], replies) for _, n, replies in queued)
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read(conn))

    async def _read(self, conn: Connection) -> None:
        """Replies, in order, to the pipelines written, until none waits."""
        parser = conn._parser
        reader = parser._reader
        push = parser._hiredis_PushNotificationType
        inflight = self._inflight
        parser.read_timeout = conn.socket_timeout
        try:
            while inflight:
                reply = reader.gets()
                if reply is NOT_ENOUGH_DATA:
                    await parser.read_from_socket()
                    continue
                if isinstance(reply, RedisConnectionError):
                    raise reply
                if isinstance(reply, list) and reply and isinstance(reply[0], RedisConnectionError):
                    raise reply[0]
                if push is not None and isinstance(reply, push):
                    await parser.handle_push_response(reply)
                    continue
                n, replies, done = inflight[0]
                replies.append(reply)
                if len(replies) == n:
                    inflight.popleft()
                    if not done.done():
                        done.set_result(replies)
                    if not inflight and self._queued:  # what queued meanwhile: one write
                        self._write(conn)
        except BaseException as exc:  # the connection is in an unknown state: everyone on it fails
            if not isinstance(exc, Exception):  # cancelled: the client closes (not sent again)
                error: BaseException = NotRetried("The Redis client was closed")
            elif isinstance(exc, (RedisConnectionError, RedisTimeout)):
                error = exc
            else:
                error = RedisConnectionError(f"Error while reading from Redis: {exc or type(exc).__name__}")
            self._fail(conn, error)
            if not isinstance(exc, Exception):  # cancelled (the client closes), or the process exits
                raise
        finally:
            parser.read_timeout = None
            self._reader = None

    def _fail(self, conn: Connection, error: BaseException) -> None:
        if self._conn is conn:
            self._conn = None
        failed = [replies for _, _, replies in self._inflight] + [replies for _, _, replies in self._queued]
        self._inflight.clear()
        self._queued.clear()
        for replies in failed:
            if not replies.done():
                replies.set_exception(error)
        conn._close()  # dropped at once; the next pipeline connects anew

    async def aclose(self) -> None:
        """Close the connection; every pipeline still waiting fails with a connection error."""
        if self._opening is not None:
            self._opening.cancel()
        reader = self._reader
        if reader is not None:  # (cancelled before its first step, it never runs its own cleanup)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self._reader = None
        closed = NotRetried("The Redis client was closed")
        for replies in [r for _, _, r in self._inflight] + [r for _, _, r in self._queued]:
            if not replies.done():
                replies.set_exception(closed)
        self._inflight.clear()
        self._queued.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.disconnect()


class Pipeline(aioredis.client.Pipeline):
    """redis-py's pipeline with a fast path for what the orchestrator sends, a batch without MULTI or WATCH:
    the client's `SharedConnection`. Anything else goes redis-py's way."""

    shared: SharedConnection | None = None  # the client's (Redis.pipeline)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = self.command_stack
        shared = self.shared
        if (shared is None or not stack or self.is_transaction or self.explicit_transaction or self.watching
                or self.scripts or self.connection is not None):
            return await super().execute(raise_on_error)
        try:
            try:
                replies = await shared.round_trip([args for args, _ in stack])
            except OSError as exc:
                raise RedisConnectionError(f"Error while reading from Redis: {exc}") from exc
            return self._responses(stack, replies, raise_on_error)
        finally:
            await self.reset()

    def _responses(self, stack: list, replies: list[Any], raise_on_error: bool) -> list[Any]:
        """The replies as redis-py's parse_response makes them: its response callbacks, EMPTY_RESPONSE."""
        callbacks = self.response_callbacks
        out: list[Any] = []
        for (args, options), reply in zip(stack, replies):
            if isinstance(reply, ResponseError):
                out.append(options[EMPTY_RESPONSE] if EMPTY_RESPONSE in options else reply)
                continue
            callback = callbacks.get(args[0])
            if callback is not None:
                kwargs = {k: v for k, v in options.items() if k not in (EMPTY_RESPONSE, NEVER_DECODE, "keys")} if options else {}
                reply = callback(reply, **kwargs)
            out.append(reply)
        if raise_on_error:
            self.raise_first_error(stack, out)
        return out


class Redis(aioredis.Redis):
    """The client whose pipelines share one connection (`SharedConnection`) when its connections are this
    module's `Connection` (TCP: `fast_client`)."""

    shared: SharedConnection | None = None

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> aioredis.client.Pipeline:
        pipe = Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.shared = self.shared
        return pipe

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self.shared is not None:
            await self.shared.aclose()
        await super().aclose(close_connection_pool)


class Pool(aioredis.BlockingConnectionPool):
    """redis-py's blocking pool with a fast path for its common case, a free connection and nobody waiting (a
    run checks out three): handed out and taken back in place, without the pool's locks, its 30 s timer, its
    observability hooks and, on release, the task redis-py's pipelines shield it in (`release` returns a done
    future). A caller that has to wait for a connection, or a release that has to wake one, goes redis-py's way.

    And a pool that gives back what a burst made it open: a connection left idle for `idle_close_s` is taken out
    of the pool and closed (redis-py's pools never shrink, so a take-over's peak of blocking reads would keep its
    sockets open, and count against a managed Redis's connection limit, for the process's life). The pool hands
    out the most recently used first, so a steady load keeps reusing the same few and the rest go.
    """

    idle_close_s = IDLE_CLOSE_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle_since: dict[Any, float] = {}  # connection -> when it was last given back
        self._trimming: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Future] = set()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if not self._available_connections:
            return await super().get_connection(*args, **kwargs)
        connection = self._available_connections.pop()
        self._in_use_connections.add(connection)
        try:
            await self.ensure_connection(connection)  # connected, and nothing left unread on it
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def ensure_connection(self, connection: Any) -> None:
        if closed_by_peer(connection):  # reset or closed while idle: reconnected here, not failed on first use
            await connection.disconnect()
        await super().ensure_connection(connection)

    def release(self, connection: Any) -> Any:  # awaitable either way
        self._idle_since[connection] = time.monotonic()
        if self._trimming is None and self.idle_close_s > 0:
            self._trimming = asyncio.get_running_loop().call_later(self.idle_close_s, self._close_idle)
        if self._condition._waiters or connection.should_reconnect():  # someone to wake, a reconnect: redis-py's
            return asyncio.ensure_future(super().release(connection))
        self._in_use_connections.remove(connection)
        self._available_connections.append(connection)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def disconnect(self, inuse_connections: bool = True) -> None:
        if self._trimming is not None:
            self._trimming.cancel()
            self._trimming = None
        await asyncio.gather(*self._closing)
        await super().disconnect(inuse_connections)

    def _close_idle(self) -> None:
        """Out of the pool first, so that no caller takes one while it closes; the pool opens new ones when it
        needs them again."""
        self._trimming = None
        now = time.monotonic()
        kept = []
        for connection in self._available_connections:
            if now - self._idle_since.get(connection, now) < self.idle_close_s:
                kept.append(connection)
                continue
            self._idle_since.pop(connection, None)
            closing = asyncio.ensure_future(_close_quietly(connection))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        self._available_connections[:] = kept
        if kept:
            oldest = min(self._idle_since.get(connection, now) for connection in kept)
            self._trimming = asyncio.get_running_loop().call_later(
                max(0.0, oldest + self.idle_close_s - now), self._close_idle)


async def _close_quietly(connection: Any) -> None:
    """An idle connection's close: whatever goes wrong closing it (a peer gone already), it is closed."""
    try:
        await connection.disconnect()
    except (RedisConnectionError, RedisTimeout, OSError):
        pass


def fast_client(url: str, retry: Retry, **pool_options: Any) -> aioredis.Redis:
    """A client of `url` (lazy: nothing connects until it is first used), its pool's connections made with
    `pool_options` and `retry`: this module's connection and pool; over TCP its pipelines too (TLS and unix
    sockets keep redis-py's)."""
    pool = Pool.from_url(url, retry=retry, **pool_options)
    client = Redis(connection_pool=pool)
    tcp = pool.connection_class is aioredis.Connection
    pool.connection_class = fast_connection_class(pool.connection_class)
    if tcp:
        client.shared = SharedConnection(pool, retry)
    return client


async def _nothing(error: BaseException) -> None:
    """A failed shared round trip needs nothing before it is sent again: its connection is dropped already."""


# ---------------------------------------------------------------- what store/agent_cache.py needs of a connection
def on_invalidation(conn: aioredis.Connection, handler: Callable[[list], Awaitable[Any]]) -> None:
    """Hand the connection's invalidation push messages (CLIENT TRACKING, RESP3) to `handler` as they are read."""
    conn._parser.set_invalidation_push_handler(handler)


def unread(conn: aioredis.Connection) -> bool:
    """Whether the connection has received bytes nobody has read yet (an invalidation, maybe), or is gone."""
    reader, writer = conn._reader, conn._writer
    return reader is None or writer is None or bool(len(reader._buffer)) or reader.at_eof()


def fileno(conn: aioredis.Connection) -> int:
    """The connection's socket (to poll it for bytes the loop has not read yet)."""
    return conn._writer.get_extra_info("socket").fileno()


# ---------------------------------------------------------------- what store/_redis_cluster.py needs of a cluster client
def fast_cluster(client: Any) -> None:
    """A cluster client's connections made with this module's connection class (TCP or TLS): redis-py's cluster
    client takes none, it picks its own. Its connection options are shared with its map of the nodes, so every
    node it finds later gets it too; the nodes it starts from were made already."""
    kwargs = client.connection_kwargs
    kwargs["connection_class"] = fast_connection_class(kwargs["connection_class"])
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = kwargs["connection_class"]

class KeptCommands(AsyncCommandsParser):
    """The cluster client's table of Redis's commands (where each command's keys are), read with COMMAND from
    the cluster's first primary each time the client refreshes its map of the slots. When that primary is the
    one that just died, the refresh fails, and with it every command of the client, whichever node it is for,
    until a replica is elected in its place. A Redis's commands do not change with the cluster's shape: once
    read, the table is kept (the client's `commands_parser`)."""

    async def initialize(self, node: Any = None) -> None:
        if node is not None:
            self.node = node
        if not self.commands:
            await super().initialize()


# ---------------------------------------------------------------- the internals this module relies on
# (where, name, what it must be): checked by the test of this module's internals.
_CALLABLE, _ATTRIBUTE, _VALUE = "callable", "attribute", "value"
INTERNALS: list[tuple[Any, str, str, tuple[str, ...]]] = [
    # the module-level names imported above
    ("redis._parsers", "_AsyncHiredisParser", _CALLABLE, ()),
    ("redis._parsers.hiredis", "NOT_ENOUGH_DATA", _VALUE, ()),
    ("redis.asyncio.client", "EMPTY_RESPONSE", _VALUE, ()),
    ("redis.asyncio.client", "NEVER_DECODE", _VALUE, ()),
    ("redis._parsers", "AsyncCommandsParser", _CALLABLE, ()),
    # the parser: overridden, called, or read
    ("redis._parsers._AsyncHiredisParser", "__init__", _CALLABLE, ("self", "socket_read_size")),
    ("redis._parsers._AsyncHiredisParser", "read_from_socket", _CALLABLE, ("self",)),
    ("redis._parsers._AsyncHiredisParser", "handle_push_response", _CALLABLE, ("self", "response")),
    ("redis._parsers._AsyncHiredisParser", "set_invalidation_push_handler", _CALLABLE,
     ("self", "invalidation_push_handler_func")),
    ("parser", "_reader", _ATTRIBUTE, ()),  # hiredis.Reader, once connected
    ("parser", "_hiredis_PushNotificationType", _ATTRIBUTE, ()),
    # the connection
    ("redis.asyncio.Connection", "pack_command", _CALLABLE, ("self", "args")),
    ("redis.asyncio.Connection", "send_packed_command", _CALLABLE, ("self", "command", "check_health")),
    ("redis.asyncio.Connection", "connect_check_health", _CALLABLE, ("self", "check_health")),
    ("redis.asyncio.Connection", "disconnect", _CALLABLE, ("self", "nowait")),
    ("connection", "is_connected", _ATTRIBUTE, ()),
    ("redis.asyncio.Connection", "read_response", _CALLABLE,
     ("self", "disable_decoding", "timeout", "disconnect_on_error", "push_request")),
    ("redis.asyncio.Connection", "check_health", _CALLABLE, ("self",)),
    ("redis.asyncio.Connection", "should_reconnect", _CALLABLE, ("self",)),
    ("redis.asyncio.Connection", "_close", _CALLABLE, ("self",)),
    ("connection", "_reader", _ATTRIBUTE, ()),  # asyncio.StreamReader, once connected
    ("connection", "_writer", _ATTRIBUTE, ()),  # asyncio.StreamWriter
    ("connection", "_parser", _ATTRIBUTE, ()),
    ("connection", "socket_timeout", _ATTRIBUTE, ()),
    ("asyncio.StreamReader", "_buffer", _ATTRIBUTE, ()),
    ("asyncio.StreamReader", "_eof", _ATTRIBUTE, ()),
    # the pipeline
    ("redis.asyncio.client.Pipeline", "__init__", _CALLABLE,
     ("self", "connection_pool", "response_callbacks", "transaction", "shard_hint")),
    ("redis.asyncio.client.Pipeline", "execute", _CALLABLE, ("self", "raise_on_error")),
    ("redis.asyncio.client.Pipeline", "raise_first_error", _CALLABLE, ("self", "commands", "response")),
    ("redis.asyncio.client.Pipeline", "reset", _CALLABLE, ("self",)),
    ("pipeline", "command_stack", _ATTRIBUTE, ()),
    ("pipeline", "is_transaction", _ATTRIBUTE, ()),
    ("pipeline", "explicit_transaction", _ATTRIBUTE, ()),
    ("pipeline", "watching", _ATTRIBUTE, ()),
    ("pipeline", "scripts", _ATTRIBUTE, ()),
    ("pipeline", "connection", _ATTRIBUTE, ()),
    ("pipeline", "response_callbacks", _ATTRIBUTE, ()),
    ("redis.asyncio.Redis", "pipeline", _CALLABLE, ("self", "transaction", "shard_hint")),
    ("redis.asyncio.Redis", "aclose", _CALLABLE, ("self", "close_connection_pool")),
    # the cluster client's table of commands (KeptCommands)
    ("redis._parsers.AsyncCommandsParser", "initialize", _CALLABLE, ("self", "node")),
    ("redis._parsers.AsyncCommandsParser", "commands", _ATTRIBUTE, ()),  # set by __init__: {} until read
    ("redis._parsers.AsyncCommandsParser", "node", _ATTRIBUTE, ()),  # a slot: there before its first set
    ("redis.asyncio.cluster.RedisCluster", "commands_parser", _ATTRIBUTE, ()),
    # the cluster client's connection class (fast_cluster)
    ("cluster", "connection_kwargs", _ATTRIBUTE, ()),  # the same dict as its nodes manager's (the test checks)
    ("cluster", "nodes_manager", _ATTRIBUTE, ()),
    ("cluster.nodes_manager", "startup_nodes", _ATTRIBUTE, ()),
    ("cluster.nodes_manager", "connection_kwargs", _ATTRIBUTE, ()),
    ("redis.asyncio.cluster.ClusterNode", "connection_class", _ATTRIBUTE, ()),
    # the pool
    ("redis.asyncio.BlockingConnectionPool", "get_connection", _CALLABLE, ("self",)),
    ("redis.asyncio.BlockingConnectionPool", "ensure_connection", _CALLABLE, ("self", "connection")),
    ("redis.asyncio.BlockingConnectionPool", "release", _CALLABLE, ("self", "connection")),
    ("redis.asyncio.BlockingConnectionPool", "make_connection", _CALLABLE, ("self",)),
    ("pool", "_available_connections", _ATTRIBUTE, ()),
    ("pool", "_in_use_connections", _ATTRIBUTE, ()),
    ("pool", "_condition", _ATTRIBUTE, ()),
    ("asyncio.Condition", "_waiters", _ATTRIBUTE, ()),
]


def missing_internals(instances: dict[str, Any]) -> list[str]:
    """Each internal of `INTERNALS` that is gone or changed shape, as `where.name: what`. `instances`: a live
    "parser", "connection" (connected), "pipeline" and "pool", for the attributes only instances have."""
    import importlib

    def resolve(path: str) -> Any:
        if path in instances:
            return instances[path]
        if path == "asyncio.Condition":
            return asyncio.Condition()
        if path == "asyncio.StreamReader":
            return asyncio.StreamReader()
        module, _, rest = path.partition(".")
        obj = importlib.import_module(module)
        for part in rest.split(".") if rest else []:
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
        return obj

    missing = []
    if redis.__version__ != PINNED_REDIS:
        missing.append(f"redis.__version__: {redis.__version__}, not the {PINNED_REDIS} these internals were read from")
    for where, name, kind, params in INTERNALS:
        try:
            obj = resolve(where)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{where}: gone ({exc})")
            continue
        if not hasattr(obj, name):
            missing.append(f"{where}.{name}: gone")
            continue
        value = getattr(obj, name)
        if kind == _CALLABLE:
            if not callable(value):
                missing.append(f"{where}.{name}: no longer callable")
                continue
            if params:
                names = tuple(p.name for p in inspect.signature(value).parameters.values())
                if isinstance(value, type):
                    names = ("self", *names)
                if names[:len(params)] != params and not set(params) <= set(names):
                    missing.append(f"{where}.{name}: parameters {names}, expected {params}")
    return missing
