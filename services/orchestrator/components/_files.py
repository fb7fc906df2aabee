"""The files a component is pointed at (ExcelProcessor's `input_files`, Browser's `upload_sources`).

A referenced value may hold: a `sys.files` entry or Begin file input ({"name", "content"}: text, or a base64
data URI), a list of those, a data URI string, a file another component of the tenant produced (a download
info with `doc_id`, read from attachments.py's store), text, or, where the caller allows it, an http(s) URL
fetched through the run's guarded client (the SSRF guard applies).
"""
from __future__ import annotations

import base64
import binascii
import os
from typing import Any
from urllib.parse import unquote, urlparse

from services.orchestrator.components._fields import FieldError, decode_json_container
from services.orchestrator.components.base import NodeContext


async def run_files(ctx: NodeContext, ref: str, value: Any, field: str, *, data_name: str, text_name: str,
                    fetch_urls: bool = False) -> list[tuple[str, bytes]]:
    """(filename, bytes) of each file in `value` (what `ref` holds). `data_name` / `text_name` name a bare
    data URI / a bare text; a problem is a FieldError naming `field` and `ref`."""
    value = decode_json_container(value)
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [f for item in value
                for f in await run_files(ctx, ref, item, field, data_name=data_name, text_name=text_name,
                                         fetch_urls=fetch_urls)]
    if isinstance(value, dict) and value.get("doc_id"):
        store = ctx.services.attachments
        tenant = getattr(ctx.request, "tenant_id", "") or "default"
        found = await store.get(tenant, str(value["doc_id"])) if store is not None else None
        if found is None:
            raise FieldError(ctx.component_id, field, f"{ref}: attachment {value['doc_id']} not found")
        return [(found.filename, found.content)]
    if isinstance(value, dict):
        name = str(value.get("name") or value.get("filename") or data_name)
        return [(name, _decode(ctx, ref, field, str(value.get("content") or value.get("url") or "")))]
    if isinstance(value, str):
        if fetch_urls and value.strip().startswith(("http://", "https://")):
            return [await _fetch(ctx, ref, field, value.strip())]
        return [(data_name if value.startswith("data:") else text_name, _decode(ctx, ref, field, value))]
    raise FieldError(ctx.component_id, field, f"{ref} holds no file (got {type(value).__name__})")


def _decode(ctx: NodeContext, ref: str, field: str, content: str) -> bytes:
    if content.startswith("data:"):
        try:
            return base64.b64decode(content.split(",", 1)[1], validate=False)
        except (IndexError, binascii.Error):
            raise FieldError(ctx.component_id, field, f"{ref}: a malformed data URI") from None
    return content.encode("utf-8")


async def _fetch(ctx: NodeContext, ref: str, field: str, url: str) -> tuple[str, bytes]:
    if ctx.http is None:
        raise FieldError(ctx.component_id, field, f"{ref}: no outbound HTTP client to fetch {url}")
    try:
        resp = await ctx.http.request("GET", url)
    except Exception as exc:  # refused by the SSRF guard, unreachable, too large: say which URL
        raise FieldError(ctx.component_id, field, f"{ref}: cannot fetch {url}: {exc}") from None
    if resp.status >= 400:
        raise FieldError(ctx.component_id, field, f"{ref}: {url} answered HTTP {resp.status}")
    name = unquote(os.path.basename(urlparse(resp.url).path)) or "download.bin"
    return name, resp.body
