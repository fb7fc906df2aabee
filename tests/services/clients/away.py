"""What the peer-restart tests share: knowing that a client found its peer away, and a restart's length."""

from __future__ import annotations

import asyncio

import grpc

from tests.support.waiting import eventually

# How long the peer stays away in the restart tests: a restart under `trellis up` as the chaos suite saw them
# (3-8 s), longer than the old retry rule's 1.75 s. It is the fault's length, not a bound anything is held to:
# a slower machine only makes the clients wait longer, well within their budget.
RESTART_S = 3.0


async def found_away(channel: grpc.aio.Channel) -> None:
    """Until the client has tried to connect and failed: it knows its peer is away. (grpc then keeps the channel
    in TRANSIENT_FAILURE, trying again about every second, until a connection is made.)"""
    await eventually(lambda: channel.get_state() == grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                     what="the client finding its peer away")


async def away_for_a_restart(channel: grpc.aio.Channel) -> None:
    """The client found its peer away, and the peer stays away as long as a restart does."""
    await found_away(channel)
    await asyncio.sleep(RESTART_S)
