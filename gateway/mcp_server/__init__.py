"""Trellis as an MCP server: the tenant's agents as tools over Streamable HTTP (docs/agents-as-services.md)."""

from gateway.mcp_server.routes import add_routes
from gateway.mcp_server.server import build_server

__all__ = ["add_routes", "build_server"]
