"""RAGFlow's document file routes outside a dataset's path:

    GET /api/v1/documents/{document_id}            (the uploaded file, found among the tenant's datasets)
    GET /api/v1/documents/images/{image_id}        (a chunk's image: Trellis keeps none, so "Image not found.")
    GET /api/v1/documents/artifact/{filename}      (a sandbox run's file: Trellis keeps none past the run)

Codes and messages follow RAGFlow's restful_apis/document_api.py; its errors here are `{"code", "message"}`.
"""

from __future__ import annotations

from pathlib import PurePath
from urllib.parse import quote

import grpc
from aiohttp import web
from trellis.retrieval.v1 import retrieval_service_pb2 as rr_pb

from gateway.contract import Contract
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError
from gateway.responses import json_response
from gateway.routes._datasets import TAGS, owned_datasets, retrieval

# RAGFlow's sandbox artifacts: the file types a code run may leave for download
_ARTIFACT_TYPES = {".png", ".jpg", ".jpeg", ".svg", ".gif", ".pdf", ".csv", ".json", ".html", ".txt", ".md", ".xlsx",
                   ".docx", ".pptx"}


def _not_found(message: str) -> web.Response:
    return json_response({"code": 102, "message": message})


@endpoint(Dialect.RAGFLOW, contract=Contract("Download a document's file by its id", binary=True, tags=TAGS))
async def download_by_id(request: web.Request) -> web.StreamResponse:
    document_id, rv = request.match_info["document_id"], retrieval(request)
    for dataset in await owned_datasets(request):
        req = rr_pb.GetDocumentFileRequest(tenant_id=request[TENANT], dataset_id=dataset.id, document_id=document_id)
        try:
            found = await rv.call(rv.rpc.GetDocumentFile, req)
        except GatewayError as err:
            if err.code == grpc.StatusCode.NOT_FOUND:
                continue
            raise
        if not found.content:
            return _not_found("This file is empty.")
        return web.Response(body=found.content, content_type=found.document.mime_type or "application/octet-stream",
                            headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(found.document.name)}"})
    return _not_found("document not found")


@endpoint(Dialect.RAGFLOW, contract=Contract("A chunk's image (Trellis keeps none)", binary=True, tags=TAGS))
async def document_image(request: web.Request) -> web.StreamResponse:
    return _not_found("Image not found.")


@endpoint(Dialect.RAGFLOW, contract=Contract("A code run's artifact (Trellis keeps none past the run)", binary=True,
                                             tags=TAGS))
async def artifact(request: web.Request) -> web.StreamResponse:
    if PurePath(request.match_info["filename"]).suffix.lower() not in _ARTIFACT_TYPES:
        return _not_found("invalid file type")
    return _not_found("Artifact not found.")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/v1/documents/images/{image_id}", document_image)
    r.add_get("/api/v1/documents/artifact/{filename}", artifact)
    r.add_get("/api/v1/documents/{document_id}", download_by_id)
