"""The orchestrator's Redis client (services/orchestrator/store/redis_client.py and its fast path, _redis_fast/):
redis-py with hiredis packing, untasked writes and shared pipelines, against a real Redis and against peers that
stop reading, stop answering or drop the connection."""
from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

import hiredis
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

from services.orchestrator.store import redis_client
from services.orchestrator.store._redis_fast import Connection, closed_by_peer
from services.orchestrator.store.redis_client import connect
from tests.support.net import free_port
from tests.support.timers import timers_armed
from tests.support.waiting import eventually

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


async def _two_hundred_sets(client, prefix: str) -> None:
    async with client.pipeline(transaction=False) as pipe:
        for i in range(200):
            pipe.set(f"{prefix}{i}", i)
        assert await pipe.execute() == [True] * 200


async def test_the_replies_of_a_pipeline_are_read_without_a_timer_each(redis_server):
    """redis-py arms a timer for every reply; here only a wait for the socket does: a pipeline of 200 commands
    reads its replies with a handful of timers, not 200."""
    client = connect(redis_server.url)
    try:
        await client.ping()
        with timers_armed() as armed:
            await _two_hundred_sets(client, "rc:n")
    finally:
        await client.aclose()
    assert armed.count < 20


async def test_a_free_connection_is_checked_out_and_back_without_a_task(redis_server):
    """The pool's fast path (single commands; pipelines share one connection): sequential commands reuse one
    connection and start no task (redis-py shields each release in one)."""
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
            assert await client.set(f"rc:seq{i}", i) is True
            assert await client.get(f"rc:seq{i}") == str(i).encode()
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


async def test_connections_a_burst_opened_are_closed_once_idle_and_the_pool_opens_them_again(redis_server):
    """Eight blocking reads at once hold eight pooled connections; once given back and idle for `idle_close_s`
    they are closed (Redis sees them go), except one still in use, and the next burst is served as the first."""
    client = connect(redis_server.url)
    watcher = aioredis.Redis.from_url(redis_server.url)
    pool = client.connection_pool
    pool.idle_close_s = 0.2

    async def clients() -> int:  # the connections Redis has, the watcher's own among them
        return len(await watcher.client_list())

    async def at_most(limit: int) -> bool:
        return await clients() <= limit

    async def at_least(limit: int) -> bool:
        return await clients() >= limit

    try:
        before = await clients()
        for burst in range(2):
            reads = [asyncio.ensure_future(client.blpop([f"rc:idle:{burst}:{i}"], timeout=0)) for i in range(8)]
            await eventually(lambda: at_least(before + 8), what="eight connections, each blocked in a read")
            for i in range(7):  # the eighth read stays blocked, its connection in use
                await watcher.lpush(f"rc:idle:{burst}:{i}", "v")
            assert [r[1] for r in await asyncio.gather(*reads[:7])] == [b"v"] * 7
            await eventually(lambda: at_most(before + 1), what="the seven idle ones closed")
            await watcher.lpush(f"rc:idle:{burst}:7", "v")
            assert (await reads[7])[1] == b"v"  # the one in use was left alone
            await eventually(lambda: at_most(before), what="the last one closed once idle")
            assert pool._in_use_connections == set() and pool._available_connections == []
    finally:
        await client.aclose()
        await watcher.aclose()


async def _batch(client, p: str) -> list:
    async with client.pipeline(transaction=False) as pipe:
        pipe.set(f"{p}:s", "v").hset(f"{p}:h", mapping={"a": 1}).hgetall(f"{p}:h").exists(f"{p}:s", f"{p}:none")
        pipe.zadd(f"{p}:z", {"m": 1.5}).zrange(f"{p}:z", 0, -1, withscores=True).get(f"{p}:none")
        pipe.incr(f"{p}:s")  # an error reply in the middle: it stays in its place
        pipe.eval("return {1, 'two', KEYS[1]}", 1, f"{p}:k").ttl(f"{p}:s")
        return await pipe.execute(raise_on_error=False)


