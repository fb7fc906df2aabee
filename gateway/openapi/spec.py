"""Build the OpenAPI 3.1 document from the aiohttp router and each route's Contract (see package doc)."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from pydantic import TypeAdapter

from gateway.contract import Contract
from gateway.dialects import Dialect

REF = "#/components/schemas/{model}"
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
_SKIP_PATHS = {"/api/{tail}", "/v1/{tail}"}  # the catch-alls that answer unknown paths in each dialect


class _Schemas:
    """Collects every type's JSON schema in one pass, so shared models become one component each."""

    def __init__(self) -> None:
        self._inputs: list[tuple[Any, str, TypeAdapter]] = []

    def ref(self, tp: Any, mode: str = "serialization") -> tuple[Any, str]:
        key = len(self._inputs)
        self._inputs.append((key, mode, TypeAdapter(tp)))  # type: ignore[arg-type]
        return key, mode  # how json_schemas keys its answer

    def resolve(self) -> tuple[dict[Any, dict[str, Any]], dict[str, Any]]:
        if not self._inputs:
            return {}, {}
        schemas, defs = TypeAdapter.json_schemas(self._inputs, ref_template=REF)
        return schemas, defs.get("$defs", {})


def _path(canonical: str) -> str:
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", canonical)


def _routes(app: web.Application):
    for resource in app.router.resources():
        if isinstance(resource, web.StaticResource):
            continue
        path = _path(resource.canonical)
        if path in _SKIP_PATHS:
            continue
        for route in resource:
            if route.method in ("HEAD", "*"):
                continue
            yield path, route.method.lower(), route.handler


def build(app: web.Application, *, title: str = "Trellis gateway", version: str = "1") -> dict[str, Any]:
    schemas = _Schemas()
    pending: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []  # (path, method, operation, slots)
    error_refs: dict[str, Any] = {}  # dialect name -> its error schema's slot
    used_ids: set[str] = set()
    for path, method, handler in _routes(app):
        contract: Contract | None = getattr(handler, "contract", None)
        dialect: Dialect | None = getattr(handler, "dialect", None)
        op: dict[str, Any] = {"operationId": _operation_id(method, path, handler, used_ids)}
        slots: dict[str, Any] = {"dialect": dialect, "contract": contract}
        if dialect is not None and dialect.name not in error_refs:
            error_refs[dialect.name] = schemas.ref(dialect.error_model)
        if contract is not None:
            op["summary"] = contract.summary or handler.__name__.replace("_", " ")
            if contract.tags:
                op["tags"] = list(contract.tags)
            if contract.body is not None:
                slots["body"] = schemas.ref(contract.body, "validation")
            if contract.query is not None:
                slots["query"] = schemas.ref(contract.query, "validation")
            if contract.response is not None:
                slots["response"] = schemas.ref(contract.response)
            if contract.accepted is not None:
                slots["accepted"] = schemas.ref(contract.accepted)
            slots["multipart"] = contract.multipart
        else:
            op["summary"] = (handler.__doc__ or handler.__name__).strip().splitlines()[0]
        if dialect and not getattr(handler, "public", False):
            op["security"] = [{"apiKey": []}]
        params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in _PARAM.findall(path)]
        op["parameters"] = params
        pending.append((path, method, op, slots))

    resolved, components = schemas.resolve()
    paths: dict[str, dict[str, Any]] = {}
    for path, method, op, slots in pending:
        if "query" in slots:
            op["parameters"] += _query_params(resolved[slots["query"]], components)
        if "body" in slots:
            op["requestBody"] = {"required": False, "content": {"application/json": {"schema": resolved[slots["body"]]}}}
        elif slots.get("multipart"):
            props = {f: {"type": "array", "items": {"type": "string", "contentMediaType": "application/octet-stream"}}
                     for f in slots["multipart"]}
            op["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": {"type": "object",
                                                                                                 "properties": props}}}}
        op["responses"] = _responses(slots, resolved, error_refs)
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "RAGFlow's HTTP API, OpenAI's chat API and the standard envelope stream over Trellis "
                                "agents (gateway/README.md)."},
        "paths": paths,
        "components": {"schemas": components,
                       "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer",
                                                      "description": "An API key of TRELLIS_API_KEYS or the key file"}}},
    }


def _operation_id(method: str, path: str, handler: Any, used: set[str]) -> str:
    base = f"{handler.__module__.rsplit('.', 1)[-1]}_{handler.__name__}"
    candidate = base if base not in used else f"{base}_{method}_{len(used)}"
    used.add(candidate)
    return candidate


def _query_params(schema: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    required = set(schema.get("required", []))
    return [{"name": name, "in": "query", "required": name in required, "schema": prop}
            for name, prop in schema.get("properties", {}).items()]


def _responses(slots: dict[str, Any], resolved: dict[Any, Any], errors: dict[str, Any]) -> dict[str, Any]:
    dialect: Dialect | None = slots.get("dialect")
    if dialect is None:
        return {"200": {"description": "the answer"}, "default": {"description": "an error"}}
    answer = resolved[slots["response"]] if "response" in slots else None
    responses = dialect.openapi_responses(slots["contract"], answer, resolved[errors[dialect.name]])
    if _may_answer_running(slots["contract"]):
        running = resolved[slots["accepted"]] if "accepted" in slots else _RUNNING
        responses["202"] = {"description": "the run goes on: its ids (docs/triggers.md)", "content": {
            "application/json": {"schema": running}}}
    if _starts_runs(slots["contract"]):
        responses["429"] = {"description": "refused: the tenant is at a limit; retry after Retry-After "
                                           "(gateway/README.md, Refusals)", "headers": _REFUSAL_HEADERS,
                            "content": {"application/json": {"schema": resolved[errors[dialect.name]]}}}
    return responses


# What an admission refusal's 429 carries besides the dialect's error (gateway/refusal.py).
_REFUSAL_HEADERS = {
    "Retry-After": {"description": "seconds to wait before trying again (the delay, rounded up)",
                    "schema": {"type": "integer", "minimum": 0}},
    "RateLimit-Policy": {"description": "the limit, as IETF RateLimit-Policy", "schema": {"type": "string"}},
    "RateLimit": {"description": "what is left of it, as IETF RateLimit", "schema": {"type": "string"}},
}


def _starts_runs(contract: Contract | None) -> bool:
    """The routes that start a run (those that take `background`), which a refusal may answer."""
    return contract is not None and contract.body is not None and "background" in contract.body.model_fields


# A background run's 202 and join's while it runs: RAGFlow's envelope with the run's ids (unless the contract
# names its own `accepted` type: OpenAI's and the envelope's).
_RUNNING = {"type": "object", "required": ["code", "data"], "properties": {
    "code": {"const": 0}, "message": {"type": "string"}, "data": {
        "type": "object", "required": ["run_id", "session_id", "status"],
        "properties": {"run_id": {"type": "string"}, "session_id": {"type": "string"}, "status": {"const": "running"}}}}}


def _may_answer_running(contract: Contract | None) -> bool:
    """Routes that start a run with `background` in their body, and `join` (a `timeout` in its query)."""
    if contract is None:
        return False
    return any(m is not None and name in m.model_fields
               for m, name in ((contract.body, "background"), (contract.query, "timeout")))
