"""The MCP client against a real FastMCP server (tests/support/mcp_server.py) over streamable HTTP, SSE and stdio."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from services.orchestrator.egress import mcp as mc
from services.orchestrator.egress.http import EgressPolicy, OutboundHttp
from tests.support.mcp_server import serving
from tests.support.net import free_port
from tests.support.waiting import eventually

TRANSPORTS = [("streamable-http", "/mcp"), ("sse", "/sse")]
SERVER_SCRIPT = Path(__file__).resolve().parents[4] / "support" / "mcp_server.py"


@pytest.fixture
async def access():
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http:
        yield mc.McpAccess(http, default_timeout_s=5.0)


@pytest.mark.parametrize("kind, path", TRANSPORTS, ids=["streamable-http", "sse"])
async def test_lists_and_calls_tools_sending_the_auth_header_from_variables(access, kind, path):
    async with serving(token="tok-123") as base:
        server = mc.McpServer("shop", base + path, kind, headers={"Authorization": "Bearer ${authorization_token}"},
                              variables={"authorization_token": "tok-123"})
        tools = await mc.list_tools(server, access)
        by_name = {t["name"]: t for t in tools}
        assert set(by_name) == {"add", "shout", "nap", "broken", "whoami"}
        assert by_name["add"]["description"] == "Adds two integers."
        assert by_name["add"]["inputSchema"]["required"] == ["a", "b"]
        assert await mc.call_tool(server, "add", {"a": 20, "b": 22}, access) == "42"
        assert await mc.call_tool(server, "whoami", {}, access) == "Bearer tok-123"
        custom = await mc.call_tool(server, "whoami", {}, access, custom_header={"Authorization": "Bearer tok-123"})
        assert custom == "Bearer tok-123"


@pytest.mark.parametrize("kind, path", TRANSPORTS, ids=["streamable-http", "sse"])
async def test_a_wrong_token_is_a_clear_401(access, kind, path):
    async with serving(token="tok-123") as base:
        server = mc.McpServer("shop", base + path, kind, headers={"Authorization": "Bearer nope"})
        with pytest.raises(mc.McpError) as err:
            await mc.list_tools(server, access)
    assert str(err.value) == (f"MCP server 'shop' ({base}{path}): could not list its tools: it answered HTTP 401 "
                              "Unauthorized (check its headers: authorization token)")


@pytest.mark.parametrize("kind, path", TRANSPORTS, ids=["streamable-http", "sse"])
async def test_a_server_that_is_down_is_a_clear_error(access, kind, path):
    url = f"http://127.0.0.1:{free_port()}{path}"
    with pytest.raises(mc.McpError, match=r"MCP server 'gone' \(.*\): could not call tool 'add': cannot connect"):
        await mc.call_tool(mc.McpServer("gone", url, kind), "add", {"a": 1, "b": 2}, access)


@pytest.mark.parametrize("kind, path", TRANSPORTS, ids=["streamable-http", "sse"])
async def test_a_call_past_the_servers_timeout_stops_there(access, kind, path):
    async with serving() as base:
        server = mc.McpServer("slow", base + path, kind, timeout_s=0.5)
        with pytest.raises(mc.McpError, match=r"could not call tool 'nap': no answer within 0.5 s"):
            await mc.call_tool(server, "nap", {"seconds": 30}, access)
        # the deployment default applies when the server sets none, and a quick call is unaffected
        assert await mc.call_tool(mc.McpServer("slow", base + path, kind), "nap", {"seconds": 0.01}, access) == "slept 0.01s"


async def test_a_tool_error_is_an_answer_not_a_failure(access):
    async with serving() as base:
        text = await mc.call_tool(mc.McpServer("s", base + "/mcp", "streamable-http"), "broken", {}, access)
    assert text.startswith("MCP server error: ") and "the disk is on fire" in text


async def test_the_ssrf_guard_refuses_private_servers_unless_allowed():
    async with OutboundHttp(EgressPolicy()) as http, serving() as base:
        server = mc.McpServer("local", base + "/mcp", "streamable-http")
        with pytest.raises(mc.McpError, match=r"MCP server 'local': .*loopback"):
            await mc.list_tools(server, mc.McpAccess(http))


def test_header_variables_and_empty_headers_follow_ragflow():
    server = mc.McpServer("s", "http://x", "sse", headers={"Authorization": "Bearer $token", "X-Team": "${team}",
                                                           "X-Empty": "", "X-Bare": "Bearer"},
                          variables={"token": "t1", "team": "blue", "tools": {"a": {}}})
    assert mc.resolved_headers(server, {"X-Run": "7"}) == {"Authorization": "Bearer t1", "X-Team": "blue",
                                                           "X-Run": "7"}


async def test_stdio_servers_are_off_unless_the_deployment_allows_them(access):
    server = mc.McpServer("local", f"{sys.executable} {SERVER_SCRIPT}", "stdio")
    with pytest.raises(mc.McpError, match=r"stdio servers are disabled on this deployment \(TRELLIS_MCP_ALLOW_STDIO=1"):
        await mc.list_tools(server, access)
    allowed = mc.McpAccess(access.http, default_timeout_s=20.0, allow_stdio=True)
    assert await mc.call_tool(server, "shout", {"text": "hi"}, allowed) == "HI!"


async def test_an_unknown_server_type_is_named(access):
    with pytest.raises(mc.McpError, match=r"unsupported server_type 'websocket'"):
        await mc.list_tools(mc.McpServer("s", "ws://x", "websocket"), access)


@pytest.mark.parametrize("kind, path", TRANSPORTS, ids=["streamable-http", "sse"])
async def test_cancelling_a_call_cancels_it_rather_than_reporting_an_error(access, kind, path):
    counts: dict[str, int] = {}
    async with serving(counts=counts) as base:
        server = mc.McpServer("slow", base + path, kind, timeout_s=60)
        call = asyncio.create_task(mc.call_tool(server, "nap", {"seconds": 60}, access))
        await eventually(lambda: counts.get("tools/call"), what="the call at the server")  # under way there
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(call, 30)  # ends long before the server's 60 s nap


async def test_a_shared_session_whose_server_went_away_is_dropped_and_the_next_call_opens_a_new_one(access):
    tasks: list[asyncio.Task] = []
    pool = mc.SessionPool(lambda coro: tasks.append(asyncio.ensure_future(coro)) or tasks[-1])  # a run's spawn
    before, after = {}, {}
    port = free_port()
    try:
        async with serving(counts=before, port=port) as base:
            server = mc.McpServer("calc", base + "/mcp", "streamable-http", timeout_s=2.0)
            assert await mc.call_tool(server, "add", {"a": 1, "b": 2}, access, sessions=pool) == "3"
            assert await mc.call_tool(server, "add", {"a": 2, "b": 2}, access, sessions=pool) == "4"
        with pytest.raises(mc.McpError, match=r"^MCP server 'calc' .*could not call tool 'add'") as gone:
            await mc.call_tool(server, "add", {"a": 1, "b": 1}, access, sessions=pool)  # the server is gone
        assert "no answer within 2 s" in str(gone.value)  # the transport does not report the refused connection
        async with serving(counts=after, port=port):  # back, at the same address
            assert await mc.call_tool(server, "add", {"a": 3, "b": 4}, access, sessions=pool) == "7"
            assert await mc.call_tool(server, "add", {"a": 4, "b": 4}, access, sessions=pool) == "8"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert before["initialize"] == 1 and after["initialize"] == 1  # one session each side of the restart
    assert before["tools/call"] == 2 and after["tools/call"] == 2 and pool.opened == 2
