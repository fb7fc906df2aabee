"""services/common/inbox.py: one producer's items reach one consumer in order, a bounded inbox holds its producer
back, a cancelled wait leaves it usable, and it costs a small fraction of an asyncio.Queue."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from services.common.inbox import Inbox


async def test_items_arrive_in_order_and_a_waiting_consumer_wakes():
    inbox = Inbox()
    assert inbox.empty() and inbox.qsize() == 0
    for i in range(3):
        inbox.put_nowait(i)
    assert [await inbox.get() for _ in range(3)] == [0, 1, 2]
    assert inbox.empty()
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_nowait("late")
    assert await waiting == "late"
    with pytest.raises(asyncio.QueueEmpty):
        inbox.get_nowait()


async def test_a_long_backlog_is_read_in_order_and_let_go_once_drained():
    inbox = Inbox()
    for i in range(10_000):
        inbox.put_nowait(i)
    assert [inbox.get_nowait() for _ in range(5_000)] == list(range(5_000))
    inbox.put_nowait("tail")
    assert inbox.qsize() == 5_001
    assert [inbox.get_nowait() for _ in range(5_001)][-2:] == [9_999, "tail"]
    assert inbox.empty() and inbox._items == []  # drained: nothing kept


async def test_a_consumer_that_never_catches_up_keeps_no_more_than_it_has_to_read():
    inbox = Inbox()
    inbox.put_nowait(0)
    for i in range(1, 10_000):
        inbox.put_nowait(i)
        assert inbox.get_nowait() == i - 1  # always one behind
    assert inbox.qsize() == 1 and len(inbox._items) <= 129


async def test_a_full_inbox_holds_its_producer_until_the_consumer_takes_one():
    inbox = Inbox(2)
    await inbox.put("a")
    await inbox.put("b")
    assert inbox.full()
    with pytest.raises(asyncio.QueueFull):
        inbox.put_nowait("c")
    putting = asyncio.ensure_future(inbox.put("c"))
    await asyncio.sleep(0)
    assert not putting.done()
    assert inbox.get_nowait() == "a"
    await putting
    assert [inbox.get_nowait(), inbox.get_nowait()] == ["b", "c"]


async def test_a_cancelled_wait_leaves_the_inbox_usable_and_a_second_waiter_is_refused():
    inbox = Inbox()
    first = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    second = asyncio.ensure_future(inbox.get())
    with pytest.raises(RuntimeError, match="second consumer"):
        await second
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    inbox.put_nowait(1)
    assert await inbox.get() == 1


async def test_it_costs_a_small_fraction_of_an_asyncio_queue():
    def bytes_each(make) -> float:
        gc.collect()
        before = tracemalloc.take_snapshot()
        made = [make() for _ in range(1000)]
        after = tracemalloc.take_snapshot()
        assert len(made) == 1000
        return sum(s.size_diff for s in after.compare_to(before, "filename")) / 1000

    tracemalloc.start()
    try:
        assert bytes_each(Inbox) * 5 < bytes_each(asyncio.Queue)
    finally:
        tracemalloc.stop()
