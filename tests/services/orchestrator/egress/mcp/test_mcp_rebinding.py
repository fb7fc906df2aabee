"""The MCP transports connect only to addresses the SSRF guard checked: a DNS answer that changes between the
URL check and the connection (a rebind) does not reach the private address. DNS is a stand-in resolver
given to OutboundHttp, not the real DNS."""
from __future__ import annotations

import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from services.orchestrator.egress import mcp as mc
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from tests.support.mcp_server import serving

TRANSPORTS = [("streamable-http", "/mcp"), ("sse", "/sse")]
PUBLIC = "93.184.216.34"


class StandInDns(AbstractResolver):
    """Answers `first` to the first lookup and `then` to every later one; counts the lookups."""

    def __init__(self, first: str, then: str) -> None:
        self.first, self.then = first, then
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        self.lookups.append(host)
        ip = self.first if len(self.lookups) == 1 else self.then
        return [{"hostname": host, "host": ip, "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("kind, path", TRANSPORTS, ids=["streamable-http", "sse"])
async def test_a_name_that_turns_private_after_the_check_does_not_reach_the_private_server(kind, path):
    dns = StandInDns(first=PUBLIC, then="127.0.0.1")
    async with OutboundHttp(EgressPolicy(), resolver=dns) as http, serving() as base:
        # "localhost": what the system would answer too, so a client resolving by itself would get through
        server = mc.McpServer("rebind", base.replace("127.0.0.1", "localhost") + path, kind)
        with pytest.raises(mc.McpError) as err:
            await mc.list_tools(server, mc.McpAccess(http, default_timeout_s=5.0))
    assert "localhost (127.0.0.1) is a loopback address" in str(err.value)
    assert str(err.value).startswith(f"MCP server 'rebind' ({server.url}): could not list its tools: refused to reach")
    assert len(dns.lookups) == 2  # the URL check, then the first connection, which was refused before it was made


@pytest.mark.parametrize("kind, path", TRANSPORTS, ids=["streamable-http", "sse"])
async def test_the_transport_asks_the_guard_for_every_connection(kind, path):
    # The test server answers only to the Host names localhost and 127.0.0.1 (FastMCP's own rebinding check)
    dns = StandInDns(first="127.0.0.1", then="127.0.0.1")
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"]), resolver=dns) as http, serving() as base:
        server = mc.McpServer("named", base.replace("127.0.0.1", "localhost") + path, kind)
        access = mc.McpAccess(http, default_timeout_s=5.0)
        assert await mc.call_tool(server, "add", {"a": 2, "b": 3}, access) == "5"
    assert set(dns.lookups) == {"localhost"}
    assert len(dns.lookups) >= 2  # the URL check, then each connection the transport opened
