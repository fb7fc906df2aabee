"""A tenant's MCP servers (RAGFlow's `mcp_server` table): name (unique per tenant), url, server_type,
description, headers, variables (`variables["tools"]` caches the tools the server listed when it was
saved), and the Trellis addition `timeout_s` (one tool call's limit; 0: the deployment's default)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.orchestrator.egress.mcp import McpServer
from services.orchestrator.store import keys
from services.orchestrator.store._records import field as _s
from services.orchestrator.store._records import write_if_exists

MAX_NAME_BYTES = 255


@dataclass(frozen=True)
class McpServerRecord:
    id: str
    tenant_id: str
    name: str
    url: str
    server_type: str
    description: str = ""
    headers: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0

    def server(self) -> McpServer:
        return McpServer(name=self.name, url=self.url, server_type=self.server_type, headers=self.headers,
                         variables=self.variables, timeout_s=self.timeout_s, id=self.id)


def _json_object(raw: dict[bytes, bytes], key: str) -> dict[str, Any]:
    try:
        value = json.loads(_s(raw, key) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _record(tenant: str, mcp_id: str, raw: dict[bytes, bytes]) -> McpServerRecord:
    return McpServerRecord(
        id=mcp_id, tenant_id=tenant, name=_s(raw, "name"), url=_s(raw, "url"), server_type=_s(raw, "server_type"),
        description=_s(raw, "description"), headers=_json_object(raw, "headers"),
        variables=_json_object(raw, "variables"), timeout_s=float(_s(raw, "timeout_s") or 0),
        created_at=float(_s(raw, "created_at") or 0), updated_at=float(_s(raw, "updated_at") or 0))


def check_name(name: str) -> None:
    if not name or len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidArgument(f"Invalid MCP name or length is {len(name)} which is large than {MAX_NAME_BYTES}.")


class McpServerStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def create(self, tenant: str, *, name: str, url: str, server_type: str, description: str = "",
                     headers: dict[str, Any] | None = None, variables: dict[str, Any] | None = None,
                     timeout_s: float = 0.0) -> McpServerRecord:
        check_name(name)
        mcp_id = uuid.uuid4().hex
        # HSETNX on the name index makes the duplicate check and the claim one atomic step.
        if not await self.redis.hsetnx(keys.mcp_server_names(tenant), name, mcp_id):
            raise AlreadyExists("Duplicated MCP server name.")
        now = time.time()
        fields = {"name": name, "url": url, "server_type": server_type, "description": description,
                  "headers": json.dumps(headers or {}), "variables": json.dumps(variables or {}),
                  "timeout_s": float(timeout_s or 0), "created_at": now, "updated_at": now}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.mcp_server(tenant, mcp_id), mapping=fields)
            pipe.zadd(keys.mcp_servers_by_create(tenant), {mcp_id: now})
            await pipe.execute()
        return await self.get(tenant, mcp_id)

    async def name_taken(self, tenant: str, name: str) -> bool:
        return bool(await self.redis.hexists(keys.mcp_server_names(tenant), name))

    async def free_name(self, tenant: str, base: str) -> str:
        """`base`, or RAGFlow's import rename `base_0`, `base_1`... when it is taken."""
        name, n = base, 0
        while await self.name_taken(tenant, name):
            name, n = f"{base}_{n}", n + 1
        return name

    async def get(self, tenant: str, mcp_id: str) -> McpServerRecord:
        raw = await self.redis.hgetall(keys.mcp_server(tenant, mcp_id))
        if not raw:
            raise NotFound(f"Cannot find MCP server {mcp_id} for user {tenant}")
        return _record(tenant, mcp_id, raw)

    async def list(self, tenant: str, *, ids: list[str] | None = None, keywords: str = "",
                   orderby: str = "create_time", desc: bool = True) -> list[McpServerRecord]:
        all_ids = [i.decode() for i in await self.redis.zrange(keys.mcp_servers_by_create(tenant), 0, -1)]
        if ids:
            wanted = set(ids)
            all_ids = [i for i in all_ids if i in wanted]
        async with self.redis.pipeline(transaction=False) as pipe:
            for mcp_id in all_ids:
                pipe.hgetall(keys.mcp_server(tenant, mcp_id))
            raws = await pipe.execute()
        servers = [_record(tenant, i, raw) for i, raw in zip(all_ids, raws) if raw]
        if keywords:
            servers = [s for s in servers if keywords.lower() in s.name.lower()]
        sort_key = {"update_time": lambda s: s.updated_at, "name": lambda s: s.name}.get(orderby, lambda s: s.created_at)
        return sorted(servers, key=sort_key, reverse=desc)

    async def update(self, tenant: str, mcp_id: str, **changes: Any) -> McpServerRecord:
        """Changes: name, url, server_type, description, headers, variables, timeout_s (None: unchanged)."""
        current = await self.get(tenant, mcp_id)
        fields = {k: v for k, v in changes.items() if v is not None}
        new_name = fields.get("name")
        if new_name is not None and new_name != current.name:
            check_name(new_name)
            if not await self.redis.hsetnx(keys.mcp_server_names(tenant), new_name, mcp_id):
                raise AlreadyExists("Duplicated MCP server name.")
            await self.redis.hdel(keys.mcp_server_names(tenant), current.name)
        for key in ("headers", "variables"):
            if key in fields:
                fields[key] = json.dumps(fields[key])
        if "timeout_s" in fields:
            fields["timeout_s"] = float(fields["timeout_s"] or 0)

        async def fill(pipe) -> None:
            pipe.multi()
            pipe.hset(keys.mcp_server(tenant, mcp_id), mapping={**fields, "updated_at": time.time()})

        await write_if_exists(self.redis, keys.mcp_server(tenant, mcp_id),
                              f"Cannot find MCP server {mcp_id} for user {tenant}", fill)
        return await self.get(tenant, mcp_id)

    async def delete(self, tenant: str, mcp_id: str) -> None:
        current = await self.get(tenant, mcp_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.mcp_server(tenant, mcp_id))
            pipe.zrem(keys.mcp_servers_by_create(tenant), mcp_id)
            pipe.hdel(keys.mcp_server_names(tenant), current.name)
            await pipe.execute()
