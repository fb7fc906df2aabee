"""The soak's Redis gate (chaos/gates.py) on samples: it passes while what Redis holds is what the last
retention's runs wrote, as many or as few as they were, and fails on memory or keys per run that keep growing, a
key written without a TTL, or a run or session left behind."""

from __future__ import annotations

from chaos.gates import redis_gate
from chaos.sampling import RedisSample

EMPTY = RedisSample(t=0.0, used_memory_mib=2.0, keys=10, active_runs=0)


def window(used_mib: float, keys: int = 1010, *, without_ttl: int = 3, active: int = 0,
           claimed: int = 0) -> RedisSample:
    return RedisSample(t=0.0, used_memory_mib=used_mib, keys=keys, active_runs=active, claimed_sessions=claimed,
                       keys_without_ttl=without_ttl)


def failed(gate) -> list[int]:
    return [row["window"] for row in gate.rows if not row["ok"]]


def test_a_plateau_passes_and_growth_or_leftovers_fail():
    assert redis_gate([window(20.0), window(21.5), window(19.0)], [250, 250, 250], EMPTY).passed is True
    growing = redis_gate([window(20.0), window(24.0), window(28.0)], [250, 250, 250], EMPTY)
    assert growing.passed is False and failed(growing) == [2]
    assert redis_gate([window(20.0), window(20.0, without_ttl=4)], [250, 250], EMPTY).passed is False
    assert redis_gate([window(20.0), window(20.0, active=1)], [250, 250], EMPTY).passed is False
    assert redis_gate([window(20.0), window(20.0, claimed=1)], [250, 250], EMPTY).passed is False


def test_what_is_gated_is_each_kept_run_s_cost_not_how_many_runs_were_kept():
    # A fifth more runs in the last retention: a fifth more memory and keys is what they cost, not growth.
    more_runs = redis_gate([window(20.0, 1010), window(23.6, 1210)], [250, 300], EMPTY)
    assert more_runs.passed is True
    assert more_runs.rows[1]["kib_per_run"] == more_runs.rows[0]["kib_per_run"] == round(18 * 1024 / 250, 2)
    # The same runs kept, and keys that do not expire pile up: the keys per run fail though memory stays.
    assert failed(redis_gate([window(20.0, 1010), window(20.0, 1400)], [250, 250], EMPTY)) == [1]
    # A window that kept no run cannot be judged per run: it fails rather than passing unseen.
    assert failed(redis_gate([window(20.0), window(2.0, 10)], [250, 0], EMPTY)) == [1]


def test_a_window_whose_kept_runs_are_not_all_known_is_not_the_baseline():
    # Window 0 came within one retention of the start: Redis still kept runs the soak did not count.
    gate = redis_gate([window(30.0), window(20.0), window(21.0), window(26.0)], [None, 250, 250, 250], EMPTY)
    assert failed(gate) == [3] and gate.rows[0]["kib_per_run"] is None


def rss_samples(pid: int, born_s: float, until_s: float, mib_at) -> list:
    from chaos.sampling import ProcessSample

    return [ProcessSample(t=float(t), part="orchestrator", pid=pid, rss_mib=mib_at(t - born_s), fds=30, tasks=69)
            for t in range(int(born_s), int(until_s), 10)]


def test_a_restarted_process_gets_the_soaks_warm_up_and_a_steady_rise_still_fails():
    """The RSS gate on samples (every 10 s of an hour, a 10-minute warm-up): a replica restarted at minute 15
    that rises 2 MiB over its own first ten minutes and 0.4 MiB an hour after passes; had only its first two
    minutes been left out (the gate before), its slope would have counted that rise. A process that keeps
    rising 1.5 MiB an hour fails whenever it was born."""
    from chaos.gates import rss_gate

    warming = rss_samples(2, 900, 3600, lambda age: 107.6 + min(age, 600) / 600 * 2.0 + max(0, age - 600) / 3600 * 0.4)
    steady = rss_samples(3, 0, 3600, lambda age: 100.0 + age / 3600 * 1.5)
    gate = rss_gate(warming + steady, since=600, until=3600, warm_up_s=600)
    assert [(row["pid"], row["ok"]) for row in gate.rows] == [(2, True), (3, False)]
    assert rss_gate(warming, since=600, until=3600, warm_up_s=120).passed is False
