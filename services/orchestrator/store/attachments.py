"""The files a run produces (DocGenerator, ExcelProcessor, Browser downloads): stored per tenant in Redis.

Why Redis and not the data directory: every orchestrator replica and every pod already share it, so a file
made by one replica is served through any gateway without a shared volume, and its TTL cleans up without
a sweeper. A file is one hash (`store/keys.py: attachment`) of its name, type, bytes and run, expiring after
TRELLIS_ATTACHMENT_TTL_S (default 7 days, as long as the run's trace); files larger than
TRELLIS_ATTACHMENT_MAX_BYTES (default 32 MiB) are refused, naming the component and the limit.

Components call `save(ctx, filename, mime_type, content)`; it returns RAGFlow's download info
(`doc_id`, `filename`, `mime_type`, `size`, and the URLs of the HTTP routes in gateway/routes/attachments.py),
which a Message that references it lists in its message_end `downloads` (`download_infos`).
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import redis.asyncio as aioredis

from services.common.errors import ResourceExhausted
from services.orchestrator.store import keys
from services.orchestrator.store._records import field

DEFAULT_TTL_S = 7 * 24 * 3600
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
_DOWNLOAD_KEYS = ("doc_id", "filename", "mime_type")


@dataclass(frozen=True)
class StoredAttachment:
    id: str
    filename: str
    mime_type: str
    content: bytes
    run_id: str
    created_at: float


class AttachmentStore:
    def __init__(self, redis: aioredis.Redis, *, ttl_s: float = DEFAULT_TTL_S, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._redis = redis
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes

    async def put(self, tenant: str, run_id: str, filename: str, mime_type: str, content: bytes) -> str:
        """Store a file for `tenant`; its new id. ResourceExhausted when it is larger than `max_bytes`."""
        if len(content) > self.max_bytes:
            raise ResourceExhausted(f"{filename}: {len(content)} bytes is more than an attachment may hold "
                                    f"({self.max_bytes}, TRELLIS_ATTACHMENT_MAX_BYTES)")
        attachment_id = uuid.uuid4().hex
        key = keys.attachment(tenant, attachment_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"filename": filename, "mime_type": mime_type, "content": content,
                                    "run_id": run_id, "created_at": repr(time.time())})
            pipe.expire(key, max(1, int(self.ttl_s)))
            await pipe.execute()
        return attachment_id

    async def get(self, tenant: str, attachment_id: str) -> StoredAttachment | None:
        """The tenant's file, or None (unknown, expired, or another tenant's: their keys differ)."""
        raw = await self._redis.hgetall(keys.attachment(tenant, attachment_id))
        if not raw:
            return None
        return StoredAttachment(attachment_id, field(raw, "filename"), field(raw, "mime_type"),
                                raw.get(b"content", b""), field(raw, "run_id"), float(field(raw, "created_at") or 0))


def download_path(attachment_id: str, filename: str) -> str:
    return f"/api/v1/agents/attachments/{attachment_id}/download?filename={quote(filename)}"


def preview_path(attachment_id: str, filename: str) -> str:
    return f"/api/v1/agents/attachments/{attachment_id}/preview?filename={quote(filename)}"


async def save(ctx: Any, filename: str, mime_type: str, content: bytes) -> dict[str, Any]:
    """Store a file the component `ctx` produced as an attachment of its run; RAGFlow's download info."""
    store = getattr(ctx.services, "attachments", None)
    if store is None:
        raise RuntimeError(f"{ctx.component_id}: no attachment store is configured (the orchestrator's Redis)")
    if not content:
        raise ValueError(f"{ctx.component_id}: the generated file {filename} is empty")
    request = ctx.request
    tenant = (getattr(request, "tenant_id", "") if request is not None else "") or "default"
    try:
        attachment_id = await store.put(tenant, ctx.run_id, filename, mime_type, content)
    except ResourceExhausted as exc:
        raise ValueError(f"{ctx.component_id}: {exc.message}") from None
    return {"doc_id": attachment_id, "filename": filename, "mime_type": mime_type, "size": len(content),
            "download_url": download_path(attachment_id, filename),
            "preview_url": preview_path(attachment_id, filename)}


def download_infos(value: Any) -> list[dict[str, Any]]:
    """The download infos inside a value (RAGFlow `Message._extract_downloads`): one info, a list of them,
    or either as JSON text. Anything else: []."""
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith(("{", "[")):
            return []
        try:
            value = json.loads(text)
        except ValueError:
            return []
    if _is_download(value):
        return [value]
    if isinstance(value, list) and value and all(_is_download(v) for v in value):
        return list(value)
    return []


def _is_download(value: Any) -> bool:
    return isinstance(value, dict) and all(k in value for k in _DOWNLOAD_KEYS)
