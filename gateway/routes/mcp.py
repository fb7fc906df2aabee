"""RAGFlow's MCP server routes (api/apps/restful_apis/mcp_api.py), for the caller's tenant:

    GET    /api/v1/mcp/servers                  list: ?keywords, page, page_size, orderby, desc, mcp_ids (a,b or repeated)
    GET    /api/v1/mcp/servers/{mcp_id}         one server; ?mode=download exports {"mcpServers": {...}}
    POST   /api/v1/mcp/servers                  create: name, url, server_type required; headers, variables, timeout
    PUT    /api/v1/mcp/servers/{mcp_id}         update any of those
    DELETE /api/v1/mcp/servers/{mcp_id}
    POST   /api/v1/mcp/servers/import           {"mcpServers": {name: {"type", "url", "authorization_token"?}}}
    POST   /api/v1/mcp/servers/{mcp_id}/test    the tools of the server described in the body (nothing saved)

Saving a server lists its tools first (stored in `variables.tools`); one that cannot be reached is not saved.
As RAGFlow answers: a missing required field is code 101, any other refusal (unsupported type, duplicated
name, unknown id, unreachable server) code 102 with the reason. `timeout` (seconds) is the server's tool call
limit, stored with it (0 or absent: TRELLIS_MCP_TIMEOUT_S), and bounds listing its tools while saving or
testing it (absent: 10 s, as in RAGFlow); this route waits that long plus a margin.
`headers` and `variables` are JSON objects (or strings holding one); `$name` in a header takes the value of
variable `name`. Bodies and queries are read with the models declared on each route (gateway/protocol.py and
below), which /openapi.json publishes; paging follows RAGFlow's lenient `page` and `page_size`.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from aiohttp import web
from trellis.canvas.v1 import mcp_service_pb2 as mcp_pb

from gateway.contract import Contract, body, query
from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError, from_rpc_error
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.protocol import CreateMcpServerBody, ImportMcpServersBody, McpServerFields, McpTestBody, UpdateMcpServerBody
from gateway.ragflow_models import PageQuery, Query
from gateway.responses import McpExport, McpImported, McpServerList, McpServerOut
from gateway.routes._views import _times, ok

# RAGFlow's limit on listing a server's tools when the body sets no `timeout` (the orchestrator applies it; this
# route waits that long, plus a margin, beyond the configured RPC timeout).
LIST_TIMEOUT_S = 10.0
_MARGIN_S = 5.0
_TAGS = ("mcp",)

# Refusals RAGFlow answers with its data-error code (get_data_error_result) rather than 101.
_DATA_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                grpc.StatusCode.FAILED_PRECONDITION}


class ListMcpServersQuery(PageQuery):
    keywords: str = ""
    mcp_ids: str | None = None  # ids, comma-separated or the parameter repeated
    mcp_id: str | None = None  # the same, when `mcp_ids` is absent


class GetMcpServerQuery(Query):
    mode: str | None = None  # "download": the server exported as {"mcpServers": {name: {...}}}


async def _call(orch: Orchestrator, method: Any, request: Any, listings: int = 0, list_timeout_s: float | None = None) -> Any:
    """The RPC, waiting longer when the orchestrator lists `listings` servers' tools on the way."""
    try:
        return await orch.unary(method, request, extra_s=listings * ((list_timeout_s or LIST_TIMEOUT_S) + _MARGIN_S))
    except grpc.aio.AioRpcError as exc:
        if exc.code() in _DATA_ERRORS:
            raise GatewayError(exc.details() or exc.code().name.lower(), code=exc.code(), ragflow_code=102) from None
        raise from_rpc_error(exc) from None


def _stub(request: web.Request) -> tuple[Orchestrator, Any, str]:
    orch = request.app[ORCHESTRATOR]
    return orch, orch.mcp, request[TENANT]


def _json_text(value: Any, name: str) -> str:
    """RAGFlow's safe_json_parse: an object, or a string holding one ("" and null: {})."""
    if value in (None, ""):
        return "{}"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise GatewayError(f"`{name}` is not valid JSON", param=name) from None
    if not isinstance(value, dict):
        raise GatewayError(f"`{name}` must be a JSON object", param=name)
    return json.dumps(value, ensure_ascii=False)


def _fields(req: McpServerFields) -> dict[str, Any]:
    """The optional fields every create/update/test body shares, as the request message's fields."""
    return {"headers_json": _json_text(req.headers, "headers"), "variables_json": _json_text(req.variables, "variables"),
            "timeout_s": req.timeout or 0.0}


def server_view(s: mcp_pb.McpServer) -> dict[str, Any]:
    return {"id": s.id, "name": s.name, "tenant_id": s.tenant_id, "url": s.url, "server_type": s.server_type,
            "description": s.description or None, "headers": json.loads(s.headers_json or "{}"),
            "variables": json.loads(s.variables_json or "{}"), "timeout": s.timeout_s,
            **_times(s.created_at, s.updated_at)}


def _mcp_ids(request: web.Request) -> list[str]:
    raw = request.query.getall("mcp_ids", []) or [request.query.get("mcp_id", "")]
    return [i for item in raw for i in item.split(",") if i]