async def test_a_pipeline_gives_exactly_the_replies_redis_py_gives(redis_server):
    ours, theirs = connect(redis_server.url), aioredis.Redis.from_url(redis_server.url)
    try:
        mine, reference = await _batch(ours, "rc:ours"), await _batch(theirs, "rc:theirs")
        assert [type(r) for r in mine] == [type(r) for r in reference]
        assert [str(r).replace("ours", "theirs") for r in mine] == [str(r) for r in reference]  # errors by message
        assert mine[2] == {b"a": b"1"} and isinstance(mine[7], ResponseError)
        with pytest.raises(Exception) as raised:
            async with ours.pipeline(transaction=False) as pipe:
                await pipe.set("rc:s", "v").incr("rc:s").execute()
        assert "Command # 2 (INCRBY rc:s 1) of pipeline caused error" in str(raised.value)
    finally:
        await ours.aclose()
        await theirs.aclose()


async def test_a_pipeline_reads_its_replies_without_a_read_per_reply(redis_server, monkeypatch):
    """The fast path: 200 replies straight from hiredis, none through redis-py's per-reply read (six coroutine
    frames each)."""
    reads = 0
    real = Connection.read_response
    loop = asyncio.get_running_loop()

    async def counted(self, *args, **kwargs):
        nonlocal reads
        reads += asyncio.get_running_loop() is loop  # (a stack another test left running in a thread reads too)
        return await real(self, *args, **kwargs)

    client = connect(redis_server.url)
    try:
        await _pipeline(client, ("PING",))  # the shared connection's handshake reads redis-py's way
        monkeypatch.setattr(Connection, "read_response", counted)
        await _two_hundred_sets(client, "rc:r")
    finally:
        await client.aclose()
    assert reads == 0


async def _scripted_redis(answer):
    """A peer speaking RESP2 that answers each command with `await answer(command, connection number)`, one
    connection at a time in order; returns (server, port, each connection's writer)."""
    seen: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer)
        parser = hiredis.Reader()
        while data := await reader.read(65536):
            parser.feed(data)
            while (command := parser.gets()) is not False:
                reply = await answer(command, len(seen))
                if reply is None:  # drop the connection
                    writer.transport.abort()
                    return
                writer.write(reply)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


@contextlib.asynccontextmanager
async def _scripted_client(answer, query: str):
    """This module's client of a `_scripted_redis` peer (`query`: the URL's options): (client, its connections)."""
    server, port, seen = await _scripted_redis(answer)
    client = connect(f"redis://127.0.0.1:{port}/0?{query}")
    try:
        yield client, seen
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


async def test_a_pipeline_cancelled_while_reading_leaves_no_reply_for_the_next_caller():
    release = asyncio.Event()

    async def answer(command, connection):
        if command == [b"GET", b"slow"]:
            await release.wait()
            return b"$5\r\nstale\r\n"
        if command[0] == b"GET":
            return b"$5\r\nfresh\r\n"
        return b"+OK\r\n"

    async with _scripted_client(answer, "protocol=2") as (client, seen):
        async with client.pipeline(transaction=False) as pipe:
            pipe.set("a", 1).get("slow")
            pending = asyncio.ensure_future(pipe.execute())
            await asyncio.sleep(0.2)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
        async with client.pipeline(transaction=False) as pipe:
            after = asyncio.ensure_future(pipe.get("other").execute())  # on the same connection, behind it
            await asyncio.sleep(0.05)
            release.set()
            assert await after == [b"fresh"]  # not the cancelled pipeline's late reply
        assert await client.get("other") == b"fresh"  # a single command: a pooled connection
        assert len(seen) == 2  # the shared one was kept, its late replies read and dropped


async def test_a_pipeline_whose_connection_is_lost_is_sent_again_on_a_new_one():
    async def answer(command, connection):
        if command[0] == b"GET" and connection == 1:
            return None  # the first connection dies before the pipeline's replies
        return b"$2\r\nok\r\n" if command[0] == b"GET" else b"+OK\r\n"

    async with _scripted_client(answer, "protocol=2") as (client, seen):
        async with client.pipeline(transaction=False) as pipe:  # the retry rule (redis_client.retry)
            assert await pipe.set("a", 1).get("a").execute() == [True, b"ok"]
        assert len(seen) == 2  # the shared connection, then its replacement


