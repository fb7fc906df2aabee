"""services/common/coalesce.py: nothing waits on a timer unless the process is busy (Linger), a slow consumer
gets fewer, merged items, order and content are exact, errors and clean-up reach the right side."""

from __future__ import annotations

import asyncio

import pytest

from services.common.coalesce import Linger, coalesce, read_pause
from services.common.speed_policies import STREAM_PACINGS, StreamPacing
from services.llm_gateway.models import ChatDelta, ToolCallDelta, Usage, assemble, merge_deltas


def join_text(a, b):
    return a + b if isinstance(a, str) and isinstance(b, str) else None


async def test_the_first_item_goes_out_while_the_source_still_waits():
    more = asyncio.Event()

    async def source():
        yield "first"
        await more.wait()  # released only once the consumer has the first item
        yield "second"

    got = []
    async for item in coalesce(source(), join_text):
        got.append(item)
        more.set()
    assert got == ["first", "second"]


async def test_a_slow_consumer_gets_fewer_items_with_exactly_the_same_text():
    words = [f"w{i} " for i in range(200)]

    async def source():
        for w in words:
            yield w
            await asyncio.sleep(0)

    got = []
    async for item in coalesce(source(), join_text):
        got.append(item)
        await asyncio.sleep(0.01)  # a busy next hop
    assert "".join(got) == "".join(words)
    assert len(got) < len(words)


async def test_items_that_cannot_merge_keep_their_order():
    items = ["a", "b", 1, "c", 2, 3, "d", "e"]

    async def source():
        for x in items:
            yield x

    got = []
    async for item in coalesce(source(), join_text):
        got.append(item)
        await asyncio.sleep(0.001)
    flat = []
    for x in got:  # merged strings split back into single letters
        flat.extend(list(x) if isinstance(x, str) else [x])
    assert flat == items


async def test_an_error_arrives_after_the_items_read_before_it():
    async def source():
        yield "a"
        yield "b"
        raise ValueError("upstream broke")

    got = []
    with pytest.raises(ValueError, match="upstream broke"):
        async for item in coalesce(source(), join_text):
            got.append(item)
    assert "".join(got) == "ab"


async def test_leaving_early_closes_the_source_before_returning():
    closed = asyncio.Event()

    async def source():
        try:
            yield "a"
            await asyncio.Event().wait()  # never ends by itself
        finally:
            closed.set()

    stream = coalesce(source(), join_text)
    async for _ in stream:
        break
    await stream.aclose()
    assert closed.is_set()


async def test_a_bounded_buffer_pauses_the_reader():
    produced = 0

    async def source():
        nonlocal produced
        for i in range(100):
            produced += 1
            yield i  # ints never merge

    stream = coalesce(source(), join_text, max_pending=4)
    first = await anext(stream)
    for _ in range(5):
        await asyncio.sleep(0)
    assert first == 0 and produced <= 6  # the reader waits for room instead of reading all 100
    rest = [x async for x in stream]
    assert rest == list(range(1, 100))


# A linger of an hour: a stream that lingered where it must not would hang (wait_for fails it instead), and one
# that lingers sends what arrives meanwhile only when its source ends.
HOUR = 3600.0


async def paced_words(linger: Linger, words: list[str], got: list[str]) -> None:
    """A source that yields each word only once the consumer has the one before."""
    received = asyncio.Event()

    async def source():
        for w in words:
            yield w
            await received.wait()
            received.clear()

    async for item in coalesce(source(), join_text, linger=linger):
        got.append(item)
        received.set()


async def test_a_process_not_busy_never_lingers():
    linger = Linger(StreamPacing("test", busy_streams=2, linger_s=HOUR))
    got: list[str] = []
    await asyncio.wait_for(paced_words(linger, ["a", "b", "c"], got), 10)
    assert got == ["a", "b", "c"] and linger.streams == 0


async def test_a_busy_process_sends_the_first_item_at_once_and_the_rest_when_the_source_ends():
    linger = Linger(StreamPacing("test", busy_streams=1, linger_s=HOUR))
    first_sent = asyncio.Event()
    words = [f"w{i} " for i in range(100)]

    async def source():
        yield "first "
        await first_sent.wait()  # the first item reached the consumer while the source still had more
        for w in words:
            yield w
            await asyncio.sleep(0)

    got = []
    async with asyncio.timeout(10):
        async for item in coalesce(source(), join_text, linger=linger):
            got.append(item)
            first_sent.set()
    assert got == ["first ", "".join(words)]  # one message for everything that came while it lingered
    assert linger.streams == 0


async def test_lingering_keeps_unmergeable_items_in_order():
    linger = Linger(StreamPacing("test", busy_streams=1, linger_s=HOUR))
    go = asyncio.Event()

    async def source():
        yield "x"
        await go.wait()
        for item in (1, "y", "z", 2, "w"):
            yield item

    got = []
    async with asyncio.timeout(10):
        async for item in coalesce(source(), join_text, linger=linger):
            got.append(item)
            go.set()
    assert got == ["x", 1, "yz", 2, "w"]


async def test_streams_together_make_a_process_busy():
    linger = Linger(StreamPacing("test", busy_streams=2, linger_s=HOUR))
    gates = [asyncio.Event(), asyncio.Event()]
    outs: list[list[str]] = [[], []]

    async def one(i: int) -> None:
        async def source():
            yield "a"
            await gates[i].wait()
            yield "b"
            yield "c"

        async for item in coalesce(source(), join_text, linger=linger):
            outs[i].append(item)
            gates[i].set()

    async with asyncio.timeout(10):
        await asyncio.gather(one(0), one(1))
    assert outs == [["a", "bc"], ["a", "bc"]] and linger.streams == 0


