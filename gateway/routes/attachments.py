"""Run attachments (files DocGenerator, ExcelProcessor and Browser produced), as RAGFlow serves them:

    GET /api/v1/agents/attachments/{attachment_id}/download   the file, as a download (?disposition=inline: shown)
    GET /api/v1/agents/attachments/{attachment_id}/preview    the file, shown inline where that is safe

Only the tenant whose run made the file gets it: any other key, an unknown or an expired id is HTTP 404
with RAGFlow's "document not found". The message_end `downloads` of the run lists these URLs.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import grpc
from aiohttp import web
from trellis.canvas.v1 import attachment_service_pb2 as att_pb

from gateway.contract import Contract, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import from_rpc_error
from gateway.orchestrator import ORCHESTRATOR
from gateway.ragflow_models import Query
from gateway.responses import json_response

# Types a browser would run as a page of our origin: never shown inline.
_ACTIVE_TYPES = {"text/html", "image/svg+xml", "application/xhtml+xml", "text/xml", "application/xml"}


class DownloadQuery(Query):
    disposition: str = ""  # "inline": shown where that is safe, else a download


def _contract(summary: str, query: type[Query] | None = None) -> Contract:
    # The file itself, or RAGFlow's error: HTTP 404 for an id this key cannot have, HTTP 200 for the others.
    return Contract(summary, query=query, binary=True, error_statuses=(404,), tags=("attachments",))


def _disposition(kind: str, filename: str) -> str:
    ascii_name = re.sub(r'[^A-Za-z0-9._ -]', "_", filename).strip() or "file"
    return f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"


async def _serve(request: web.Request, *, inline: bool) -> web.StreamResponse:
    orch, tenant = request.app[ORCHESTRATOR], request[TENANT]
    req = att_pb.GetAttachmentRequest(tenant_id=tenant, attachment_id=request.match_info["attachment_id"])
    try:
        found = await orch.unary(orch.attachments.GetAttachment, req)
    except grpc.aio.AioRpcError as exc:
        if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            return json_response({"code": 102, "message": "document not found", "data": False}, status=404)
        raise from_rpc_error(exc) from None
    mime = found.mime_type or "application/octet-stream"
    shown = inline and mime not in _ACTIVE_TYPES
    return web.Response(body=found.content, headers={
        "Content-Type": mime,
        "Content-Disposition": _disposition("inline" if shown else "attachment", found.filename),
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-store",
    })


@endpoint(Dialect.RAGFLOW, contract=_contract("Download a file a run produced", DownloadQuery))
async def download(request: web.Request) -> web.StreamResponse:
    return await _serve(request, inline=query(request).disposition.lower() == "inline")


@endpoint(Dialect.RAGFLOW, contract=_contract("Show a file a run produced"))
async def preview(request: web.Request) -> web.StreamResponse:
    return await _serve(request, inline=True)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/agents/attachments/{attachment_id}/download", download)
    app.router.add_get("/api/v1/agents/attachments/{attachment_id}/preview", preview)
