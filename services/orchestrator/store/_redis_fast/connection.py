"""The connection: redis-py's asyncio connection made faster and losing no cancellation (`Fast`), over TCP, TLS
or to the primary Sentinel names; and whether Redis closed an idle one (`closed_by_peer`)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers import _AsyncHiredisParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout


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
