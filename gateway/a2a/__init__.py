"""Trellis as A2A agents: an agent card and a JSON-RPC endpoint per agent (docs/agents-as-services.md)."""

from gateway.a2a.routes import add_routes

__all__ = ["add_routes"]
