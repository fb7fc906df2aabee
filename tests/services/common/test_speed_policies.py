"""The named speed policies: what each decides, and that an unknown name is refused with the known ones."""

from __future__ import annotations

import pytest

from services.common.speed_policies import JOURNAL_POLICIES, journal_policy


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