async def test_a_connection_lost_on_every_attempt_fails_the_pipeline_after_the_rules_retries(monkeypatch):
    monkeypatch.setattr(redis_client, "BACKOFF_BASE_S", 0.001)
    async def answer(command, connection):
        return None if command[0] == b"GET" else b"+OK\r\n"  # every connection dies at the GET

    async with _scripted_client(answer, "protocol=2") as (client, seen):
        with pytest.raises(RedisConnectionError):
            async with client.pipeline(transaction=False) as pipe:
                await pipe.get("a").execute()
        assert len(seen) == 1 + redis_client.RETRIES
        with pytest.raises(RedisConnectionError):
            await client.get("a")  # a single command: the same rule, through redis-py's own retry
        assert len(seen) == 2 * (1 + redis_client.RETRIES)


async def _pipeline(client, *commands: tuple) -> list:
    async with client.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute(raise_on_error=False)


async def test_pipelines_sent_while_one_is_in_flight_go_out_in_one_write_and_each_gets_its_own_replies(redis_server):
    client = connect(redis_server.url)
    try:
        await _pipeline(client, ("PING",))
        writes = client.shared.writes
        replies = await asyncio.gather(*(
            _pipeline(client, ("SET", f"rc:mux{i}", i), ("INCRBY", f"rc:mux{i}", i), ("GET", f"rc:mux{i}"),
                      *([("INCR", "rc:mux-not-a-number-" + "x" * i)] if i % 7 == 0 else []))
            for i in range(60)))
        assert client.shared.writes == writes + 2  # the first at once, the 59 sent meanwhile together
        for i, got in enumerate(replies):
            assert got[:3] == [True, 2 * i, str(2 * i).encode()]
            assert len(got) == (4 if i % 7 == 0 else 3)
        assert await _pipeline(client, ("GET", "rc:mux59")) == [b"118"]  # alone: at once
        assert client.shared.writes == writes + 3
    finally:
        await client.aclose()


async def test_a_shared_connection_redis_closed_while_idle_is_replaced_before_the_next_pipeline(redis_server):
    client = connect(redis_server.url)
    try:
        [shared_id] = await _pipeline(client, ("CLIENT", "ID"))
        stream = client.shared._conn._reader
        assert await client.execute_command("CLIENT", "KILL", "ID", shared_id) == 1  # as a Redis restart closes it
        for _ in range(2000):  # until this process has seen the close (no time limit: the loop turns)
            if stream.at_eof():
                break
            await asyncio.sleep(0.001)
        assert stream.at_eof()
        writes = client.shared.writes
        assert await _pipeline(client, ("SET", "rc:after-kill", 1), ("GET", "rc:after-kill")) == [True, b"1"]
        [new_id] = await _pipeline(client, ("CLIENT", "ID"))
        assert new_id != shared_id and client.shared.writes == writes + 2
    finally:
        await client.aclose()


async def test_a_pipeline_cancelled_before_its_write_sends_nothing(redis_server):
    client = connect(redis_server.url)
    try:
        await _pipeline(client, ("DEL", "rc:never"))
        in_flight = asyncio.ensure_future(_pipeline(client, ("SET", "rc:sent", 1)))
        await asyncio.sleep(0)  # written, its reply not read yet
        pending = asyncio.ensure_future(_pipeline(client, ("SET", "rc:never", 1)))
        after = asyncio.ensure_future(_pipeline(client, ("GET", "rc:sent")))
        await asyncio.sleep(0)  # both wait for the next write
        pending.cancel()
        assert await in_flight == [True] and await after == [b"1"]
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert await client.exists("rc:never") == 0
    finally:
        await client.aclose()


