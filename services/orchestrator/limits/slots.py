"""Concurrency limits (runs at once, held streams) across replicas, without a Redis round trip per run.

Each replica leases slots of each scope from Redis (store/limits.py: the leases of all replicas never sum past
the limit, and a dead replica's expire) and admits locally while it uses fewer than it holds. Only when it runs
out does an admission lease more, one round trip for every scope of the tenant at once; a lease grants what
the limit leaves after the other replicas' leases, and when that is not enough the request is refused. The
replica's reconcile pass (`reconcile`, every third of the lease's TTL) renews what it holds and gives back
what it no longer uses, keeping a little headroom (a tenth of the limit) while the scope is busy, so the next
runs need no round trip either.

A run taken over from a dead replica (`force`) was admitted already: it takes its slot even past what the
replica holds, and the next lease records it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from services.orchestrator.limits.policy import Scope
from services.orchestrator.store.limits import LimitStore, SlotWant

HEADROOM = 0.1  # of a limit, kept leased past what a busy replica uses


def headroom(limit: int) -> int:
    return int(limit * HEADROOM)


@dataclass
class _Lease:
    """This replica's share of one scope: the limit as last known, what it uses, what it holds in Redis."""

    limit: int
    used: int = 0
    held: int = 0


class SlotLeases:
    """The slots of one kind (`runs` or `streams`, the limit `limit_name` of a Scope's Limits) on this replica."""

    def __init__(self, store: LimitStore, kind: str, limit_name: str) -> None:
        self.store = store
        self.kind = kind
        self.limit_name = limit_name
        self._leases: dict[tuple[str, str], _Lease] = {}  # (tenant, scope key) -> lease
        self._locks: dict[str, asyncio.Lock] = {}  # per tenant: one lease in flight at a time

    def limited(self, scopes: list[Scope]) -> list[tuple[Scope, int]]:
        """The scopes that have this limit, with it."""
        found = []
        for scope in scopes:
            limit = getattr(scope.limits, self.limit_name)
            if limit is not None:
                found.append((scope, limit))
        return found

    def _lease(self, scope: Scope, limit: int) -> _Lease:
        lease = self._leases.get((scope.tenant, scope.key))
        if lease is None:
            lease = self._leases[(scope.tenant, scope.key)] = _Lease(limit)
        lease.limit = limit
        return lease

    async def acquire(self, limited: list[tuple[Scope, int]]) -> Scope | None:
        """Take a slot in every scope, leasing more when this replica holds none free; the scope at its limit
        (nothing taken) or None (taken)."""
        leases = [self._lease(scope, limit) for scope, limit in limited]
        if all(lease.used < min(lease.held, lease.limit) for lease in leases):
            for lease in leases:
                lease.used += 1
            return None
        tenant = limited[0][0].tenant
        lock = self._locks.setdefault(tenant, asyncio.Lock())
        async with lock:
            short = [(scope, lease) for (scope, _), lease in zip(limited, leases)
                     if lease.used >= min(lease.held, lease.limit)]
            if short:
                wants = [SlotWant(scope.key, lease.used, lease.used + 1 + headroom(lease.limit), lease.limit)
                         for scope, lease in short]
                for (_, lease), held in zip(short, await self.store.lease(tenant, self.kind, wants)):
                    lease.held = held
            for (scope, _), lease in zip(limited, leases):
                if lease.used >= min(lease.held, lease.limit):
                    return scope
            for lease in leases:
                lease.used += 1
            return None

    def force(self, limited: list[tuple[Scope, int]]) -> None:
        """Take a slot in every scope whatever is held (a run admitted before, taken over here)."""
        for scope, limit in limited:
            self._lease(scope, limit).used += 1

    def release(self, limited: list[tuple[Scope, int]]) -> None:
        for scope, _ in limited:
            lease = self._leases.get((scope.tenant, scope.key))
            if lease is not None and lease.used > 0:
                lease.used -= 1

    def used(self, tenant: str) -> int:
        """This replica's slots in use of the tenant's own scope."""
        lease = self._leases.get((tenant, "tenant"))
        return lease.used if lease is not None else 0

    async def reconcile(self) -> None:
        """Renew what this replica holds and give back what it does not use (a busy scope keeps its headroom); a
        scope neither used nor held is forgotten."""
        by_tenant: dict[str, list[tuple[str, _Lease]]] = {}
        for (tenant, key), lease in list(self._leases.items()):
            if lease.used == 0 and lease.held == 0:
                del self._leases[(tenant, key)]
                continue
            by_tenant.setdefault(tenant, []).append((key, lease))
        for tenant in list(self._locks):
            if tenant not in by_tenant and not self._locks[tenant].locked():
                del self._locks[tenant]
        for tenant, leases in by_tenant.items():
            async with self._locks.setdefault(tenant, asyncio.Lock()):
                wants = [SlotWant(key, lease.used, lease.used + (headroom(lease.limit) if lease.used else 0),
                                  lease.limit) for key, lease in leases]
                for (_, lease), held in zip(leases, await self.store.lease(tenant, self.kind, wants)):
                    lease.held = held
