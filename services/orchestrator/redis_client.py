"""The orchestrator's Redis connection: health stays NOT_SERVING until Redis answers."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers import _AsyncHiredisParser
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

from services.common.errors import Unavailable


async def wait_until_ready(client: aioredis.Redis, url: str, attempts: int = 50, delay_s: float = 0.2) -> None:
    for attempt in range(attempts):
        try:
            await client.ping()
            return
        except (OSError, aioredis.ConnectionError) as exc:
            if attempt == attempts - 1:
                raise Unavailable(f"Redis at {url} is not reachable: {exc}") from exc
            await asyncio.sleep(delay_s)


# redis-py's default pool refuses its 101st connection at once ("Too many connections"): a burst of runs (each
# holds one for a command, its journal writer another) failed runs. This pool makes a caller wait for a free
# connection instead, for at most POOL_TIMEOUT_S.
MAX_CONNECTIONS = 256
POOL_TIMEOUT_S = 30


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


class Connection(aioredis.Connection):
    """redis-py's asyncio TCP connection without three costs every command pays (a run reads about eighteen
    replies):

    - its arguments are packed by hiredis, as redis-py's sync client packs them (a journal batch of 14 events
      packs in 4 us instead of 30);
    - a write that fits in the socket's buffer is just written. redis-py bounds every write with
      `asyncio.wait_for`, which on Python 3.11 runs it in a task of its own; such a write cannot block, so
      only one that has to wait for the buffer to drain goes that way, still bounded by `socket_timeout`;
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
        writer = self._writer
        if writer is None or not self.is_connected or not isinstance(command, list):
            return await super().send_packed_command(command, check_health)
        transport = writer.transport
        if transport.is_closing() or transport.get_write_buffer_size() >= transport.get_write_buffer_limits()[1]:
            return await super().send_packed_command(command, check_health)  # waits for the drain, or fails
        if check_health:
            await self.check_health()
        writer.writelines(command)

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

    def lean(self) -> bool:
        """Whether `round_trip` can serve this connection: its replies come through hiredis, and a failure is
        not retried (this client's connections have no retries; with some, redis-py's own way retries)."""
        return isinstance(self._parser, _Parser) and self._parser._reader is not None and not self.retry.get_retries()

    async def round_trip(self, commands: list[tuple]) -> list[Any]:
        """`commands` in one write, then their raw replies straight from hiredis (a command's error is its
        reply; RESP3 push messages go to the parser's handler, as redis-py's read does). A failure leaves the
        connection in an unknown state: the caller drops it."""
        await self.send_packed_command(self.pack_commands(commands))
        parser = self._parser
        reader = parser._reader
        push = parser._hiredis_PushNotificationType
        replies: list[Any] = []
        parser.read_timeout = self.socket_timeout  # each wait for the socket, as read_response bounds it
        try:
            while len(replies) < len(commands):
                reply = reader.gets()
                if reply is NOT_ENOUGH_DATA:
                    await parser.read_from_socket()
                elif isinstance(reply, RedisConnectionError):
                    raise reply
                elif isinstance(reply, list) and reply and isinstance(reply[0], RedisConnectionError):
                    raise reply[0]
                elif push is not None and isinstance(reply, push):
                    await parser.handle_push_response(reply)
                else:
                    replies.append(reply)
        finally:
            parser.read_timeout = None
        return replies


class Pipeline(aioredis.client.Pipeline):
    """redis-py's pipeline with a fast path for what the orchestrator sends, a batch without MULTI or WATCH on a
    `Connection`: one write, then every reply read straight from hiredis. redis-py reads each reply through six
    coroutine frames and runs its per-pipeline hooks (HIMPORT bookkeeping, operation metrics): a third of what
    the orchestrator's pipelines cost it in bursts of runs (py-spy, 9.5% of its samples before, 6.1% after).
    Anything else goes redis-py's way. A failure drops the connection and raises, as redis-py does without
    retries."""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = self.command_stack
        if not stack or self.is_transaction or self.explicit_transaction or self.watching or self.scripts:
            return await super().execute(raise_on_error)
        if self.connection is None:
            self.connection = await self.connection_pool.get_connection()
        conn = self.connection
        if not (isinstance(conn, Connection) and conn.lean()):
            return await super().execute(raise_on_error)
        try:
            try:
                replies = await conn.round_trip([args for args, _ in stack])
            except OSError as exc:
                raise RedisConnectionError(f"Error while reading from Redis: {exc}") from exc
            return self._responses(stack, replies, raise_on_error)
        except ResponseError:
            raise  # raise_on_error: every reply was read, the connection is fine
        except BaseException:  # failed or cancelled mid-read: what is still unread must not reach the next user
            await conn.disconnect(nowait=True)
            raise
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
    """The client with the lean pipeline."""

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> aioredis.client.Pipeline:
        return Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class Pool(aioredis.BlockingConnectionPool):
    """redis-py's blocking pool with a fast path for its common case, a free connection and nobody waiting (a
    run checks out three): handed out and taken back in place, without the pool's locks, its 30 s timer, its
    observability hooks and, on release, the task redis-py's pipelines shield it in (`release` returns a done
    future). A caller that has to wait for a connection, or a release that has to wake one, goes redis-py's way.
    """

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

    def release(self, connection: Any) -> Any:  # awaitable either way
        if self._condition._waiters or connection.should_reconnect():  # someone to wake, a reconnect: redis-py's
            return asyncio.ensure_future(super().release(connection))
        self._in_use_connections.remove(connection)
        self._available_connections.append(connection)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def connect(url: str) -> aioredis.Redis:
    """The process's client (lazy: nothing connects until it is first used)."""
    pool = Pool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT_S)
    if pool.connection_class is aioredis.Connection:  # TCP; TLS and unix sockets keep redis-py's own
        pool.connection_class = Connection
    return Redis(connection_pool=pool)
