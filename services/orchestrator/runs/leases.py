"""Ownership of runs through leases (store/runs.py): this replica's heartbeat renews the lease of every run it
drives, and its reaper takes over runs whose owner stopped renewing (runs/resume.py resumes them, at the run's
next epoch). A run whose renewal is refused was taken over while this replica was stalled: its pump stops
(runs/pump.py `abandon`), as it does when one of its writes is refused.

Each pump also keeps the lease by its own clock (`Pump.lease_until`: when the last renewal that held it was
sent, plus `SURE` of the lease). Another replica can take the run over only once the lease ran out by Redis's
clock, which started later; so until then the run is surely still this replica's. Past it (the replica was
paused, cut off from Redis, or its event loop stalled), a component about to start asks for a renewal first
(`Renewal.now`, shared by every run that asks meanwhile), so nothing a component calls out to (a model) is
called by an owner that lost the run.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING

from services.common.logs import Outage
from services.orchestrator.runs.local import LocalRuns
from services.orchestrator.store import RunStore

if TYPE_CHECKING:
    from services.orchestrator.runs.resume import RunResumes

log = logging.getLogger(__name__)

_jitter = random.Random()  # its own: background timing leaves the process's global random state alone
# The part of a lease a pump counts on by its own clock: the rest covers the time between its check and the call
# that follows (the heartbeat renews every third of the lease, so a healthy replica never comes near it).
SURE = 0.8


class Renewal:
    """Renews the lease of every run of this replica, one renewal at a time: whoever asks while one is on its
    way (the heartbeat, a pump whose lease may have lapsed) waits for that one."""

    def __init__(self, runs: RunStore, local: LocalRuns) -> None:
        self.runs = runs
        self.local = local
        self._on_its_way: asyncio.Future | None = None
        self._outage = Outage(log, "could not renew run leases")

    async def now(self) -> None:
        if self._on_its_way is None:
            self._on_its_way = asyncio.ensure_future(self._renew())
            self._on_its_way.add_done_callback(self._done)
        await asyncio.shield(self._on_its_way)

    def _done(self, task: asyncio.Future) -> None:
        if self._on_its_way is task:
            self._on_its_way = None

    async def _renew(self) -> None:
        """Renew the lease of every run here; one another replica took over stops here."""
        pumps = list(self.local)
        sent = time.monotonic()
        try:
            held = await self.runs.renew([(p.spec.tenant_id, p.run_id, p.session_id, p.epoch) for p in pumps])
        except Exception:
            self._outage.failed()
            return
        self._outage.ok()
        sure_until = sent + self.runs.lease_s * SURE
        for pump, ok in zip(pumps, held):
            if ok:
                pump.lease_until = max(pump.lease_until, sure_until)
            # (finishing: its own end freed the lease; abandoned: a refused write stopped it already)
            elif not pump.finishing and not pump.abandoned and not pump.task.done():
                log.warning("run %s: its lease renewal was refused: another replica took it over; stopping here",
                            pump.run_id)
                pump.abandon()


class Leases:
    def __init__(self, runs: RunStore, local: LocalRuns, resumes: RunResumes, renewal: Renewal) -> None:
        self.runs = runs
        self.local = local
        self.resumes = resumes
        self.renewal = renewal
        self._loops: list[asyncio.Task] = []
        self._reaper_outage = Outage(log, "reaper pass failed")

    def start(self) -> None:
        self._loops = [asyncio.create_task(self._heartbeat(), name="run-heartbeat"),
                       asyncio.create_task(self._reaper(), name="run-reaper")]

    async def stop(self) -> None:
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.runs.lease_s / 3)
            await self.renew()

    async def renew(self) -> None:
        await self.renewal.now()

    async def _reaper(self) -> None:
        while True:
            # Jitter: replicas that started together do not all race for the same orphan.
            await asyncio.sleep(self.runs.lease_s * _jitter.uniform(0.3, 0.6))
            try:
                await self.reap()
            except asyncio.CancelledError:
                raise
            except Exception:
                self._reaper_outage.failed()
            else:
                self._reaper_outage.ok()

    async def reap(self) -> None:
        """Take over the runs whose owner stopped renewing their lease, and resume each."""
        for tenant, run_id in await self.runs.expired():
            if run_id in self.local:
                continue
            attempt = await self.runs.take_over(tenant, run_id)
            if attempt is not None:
                log.info("run %s: owner stopped renewing its lease; resuming here (attempt %d)", run_id, attempt)
                await self.resumes.take_over(tenant, run_id, attempt)
