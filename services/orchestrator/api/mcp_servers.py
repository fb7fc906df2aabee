"""McpServerService: a tenant's MCP servers (store/mcp_servers.py), checked against the server itself.

As RAGFlow does, saving a server lists its tools first: the tools go into `variables["tools"]`, and a server
that cannot be reached is not saved (FAILED_PRECONDITION with the reason). `variables["tools"]` sent by a
client is always replaced by what the server lists.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from trellis.canvas.v1 import mcp_service_pb2 as mcp_pb
from trellis.canvas.v1 import mcp_service_pb2_grpc as mcp_grpc

from services.common.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from services.common.json_fields import json_object
from services.orchestrator.api.requests import tenant_of as _tenant
from services.orchestrator.egress import mcp as mcp_client
from services.orchestrator.egress.mcp import McpAccess, McpError, McpServer
from services.orchestrator.store.mcp_servers import McpServerRecord, McpServerStore, check_name

# Listing a server's tools while saving or testing it: the request's `timeout`, else RAGFlow's 10 s (the gateway
# waits that long plus a margin for each server).
LIST_TIMEOUT_S = 10.0


def _ts(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def server_to_proto(r: McpServerRecord) -> mcp_pb.McpServer:
    return mcp_pb.McpServer(
        id=r.id, tenant_id=r.tenant_id, name=r.name, url=r.url, server_type=r.server_type, description=r.description,
        headers_json=json.dumps(r.headers, ensure_ascii=False), variables_json=json.dumps(r.variables, ensure_ascii=False),
        timeout_s=r.timeout_s, created_at=_ts(r.created_at), updated_at=_ts(r.updated_at))


def _check_type(server_type: str, access: McpAccess) -> None:
    if server_type not in mcp_client.SERVER_TYPES or (server_type == "stdio" and not access.allow_stdio):
        raise InvalidArgument("Unsupported MCP server type.")


def _check_url(url: str) -> None:
    if not url.strip():
        raise InvalidArgument("Invalid url.")


class McpServerServicer(mcp_grpc.McpServerServiceServicer):
    def __init__(self, store: McpServerStore, access: McpAccess) -> None:
        self.store = store
        self.access = access

    async def _tools(self, server: McpServer, timeout_s: float) -> dict[str, Any]:
        try:
            tools = await mcp_client.list_tools(server, self.access, timeout_s=timeout_s or LIST_TIMEOUT_S)
        except McpError as exc:
            raise FailedPrecondition(str(exc)) from None
        return {t["name"]: t for t in tools if isinstance(t, dict) and "name" in t}

    async def ListMcpServers(self, request, context):
        servers = await self.store.list(_tenant(request), ids=list(request.ids), keywords=request.keywords,
                                        orderby=request.orderby or "create_time", desc=request.desc)
        return mcp_pb.ListMcpServersResponse(servers=[server_to_proto(s) for s in servers])

    async def GetMcpServer(self, request, context):
        return mcp_pb.GetMcpServerResponse(server=server_to_proto(await self.store.get(_tenant(request), request.mcp_id)))

    async def CreateMcpServer(self, request, context):
        tenant = _tenant(request)
        _check_type(request.server_type, self.access)
        check_name(request.name)
        _check_url(request.url)
        headers = json_object(request.headers_json, "headers")
        variables = json_object(request.variables_json, "variables")
        variables.pop("tools", None)
        if await self.store.name_taken(tenant, request.name):  # before contacting the server
            raise AlreadyExists("Duplicated MCP server name.")
        server = McpServer(request.name, request.url, request.server_type, headers, variables, request.timeout_s)
        variables["tools"] = await self._tools(server, request.timeout_s)
        record = await self.store.create(
            tenant, name=request.name, url=request.url, server_type=request.server_type,
            description=request.description, headers=headers, variables=variables, timeout_s=request.timeout_s)
        return mcp_pb.CreateMcpServerResponse(server=server_to_proto(record))

    async def UpdateMcpServer(self, request, context):
        tenant = _tenant(request)
        current = await self.store.get(tenant, request.mcp_id)

        def given(name: str) -> Any:
            return getattr(request, name) if request.HasField(name) else None

        server_type = given("server_type") or current.server_type
        _check_type(server_type, self.access)
        name = given("name") or current.name
        check_name(name)
        url = given("url") if given("url") is not None else current.url
        _check_url(url)
        headers = json_object(request.headers_json, "headers") if request.HasField("headers_json") else current.headers
        variables = (json_object(request.variables_json, "variables") if request.HasField("variables_json")
                     else dict(current.variables))
        variables.pop("tools", None)
        timeout_s = given("timeout_s") if request.HasField("timeout_s") else current.timeout_s
        server = McpServer(name, url, server_type, headers, variables, timeout_s, id=current.id)
        variables["tools"] = await self._tools(server, request.timeout_s if request.HasField("timeout_s") else 0.0)
        record = await self.store.update(
            tenant, request.mcp_id, name=name, url=url, server_type=server_type, description=given("description"),
            headers=headers, variables=variables, timeout_s=timeout_s)
        return mcp_pb.UpdateMcpServerResponse(server=server_to_proto(record))

    async def DeleteMcpServer(self, request, context):
        await self.store.delete(_tenant(request), request.mcp_id)
        return mcp_pb.DeleteMcpServerResponse()

    async def ImportMcpServers(self, request, context):
        tenant = _tenant(request)
        servers = json_object(request.servers_json, "mcpServers")
        if not servers:
            raise InvalidArgument("No MCP servers provided.")
        results = []
        for base, config in servers.items():
            results.append(await self._import_one(tenant, str(base), config, request.timeout_s))
        return mcp_pb.ImportMcpServersResponse(results=results)

    async def _import_one(self, tenant: str, base: str, config: Any, timeout_s: float) -> mcp_pb.ImportResult:
        def failed(message: str) -> mcp_pb.ImportResult:
            return mcp_pb.ImportResult(server=base, success=False, message=message)

        if not isinstance(config, dict) or not all(k in config for k in ("type", "url")):
            return failed("Missing required fields (type or url)")
        try:
            check_name(base)
            _check_type(str(config["type"]), self.access)
            _check_url(str(config["url"]))
        except InvalidArgument as exc:
            return failed(str(exc))
        name = await self.store.free_name(tenant, base)
        token = config.get("authorization_token")
        headers = {"Authorization": "Bearer ${authorization_token}"} if token else {}
        headers.update(config.get("headers") if isinstance(config.get("headers"), dict) else {})
        variables = {"authorization_token": token or ""}
        server = McpServer(name, str(config["url"]), str(config["type"]), headers, variables,
                           float(config.get("timeout") or 0))
        try:
            variables["tools"] = await self._tools(server, timeout_s)
        except FailedPrecondition as exc:
            return failed(str(exc))
        record = await self.store.create(tenant, name=name, url=server.url, server_type=server.server_type,
                                         description=str(config.get("description") or ""), headers=headers,
                                         variables=variables, timeout_s=server.timeout_s)
        result = mcp_pb.ImportResult(server=base, success=True, action="created", id=record.id, new_name=name)
        if name != base:
            result.message = f"Renamed from '{base}' to '{name}' avoid duplication"
        return result

    async def TestMcpServer(self, request, context):
        _tenant(request)
        if not request.url.strip():
            raise InvalidArgument("Invalid MCP url.")
        _check_type(request.server_type, self.access)
        server = McpServer("test", request.url, request.server_type, json_object(request.headers_json, "headers"),
                           json_object(request.variables_json, "variables"), request.timeout_s)
        try:
            tools = await mcp_client.list_tools(server, self.access, timeout_s=request.timeout_s or LIST_TIMEOUT_S)
        except McpError as exc:
            raise FailedPrecondition(f"Test MCP error: {exc}") from None
        return mcp_pb.TestMcpServerResponse(tools_json=json.dumps([{**t, "enabled": True} for t in tools],
                                                                  ensure_ascii=False))