async def test_pipelines_waiting_on_a_redis_that_never_answers_fail_with_a_timeout():
    """Two pipelines in flight on the shared connection, no reply ever: both fail within the socket timeout,
    and the next pipeline gets a new connection."""
    async def answer(command, connection):
        if command[0] == b"GET" and connection == 1:
            await asyncio.sleep(3600)
        return b"$2\r\nok\r\n" if command[0] == b"GET" else b"+OK\r\n"

    async with _scripted_client(answer, "socket_timeout=0.3&protocol=2") as (client, seen):
        outcomes = await asyncio.wait_for(asyncio.gather(
            _pipeline(client, ("GET", "a")), _pipeline(client, ("SET", "b", 1)), return_exceptions=True), 10)
        assert [type(o) for o in outcomes] == [RedisTimeout, RedisTimeout]
        assert await asyncio.wait_for(_pipeline(client, ("GET", "a")), 10) == [b"ok"]
        assert len(seen) == 2


async def test_closing_the_client_fails_a_waiting_pipeline_instead_of_leaving_it_hanging():
    async def answer(command, connection):
        if command[0] == b"GET":
            await asyncio.sleep(3600)
        return b"+OK\r\n"

    server, port, _ = await _scripted_redis(answer)
    client = connect(f"redis://127.0.0.1:{port}/0?protocol=2")
    try:
        waiting = asyncio.ensure_future(_pipeline(client, ("GET", "a")))
        await asyncio.sleep(0.2)
        await client.aclose()
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(waiting, 10)
    finally:
        server.close()
        await server.wait_closed()


async def test_pipelines_waiting_for_the_shared_connection_share_one_attempt_and_its_failure(monkeypatch):
    attempts = 0
    real = Connection.connect
    port = free_port()  # nothing listens there

    async def counted(self):
        nonlocal attempts
        attempts += self.port == port  # (a stack another test left running in a thread connects elsewhere)
        return await real(self)

    monkeypatch.setattr(Connection, "connect", counted)
    client = connect(f"redis://127.0.0.1:{port}/0")
    try:
        outcomes = await asyncio.gather(*(_pipeline(client, ("GET", "a")) for _ in range(5)), return_exceptions=True)
        assert all(isinstance(o, RedisConnectionError) for o in outcomes) and len(outcomes) == 5
        assert attempts == 1
    finally:
        await client.aclose()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a crashed host's kernel or a middlebox does."""
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _until_seen_closed(conn) -> None:
    for _ in range(2000):  # until this process has read the close (no time limit: the loop turns)
        if closed_by_peer(conn):
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the close never reached the client")


def _ok(command, connection):
    return b"$2\r\nok\r\n" if command[0] == b"GET" else b"+OK\r\n"


@pytest.mark.parametrize("close", [_reset, asyncio.StreamWriter.close], ids=["reset", "closed"])
async def test_a_pooled_connection_redis_dropped_while_idle_is_replaced_before_the_next_command(close):
    async def answer(command, connection):
        return _ok(command, connection)

    async with _scripted_client(answer, "protocol=2") as (client, seen):
        assert await client.get("x") == b"ok"
        close(seen[-1])
        await _until_seen_closed(client.connection_pool._available_connections[-1])
        assert await client.get("x") == b"ok"
        assert len(seen) == 2


async def test_a_shared_connection_reset_while_idle_is_replaced_before_the_next_pipeline():
    async def answer(command, connection):
        return _ok(command, connection)

    async with _scripted_client(answer, "protocol=2") as (client, seen):
        assert await _pipeline(client, ("GET", "x")) == [b"ok"]
        _reset(seen[-1])
        await _until_seen_closed(client.shared._conn)
        assert await _pipeline(client, ("GET", "x")) == [b"ok"]
        assert len(seen) == 2


