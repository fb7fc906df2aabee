"""The run journal against a real Redis: events and checkpoint records stored in order, the last batch carried
in the caller's round trip (the turn's), and kept when that round trip fails."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from services.orchestrator.store import keys
from services.orchestrator.store import journal as journal_module
from services.orchestrator.store.journal import JournalWriter, RunJournal, read_checkpoint, read_events
from tests.support.redis_server import RedisServer
from tests.support.net import free_port


def stored(events) -> list[tuple[int, bytes, bytes, bytes]]:
    return [(seq, f[b"e"], f[b"k"], f[b"f"]) for seq, f in events]


async def test_the_last_batch_rides_in_the_callers_round_trip(redis_client):
    journal = RunJournal(JournalWriter(redis_client), "t1", "run-ride")
    journal.event(1, b"first", "")
    await journal.flush()  # written in the background
    journal.event(2, b"second", "n1")
    journal.event(3, b"third", "n1", record={"n": "n1"})
    await journal.settle()
    assert stored(await read_events(redis_client, "t1", "run-ride")) == [(1, b"first", b"", b"0")]
    async with redis_client.pipeline(transaction=False) as pipe:
        assert journal.queue_pending(pipe)
        pipe.set("after-the-journal", 1)
        replies = await pipe.execute()
    assert replies == [1, True]
    journal.pending_written()
    await journal.aclose()  # nothing left: nothing written twice
    assert stored(await read_events(redis_client, "t1", "run-ride")) == [
        (1, b"first", b"", b"0"), (2, b"second", b"n1", b"0"), (3, b"third", b"n1", b"1")]
    assert await read_checkpoint(redis_client, "t1", "run-ride") == [{"n": "n1"}]
    assert 0 < await redis_client.ttl(keys.run_events("t1", "run-ride")) <= journal.ttl_s
    assert 0 < await redis_client.ttl(keys.run_checkpoint("t1", "run-ride")) <= journal.ttl_s


async def test_a_failed_round_trip_leaves_the_batch_to_the_journals_retries(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    client = aioredis.from_url(server.url)
    try:
        journal = RunJournal(JournalWriter(client), "t1", "run-retry", retry_s=30)
        journal.event(1, b"one", "n1", record={"n": "n1", "o": {"x": 1}})
        await journal.settle()
        server.stop()
        with pytest.raises(RedisConnectionError):
            async with client.pipeline(transaction=False) as pipe:
                journal.queue_pending(pipe)
                await pipe.execute()
        closing = asyncio.create_task(journal.aclose())  # retries while Redis is away
        await asyncio.sleep(0.3)
        assert not closing.done()
        server.start()
        await asyncio.wait_for(closing, 30)
        assert stored(await read_events(client, "t1", "run-retry")) == [(1, b"one", b"n1", b"1")]
        assert [json.dumps(r) for r in await read_checkpoint(client, "t1", "run-retry")] == [
            json.dumps({"n": "n1", "o": {"x": 1}})]
    finally:
        await client.aclose()
        server.stop()


def counting_pipelines(writer: JournalWriter) -> list[int]:
    """[pipelines `writer` has sent since], kept up to date."""
    sent = [0]
    send = writer._pipeline

    async def counted(batch):
        sent[0] += 1
        return await send(batch)

    writer._pipeline = counted
    return sent


async def test_one_writer_stores_many_runs_in_one_round_trip(redis_client):
    writer = JournalWriter(redis_client)
    pipelines = counting_pipelines(writer)
    await redis_client.script_load(journal_module._APPEND)  # (a fresh Redis answers the first call NOSCRIPT)
    journals = [RunJournal(writer, "t1", f"run-many-{i}") for i in range(20)]
    for seq in (1, 2, 3):
        for i, journal in enumerate(journals):
            journal.event(seq, f"run {i} event {seq}".encode(), "")
    await asyncio.gather(*(j.flush() for j in journals))
    assert pipelines == [1]  # handed over while nothing was in flight: one pipeline for all of them
    for i in range(20):
        events = await read_events(redis_client, "t1", f"run-many-{i}")
        assert [(seq, f[b"e"]) for seq, f in events] == [(s, f"run {i} event {s}".encode()) for s in (1, 2, 3)]


async def test_a_redis_that_forgot_the_script_gets_it_again(redis_client):
    writer = JournalWriter(redis_client)
    journal = RunJournal(writer, "t1", "run-noscript")
    journal.event(1, b"before", "")
    await journal.flush()
    await redis_client.script_flush()  # as after a restart
    journal.event(2, b"after", "")
    await journal.flush()
    assert [seq for seq, _ in await read_events(redis_client, "t1", "run-noscript")] == [1, 2]


async def test_a_held_journal_writes_nothing_until_released(redis_client):
    journal = RunJournal(JournalWriter(redis_client), "t1", "run-held", held=True)
    journal.event(1, b"early", "")
    await journal.flush()  # held: nothing goes out, nothing waits
    assert await read_events(redis_client, "t1", "run-held") == []
    journal.release()
    await journal.flush()
    assert [seq for seq, _ in await read_events(redis_client, "t1", "run-held")] == [1]


async def test_an_event_handed_over_as_a_maker_is_stored_as_its_bytes(redis_client):
    journal = RunJournal(JournalWriter(redis_client), "t1", "run-maker")
    made = []

    def maker() -> bytes:
        made.append(1)
        return b"made later"

    journal.event(1, maker, "")
    assert made == []  # not made while the run hands it over
    await journal.flush()
    assert made == [1]
    (_, fields), = await read_events(redis_client, "t1", "run-maker")
    assert fields[b"e"] == b"made later"


async def test_what_an_event_woke_runs_before_the_event_is_stored(redis_client):
    writer = JournalWriter(redis_client)
    order = []
    send = writer._pipeline

    async def noted(batch):
        order.append("stored")
        return await send(batch)

    writer._pipeline = noted
    await redis_client.script_load(journal_module._APPEND)  # one pipeline per write: no NOSCRIPT retry
    journal = RunJournal(writer, "t1", "run-order")
    journal.event(1, b"delta", "")
    asyncio.get_running_loop().call_soon(order.append, "sent to the caller")  # woken by the same event, after it
    await journal.flush()
    assert order == ["sent to the caller", "stored"]
    order.clear()
    journal.event(2, b"node started", "")  # the writer starts its turns
    await asyncio.sleep(0)
    journal.event(3, b"delta", "")  # handed over while the writer waits
    asyncio.get_running_loop().call_soon(order.append, "sent to the caller")
    await journal.flush()
    assert order == ["sent to the caller", "stored"]


async def test_a_delayed_journal_writes_nothing_and_a_run_that_ends_meanwhile_stores_it_with_its_turn(redis_client):
    writer = JournalWriter(redis_client)
    prompt, late = RunJournal(writer, "t1", "run-a"), RunJournal(writer, "t1", "run-c", first_write_delay_s=3600)
    prompt.event(1, b"started", "")
    late.event(1, b"started", "")
    await prompt.flush()
    for _ in range(10):
        await asyncio.sleep(0)
    assert await read_events(redis_client, "t1", "run-a")
    assert await read_events(redis_client, "t1", "run-c") == []  # not yet: its delay runs
    await late.settle()  # the run ends: its whole journal rides with the turn
    async with redis_client.pipeline(transaction=False) as pipe:
        assert late.queue_pending(pipe)
        await pipe.execute()
    late.pending_written()
    await late.aclose()
    assert stored(await read_events(redis_client, "t1", "run-c")) == [(1, b"started", b"", b"0")]


async def test_a_delayed_journal_writes_in_the_background_once_its_delay_is_over(redis_client):
    journal = RunJournal(JournalWriter(redis_client), "t1", "run-later", first_write_delay_s=0.05)
    journal.event(1, b"one", "n1", record={"n": "n1"})
    journal.release()  # (its run's start landed): the delay still holds it
    assert await read_events(redis_client, "t1", "run-later") == []
    while not await read_events(redis_client, "t1", "run-later"):
        await asyncio.sleep(0.01)
    journal.event(2, b"two", "")  # after the delay: at once, as without one
    await journal.flush()
    assert stored(await read_events(redis_client, "t1", "run-later")) == [(1, b"one", b"n1", b"1"), (2, b"two", b"", b"0")]
    assert await read_checkpoint(redis_client, "t1", "run-later") == [{"n": "n1"}]


async def test_an_aborted_delayed_journal_writes_nothing_once_its_delay_would_have_ended(redis_client):
    journal = RunJournal(JournalWriter(redis_client), "t1", "run-moved", first_write_delay_s=0.01)
    journal.event(1, b"one", "")
    journal.abort()
    await asyncio.sleep(0.05)
    assert await read_events(redis_client, "t1", "run-moved") == []


async def test_a_busy_writer_waits_its_pace_and_the_runs_end_stores_what_waited(redis_client):
    """An idle writer writes each batch as soon as the previous write is done; a paced one (an hour here) writes
    nothing until its pace has passed, and a run that ends meanwhile stores its events with its turn."""
    await redis_client.script_load(journal_module._APPEND)
    pace = [0.0]
    writer = JournalWriter(redis_client, pace=lambda: pace[0])
    pipelines = counting_pipelines(writer)
    idle = RunJournal(writer, "t1", "run-idle")
    for seq in (1, 2, 3):
        idle.event(seq, b"idle %d" % seq, "")
        await idle.flush()
    assert pipelines == [3]

    pace[0] = 3600.0
    busy = RunJournal(writer, "t1", "run-busy")
    for seq in (1, 2, 3):
        busy.event(seq, b"busy %d" % seq, "")
        for _ in range(20):
            await asyncio.sleep(0)
    assert pipelines == [3] and await read_events(redis_client, "t1", "run-busy") == []
    await busy.settle()  # the run ended: its turn's round trip carries what waited, as _persist sends it
    async with redis_client.pipeline(transaction=False) as pipe:
        assert busy.queue_pending(pipe)
        await pipe.execute()
    busy.pending_written()
    assert [s for s, _ in await read_events(redis_client, "t1", "run-busy")] == [1, 2, 3]
    writer._task.cancel()  # the writer's loop, still waiting out its pace with nothing left to write


async def test_a_batch_whose_reply_was_lost_is_found_stored_and_not_sent_again(redis_client):
    writer = JournalWriter(redis_client)
    await redis_client.script_load(journal_module._APPEND)
    sent = counting_pipelines(writer)
    send = writer._pipeline

    lost = []

    async def reply_lost(batch):
        replies = await send(batch)  # stored
        if not lost:
            lost.append(replies)  # its reply never reaches the writer
            raise RedisConnectionError("Connection closed by server.")
        return replies

    writer._pipeline = reply_lost
    journal = RunJournal(writer, "t1", "run-lost-reply")
    journal.event(1, b"one", "n1", record={"n": "n1"})
    await journal.flush()
    assert lost == [[1]] and sent == [1]  # checked against the stream, not sent again
    assert stored(await read_events(redis_client, "t1", "run-lost-reply")) == [(1, b"one", b"n1", b"1")]
    assert await read_checkpoint(redis_client, "t1", "run-lost-reply") == [{"n": "n1"}]


async def test_a_journal_gives_up_once_redis_stayed_away_for_its_retry_s(monkeypatch):
    from services.orchestrator.store import redis_client as redis_client_module

    monkeypatch.setattr(redis_client_module, "BACKOFF_BASE_S", 0.01)
    monkeypatch.setattr(redis_client_module, "BACKOFF_CAP_S", 0.05)
    client = redis_client_module.connect(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    writer = JournalWriter(client)
    sent = counting_pipelines(writer)
    try:
        journal = RunJournal(writer, "t1", "run-away", retry_s=0.3)
        journal.event(1, b"one", "n1")
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(journal_module.JournalUnavailable, match="could not be stored"):
            await asyncio.wait_for(journal.flush(), 30)
        assert loop.time() - started >= 0.3  # not before its retry_s
        assert sent[0] >= 2  # sent again meanwhile, by the retry rule
    finally:
        await client.aclose()
