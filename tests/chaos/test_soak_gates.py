"""The soak's Redis gate (chaos/gates.py) on samples: it passes while what Redis holds stays what the last
retention's runs wrote, and fails on memory that keeps growing, a key written without a TTL, or a run or
session left behind."""

from __future__ import annotations

from chaos.gates import redis_gate
from chaos.sampling import RedisSample


def window(used_mib: float, *, without_ttl: int = 3, active: int = 0, claimed: int = 0) -> RedisSample:
    return RedisSample(t=0.0, used_memory_mib=used_mib, keys=1000, active_runs=active, claimed_sessions=claimed,
                       keys_without_ttl=without_ttl)


def test_a_plateau_passes_and_growth_or_leftovers_fail():
    assert redis_gate([window(20.0), window(21.5), window(19.0)]).passed is True
    growing = redis_gate([window(20.0), window(24.0), window(28.0)])
    assert growing.passed is False and [row["window"] for row in growing.rows if not row["ok"]] == [2]
    assert redis_gate([window(20.0), window(20.0, without_ttl=4)]).passed is False
    assert redis_gate([window(20.0), window(20.0, active=1)]).passed is False
    assert redis_gate([window(20.0), window(20.0, claimed=1)]).passed is False
