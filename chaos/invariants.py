"""What must hold whatever the faults did, each counted (how many cases were checked, how many broke it):

- `terminal`: every run a client saw ends in a terminal state (succeeded, failed, cancelled).
- `no_rerun`: no finished component runs again: the model answer recorded in a component's checkpoint is the
  last request the model server got for it (chaos/model_server.py numbers them), and a component has one record.
- `final_output`: a client that had the run's end (rejoining as often as it took) shows each component's final
  output: the answer built from each LLM component's recorded answer (chaos/workload.py).
- `claim_released`: no session stays claimed longer than a lease after its owner died (chaos/claims.py).
- `single_writer`: a stale owner cannot write after another took over: in the journal no component finishes
  twice or has events in two owners' stretches of the stream (`StoredRun.spanning`), and the run's stored
  status is the one its stream ends with.

The suite reads Redis directly (never through the proxies): the keys are the orchestrator's
(services/orchestrator/store/keys.py), the records its checkpoint's.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from trellis.canvas.v1 import events_pb2

from chaos.load import RunSeen
from chaos.model_server import ModelServer, tag_number
from chaos.workload import LLM_SHAPES, expected_answer
from services.orchestrator.runs.resume import TAKE_OVER_GAP
from services.orchestrator.store import keys

TERMINAL = {"succeeded", "failed", "cancelled"}
_EXAMPLES = 5


@dataclass
class Check:
    name: str
    what: str
    checked: int = 0
    violations: int = 0
    examples: list[str] = field(default_factory=list)
    runs: set[str] = field(default_factory=set)  # the runs that broke it

    def count(self, ok: bool, example: str = "", run_id: str = "") -> None:
        self.checked += 1
        if not ok:
            self.violations += 1
            if run_id:
                self.runs.add(run_id)
            if len(self.examples) < _EXAMPLES:
                self.examples.append(example)

    def as_dict(self) -> dict:
        return {"name": self.name, "what": self.what, "checked": self.checked, "violations": self.violations,
                "examples": self.examples}


async def settle(redis: aioredis.Redis, tenant: str, runs: list[RunSeen], timeout_s: float) -> float:
    """Wait until every run the clients saw is terminal, at most `timeout_s`; the seconds it took."""
    start = time.monotonic()
    pending = {s.run_id for s in runs if s.run_id}
    while pending and time.monotonic() - start < timeout_s:
        async with redis.pipeline(transaction=False) as pipe:
            for run_id in pending:
                pipe.hget(keys.run(tenant, run_id), "status")
            statuses = await pipe.execute()
        pending = {r for r, s in zip(list(pending), statuses) if (s or b"").decode() not in TERMINAL}
        if pending:
            await asyncio.sleep(1.0)
    return time.monotonic() - start


@dataclass
class StoredRun:
    status: str
    error: str
    attempts: int
    records: list[str]  # the checkpoint's records, as stored (JSON text)
    entries: list[tuple[int, str, bool]]  # the stream: (seq, component key, finishes it)
    last_event: events_pb2.RunEvent | None

    def finished_twice(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, node, finishes in self.entries:
            counts[node] = counts.get(node, 0) + finishes
        return {node: n for node, n in counts.items() if n > 1}

    def spanning(self) -> list[str]:
        """Components with events under two owners. A take-over numbers its events past a gap
        (runs/resume.py) and first drops the events of what had not finished, so each component's events lie
        in one owner's stretch of the stream; one in two was written by a stale owner after it lost the run."""
        stretch, last, owners = 0, None, {}
        for seq, node, _ in self.entries:
            if last is not None and seq - last > TAKE_OVER_GAP // 2:
                stretch += 1
            last = seq
            if node:
                owners.setdefault(node, set()).add(stretch)
        return [node for node, seen in owners.items() if len(seen) > 1]


async def read_run(redis: aioredis.Redis, tenant: str, run_id: str) -> StoredRun:
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.run(tenant, run_id))
        pipe.lrange(keys.run_checkpoint(tenant, run_id), 0, -1)
        pipe.xrange(keys.run_events(tenant, run_id))
        info, records, stream = await pipe.execute()
    info = {k.decode(): v.decode(errors="replace") for k, v in info.items()}
    entries = [(int(entry_id.split(b"-")[1]), fields.get(b"k", b"").decode(), fields.get(b"f") == b"1")
               for entry_id, fields in stream]
    last = events_pb2.RunEvent.FromString(stream[-1][1][b"e"]) if stream else None
    return StoredRun(info.get("status", ""), info.get("error", ""), int(info.get("attempts") or 0),
                     [r.decode() for r in records], entries, last)


def _ended_as_stored(run: StoredRun) -> bool:
    """The stream's last event is the RunFinished that matches the stored status."""
    if run.last_event is None or run.last_event.WhichOneof("kind") != "run_finished":
        return run.status not in TERMINAL  # still going: nothing to compare yet
    end = run.last_event.run_finished
    told = "cancelled" if end.cancelled else "failed" if end.error else "succeeded"
    return told == run.status


async def check_runs(redis: aioredis.Redis, tenant: str, seen: list[RunSeen], model: ModelServer) -> dict[str, Check]:
    checks = {
        "terminal": Check("terminal", "every run a client saw ends in a terminal state"),
        "no_rerun": Check("no_rerun", "no finished component runs again (model requests after its recorded answer)"),
        "final_output": Check("final_output", "a client that had the run's end shows each component's final output"),
        "single_writer": Check("single_writer", "after a take-over only the new owner writes: in the journal no "
                                                "component finishes twice or has events under two owners, and "
                                                "the stored status is the stream's end"),
    }
    for s in seen:
        if not s.run_id:
            continue
        run = await read_run(redis, tenant, s.run_id)
        checks["terminal"].count(run.status in TERMINAL, f"{s.run_id} ({s.nonce}): status {run.status or 'missing'!r}",
                                 s.run_id)
        requests = {c: model.last_number(s.nonce, c) for c in LLM_SHAPES}
        final = dict(requests)  # each LLM component's final output: the answer recorded for it
        for component in LLM_SHAPES:
            mine = [r for r in run.records if json.loads(r).get("n") == component]
            if not mine or "_ERROR" in json.loads(mine[0]).get("o", {}):
                continue  # never finished, or failed (and its run with it): nothing to check
            recorded = final[component] = tag_number(mine[0], s.nonce, component) or 0
            checks["no_rerun"].count(
                len(mine) == 1 and recorded == requests[component],
                f"{s.run_id} {component}: {len(mine)} record(s), recorded answer #{recorded}, "
                f"{requests[component]} request(s)", s.run_id)
        if s.outcome == "finished":
            want = expected_answer(s.nonce, final)
            checks["final_output"].count(s.shown() == want, f"{s.run_id}: shown {s.shown()[-40:]!r}, "
                                                            f"want {want[-40:]!r}; saw {' | '.join(s.trace)}",
                                          s.run_id)
        twice, spanning = run.finished_twice(), run.spanning()
        checks["single_writer"].count(not twice and not spanning and _ended_as_stored(run),
                                      f"{s.run_id}: finished twice {twice}, under two owners {spanning}, status "
                                      f"{run.status!r}, stream ends "
                                      f"{run.last_event.WhichOneof('kind') if run.last_event else None}", s.run_id)
    return checks


async def run_outcomes(redis: aioredis.Redis, tenant: str, run_ids: list[str]) -> dict[str, StoredRun]:
    return {r: await read_run(redis, tenant, r) for r in run_ids}
