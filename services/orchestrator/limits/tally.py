"""This replica's admission figures per tenant since it started: runs admitted, refusals by limit, LLM tokens in
all and in the last minute. The gate counts here where it counts its Prometheus metrics (a process may run
several orchestrators, each with its own tally); its background pass writes them to Redis (store/admission.py)
so any replica answers GetTenantAdmission for all of them. Counting is a few dictionary updates, never I/O.
"""

from __future__ import annotations

import time
from collections import Counter, deque

MINUTE_S = 60


class TenantTally:
    def __init__(self) -> None:
        self.admitted: Counter[str] = Counter()
        self.refused: dict[str, Counter[str]] = {}  # tenant -> limit -> refusals
        self.tokens: Counter[str] = Counter()
        self._recent: dict[str, deque[list[int]]] = {}  # tenant -> [second, tokens] of the last minute's seconds

    def admit(self, tenant: str) -> None:
        self.admitted[tenant] += 1

    def refuse(self, tenant: str, limit: str) -> None:
        self.refused.setdefault(tenant, Counter())[limit] += 1

    def use_tokens(self, tenant: str, tokens: int) -> None:
        self.tokens[tenant] += tokens
        now = int(time.monotonic())
        recent = self._recent.setdefault(tenant, deque())
        if recent and recent[-1][0] == now:
            recent[-1][1] += tokens
        else:
            recent.append([now, tokens])

    def tokens_last_minute(self, tenant: str) -> int:
        recent = self._recent.get(tenant)
        if not recent:
            return 0
        since = int(time.monotonic()) - MINUTE_S
        while recent and recent[0][0] <= since:
            recent.popleft()
        return sum(tokens for _, tokens in recent)

    def tenants(self) -> set[str]:
        return set(self.admitted) | set(self.refused) | set(self.tokens)

    def figures(self, tenant: str) -> dict[str, int]:
        """The tenant's counts by name (`refused.<limit>` for each limit that refused it)."""
        counts = {"admitted": self.admitted.get(tenant, 0), "tokens": self.tokens.get(tenant, 0),
                  "tokens_last_minute": self.tokens_last_minute(tenant)}
        for limit, n in self.refused.get(tenant, {}).items():
            counts[f"refused.{limit}"] = n
        return counts
