"""The soak's gates: slopes and returns to baseline, not levels (a process may use what it needs; what it must not
do is keep growing).

- `rss`: each process's RSS, after the warm-up, grows at most `RSS_MIB_PER_HOUR` (least-squares slope of its
  samples). The warm-up is each process's own: a part restarted by the kill is a new process and is given the
  same warm-up the soak gives every process at its start, since its first minutes are the same (its caches,
  pools and allocator's arenas fill as the first ones' did: in two hour soaks every restarted replica rose
  0.4-0.7 MiB over its first ten minutes, then flattened). A process sampled over too short a span to tell is
  reported, not gated, and so is Redis (its memory is the data it keeps).
- `fds`, `tasks`: in every quiet window (no load, its last runs ended) each process's open files and asyncio
  tasks are back within `SLACK` of what that process had in its first quiet window past its own first minutes
  (pools and carriers open lazily, with the first load).
- `redis`: in every quiet window no run is active, no session claimed, the keys without a TTL are back to their
  first quiet window's count (everything a run writes expires), and its memory and keys per run kept are within
  `REDIS_RATIO` of the first quiet window's (the soak keeps runs and sessions for minutes, not the default week:
  what Redis holds above its empty start is then what the runs of the last retention wrote; their number moves
  with the arrivals, which are random, so what must stay is what each of them costs).
- `p99`: the run time's p99 in the last window is within `P99_RATIO` of the first window's (runs that a kill or
  a quiet window met are left out of both).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from chaos.sampling import ProcessSample, RedisSample

RSS_MIB_PER_HOUR = 1.0
# Redis is measured but not gated here: its memory is the data it keeps (the `redis` gate), its open files its
# clients' connections.
NOT_GATED = ("redis",)
SLACK = {"fds": 2, "tasks": 2}
P99_RATIO = 1.1
REDIS_RATIO = 1.25
PROCESS_WARM_UP_S = 120.0  # a process's own first minutes (imports, pools) are not its baseline of files and tasks
MIN_SPAN_FRACTION = 1 / 3  # of the soak's measured span: shorter is reported, not gated


@dataclass
class Gate:
    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, ok: bool | None, **row: Any) -> None:
        row["ok"] = ok  # None: measured, not gated
        self.rows.append(row)

    @property
    def passed(self) -> bool | None:
        """False when a row failed; None when no row could be gated (a soak too short to tell)."""
        gated = [r["ok"] for r in self.rows if r["ok"] is not None]
        return all(gated) if gated else None


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    xs, ys = [t for t, _ in points], [v for _, v in points]
    return statistics.linear_regression(xs, ys).slope * 3600


def rss_gate(samples: list[ProcessSample], since: float, until: float, warm_up_s: float) -> Gate:
    """The slope of each process's samples from `warm_up_s` past its first one (and not before `since`, the
    soak's own warm-up) to `until`."""
    gate = Gate("rss")
    first_seen: dict[int, float] = {}
    for s in samples:
        first_seen.setdefault(s.pid, s.t)
    by_pid: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for s in samples:
        if s.t >= since and s.t >= first_seen[s.pid] + warm_up_s:
            by_pid.setdefault((s.part, s.pid), []).append((s.t, s.rss_mib))
    for (part, pid), points in sorted(by_pid.items()):
        span = points[-1][0] - points[0][0]
        if len(points) < 3 or span <= 0:
            continue
        slope = slope_per_hour(points)
        gated = span >= MIN_SPAN_FRACTION * (until - since) and not part.startswith(NOT_GATED)
        gate.add(slope <= RSS_MIB_PER_HOUR if gated else None, part=part, pid=pid, minutes=round(span / 60, 1),
                 start_mib=points[0][1], end_mib=points[-1][1], mib_per_hour=round(slope, 2))
    return gate


def baseline_gate(name: str, quiet: list[list[ProcessSample]], samples: list[ProcessSample]) -> Gate:
    """`name` is "fds" or "tasks"; `quiet` the process samples of each quiet window, in order; a process's
    windows in its own first minutes (`samples` say when it was first seen) are not its baseline yet."""
    gate = Gate(name)
    first_seen: dict[int, float] = {}
    for s in samples:
        first_seen.setdefault(s.pid, s.t)
    values: dict[int, tuple[str, list[int], list[dict[str, int] | None]]] = {}
    for window in quiet:
        for s in window:
            value = getattr(s, name)
            if value is not None and s.t >= first_seen.get(s.pid, s.t) + PROCESS_WARM_UP_S:
                part, seen, peers = values.setdefault(s.pid, (s.part, [], []))
                seen.append(value)
                peers.append(s.peers)
    for pid, (part, seen, peers) in sorted(values.items(), key=lambda kv: kv[1][0]):
        later = seen[1:]
        ok = all(v <= seen[0] + SLACK[name] for v in later) if later and not part.startswith(NOT_GATED) else None
        row = {"part": part, "pid": pid, "baseline": seen[0], "quiet_windows": seen}
        if name == "fds":
            row["connections"] = peers  # what the open sockets of each window connect to
        gate.add(ok, **row)
    return gate


def redis_gate(quiet: list[RedisSample], runs_kept: list[int | None], empty: RedisSample) -> Gate:
    """`runs_kept[i]`: the runs started within one retention before quiet window i (None: not all of them are
    known, so that window's cost per run is not judged); `empty`: Redis before any run (its own memory, the
    agent's keys). The first window whose cost per run is known is the baseline of the rest."""
    gate = Gate("redis")
    base = quiet[0].keys_without_ttl if quiet else None
    costs = [((s.used_memory_mib - empty.used_memory_mib) * 1024 / kept, (s.keys - empty.keys) / kept)
             if kept else None for s, kept in zip(quiet, runs_kept)]
    first = next((c for c, kept in zip(costs, runs_kept) if kept is not None), None)
    for i, (s, kept, cost) in enumerate(zip(quiet, runs_kept, costs)):
        within = kept is None or (cost is not None and first is not None and cost[0] <= first[0] * REDIS_RATIO
                                  and cost[1] <= first[1] * REDIS_RATIO)
        gate.add(s.active_runs == 0 and s.claimed_sessions == 0 and (s.keys_without_ttl or 0) <= (base or 0)
                 and within,
                 window=i, active_runs=s.active_runs, claimed_sessions=s.claimed_sessions,
                 keys_without_ttl=s.keys_without_ttl, keys=s.keys, used_memory_mib=s.used_memory_mib,
                 runs_kept=kept, kib_per_run=round(cost[0], 2) if cost else None,
                 keys_per_run=round(cost[1], 2) if cost else None)
    return gate


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def p99_gate(first: list[float], last: list[float]) -> Gate:
    gate = Gate("p99")
    start, end = p99(first), p99(last)
    ratio = end / start if start and end else None
    gate.add(ratio is not None and ratio <= P99_RATIO, start_s=round(start or 0, 3), end_s=round(end or 0, 3),
             ratio=round(ratio, 3) if ratio else None, runs_start=len(first), runs_end=len(last))
    return gate
