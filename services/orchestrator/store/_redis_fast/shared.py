"""Auto-pipelining: one connection that every lean pipeline of the process shares (`SharedConnection`), the
pipeline that goes through it (`Pipeline`) and the client that makes such pipelines (`Redis`)."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import redis.asyncio as aioredis
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.asyncio.retry import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

from services.orchestrator.store._redis_fast.connection import Connection, closed_by_peer


class NotRetried(RedisConnectionError):
    """A shared connection's failure its pipelines do not retry: the client closed, or connecting failed
    (redis-py's connect has retried that already)."""


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


async def _nothing(error: BaseException) -> None:
    """A failed shared round trip needs nothing before it is sent again: its connection is dropped already."""
