"""The named speed policies: what each decides, and that an unknown name is refused with the known ones."""

from __future__ import annotations

import pytest

from services.common.config import ServerConfig
from services.common.speed_policies import (
    GC_POLICIES,
    JOURNAL_POLICIES,
    STREAM_PACINGS,
    StreamPacing,
    gc_policy,
    journal_policy,
    stream_pacing,
)


def test_the_at_once_journal_never_waits_whatever_the_load():
    policy = JOURNAL_POLICIES["at_once"]
    assert [policy.first_write_delay(n) for n in (0, 16, 10_000)] == [0.0, 0.0, 0.0]
    assert [policy.pace(n) for n in (0, 16, 10_000)] == [0.0, 0.0, 0.0]


def test_the_batched_journal_waits_only_while_enough_runs_run_on_the_replica():
    policy = JOURNAL_POLICIES["batched"]
    busy = policy.busy_runs
    assert policy.first_write_delay(busy - 1) == 0.0 and policy.first_write_delay(busy) == policy.first_write_delay_s > 0
    assert policy.pace(busy - 1) == 0.0 and policy.pace(busy) == policy.pace_s > 0


def test_the_policy_comes_from_the_environment_and_durability_comes_first_by_default(monkeypatch):
    monkeypatch.delenv("TRELLIS_JOURNAL_POLICY", raising=False)
    assert journal_policy().name == "at_once"
    monkeypatch.setenv("TRELLIS_JOURNAL_POLICY", "batched")
    assert journal_policy() is JOURNAL_POLICIES["batched"]
    monkeypatch.setenv("TRELLIS_JOURNAL_POLICY", "fastest")
    with pytest.raises(ValueError, match="TRELLIS_JOURNAL_POLICY='fastest'.*known: at_once, batched"):
        journal_policy()


def test_an_immediate_stream_never_waits_whatever_the_load():
    assert [STREAM_PACINGS["immediate"].wait_s(n) for n in (0, 16, 10_000)] == [0.0, 0.0, 0.0]


def test_a_stream_lingering_under_load_waits_more_with_more_streams_up_to_the_longest():
    pacing = STREAM_PACINGS["linger_under_load"]
    busy = pacing.busy_streams
    assert pacing.wait_s(0) == pacing.wait_s(busy - 1) == 0.0  # not busy
    assert pacing.wait_s(busy) == pytest.approx(pacing.linger_s)
    assert pacing.wait_s(2 * busy) == pytest.approx(2 * pacing.linger_s)  # the process's messages a second stay put
    assert pacing.wait_s(100 * busy) == pytest.approx(pacing.longest_s)  # each stream still gets some
    fixed = StreamPacing("fixed", busy_streams=1, linger_s=0.04)  # no longest: the wait stays what it is
    assert fixed.wait_s(100) == pytest.approx(0.04)
    assert StreamPacing("off", busy_streams=1, longest_s=0.25).wait_s(100) == 0.0  # no linger: never


def test_the_stream_pacing_comes_from_the_environment_and_lingers_under_load_by_default(monkeypatch):
    monkeypatch.delenv("TRELLIS_LLM_STREAM_PACING", raising=False)
    assert stream_pacing().name == "linger_under_load"
    monkeypatch.setenv("TRELLIS_LLM_STREAM_PACING", "immediate")
    assert stream_pacing() is STREAM_PACINGS["immediate"]
    monkeypatch.setenv("TRELLIS_LLM_STREAM_PACING", "slow")
    with pytest.raises(ValueError, match="TRELLIS_LLM_STREAM_PACING='slow'.*known: linger_under_load, immediate"):
        stream_pacing()


def test_the_gc_policy_comes_from_the_environment_and_freezes_the_startup_heap_by_default(monkeypatch):
    monkeypatch.delenv("TRELLIS_GC_POLICY", raising=False)
    assert gc_policy().name == "frozen_startup"
    frozen = GC_POLICIES["frozen_startup"]
    assert frozen.freeze_startup_heap and frozen.young_threshold > 700  # CPython's first threshold
    assert not GC_POLICIES["default"].freeze_startup_heap and not GC_POLICIES["default"].young_threshold
    monkeypatch.setenv("TRELLIS_GC_POLICY", "default")
    assert gc_policy() is GC_POLICIES["default"]


def test_a_service_with_an_unknown_policy_does_not_start(monkeypatch):
    monkeypatch.setenv("TRELLIS_GC_POLICY", "never")
    with pytest.raises(SystemExit, match="configuration error: TRELLIS_GC_POLICY='never'.*known: frozen_startup, default"):
        ServerConfig.from_env("sandbox")
    monkeypatch.setenv("TRELLIS_GC_POLICY", "default")
    assert ServerConfig.from_env("sandbox").gc_policy is GC_POLICIES["default"]
