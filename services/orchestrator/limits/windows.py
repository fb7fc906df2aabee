"""Rate limits (runs started per second with a burst, LLM tokens per minute) across replicas, without a Redis
round trip per run: each replica leases units of a scope's moving window in chunks (the `limits` package, hit
with `cost=k`: store/limits.py) and spends them locally.

Runs started (`StartLeases`): a window of `runs` per `seconds` (policy.Limits.run_window). A replica leases a
chunk of a tenth of the window at a time, spends one per run, and leases the next chunk in the background when
half the last one is spent, so a busy tenant's runs do not wait for Redis. Units are spent within the window
they were leased in, or dropped: what a replica holds unspent is at most a chunk, so in any window the runs
started stay within `runs` plus a chunk per replica. Out of units, an admission leases inline (a chunk, or a
single unit when the window has less left); when even that fails the run is refused with the time until the
window has a unit free.

LLM tokens (`TokenBudgets`): a window of tokens per 60 s, counted in chunks of a hundredth of the limit (so the
moving window holds at most a hundred entries). Tokens are known only once a model answered, so a run is not
refused for the tokens it will use: each replica leases a chunk ahead, charges every model call's tokens
against it (`charge`, never waiting), and leases again in the background as it runs low. When a lease fails the
tenant is out of tokens for this minute: new runs are refused until the window frees a chunk (runs already
admitted finish). A replica's first run of a tenant leases inline, so it knows before admitting.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field

from services.orchestrator.limits.policy import Scope
from services.orchestrator.store.limits import LimitStore

log = logging.getLogger(__name__)

CHUNKS_PER_WINDOW = 10  # runs: a lease takes a tenth of the window
TOKEN_CHUNKS_PER_MINUTE = 100  # tokens: the window counts hundredths of the limit


@dataclass
class _Units:
    """Units of one scope's window leased by this replica and not spent yet."""

    left: int = 0
    until: float = 0.0  # monotonic: unspent units are dropped then (the window they were leased in has passed)
    refill: asyncio.Task | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class StartLeases:
    """Runs started per second, per scope, on this replica."""

    def __init__(self, store: LimitStore) -> None:
        self.store = store
        self._units: dict[tuple[str, str], _Units] = {}

    async def take(self, scope: Scope) -> float | None:
        """One run start of the scope; None when taken, else the seconds until the window frees one (refused)."""
        window = scope.limits.run_window
        if window is None:
            return None
        runs, seconds = window
        key = (scope.tenant, scope.key)
        units = self._units.get(key)
        if units is None:
            units = self._units[key] = _Units()
        now = time.monotonic()
        if units.left and now < units.until:
            units.left -= 1
            self._maybe_refill(scope, units, runs, seconds)
            return None
        async with units.lock:
            if units.refill is not None:  # the next chunk is on its way: wait for it rather than lease another
                await asyncio.shield(units.refill)
            if units.left and time.monotonic() < units.until:
                units.left -= 1
                return None
            chunk = max(1, runs // CHUNKS_PER_WINDOW)
            for cost in dict.fromkeys((chunk, 1)):  # a chunk, else a single unit when the window is nearly full
                if await self.store.take(scope.tenant, "starts", scope.key, runs, seconds, cost):
                    units.left, units.until = cost - 1, time.monotonic() + seconds
                    return None
            return max(await self.store.free_in(scope.tenant, "starts", scope.key, runs, seconds), 0.05)

    def give_back(self, scope: Scope) -> None:
        """A start taken for a run refused by another limit: spend it on the next run here."""
        units = self._units.get((scope.tenant, scope.key))
        if units is not None and scope.limits.run_window is not None and time.monotonic() < units.until:
            units.left += 1

    def _maybe_refill(self, scope: Scope, units: _Units, runs: int, seconds: int) -> None:
        """Lease the next chunk in the background once half of a chunk is spent."""
        chunk = max(1, runs // CHUNKS_PER_WINDOW)
        if chunk < 2 or units.left > chunk // 2 or units.refill is not None:
            return

        async def refill() -> None:
            try:
                if await self.store.take(scope.tenant, "starts", scope.key, runs, seconds, chunk):
                    units.left, units.until = units.left + chunk, time.monotonic() + seconds
            except Exception:
                log.warning("could not lease run starts of %s", scope.describe(), exc_info=True)
            finally:
                units.refill = None

        units.refill = asyncio.ensure_future(refill())

    def forget_idle(self) -> None:
        now = time.monotonic()
        for key, units in list(self._units.items()):
            if now >= units.until and units.refill is None and not units.lock.locked():
                del self._units[key]


@dataclass
class _Budget:
    """LLM tokens of one scope leased by this replica and not charged yet (negative: charged past the lease)."""

    tokens: int = 0
    leased: bool = False  # a first lease was made
    blocked_until: float = 0.0  # monotonic: out of tokens for this minute until then
    refill: asyncio.Task | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = 0.0


class TokenBudgets:
    """LLM tokens per minute, per scope, on this replica."""

    def __init__(self, store: LimitStore) -> None:
        self.store = store
        self._budgets: dict[tuple[str, str], _Budget] = {}

    @staticmethod
    def _window(per_minute: int) -> tuple[int, int]:
        """(chunk size in tokens, chunks per 60 s)."""
        chunk = max(1, math.ceil(per_minute / TOKEN_CHUNKS_PER_MINUTE))
        return chunk, max(1, per_minute // chunk)

    async def check(self, scope: Scope) -> float | None:
        """Whether the scope may start a run: None, else the seconds until its window frees tokens (refused)."""
        per_minute = scope.limits.tokens_per_minute
        if per_minute is None:
            return None
        key = (scope.tenant, scope.key)
        budget = self._budgets.get(key)
        if budget is None:
            budget = self._budgets[key] = _Budget()
        now = time.monotonic()
        budget.last_used = now
        if budget.blocked_until > now:
            return budget.blocked_until - now
        if budget.leased and (budget.tokens > 0 or budget.refill is not None):
            return None
        async with budget.lock:  # the first run here, or the lease is spent: ask Redis before admitting
            if not (budget.leased and budget.tokens > 0):
                await self._lease(scope, budget, per_minute)
            wait = budget.blocked_until - time.monotonic()
            return wait if wait > 0 else None

    def charge(self, scope: Scope, tokens: int) -> None:
        """Tokens a model call of the scope used: spent from the lease; the next chunk leased in the background
        as it runs low."""
        per_minute = scope.limits.tokens_per_minute
        if per_minute is None or tokens <= 0:
            return
        key = (scope.tenant, scope.key)
        budget = self._budgets.get(key)
        if budget is None:
            budget = self._budgets[key] = _Budget()
        budget.tokens -= tokens
        budget.last_used = time.monotonic()
        chunk, _ = self._window(per_minute)
        if budget.tokens < chunk // 2 + 1 and budget.refill is None and not budget.lock.locked():
            async def refill() -> None:
                try:
                    async with budget.lock:
                        await self._lease(scope, budget, per_minute)
                except Exception:
                    log.warning("could not lease LLM tokens of %s", scope.describe(), exc_info=True)
                finally:
                    budget.refill = None

            budget.refill = asyncio.ensure_future(refill())

    async def _lease(self, scope: Scope, budget: _Budget, per_minute: int) -> None:
        """Lease enough chunks to bring the budget back above one chunk (what was charged past it included); out
        of tokens: blocked until the window frees a chunk."""
        chunk, chunks = self._window(per_minute)
        need = min(chunks, max(1, math.ceil((chunk - budget.tokens) / chunk)))
        # Less than asked will do only when it still leaves tokens to spend (not when it only pays a debt).
        for cost in dict.fromkeys((need, 1) if budget.tokens + chunk > 0 else (need,)):
            if await self.store.take(scope.tenant, "tokens", scope.key, chunks, 60, cost):
                budget.tokens += cost * chunk
                budget.leased = True
                budget.blocked_until = 0.0
                return
        budget.leased = True
        wait = await self.store.free_in(scope.tenant, "tokens", scope.key, chunks, 60)
        budget.blocked_until = time.monotonic() + max(wait, 0.05)

    def forget_idle(self, idle_s: float = 120.0) -> None:
        now = time.monotonic()
        for key, budget in list(self._budgets.items()):
            if now - budget.last_used > idle_s and budget.refill is None and not budget.lock.locked():
                del self._budgets[key]
