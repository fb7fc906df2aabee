"""Agents (title, description, DSL, owner tenant) and their immutable published versions."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import redis.asyncio as aioredis

from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.orchestrator.store import keys
from services.orchestrator.store.agent_cache import ResolvedAgents
from services.orchestrator.store._records import field as _s
from services.orchestrator.store._records import write_if_exists


_LATEST_SEEN = 4096
_CHANGES_TTL_S = 24 * 3600  # a deleted agent's change counter: long enough for every replica to have heard  # agents whose latest version id a process remembers (a guess, always checked)


@dataclass(frozen=True)
class AgentRecord:
    id: str
    tenant_id: str
    title: str
    description: str
    dsl_json: str
    canvas_type: str
    canvas_category: str
    created_at: float
    updated_at: float
    latest_version_id: str


@dataclass(frozen=True)
class VersionRecord:
    id: str
    agent_id: str
    number: int
    title: str
    dsl_json: str
    created_at: float


def _agent(tenant: str, agent_id: str, raw: dict[bytes, bytes]) -> AgentRecord:
    return AgentRecord(
        id=agent_id, tenant_id=tenant, title=_s(raw, "title"), description=_s(raw, "description"),
        dsl_json=_s(raw, "dsl_json"), canvas_type=_s(raw, "canvas_type"), canvas_category=_s(raw, "canvas_category"),
        created_at=float(_s(raw, "created_at") or 0), updated_at=float(_s(raw, "updated_at") or 0),
        latest_version_id=_s(raw, "latest_version_id"),
    )


def _version(raw: dict[bytes, bytes], version_id: str) -> VersionRecord:
    return VersionRecord(
        id=version_id, agent_id=_s(raw, "agent_id"), number=int(_s(raw, "number") or 0), title=_s(raw, "title"),
        dsl_json=_s(raw, "dsl_json"), created_at=float(_s(raw, "created_at") or 0),
    )


def _entry(tenant: str, agent_id: str, version_id: str, draft: bool) -> tuple[str, str, str]:
    """A resolution's key in the cache (":" is in no id)."""
    return tenant, agent_id, version_id or (":draft" if draft else ":latest")


class AgentStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self._latest: dict[tuple[str, str], str] = {}  # (tenant, agent id) -> its latest version id, as last read
        self.resolved_cache = ResolvedAgents(redis)  # used once started (app.py): tests of the reads leave it off

    async def create(self, tenant: str, *, title: str, dsl_json: str, description: str = "",
                     canvas_type: str = "", canvas_category: str = "") -> AgentRecord:
        if not title.strip():
            raise InvalidArgument("title is required")
        agent_id = uuid.uuid4().hex
        # HSETNX on the title index makes the duplicate check and the claim one atomic step.
        if not await self.redis.hsetnx(keys.agent_titles(tenant), title, agent_id):
            raise AlreadyExists(f"{title} already exists.")
        now = time.time()
        fields = {"title": title, "description": description, "dsl_json": dsl_json, "canvas_type": canvas_type,
                  "canvas_category": canvas_category, "created_at": now, "updated_at": now, "latest_version_id": ""}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.agent(tenant, agent_id), mapping=fields)
            pipe.zadd(keys.agents_by_update(tenant), {agent_id: now})
            pipe.zadd(keys.agents_by_create(tenant), {agent_id: now})
            await pipe.execute()
        return await self.get(tenant, agent_id)

    async def get(self, tenant: str, agent_id: str) -> AgentRecord:
        raw = await self.redis.hgetall(keys.agent(tenant, agent_id))
        if not raw:
            raise NotFound(f"agent {agent_id!r} not found")
        return _agent(tenant, agent_id, raw)

    async def list(self, tenant: str, *, page: int = 1, page_size: int = 30, orderby: str = "update_time",
                   desc: bool = True, keywords: str = "") -> tuple[list[AgentRecord], int]:
        index = keys.agents_by_create(tenant) if orderby == "create_time" else keys.agents_by_update(tenant)
        ids = [i.decode() for i in (await self.redis.zrange(index, 0, -1, desc=desc))]
        async with self.redis.pipeline(transaction=False) as pipe:
            for agent_id in ids:
                pipe.hgetall(keys.agent(tenant, agent_id))
            raws = await pipe.execute()
        agents = [_agent(tenant, i, raw) for i, raw in zip(ids, raws) if raw]
        if keywords:
            agents = [a for a in agents if keywords.lower() in a.title.lower()]
        page, page_size = max(page, 1), max(page_size, 1)
        return agents[(page - 1) * page_size : page * page_size], len(agents)

    async def update(self, tenant: str, agent_id: str, **changes: str | None) -> AgentRecord:
        current = await self.get(tenant, agent_id)
        fields = {k: v for k, v in changes.items() if v is not None}
        new_title = fields.get("title")
        if new_title is not None and new_title != current.title:
            if not new_title.strip():
                raise InvalidArgument("title must not be empty")
            if not await self.redis.hsetnx(keys.agent_titles(tenant), new_title, agent_id):
                raise AlreadyExists(f"{new_title} already exists.")
            await self.redis.hdel(keys.agent_titles(tenant), current.title)
        now = time.time()

        async def fill(pipe) -> None:
            pipe.multi()
            pipe.hset(keys.agent(tenant, agent_id), mapping={**fields, "updated_at": now})
            pipe.zadd(keys.agents_by_update(tenant), {agent_id: now})
            pipe.incr(keys.agent_changes(tenant, agent_id))

        await write_if_exists(self.redis, keys.agent(tenant, agent_id), f"agent {agent_id!r} not found", fill)
        return await self.get(tenant, agent_id)

    async def delete(self, tenant: str, agent_id: str) -> None:
        current = await self.get(tenant, agent_id)
        version_ids = await self.redis.zrange(keys.versions(tenant, agent_id), 0, -1)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.agent(tenant, agent_id), keys.versions(tenant, agent_id))
            for vid in version_ids:
                pipe.delete(keys.version(tenant, vid.decode()))
            pipe.zrem(keys.agents_by_update(tenant), agent_id)
            pipe.zrem(keys.agents_by_create(tenant), agent_id)
            pipe.hdel(keys.agent_titles(tenant), current.title)
            pipe.incr(keys.agent_changes(tenant, agent_id))  # (a DEL of a missing key would tell no one)
            pipe.expire(keys.agent_changes(tenant, agent_id), _CHANGES_TTL_S)
            await pipe.execute()

    async def publish(self, tenant: str, agent_id: str, title: str = "") -> VersionRecord:
        """Snapshot the current DSL as a new immutable version; never overwrites an earlier one."""
        version_id = uuid.uuid4().hex

        async def fill(pipe) -> None:
            # Read under WATCH: two publishes never share a number, and the snapshot is the DSL of this moment.
            last = await pipe.zrange(keys.versions(tenant, agent_id), -1, -1, withscores=True)
            number = int(last[0][1]) + 1 if last else 1
            dsl_json = await pipe.hget(keys.agent(tenant, agent_id), "dsl_json")
            pipe.multi()
            pipe.hset(keys.version(tenant, version_id), mapping={
                "agent_id": agent_id, "number": number, "title": title or f"v{number}",
                "dsl_json": dsl_json or b"", "created_at": time.time()})
            pipe.zadd(keys.versions(tenant, agent_id), {version_id: number})
            pipe.hset(keys.agent(tenant, agent_id), "latest_version_id", version_id)
            pipe.incr(keys.agent_changes(tenant, agent_id))

        await write_if_exists(self.redis, keys.agent(tenant, agent_id), f"agent {agent_id!r} not found", fill,
                              also_watch=(keys.versions(tenant, agent_id),))
        return await self.get_version(tenant, agent_id, version_id)

    async def list_versions(self, tenant: str, agent_id: str) -> list[VersionRecord]:
        await self.get(tenant, agent_id)
        ids = [i.decode() for i in await self.redis.zrange(keys.versions(tenant, agent_id), 0, -1, desc=True)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for vid in ids:
                pipe.hgetall(keys.version(tenant, vid))
            raws = await pipe.execute()
        return [_version(raw, vid) for vid, raw in zip(ids, raws) if raw]

    async def get_version(self, tenant: str, agent_id: str, version_id: str) -> VersionRecord:
        raw = await self.redis.hgetall(keys.version(tenant, version_id))
        if not raw or _s(raw, "agent_id") != agent_id:
            raise NotFound(f"version {version_id!r} of agent {agent_id!r} not found")
        return _version(raw, version_id)

    async def delete_version(self, tenant: str, agent_id: str, version_id: str) -> None:
        await self.get_version(tenant, agent_id, version_id)

        async def fill(pipe) -> None:
            remaining = [v for v in await pipe.zrange(keys.versions(tenant, agent_id), 0, -1) if v.decode() != version_id]
            pipe.multi()
            pipe.delete(keys.version(tenant, version_id))
            pipe.zrem(keys.versions(tenant, agent_id), version_id)
            pipe.hset(keys.agent(tenant, agent_id), "latest_version_id", remaining[-1].decode() if remaining else "")
            pipe.incr(keys.agent_changes(tenant, agent_id))

        await write_if_exists(self.redis, keys.agent(tenant, agent_id), f"agent {agent_id!r} not found", fill,
                              also_watch=(keys.versions(tenant, agent_id),))

    async def resolve_dsl(self, tenant: str, agent_id: str, *, version_id: str = "", draft: bool = False) -> tuple[str, str]:
        """(dsl_json, version_id) to run: a named version, the draft, or the latest published (else the draft).
        Kept by `resolved_cache` until the agent changes (no round trip); else read in one round trip."""
        entry = _entry(tenant, agent_id, version_id, draft)
        hit = self.resolved_cache.get(entry)
        if hit is not None:
            return hit
        token = self.resolved_cache.token()
        resolved = await self._read_dsl(tenant, agent_id, version_id=version_id, draft=draft)
        self.resolved_cache.put(token, keys.agent_changes(tenant, agent_id), entry, resolved)
        return resolved

    def cached_dsl(self, tenant: str, agent_id: str, version_id: str) -> tuple[str, str] | None:
        """What `resolve_dsl` of a named version (or, with none, the draft) has kept, if anything."""
        return self.resolved_cache.get(_entry(tenant, agent_id, version_id, not version_id))

    def keep_dsl(self, token: int | None, tenant: str, agent_id: str, version_id: str, resolved: tuple[str, str]) -> None:
        """Keep what `resolved` (of `queue_resolve`) returned, as `resolve_dsl` does; `token` from before the read."""
        self.resolved_cache.put(token, keys.agent_changes(tenant, agent_id),
                                _entry(tenant, agent_id, version_id, not version_id), resolved)

    async def _read_dsl(self, tenant: str, agent_id: str, *, version_id: str = "", draft: bool = False) -> tuple[str, str]:
        """`resolve_dsl` from Redis, reading only the fields a run needs. The latest version's DSL is read in the
        same round trip as the agent's latest version id by guessing it is the one this process saw last (a
        second round trip only when it changed since)."""
        if version_id or draft:
            async with self.redis.pipeline(transaction=False) as pipe:
                self.queue_resolve(pipe, tenant, agent_id, version_id)
                return self.resolved(agent_id, version_id, await pipe.execute())
        seen = (tenant, agent_id)
        guess = self._latest.get(seen)  # None: not seen here yet; "": nothing was published
        async with self.redis.pipeline(transaction=False) as pipe:
            if guess:  # the guessed version's DSL, not the draft's
                pipe.hmget(keys.agent(tenant, agent_id), "latest_version_id")
                self.queue_resolve(pipe, tenant, agent_id, guess)
            else:
                pipe.hmget(keys.agent(tenant, agent_id), "latest_version_id", "dsl_json")
            (latest, *draft_dsl), *version = await pipe.execute()
        if not (version[0] if guess else draft_dsl[0] is not None):  # (EXISTS; every agent has a dsl_json)
            raise NotFound(f"agent {agent_id!r} not found")
        latest = (latest or b"").decode()
        if len(self._latest) >= _LATEST_SEEN:
            self._latest.clear()
        self._latest[seen] = latest
        if not latest:  # nothing published: the draft (read along unless a version was guessed)
            if draft_dsl:
                return (draft_dsl[0] or b"").decode(), ""
            return await self._read_dsl(tenant, agent_id, draft=True)
        if latest == guess:
            return self.resolved(agent_id, latest, version)
        return await self._read_dsl(tenant, agent_id, version_id=latest)  # published since the guess

    @staticmethod
    def queue_resolve(pipe, tenant: str, agent_id: str, version_id: str) -> None:
        """`resolve_dsl` of a named version (or, with none, the draft) on `pipe`; its replies go to `resolved`."""
        if version_id:
            pipe.exists(keys.agent(tenant, agent_id))
            pipe.hmget(keys.version(tenant, version_id), "agent_id", "dsl_json")
        else:
            pipe.hget(keys.agent(tenant, agent_id), "dsl_json")  # every agent has it, "" for an empty draft

    @staticmethod
    def resolved(agent_id: str, version_id: str, replies: list) -> tuple[str, str]:
        """(dsl_json, version_id) from the replies of `queue_resolve`."""
        if not version_id:
            if replies[0] is None:
                raise NotFound(f"agent {agent_id!r} not found")
            return replies[0].decode(), ""
        if not replies[0]:
            raise NotFound(f"agent {agent_id!r} not found")
        owner, dsl_json = replies[1]
        if owner is None or owner.decode() != agent_id:
            raise NotFound(f"version {version_id!r} of agent {agent_id!r} not found")
        return (dsl_json or b"").decode(), version_id
