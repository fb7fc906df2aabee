"""What each tenant may use: the limits file (`TRELLIS_LIMITS_FILE`, YAML) over embedded defaults, as typed values.

    defaults:                 # every tenant not listed under `tenants` (each field optional; absent: unlimited)
      concurrent_runs: 100    # runs running at once, across every replica
      runs_per_second: 20     # runs started per second, with
      burst: 40               #   at most this many at once (default: one second's worth)
      tokens_per_minute: 200000   # LLM tokens (prompt + completion) its runs use per minute
      held_streams: 500       # Run and WatchRun streams open at the orchestrators at once
      weight: 1               # its share when the replica is saturated (fair queue)
      priority: 0             # a higher class is always admitted first
    tenants:
      acme:                   # over `defaults`, field by field (`null`: unlimited for this tenant)
        concurrent_runs: 5
        api_keys:             # by the key's id (docs/limits.md): the tightest of tenant, key and agent applies
          3f2a9c0d1e2b4a5f: {runs_per_second: 1}
        agents:
          my-agent-id: {concurrent_runs: 2}
    capacity:                 # this replica: runs at once, the rest wait fairly (absent: no queue)
      runs: 64
      max_wait_s: 2           # a run that would wait longer is refused at once

With no file every limit is absent: a single-tenant `make up` runs as it always did. docs/limits.md is the
reference; `parse` raises LimitsFileError naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

# The limits a scope can have, by the name a refusal gives (QuotaFailure's description, the `ratelimit` policy).
CONCURRENT_RUNS = "concurrent_runs"
RUNS_PER_SECOND = "runs_per_second"
TOKENS_PER_MINUTE = "tokens_per_minute"
HELD_STREAMS = "held_streams"


class LimitsFileError(ValueError):
    """The limits file cannot be used; the message names the field."""


# Tenant, key and agent ids go into Redis keys: the characters store/keys.py allows there.
Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.@-]{1,128}$")]


class _Scope(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrent_runs: int | None = Field(None, ge=0)
    runs_per_second: float | None = Field(None, gt=0, allow_inf_nan=False)
    burst: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    held_streams: int | None = Field(None, ge=0)


class _Tenant(_Scope):
    weight: float | None = Field(None, gt=0, allow_inf_nan=False)
    priority: int | None = None
    api_keys: dict[Id, _Scope] = Field(default_factory=dict)
    agents: dict[Id, _Scope] = Field(default_factory=dict)


class _Capacity(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int = Field(ge=1)
    max_wait_s: float = Field(2.0, gt=0)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    defaults: _Tenant = Field(default_factory=_Tenant)
    tenants: dict[Id, _Tenant] = Field(default_factory=dict)
    capacity: _Capacity | None = None


@dataclass(frozen=True)
class Limits:
    """One scope's limits (a tenant, one of its API keys, one of its agents); None: unlimited."""

    concurrent_runs: int | None = None
    runs_per_second: float | None = None
    burst: int | None = None
    tokens_per_minute: int | None = None
    held_streams: int | None = None

    @property
    def run_window(self) -> tuple[int, int] | None:
        """(runs, seconds) of the moving window that enforces `runs_per_second` with its `burst`: at most
        `runs` started in any `seconds`. The window is whole seconds (the `limits` package's granularity), so
        seconds = round(burst / rate) (at least 1) and runs = round(rate * seconds): the long-run rate is the
        rate, and the most started at once is `burst` whenever burst is a whole multiple of the rate (the
        default burst is one second's worth, ceil(rate))."""
        rate = self.runs_per_second
        if rate is None:
            return None
        burst = self.burst or max(1, math.ceil(rate))
        seconds = max(1, round(burst / rate))
        return max(1, round(rate * seconds)), seconds


@dataclass(frozen=True)
class Scope:
    """Where a limit is counted: `kind` tenant, api_key or agent; `id` "" for the tenant itself."""

    tenant: str
    kind: str = "tenant"
    id: str = ""
    limits: Limits = field(default_factory=Limits)

    @property
    def key(self) -> str:
        """Its part of a Redis key (store/keys.py checks it): "tenant", "api_key.<id>", "agent.<id>"."""
        return "tenant" if self.kind == "tenant" else f"{self.kind}.{self.id}"

    def describe(self) -> str:
        """How a refusal names it: tenant 'acme', tenant 'acme' agent 'x'."""
        own = "" if self.kind == "tenant" else f" {self.kind.replace('_', ' ')} {self.id!r}"
        return f"tenant {self.tenant!r}{own}"


@dataclass(frozen=True)
class Share:
    """A tenant's place in the fair queue."""

    weight: float = 1.0
    priority: int = 0


@dataclass(frozen=True)
class Capacity:
    """This replica's runs at once, shared fairly; the longest a run may wait for a slot."""

    runs: int
    max_wait_s: float


_LIMIT_FIELDS = [f.name for f in fields(Limits)]


def _limits(*layers: _Scope) -> Limits:
    """Later layers win, field by field, where they set the field (an explicit null included)."""
    values: dict[str, Any] = {}
    for layer in layers:
        values.update({name: getattr(layer, name) for name in _LIMIT_FIELDS if name in layer.model_fields_set})
    return Limits(**values)


class LimitsTable:
    """The limits in force: `scopes(tenant, api_key_id, agent_id)`, `share(tenant)`, `capacity`."""

    def __init__(self, parsed: _File | None = None) -> None:
        self._file = parsed or _File()
        self._tenants: dict[str, Limits] = {}  # resolved once per tenant
        self.capacity = (Capacity(self._file.capacity.runs, self._file.capacity.max_wait_s)
                         if self._file.capacity else None)
        f = self._file
        entries = [f.defaults, *f.tenants.values()]
        entries += [s for t in f.tenants.values() for s in (*t.api_keys.values(), *t.agents.values())]
        # Whether any scope has a limit at all (without, admission looks at no scope).
        self.any_limits = any(getattr(e, name) is not None for e in entries for name in _LIMIT_FIELDS)

    def tenant(self, tenant: str) -> Limits:
        limits = self._tenants.get(tenant)
        if limits is None:
            entry = self._file.tenants.get(tenant)
            limits = self._tenants[tenant] = _limits(self._file.defaults, *([entry] if entry else []))
        return limits

    def scopes(self, tenant: str, api_key_id: str = "", agent_id: str = "") -> list[Scope]:
        """Every scope a run of the tenant counts in: the tenant's, and its key's and agent's when listed."""
        found = [Scope(tenant, limits=self.tenant(tenant))]
        entry = self._file.tenants.get(tenant)
        if entry is not None:
            if api_key_id and api_key_id in entry.api_keys:
                found.append(Scope(tenant, "api_key", api_key_id, _limits(entry.api_keys[api_key_id])))
            if agent_id and agent_id in entry.agents:
                found.append(Scope(tenant, "agent", agent_id, _limits(entry.agents[agent_id])))
        return found

    def share(self, tenant: str) -> Share:
        entry = self._file.tenants.get(tenant)
        weight = (entry.weight if entry is not None else None) or self._file.defaults.weight or 1.0
        priority = next((p for p in ((entry.priority if entry else None), self._file.defaults.priority)
                         if p is not None), 0)
        return Share(weight, priority)


def parse(data: Any, source: str = "the limits file") -> LimitsTable:
    """A table from the file's parsed YAML (None: an empty file); LimitsFileError names the bad field."""
    try:
        return LimitsTable(_File.model_validate(data or {}))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: "
                             f"{e['msg'].split(' or instance of')[0]}" for e in exc.errors())
        raise LimitsFileError(f"{source}: {problems}") from None
