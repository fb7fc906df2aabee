"""/openapi.json and /docs: one OpenAPI 3.1 document of every route the app registers, made from the same
pydantic models the handlers validate with; a browsable page served from local files."""

from __future__ import annotations

import re

import jsonschema
from aiohttp import web
import schemathesis

from gateway.contract import Contract
from gateway.openapi.spec import _path
from gateway.ragflow_models import CreateDatasetBody, ListAgentsQuery


async def _document(stack) -> dict:
    resp = await stack.client.get("/openapi.json")  # no key needed: the document is public
    assert resp.status == 200
    return await resp.json()


def _resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


async def test_every_registered_route_is_in_the_document(stack):
    document = await _document(stack)
    assert document["openapi"] == "3.1.0"
    app = stack.client.server.app
    registered = {(_path(r.resource.canonical), r.method.lower()) for r in app.router.routes()
                  if r.method not in ("HEAD", "*") and not isinstance(r.resource, web.StaticResource)}
    documented = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert registered == documented
    for must in [("/api/v1/agents", "get"), ("/api/v1/datasets", "post"), ("/api/v1/retrieval", "post"),
                 ("/v1/chat/completions", "post"), ("/api/v1/agents/{agent_id}/stream", "post"),
                 ("/api/v1/datasets/{dataset_id}/documents/{document_id}/chunks/{chunk_id}", "patch"),
                 ("/api/v1/mcp/servers", "get"), ("/openapi.json", "get")]:
        assert must in documented, must
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


async def test_schemas_are_the_models_the_handlers_validate_with(stack):
    document = await _document(stack)
    create = document["paths"]["/api/v1/datasets"]["post"]
    body = _resolve(document, create["requestBody"]["content"]["application/json"]["schema"])
    assert body == _resolve(document, {"$ref": "#/components/schemas/CreateDatasetBody"})
    assert set(body["properties"]) == set(CreateDatasetBody.model_fields)
    assert body["additionalProperties"] is False  # RAGFlow refuses unknown fields here
    params = {p["name"]: p for p in document["paths"]["/api/v1/agents"]["get"]["parameters"]}
    assert set(params) == set(ListAgentsQuery.model_fields)
    ok, error = document["paths"]["/api/v1/agents"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["anyOf"]
    canvas = _resolve(document, ok["properties"]["data"])
    assert set(canvas["properties"]) == {"canvas", "total"}
    assert _resolve(document, error)["required"] == ["code", "message"]
    assert "text/event-stream" in document["paths"]["/api/v1/agents/chat/completions"]["post"]["responses"]["200"]["content"]
    assert document["paths"]["/v1/models"]["get"]["responses"]["default"]["content"]["application/json"]["schema"]
    assert "multipart/form-data" in document["paths"]["/api/v1/datasets/{dataset_id}/documents"]["post"]["requestBody"]["content"]


async def test_document_is_valid_json_schema_and_loads_in_schemathesis(stack):
    document = await _document(stack)
    for name, schema in document["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(schema)
    schema = schemathesis.openapi.from_dict(document)
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) == sum(len(ops) for ops in document["paths"].values())


async def test_a_handler_reads_its_body_with_the_declared_model(stack):
    """The contract is what the handler parses with: a field the model refuses is refused on the wire."""
    resp = await stack.client.post("/api/v1/datasets", json={"name": "x", "unknown": 1}, headers=stack.auth())
    body = await resp.json()
    assert body["code"] == 101 and "Field: <unknown> - Message: <Extra inputs are not permitted>" in body["message"]
    assert isinstance(Contract(body=CreateDatasetBody).body, type)


async def test_docs_page_renders_swagger_ui_from_local_files(stack):
    page = await stack.client.get("/docs")
    html = await page.text()
    assert page.status == 200 and "/openapi.json" in html
    for asset in re.findall(r'(?:src|href)="(/docs/static/[^"]+)"', html):
        resp = await stack.client.get(asset)
        assert resp.status == 200 and len(await resp.read()) > 1000, asset
    assert "http" not in "".join(re.findall(r'(?:src|href)="([^"]+)"', html))  # no CDN


async def test_the_completion_routes_document_background_and_a_request_webhook(stack):
    document = await _document(stack)
    routes = {"/api/v1/agents/chat/completions": "code", "/v1/chat/completions": "object",
              "/api/v1/agents/{agent_id}/stream": "type"}
    for path, marker in routes.items():
        post = document["paths"][path]["post"]
        body = _resolve(document, post["requestBody"]["content"]["application/json"]["schema"])
        assert body["properties"]["background"]["type"] == "boolean", path
        hook = _resolve(document, next(s for s in body["properties"]["completion_webhook"]["anyOf"] if "$ref" in s))
        assert set(hook["required"]) == {"url", "secret"} and hook["additionalProperties"] is False
        assert set(hook["properties"]["events"]["anyOf"][0]["items"]["enum"]) == {
            "run.succeeded", "run.failed", "run.waiting_for_user", "run.cancelled"}
        accepted = _resolve(document, post["responses"]["202"]["content"]["application/json"]["schema"])
        assert marker in accepted["properties"], path  # each dialect's own 202
    openai_202 = _resolve(document, document["paths"]["/v1/chat/completions"]["post"]["responses"]["202"]["content"][
        "application/json"]["schema"])
    assert {"run_id", "session_id", "status"} <= set(openai_202["required"])
