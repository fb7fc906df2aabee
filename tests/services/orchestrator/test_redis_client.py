"""The orchestrator's Redis client (services/orchestrator/redis_client.py): redis-py with hiredis packing and
untasked writes, against a real Redis and against a peer that stops reading."""
from __future__ import annotations

import asyncio

import hiredis
import pytest
import redis.asyncio as aioredis
from redis.exceptions import DataError, TimeoutError as RedisTimeout

from services.orchestrator.redis_client import Connection, connect
from tests.support.timers import timers_armed

COMMANDS = [
    ("SET", "k", "välue"),
    ("HSET", b"h", "f", 3, "g", 0.1, "t", 1795713708.9178567, "n", -7),
    ("EVALSHA", "5d2e8ac856f1ab727ff243116579817a1c863bc6", 2, "a", "b", b"\x00\xff" * 40_000),
    ("CONFIG GET", "maxmemory"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: str(a[0]))
def test_commands_pack_exactly_as_redis_py_packs_them(args):
    assert b"".join(Connection().pack_command(*args)) == b"".join(aioredis.Connection().pack_command(*args))


def test_what_hiredis_cannot_pack_goes_redis_py_s_way():
    assert b"".join(Connection().pack_command("SET", "k", memoryview(b"ab"))) == \
        b"".join(aioredis.Connection().pack_command("SET", "k", memoryview(b"ab")))
    with pytest.raises(DataError, match="bool"):  # redis-py's error, naming the type
        Connection().pack_command("SET", "k", True)


async def test_commands_pipelines_and_scripts_work_on_a_real_redis(redis_server):
    client = connect(redis_server.url)
    try:
        conn = await client.connection_pool.get_connection()
        assert isinstance(conn, Connection)
        await client.connection_pool.release(conn)
        big = b"\x00\xff" * 600_000  # larger than the socket's buffer
        async with client.pipeline(transaction=True) as pipe:
            pipe.set("rc:big", big).hset("rc:h", mapping={"a": 1, "b": 0.5}).hgetall("rc:h")
            _, _, fields = await pipe.execute()
        assert fields == {b"a": b"1", b"b": b"0.5"} and await client.get("rc:big") == big
        assert await client.eval("return redis.call('STRLEN', KEYS[1])", 1, "rc:big") == len(big)
        assert (await client.config_get("maxmemory"))  # a two-word command name
    finally:
        await client.aclose()


async def test_a_redis_that_stops_reading_fails_the_command_with_a_timeout():
    """A peer that answers the handshake and then neither reads nor answers: the command fails within the
    socket timeout, it does not hang."""
    released = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    if command[0].upper() == b"SET":
                        await released.wait()  # hung: reads and answers nothing more
                        return
                    writer.write(b"+OK\r\n")
        finally:
            writer.transport.abort()  # the client's side closes at once, with what it still had to send

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = connect(f"redis://127.0.0.1:{port}/0?socket_timeout=0.3&protocol=2")
    try:
        with pytest.raises(RedisTimeout):
            await client.set("k", b"x" * 8_000_000)  # far more than the socket takes before the peer reads
    finally:
        released.set()
        await client.aclose()
        server.close()
        await server.wait_closed()


async def test_a_redis_that_never_answers_fails_the_read_with_a_timeout():
    """The command is written and read by the peer, which never answers: the reply's read fails within the
    socket timeout (bounded per wait for the socket), it does not hang."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = hiredis.Reader()
        while data := await reader.read(65536):
            parser.feed(data)
            while (command := parser.gets()) is not False:
                if command[0].upper() != b"GET":
                    writer.write(b"+OK\r\n")  # the handshake; a GET gets nothing, ever

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = connect(f"redis://127.0.0.1:{port}/0?socket_timeout=0.3&protocol=2")
    try:
        with pytest.raises(RedisTimeout):
            await asyncio.wait_for(client.get("k"), 10)  # the bound only guards a hang
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


async def test_the_replies_of_a_pipeline_are_read_without_a_timer_each(redis_server):
    """redis-py arms a timer for every reply; here only a wait for the socket does: a pipeline of 200 commands
    reads its replies with a handful of timers, not 200."""
    client = connect(redis_server.url)
    try:
        await client.ping()
        with timers_armed() as armed:
            async with client.pipeline(transaction=False) as pipe:
                for i in range(200):
                    pipe.set(f"rc:n{i}", i)
                assert await pipe.execute() == [True] * 200
    finally:
        await client.aclose()
    assert armed.count < 20


async def test_a_free_connection_is_checked_out_and_back_without_a_task(redis_server):
    """The pool's fast path: sequential pipelines reuse one connection and start no task (redis-py's pipeline
    shields each release in one)."""
    client = connect(redis_server.url)
    loop = asyncio.get_running_loop()
    started = 0
    default_factory = loop.get_task_factory()

    def counting_factory(loop, coro, **kwargs):
        nonlocal started
        started += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    try:
        await client.ping()
        loop.set_task_factory(counting_factory)
        for i in range(50):
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(f"rc:seq{i}", i).get(f"rc:seq{i}")
                assert await pipe.execute() == [True, str(i).encode()]
    finally:
        loop.set_task_factory(default_factory)
        await client.aclose()
    assert started == 0


async def test_callers_beyond_the_pool_wait_for_a_connection_and_all_get_one(redis_server):
    """Two connections, 60 concurrent commands: the ones that wait are woken as connections come back."""
    client = connect(redis_server.url)
    pool = client.connection_pool
    pool.max_connections = 2
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(client.eval("return ARGV[1]", 0, str(i)) for i in range(60))), 30)
        assert results == [str(i).encode() for i in range(60)]
        assert len(pool._available_connections) + len(pool._in_use_connections) <= 2
    finally:
        await client.aclose()
