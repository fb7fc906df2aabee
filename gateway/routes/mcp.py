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
variable `name`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import grpc
from aiohttp import web
from trellis.canvas.v1 import mcp_service_pb2 as mcp_pb

from gateway.endpoint import TENANT, Dialect, endpoint
from gateway.errors import GatewayError, from_rpc_error
from gateway.orchestrator import ORCHESTRATOR, Orchestrator
from gateway.protocol import query_bool, query_int, read_json
from gateway.routes._views import _times, ok

LIST_TIMEOUT_S = 10.0  # the orchestrator's limit on listing a server's tools when the body sets no `timeout`

# Refusals RAGFlow answers with its data-error code (get_data_error_result) rather than 101.
_DATA_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                grpc.StatusCode.FAILED_PRECONDITION}


async def _call(orch: Orchestrator, method: Any, request: Any, listings: int = 0, list_timeout_s: float = 0.0) -> Any:
    """The RPC, waiting longer when the orchestrator lists `listings` servers' tools on the way."""
    wait = orch.rpc_timeout_s + listings * ((list_timeout_s or LIST_TIMEOUT_S) + 5)
    try:
        return await method(request, timeout=wait)
    except grpc.aio.AioRpcError as exc:
        if exc.code() in _DATA_ERRORS:
            raise GatewayError(exc.details() or exc.code().name.lower(), code=exc.code(), ragflow_code=102) from None
        raise from_rpc_error(exc) from None


def _stub(request: web.Request) -> tuple[Orchestrator, Any, str]:
    orch = request.app[ORCHESTRATOR]
    return orch, orch.mcp, request[TENANT]


def _required(body: dict[str, Any], *names: str) -> None:
    missing = [n for n in names if n not in body]
    if missing:
        raise GatewayError(f"required argument are missing: {','.join(missing)}; ", param=missing[0])


def _json_text(body: dict[str, Any], name: str) -> str:
    """RAGFlow's safe_json_parse: an object, or a string holding one ("" and null: {})."""
    value = body.get(name)
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


def _timeout(body: dict[str, Any]) -> float:
    raw = body.get("timeout")
    if raw in (None, ""):
        return 0.0
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise GatewayError(f"`timeout` must be a number of seconds, not {raw!r}", param="timeout") from None
    if not math.isfinite(value) or value < 0:
        raise GatewayError(f"`timeout` must be a finite number of seconds >= 0, not {raw!r}", param="timeout")
    return value


def server_view(s: mcp_pb.McpServer) -> dict[str, Any]:
    return {"id": s.id, "name": s.name, "tenant_id": s.tenant_id, "url": s.url, "server_type": s.server_type,
            "description": s.description or None, "headers": json.loads(s.headers_json or "{}"),
            "variables": json.loads(s.variables_json or "{}"), "timeout": s.timeout_s,
            **_times(s.created_at, s.updated_at)}


def _mcp_ids(request: web.Request) -> list[str]:
    raw = request.query.getall("mcp_ids", []) or [request.query.get("mcp_id", "")]
    return [i for item in raw for i in item.split(",") if i]


