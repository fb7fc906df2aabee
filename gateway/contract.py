"""What a route takes and answers, declared once on `@endpoint(..., contract=Contract(...))`.

The same declaration serves two readers: the handler, which reads its body and query through
`body(request)` and `query(request)` (validated with exactly the declared models), and the OpenAPI
generator (gateway/openapi/spec.py), which turns the same models into the published schema. So the
document and the validation cannot drift apart.

    @endpoint(Dialect.RAGFLOW, contract=Contract(body=CreateAgentBody, response=AgentOut, summary="Create an agent"))
    async def create_agent(request):
        req = await body(request)          # a CreateAgentBody, or a 101 naming the bad field
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import BaseModel

CONTRACT = web.RequestKey("contract", object)  # the Contract of the route serving the request


@dataclass(frozen=True)
class Contract:
    summary: str = ""
    body: type[BaseModel] | None = None  # a JSON object body
    query: type[BaseModel] | None = None  # the query string, one field per parameter
    response: Any = None  # the type of `data` (RAGFlow) or of the whole body (OpenAI, envelope)
    stream: bool = False  # may answer text/event-stream
    multipart: tuple[str, ...] = ()  # multipart/form-data file fields (uploads), instead of `body`
    binary: bool = False  # answers with a file of any media type (a download) instead of JSON
    error_statuses: tuple[int, ...] = ()  # HTTP statuses besides the dialect's own that carry its error body
    # the type of a 202 answer (a run going on: `background` in the body); None: RAGFlow's envelope with the ids
    accepted: Any = None
    tags: tuple[str, ...] = field(default_factory=tuple)


def contract_of(request: web.Request) -> Contract:
    found = request.get(CONTRACT)
    if not isinstance(found, Contract):
        raise RuntimeError(f"{request.method} {request.path}: the route declares no Contract")
    return found


async def body(request: web.Request) -> Any:
    """The request body parsed with the route's declared model (its `read` classmethod when it has one:
    RAGFlow's strict dataset models read JSON RAGFlow's way)."""
    from gateway.protocol import read_body

    model = contract_of(request).body
    if model is None:
        raise RuntimeError(f"{request.method} {request.path}: the route declares no body model")
    reader = getattr(model, "read", None)
    if reader is not None:
        return await reader(request)
    return await read_body(request, model)


def query(request: web.Request) -> Any:
    """The query string parsed with the route's declared model."""
    from gateway.protocol import parse_query

    model = contract_of(request).query
    if model is None:
        raise RuntimeError(f"{request.method} {request.path}: the route declares no query model")
    return parse_query(request, model)
