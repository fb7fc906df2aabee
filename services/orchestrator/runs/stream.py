"""A run's stream: its events numbered in the order they enter it, and the format its journal stores them in.

The number (`seq`: 1, 2, ...) is the event's place in the stream; a client that lost its connection rejoins
after the last one it saw. Events themselves are immutable engine values; the number travels beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from services.orchestrator.engine import events as ev


@dataclass(slots=True)
class Numbered:
    """One event of a run's stream with its place in it."""

    seq: int
    event: ev.Event
    # Its wire form, made once for both the journal and the caller (api/convert.py); never changed after.
    encoded: object | None = None


class EventCodec(Protocol):
    """How a run's journal stores its events (api/convert.py's `ProtoEventCodec`)."""

    def encode(self, item: Numbered) -> bytes: ...

    def decode(self, data: bytes) -> ev.Event: ...


def merge_numbered(a: Numbered, b: Numbered) -> Numbered | None:
    """Two neighbouring answer deltas as one numbered event (its number is the later one's: a client that saw
    it has seen everything up to it), else None."""
    merged = ev.merge_deltas(a.event, b.event)
    return None if merged is None else Numbered(b.seq, merged)


def merge_batch(batch: list) -> list:
    """Answer deltas that queued up while the previous batch was being handled become one event (one seq, one
    stream entry): per-token work only when the pipeline keeps up."""
    if len(batch) < 2:
        return batch
    out: list = []
    for item in batch:
        if out and item.__class__ is ev.MessageDelta:
            merged = ev.merge_deltas(out[-1], item)
            if merged is not None:
                out[-1] = merged
                continue
        out.append(item)
    return out
