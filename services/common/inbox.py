"""`Inbox`: a stream's items in order, from one producer to one consumer: what `asyncio.Queue` does for them, in
a small fraction of its memory.

An `asyncio.Queue` is four deques and an Event, about 3.2 KB however empty it is, and a held stream had one in
each hop for its turn (services/common/turns/client.py) and one for its run's caller (runs/pump.py): a tenth of
what a held stream cost the stack (docs/speed-policies.md, "Many held streams"). An Inbox is a list, a read
position and at most one waiting future each way, about 150 bytes.

    inbox = Inbox()             # Inbox(maxsize): `await put()` waits while it holds that many
    inbox.put_nowait(item)      # the producer
    item = await inbox.get()    # the consumer

Its methods are those of `asyncio.Queue` that the pipeline uses, with the same meaning, for one consumer and
one producer at a time (a second task waiting on the same side is a bug, and raises).
"""

from __future__ import annotations

import asyncio
from typing import Any


class Inbox:
    __slots__ = ("_items", "_head", "_maxsize", "_getter", "_putter")

    def __init__(self, maxsize: int = 0) -> None:
        self._items: list[Any] = []
        self._head = 0  # items before it were taken (None): dropped when the consumer catches up or is past half
        self._maxsize = maxsize
        self._getter: asyncio.Future[None] | None = None  # the consumer, waiting for an item
        self._putter: asyncio.Future[None] | None = None  # the producer, waiting for room

    def qsize(self) -> int:
        return len(self._items) - self._head

    def empty(self) -> bool:
        return self._head == len(self._items)

    def full(self) -> bool:
        return 0 < self._maxsize <= len(self._items) - self._head

    def put_nowait(self, item: Any) -> None:
        if self._maxsize and self.full():
            raise asyncio.QueueFull
        self._items.append(item)
        getter = self._getter
        if getter is not None:
            self._getter = None
            if not getter.done():
                getter.set_result(None)

    async def put(self, item: Any) -> None:
        while self._maxsize and self.full():
            if self._putter is not None:
                raise RuntimeError("Inbox: a second producer waits for room")
            self._putter = putter = asyncio.get_running_loop().create_future()
            try:
                await putter
            finally:
                if self._putter is putter:  # cancelled while waiting
                    self._putter = None
        self.put_nowait(item)

    def get_nowait(self) -> Any:
        items, head = self._items, self._head
        if head == len(items):
            raise asyncio.QueueEmpty
        item, items[head] = items[head], None
        head += 1
        if head == len(items):
            items.clear()
            head = 0
        elif head >= 64 and head * 2 >= len(items):  # a consumer that never quite catches up: drop what it read
            del items[:head]
            head = 0
        self._head = head
        putter = self._putter
        if putter is not None:
            self._putter = None
            if not putter.done():
                putter.set_result(None)
        return item

    async def get(self) -> Any:
        while self._head == len(self._items):
            if self._getter is not None:
                raise RuntimeError("Inbox: a second consumer waits for an item")
            self._getter = getter = asyncio.get_running_loop().create_future()
            try:
                await getter
            finally:
                if self._getter is getter:  # cancelled while waiting
                    self._getter = None
        return self.get_nowait()