async def test_a_push_message_left_unread_does_not_hide_that_redis_closed_the_connection():
    async def answer(command, connection):  # RESP3: HELLO answers with a map
        return b"%1\r\n+proto\r\n:3\r\n" if command[0].upper() == b"HELLO" else _ok(command, connection)

    async with _scripted_client(answer, "protocol=3") as (client, seen):
        assert await _pipeline(client, ("GET", "x")) == [b"ok"]
        seen[-1].write(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n")  # an unsolicited push, then the close
        seen[-1].close()
        await _until_seen_closed(client.shared._conn)
        assert await _pipeline(client, ("GET", "x")) == [b"ok"]
        assert len(seen) == 2


async def test_closing_the_client_fails_a_pipeline_whose_reader_has_not_run_yet(redis_server):
    client = connect(redis_server.url)
    try:
        await _pipeline(client, ("PING",))
        waiting = asyncio.ensure_future(_pipeline(client, ("SET", "rc:closing", 1)))
        await asyncio.sleep(0)  # written; the reader's task is made but has not run
        assert client.shared._reader is not None
    finally:
        await client.aclose()
    with pytest.raises(RedisConnectionError, match="closed"):
        await asyncio.wait_for(waiting, 10)
    assert await _pipeline(client, ("GET", "rc:closing")) in ([None], [b"1"])  # the shared path works again


async def test_closing_the_client_while_it_connects_fails_the_waiting_pipelines_with_a_connection_error():
    accepted, closed_by_client = asyncio.Event(), asyncio.Event()

    async def stalled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()  # reads the handshake, never answers it
        while await reader.read(65536):
            pass
        closed_by_client.set()

    server = await asyncio.start_server(stalled, "127.0.0.1", 0)
    client = connect(f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0?protocol=2")
    waiting = [asyncio.ensure_future(_pipeline(client, ("GET", "a"))) for _ in range(3)]
    try:
        await asyncio.wait_for(accepted.wait(), 10)
        await client.aclose()
        outcomes = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
        # not CancelledError: nobody cancelled them
        assert all(isinstance(o, RedisConnectionError) for o in outcomes) and len(outcomes) == 3
        await asyncio.wait_for(closed_by_client.wait(), 10)  # the half-made connection closed, not left to the GC
    finally:
        server.close()
        await server.wait_closed()


async def test_a_redis_that_stops_answering_fails_calls_after_the_default_timeout_unless_the_url_sets_one(monkeypatch):
    from services.orchestrator.store import redis_client

    monkeypatch.setattr(redis_client, "SOCKET_TIMEOUT_S", 0.3)

    async def answer(command, connection):
        if command[0] == b"GET":
            await asyncio.sleep(3600)  # stalled
        return b"+OK\r\n"

    async with _scripted_client(answer, "protocol=2") as (client, _):
        with pytest.raises(RedisTimeout):
            await asyncio.wait_for(client.get("a"), 30)
        with pytest.raises(RedisTimeout):
            await asyncio.wait_for(_pipeline(client, ("GET", "a")), 30)
    assert connect("redis://127.0.0.1:1/0?socket_timeout=42").connection_pool.connection_kwargs["socket_timeout"] == 42


async def test_readiness_gives_up_with_unavailable_once_its_time_is_spent():
    from services.common.errors import Unavailable

    client = connect(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        with pytest.raises(Unavailable, match="Redis at redis://nowhere is not reachable"):
            await asyncio.wait_for(redis_client.wait_until_ready(client, "redis://nowhere", timeout_s=0.5), 10)
    finally:
        await client.aclose()


async def test_readiness_returns_once_redis_answers(redis_server):
    client = connect(redis_server.url)
    try:
        await redis_client.wait_until_ready(client, redis_server.url)
    finally:
        await client.aclose()


async def tasks_cancelled_while_writing(client, rounds: int = 5, tasks: int = 100) -> int:
    """How many of `rounds` x `tasks` tasks, each writing to Redis in a loop, are still running after they were
    all cancelled."""
    async def writer(i: int) -> None:
        while True:
            await client.set(f"cancel-{i}", i)

    running = 0
    for _ in range(rounds):
        started = [asyncio.create_task(writer(i)) for i in range(tasks)]
        await asyncio.sleep(0.05)
        for task in started:
            task.cancel()
        _, pending = await asyncio.wait(started, timeout=2)
        running += len(pending)
        for task in pending:  # (for ever, else: each writes again as soon as it is told to stop)
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
    return running


async def test_a_task_cancelled_while_it_writes_is_cancelled(redis_server):
    """redis-py bounds each write with asyncio.wait_for, which on Python 3.11 returns normally when its caller is
    cancelled as the write completes: here about one task in seven went on writing after its cancel."""
    client = connect(redis_server.url)
    try:
        assert await tasks_cancelled_while_writing(client) == 0
    finally:
        await client.aclose()
