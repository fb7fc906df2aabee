"""Ownership of runs through leases (store/runs.py): this replica's heartbeat renews the lease of every run it
drives, and its reaper takes over runs whose owner stopped renewing (runs/resume.py resumes them, at the run's
next epoch). A run whose renewal is refused was taken over while this replica was stalled: its pump stops
(runs/pump.py `abandon`), as it does when one of its writes is refused."""

from __future__ import annotations

import asyncio
import logging
import random

from services.orchestrator.runs.local import LocalRuns
from services.orchestrator.runs.resume import RunResumes
from services.orchestrator.store import RunStore

log = logging.getLogger(__name__)

_jitter = random.Random()  # its own: background timing leaves the process's global random state alone


class Leases:
    def __init__(self, runs: RunStore, local: LocalRuns, resumes: RunResumes) -> None:
        self.runs = runs
        self.local = local
        self.resumes = resumes
        self._loops: list[asyncio.Task] = []

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
        """Renew the lease of every run here; one another replica took over stops here."""
        pumps = list(self.local)
        try:
            held = await self.runs.renew([(p.spec.tenant_id, p.run_id, p.session_id) for p in pumps])
        except Exception:
            log.warning("could not renew run leases", exc_info=True)
            return
        for pump, ok in zip(pumps, held):
            # (finishing: its own end freed the lease; abandoned: a refused write stopped it already)
            if not ok and not pump.finishing and not pump.abandoned and not pump.task.done():
                log.warning("run %s: its lease renewal was refused: another replica took it over; stopping here",
                            pump.run_id)
                pump.abandon()

    async def _reaper(self) -> None:
        while True:
            # Jitter: replicas that started together do not all race for the same orphan.
            await asyncio.sleep(self.runs.lease_s * _jitter.uniform(0.3, 0.6))
            try:
                await self.reap()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("reaper pass failed", exc_info=True)

    async def reap(self) -> None:
        """Take over the runs whose owner stopped renewing their lease, and resume each."""
        for tenant, run_id in await self.runs.expired():
            if run_id in self.local:
                continue
            attempt = await self.runs.take_over(tenant, run_id)
            if attempt is not None:
                log.info("run %s: owner stopped renewing its lease; resuming here (attempt %d)", run_id, attempt)
                await self.resumes.take_over(tenant, run_id, attempt)