@endpoint(Dialect.RAGFLOW)
async def list_servers(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    page, page_size = query_int(request, "page", 1), query_int(request, "page_size", 30)
    if page < 1 or page_size < 1:
        raise GatewayError("`page` and `page_size` must be positive integers")
    resp = await _call(orch, stub.ListMcpServers, mcp_pb.ListMcpServersRequest(
        tenant_id=tenant, ids=_mcp_ids(request), keywords=request.query.get("keywords", ""),
        orderby=request.query.get("orderby", "create_time"), desc=query_bool(request, "desc", True)))
    servers = [server_view(s) for s in resp.servers]
    return ok({"mcp_servers": servers[(page - 1) * page_size: page * page_size], "total": len(servers)})


@endpoint(Dialect.RAGFLOW)
async def get_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    req = mcp_pb.GetMcpServerRequest(tenant_id=tenant, mcp_id=request.match_info["mcp_id"])
    server = (await _call(orch, stub.GetMcpServer, req)).server
    if request.query.get("mode") == "download":
        variables = json.loads(server.variables_json or "{}")
        return ok({"mcpServers": {server.name: {
            "type": server.server_type, "url": server.url, "name": server.name,
            "authorization_token": variables.get("authorization_token", ""), "tools": variables.get("tools", {})}}})
    return ok(server_view(server))


@endpoint(Dialect.RAGFLOW)
async def create_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    body = await read_json(request)
    _required(body, "name", "url", "server_type")
    req = mcp_pb.CreateMcpServerRequest(
        tenant_id=tenant, name=str(body["name"] or ""), url=str(body["url"] or ""),
        server_type=str(body["server_type"] or ""), description=str(body.get("description") or ""),
        headers_json=_json_text(body, "headers"), variables_json=_json_text(body, "variables"),
        timeout_s=_timeout(body))
    return ok(server_view((await _call(orch, stub.CreateMcpServer, req, 1, req.timeout_s)).server))


@endpoint(Dialect.RAGFLOW)
async def update_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    body = await read_json(request)
    req = mcp_pb.UpdateMcpServerRequest(tenant_id=tenant, mcp_id=request.match_info["mcp_id"])
    for name in ("name", "url", "server_type", "description"):
        if body.get(name) is not None:
            setattr(req, name, str(body[name]))
    for name in ("headers", "variables"):
        if body.get(name) is not None:
            setattr(req, f"{name}_json", _json_text(body, name))
    if body.get("timeout") not in (None, ""):
        req.timeout_s = _timeout(body)
    return ok(server_view((await _call(orch, stub.UpdateMcpServer, req, 1, req.timeout_s)).server))


@endpoint(Dialect.RAGFLOW)
async def delete_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    await _call(orch, stub.DeleteMcpServer,
                mcp_pb.DeleteMcpServerRequest(tenant_id=tenant, mcp_id=request.match_info["mcp_id"]))
    return ok(True)


@endpoint(Dialect.RAGFLOW)
async def import_servers(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    body = await read_json(request)
    _required(body, "mcpServers")
    servers = body["mcpServers"]
    if not servers:
        raise GatewayError("No MCP servers provided.", ragflow_code=102)
    if not isinstance(servers, dict):
        raise GatewayError("`mcpServers` must be an object {name: server}", param="mcpServers")
    timeout_s = _timeout(body)
    resp = await _call(orch, stub.ImportMcpServers, mcp_pb.ImportMcpServersRequest(
        tenant_id=tenant, servers_json=json.dumps(servers, ensure_ascii=False), timeout_s=timeout_s),
        len(servers), timeout_s)
    results = []
    for r in resp.results:
        item: dict[str, Any] = {"server": r.server, "success": r.success}
        if r.success:
            item.update(action=r.action, id=r.id, new_name=r.new_name)
        if r.message:
            item["message"] = r.message
        results.append(item)
    return ok({"results": results})


@endpoint(Dialect.RAGFLOW)
async def test_server(request: web.Request) -> web.Response:
    orch, stub, tenant = _stub(request)
    body = await read_json(request)
    _required(body, "url", "server_type")
    req = mcp_pb.TestMcpServerRequest(
        tenant_id=tenant, url=str(body["url"] or ""), server_type=str(body["server_type"] or ""),
        headers_json=_json_text(body, "headers"), variables_json=_json_text(body, "variables"),
        timeout_s=_timeout(body))
    return ok(json.loads((await _call(orch, stub.TestMcpServer, req, 1, req.timeout_s)).tools_json or "[]"))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/v1/mcp/servers", list_servers)
    r.add_post("/api/v1/mcp/servers", create_server)
    r.add_post("/api/v1/mcp/servers/import", import_servers)
    r.add_get("/api/v1/mcp/servers/{mcp_id}", get_server)
    r.add_put("/api/v1/mcp/servers/{mcp_id}", update_server)
    r.add_delete("/api/v1/mcp/servers/{mcp_id}", delete_server)
    r.add_post("/api/v1/mcp/servers/{mcp_id}/test", test_server)
