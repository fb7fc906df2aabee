"""Counting the orchestrator's Redis round trips: a pipeline is one (it goes through the shared connection:
services/orchestrator/store/_redis_fast/), and so is a single command (it goes through a pooled connection)."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from services.orchestrator.limits import gate
from services.orchestrator.runs import interrupts
from services.orchestrator.store import agent_cache
from services.orchestrator.store._redis_fast import Connection, SharedConnection
from services.orchestrator.triggers.settings import TriggerSettings
from services.orchestrator.triggers.webhooks_out import WebhookDeliverer


def count_round_trips(monkeypatch: pytest.MonkeyPatch, skip: Callable[[Any], bool] = lambda conn: False) -> list:
    """[what each round trip sent], kept up to date; `skip(connection)` leaves a pooled connection's sends out.
    Only the calling event loop's round trips count: a stack another test left running in a thread of its own
    (tests/ragflow_restful's, for the session) sends its own."""
    sent: list = []
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None

    def ours() -> bool:
        return loop is None or asyncio.get_running_loop() is loop
    real_send = Connection.send_packed_command
    real_round_trip = SharedConnection.round_trip

    async def send(self, command, check_health=True):
        if ours() and not skip(self):
            sent.append(command)
        return await real_send(self, command, check_health)

    async def round_trip(self, commands):
        if ours():
            sent.append(commands)
        return await real_round_trip(self, commands)

    monkeypatch.setattr(Connection, "send_packed_command", send)
    monkeypatch.setattr(SharedConnection, "round_trip", round_trip)
    return sent


def quiet_replica(monkeypatch: pytest.MonkeyPatch) -> TriggerSettings:
    """An orchestrator's own periodic work kept out of a count of its runs' round trips: pass the returned
    TriggerSettings as its `triggers`. Its webhook deliverer does not start at all: the session's shared Redis may
    hold other tests' deliveries, and a deliverer's pass goes on at once while it finds work."""
    monkeypatch.setattr(interrupts, "EXPIRY_POLL_S", 3600.0)
    monkeypatch.setattr(agent_cache, "_QUIET_S", 3600.0)
    monkeypatch.setattr(gate, "FIGURES_EVERY_S", 3600.0)  # the admission figures' background write
    monkeypatch.setattr(WebhookDeliverer, "start", lambda self: None)
    return TriggerSettings(scheduler_poll_s=3600.0, webhook_poll_s=3600.0)