@endpoint(Dialect.RAGFLOW, contract=Contract("List MCP servers", query=ListMcpServersQuery, response=McpServerList,
                                             tags=_TAGS))
async def list_servers(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    q = query(request)
    resp = await _call(orch, stub.ListMcpServers, mcp_pb.ListMcpServersRequest(
        tenant_id=tenant, ids=_mcp_ids(request), keywords=q.keywords, orderby=q.orderby, desc=q.desc))
    servers = [server_view(s) for s in resp.servers]
    return ok({"mcp_servers": servers[(q.page - 1) * q.page_size: q.page * q.page_size], "total": len(servers)})


@endpoint(Dialect.RAGFLOW, contract=Contract("Get an MCP server, or export it (mode=download)", query=GetMcpServerQuery,
                                             response=McpServerOut | McpExport, tags=_TAGS))
async def get_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    req = mcp_pb.GetMcpServerRequest(tenant_id=tenant, mcp_id=request.match_info["mcp_id"])
    server = (await _call(orch, stub.GetMcpServer, req)).server
    if query(request).mode == "download":
        variables = json.loads(server.variables_json or "{}")
        return ok({"mcpServers": {server.name: {
            "type": server.server_type, "url": server.url, "name": server.name,
            "authorization_token": variables.get("authorization_token", ""), "tools": variables.get("tools", {})}}})
    return ok(server_view(server))


@endpoint(Dialect.RAGFLOW, contract=Contract("Create an MCP server (its tools are listed first)", body=CreateMcpServerBody,
                                             response=McpServerOut, tags=_TAGS))
async def create_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    b: CreateMcpServerBody = await body(request)
    req = mcp_pb.CreateMcpServerRequest(tenant_id=tenant, name=b.name, url=b.url, server_type=b.server_type,
                                        description=b.description or "", **_fields(b))
    return ok(server_view((await _call(orch, stub.CreateMcpServer, req, 1, b.timeout)).server))


@endpoint(Dialect.RAGFLOW, contract=Contract("Update an MCP server", body=UpdateMcpServerBody, response=McpServerOut,
                                             tags=_TAGS))
async def update_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    b: UpdateMcpServerBody = await body(request)
    req = mcp_pb.UpdateMcpServerRequest(tenant_id=tenant, mcp_id=request.match_info["mcp_id"])
    for name in ("name", "url", "server_type", "description"):
        if getattr(b, name) is not None:
            setattr(req, name, getattr(b, name))
    for name in ("headers", "variables"):
        if getattr(b, name) is not None:
            setattr(req, f"{name}_json", _json_text(getattr(b, name), name))
    if b.timeout is not None:
        req.timeout_s = b.timeout
    return ok(server_view((await _call(orch, stub.UpdateMcpServer, req, 1, b.timeout)).server))


@endpoint(Dialect.RAGFLOW, contract=Contract("Delete an MCP server", response=bool, tags=_TAGS))
async def delete_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    await _call(orch, stub.DeleteMcpServer,
                mcp_pb.DeleteMcpServerRequest(tenant_id=tenant, mcp_id=request.match_info["mcp_id"]))
    return ok(True)


@endpoint(Dialect.RAGFLOW, contract=Contract("Import MCP servers", body=ImportMcpServersBody, response=McpImported,
                                             tags=_TAGS))
async def import_servers(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    b: ImportMcpServersBody = await body(request)
    if not b.mcpServers:
        raise GatewayError("No MCP servers provided.", ragflow_code=102)
    resp = await _call(orch, stub.ImportMcpServers, mcp_pb.ImportMcpServersRequest(
        tenant_id=tenant, servers_json=json.dumps(b.mcpServers, ensure_ascii=False), timeout_s=b.timeout or 0.0),
        len(b.mcpServers), b.timeout)
    results = []
    for r in resp.results:
        item: dict[str, Any] = {"server": r.server, "success": r.success}
        if r.success:
            item.update(action=r.action, id=r.id, new_name=r.new_name)
        if r.message:
            item["message"] = r.message
        results.append(item)
    return ok({"results": results})


@endpoint(Dialect.RAGFLOW, contract=Contract("The tools of the MCP server described (nothing saved)", body=McpTestBody,
                                             response=list[dict[str, Any]], tags=_TAGS))
async def test_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    b: McpTestBody = await body(request)
    req = mcp_pb.TestMcpServerRequest(tenant_id=tenant, url=b.url, server_type=b.server_type, **_fields(b))
    return ok(json.loads((await _call(orch, stub.TestMcpServer, req, 1, b.timeout)).tools_json or "[]"))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/v1/mcp/servers", list_servers)
    r.add_post("/api/v1/mcp/servers", create_server)
    r.add_post("/api/v1/mcp/servers/import", import_servers)
    r.add_get("/api/v1/mcp/servers/{mcp_id}", get_server)
    r.add_put("/api/v1/mcp/servers/{mcp_id}", update_server)
    r.add_delete("/api/v1/mcp/servers/{mcp_id}", delete_server)
    r.add_post("/api/v1/mcp/servers/{mcp_id}/test", test_server)