async def test_a_source_learns_how_long_its_consumer_still_lingers():
    linger = Linger(StreamPacing("test", busy_streams=1, linger_s=HOUR))
    pauses: list[float] = []
    sent = asyncio.Event()

    async def source():
        pauses.append(read_pause())  # before the first item: nobody lingers
        yield "a"
        await sent.wait()
        pauses.append(read_pause())  # "a" went out: the consumer lingers
        yield "b"

    got = []
    async with asyncio.timeout(10):
        async for item in coalesce(source(), join_text, linger=linger):
            got.append(item)
            sent.set()
    assert got == ["a", "b"]  # the source's end cut the linger short
    # (now + HOUR) - now may round a hair above HOUR when the loop's clock has not moved (uvloop's ticks in ms)
    assert pauses[0] == 0.0 and HOUR - 60 < pauses[1] <= HOUR + 1e-6
    assert read_pause() == 0.0  # outside a coalesced source


def test_a_linger_counts_its_streams_and_asks_its_pacing():
    linger = Linger(STREAM_PACINGS["linger_under_load"])
    assert linger.wait_s() == 0.0  # no streams yet
    linger.streams = 100
    assert linger.wait_s() == linger.pacing.wait_s(100) > 0


async def test_a_consumer_that_leaves_while_lingering_closes_the_source():
    linger = Linger(StreamPacing("test", busy_streams=1, linger_s=HOUR))
    closed = asyncio.Event()

    async def source():
        try:
            yield "a"
            yield "b"
            await asyncio.Event().wait()
        finally:
            closed.set()

    async def consume() -> None:
        async for _ in coalesce(source(), join_text, linger=linger):
            pass

    task = asyncio.create_task(consume())
    for _ in range(10):  # "a" went out, "b" arrived: the consumer lingers
        await asyncio.sleep(0)
    assert linger.streams == 1 and not closed.is_set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set() and linger.streams == 0


def test_merged_tool_call_deltas_assemble_to_the_same_turn():
    deltas = [
        ChatDelta("Let me "), ChatDelta("check."),
        ChatDelta(tool_calls=(ToolCallDelta(0, "call_a", "weather", ""),)),
        ChatDelta(tool_calls=(ToolCallDelta(0, "", "", '{"ci'),)),
        ChatDelta(tool_calls=(ToolCallDelta(0, "", "", 'ty": "Pa'),)),
        ChatDelta(tool_calls=(ToolCallDelta(1, "call_b", "time", '{"tz"'),)),
        ChatDelta(tool_calls=(ToolCallDelta(0, "", "", 'ris"}'),)),
        ChatDelta(tool_calls=(ToolCallDelta(1, "", "", ': "CET"}'),)),
        ChatDelta("after tools"),
        ChatDelta(finish_reason="tool_calls", usage=Usage(3, 4)),
        ChatDelta("never merged into a finished delta"),
    ]
    merged = [deltas[0]]
    for d in deltas[1:]:
        joined = merge_deltas(merged[-1], d)
        if joined is None:
            merged.append(d)
        else:
            merged[-1] = joined
    assert len(merged) < len(deltas)
    assert assemble(merged) == assemble(deltas)
    assert merge_deltas(ChatDelta(tool_calls=(ToolCallDelta(0, "x", "f", "{}"),)), ChatDelta("text")) is None


class Buffered:
    """A source that buffers what arrives itself and says whether its next item is here (as a turn does)."""

    def __init__(self) -> None:
        self.items: list = []
        self.arrived = asyncio.Event()
        self.closed = False

    def put(self, *items) -> None:
        self.items.extend(items)
        self.arrived.set()

    def ready(self) -> bool:
        return bool(self.items)

    def __aiter__(self):
        return self

    async def __anext__(self):
        while not self.items:
            self.arrived.clear()
            await self.arrived.wait()
        item = self.items.pop(0)
        if item is StopAsyncIteration or isinstance(item, Exception):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed = True


async def test_a_source_that_says_what_is_ready_is_merged_as_it_is_taken_without_a_task():
    source = Buffered()
    tasks_before = len(asyncio.all_tasks())
    merged = coalesce(source, join_text, ready=source.ready)
    source.put("a")
    assert await anext(merged) == "a"  # alone: nothing else was there
    assert len(asyncio.all_tasks()) == tasks_before  # no reader task
    source.put("b", "c", 1, "d")  # arrived while "a" was being sent
    assert [await anext(merged), await anext(merged), await anext(merged)] == ["bc", 1, "d"]
    source.put("e", ValueError("broke"))
    assert await anext(merged) == "e"  # the error after the items before it
    with pytest.raises(ValueError, match="broke"):
        await anext(merged)
    await merged.aclose()
    assert source.closed


async def test_in_place_at_most_max_pending_items_merge_into_one_and_the_end_follows():
    source = Buffered()
    merged = coalesce(source, join_text, ready=source.ready, max_pending=4)
    source.put(*"abcdefghij", StopAsyncIteration)
    assert [item async for item in merged] == ["abcd", "efgh", "ij"]
    assert source.closed
