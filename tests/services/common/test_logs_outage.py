"""A background loop whose dependency fails pass after pass logs the first failure with its trace, then a line a
minute, then one line when it works again: not a stack trace every pass."""

from __future__ import annotations

import logging

from services.common.logs import Outage

log = logging.getLogger("tests.outage")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fail(outage: Outage, clock: Clock, at: float, error: Exception | None = None) -> None:
    clock.now = at
    try:
        raise error or ConnectionError("Redis is away")
    except Exception:
        outage.failed()


def test_an_outage_is_told_once_with_its_trace_then_once_a_minute_then_its_end(caplog) -> None:
    clock = Clock()
    outage = Outage(log, "could not renew run leases", every_s=60.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="tests.outage"):
        for second in range(0, 150):  # a pass a second for two and a half minutes
            fail(outage, clock, 100.0 + second)
        clock.now = 250.0
        outage.ok()
        outage.ok()  # a second pass that works says nothing more

    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines[0] == ("WARNING", "could not renew run leases", True)
    assert [line[1] for line in lines[1:3]] == [
        "could not renew run leases: still failing, 61 times in 60 s (ConnectionError: Redis is away)",
        "could not renew run leases: still failing, 121 times in 120 s (ConnectionError: Redis is away)",
    ]
    assert not any(line[2] for line in lines[1:])  # one trace only
    assert lines[3:] == [("INFO", "could not renew run leases: works again after 150 s (150 failures)", False)]


def test_a_new_outage_after_a_recovery_is_told_with_its_trace_again(caplog) -> None:
    clock = Clock()
    outage = Outage(log, "reaper pass failed", clock=clock)
    with caplog.at_level(logging.INFO, logger="tests.outage"):
        fail(outage, clock, 100.0)
        outage.ok()
        fail(outage, clock, 101.0)
    assert [(r.levelname, r.exc_info is not None) for r in caplog.records] == [
        ("WARNING", True), ("INFO", False), ("WARNING", True)]


def test_a_failure_of_another_kind_during_an_outage_is_told_with_its_trace(caplog) -> None:
    clock = Clock()
    outage = Outage(log, "reaper pass failed", clock=clock)
    with caplog.at_level(logging.INFO, logger="tests.outage"):
        fail(outage, clock, 100.0)
        fail(outage, clock, 101.0)  # the same: nothing yet
        fail(outage, clock, 102.0, KeyError("run"))  # Redis is back, and a bug shows
        fail(outage, clock, 103.0, KeyError("run"))
    assert [(r.getMessage(), r.exc_info[0] if r.exc_info else None) for r in caplog.records] == [
        ("reaper pass failed", ConnectionError), ("reaper pass failed", KeyError)]
