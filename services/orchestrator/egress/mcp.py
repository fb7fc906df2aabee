"""Talking to MCP servers through the official `mcp` package: list a server's tools, call one.

A server (`McpServer`) is reached over streamable HTTP ("streamable-http"), SSE ("sse"), or, where the
deployment allows it (`EngineSettings.mcp_allow_stdio`, TRELLIS_MCP_ALLOW_STDIO=1), as a local command
speaking MCP on stdin/stdout ("stdio": `url` is the command line). Listing tools opens a session,
initializes it, does its one request and closes. Tool calls of a run share one session per server (and
headers): `run_sessions(run, spawn)` gives the run's `SessionPool`, whose sessions open on first use and
close when the run ends (each lives in a background task of the run, which the runner cancels at its end);
a session whose transport failed or went silent is dropped, so the next call opens a new one.

Headers are RAGFlow's: each header name and value may use `$name` / `${name}` from the server's
`variables` (string.Template), a header whose value is empty (or only "Bearer") is left out, and an
Agent's `custom_header` is added on top. The URL's host goes through the SSRF guard of
`http_client.OutboundHttp` (TRELLIS_SSRF_ALLOWLIST lets private addresses through), and every connection
the HTTP transports open goes to an address the guard checked then (_guarded_httpx.py).

Every failure is an `McpError` whose message names the server and says what went wrong (refused,
401, timed out...); a tool that answers with `isError` is an observation, not an error (RAGFlow:
"MCP server error: ...").
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import shlex
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from string import Template
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from services.orchestrator.egress.http import EgressBlocked, OutboundHttp

if TYPE_CHECKING:  # the `mcp` package (and httpx with it) is imported where it is first used: it is slow to
    import httpx  # import, and the orchestrator starts without talking to any MCP server
    from mcp import ClientSession, types

log = logging.getLogger(__name__)

SERVER_TYPES = ("sse", "streamable-http", "stdio")
SHARED_READ_S = 3600.0  # how long a run's shared session may sit idle between calls


class McpError(Exception):
    """An MCP server could not be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class McpServer:
    name: str
    url: str
    server_type: str
    headers: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 0.0  # 0: the deployment's default (EngineSettings.mcp_timeout_s)
    id: str = ""


@dataclass(frozen=True, slots=True)
class McpAccess:
    """What a deployment lets MCP calls do: the guarded HTTP client, the default time limit, stdio."""

    http: OutboundHttp
    default_timeout_s: float = 60.0
    allow_stdio: bool = False

    def timeout_of(self, server: McpServer, override: float | None = None) -> float:
        for t in (override, server.timeout_s):
            if t and t > 0:
                return float(t)
        return self.default_timeout_s


def resolved_headers(server: McpServer, custom_header: dict[str, Any] | None = None) -> dict[str, str]:
    variables = {k: str(v) for k, v in (server.variables or {}).items() if not isinstance(v, (dict, list))}
    headers: dict[str, str] = {}
    for h, v in (server.headers or {}).items():
        name = Template(str(h)).safe_substitute(variables).strip()
        value = Template(str(v)).safe_substitute(variables).strip()
        if name and value and value != "Bearer":
            headers[name] = value
    for h, v in (custom_header or {}).items():
        headers[str(h)] = str(v)
    return headers


async def list_tools(server: McpServer, access: McpAccess, *, timeout_s: float | None = None) -> list[dict[str, Any]]:
    """The server's tools as RAGFlow stores them: {"name", "description", "inputSchema", ...}."""
    limit = access.timeout_of(server, timeout_s)
    async with _guarded(server, "list its tools", limit):
        async with open_session(server, access, limit) as session:
            result = await session.list_tools()
    return [t.model_dump(mode="json", exclude_none=True) for t in result.tools]


async def call_tool(server: McpServer, tool: str, arguments: dict[str, Any], access: McpAccess, *,
                    custom_header: dict[str, Any] | None = None, sessions: SessionPool | None = None) -> str:
    """The tool's answer as the text the model reads; through `sessions` when given, else a session of its own."""
    from mcp.shared.exceptions import McpError as ProtocolError

    limit = access.timeout_of(server)
    read = timedelta(seconds=limit)
    async with _guarded(server, f"call tool {tool!r}", limit):
        if sessions is None:
            async with open_session(server, access, limit, custom_header) as session:
                result = await session.call_tool(tool, arguments, read_timeout_seconds=read)
        else:
            key, session = await sessions.session(server, access, limit, custom_header)
            try:
                result = await session.call_tool(tool, arguments, read_timeout_seconds=read)
            except ProtocolError as exc:
                if "Timed out" in exc.error.message:  # no answer: a server that went away looks the same
                    sessions.drop(key)
                raise  # else the server answered (a tool or protocol error): the session is fine
            except BaseException:
                sessions.drop(key)  # the transport failed, or the call was cut short
                raise
    return result_text(result)


class SessionPool:
    """The MCP sessions of one run: one per (server, headers, time limit), opened on first use.

    A session is entered and left by one task (the transports' anyio scopes require it), spawned with the
    run's `spawn`, so the run's end closes it; callers share it (MCP multiplexes requests by id).
    """

    def __init__(self, spawn: Callable[[Any], Any]) -> None:
        self._spawn = spawn
        self._open: dict[tuple[Any, ...], tuple[asyncio.Future[ClientSession], Any]] = {}
        self.opened = 0  # sessions opened so far

    async def session(self, server: McpServer, access: McpAccess, timeout_s: float,
                      custom_header: dict[str, Any] | None) -> tuple[tuple[Any, ...], ClientSession]:
        headers = resolved_headers(server, custom_header) if server.server_type != "stdio" else {}
        key = (server.id or server.name, server.url, server.server_type, tuple(sorted(headers.items())), timeout_s)
        if key not in self._open:
            ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
            ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen, even with no caller left
            self._open[key] = (ready, self._spawn(self._own(key, ready, server, access, timeout_s, custom_header)))
            self.opened += 1
        ready = self._open[key][0]
        try:
            return key, await asyncio.shield(ready)
        except asyncio.CancelledError:
            if not ready.done():  # this caller gave up (its time limit) while the session was opening
                self.drop(key)
            raise

    def drop(self, key: tuple[Any, ...]) -> None:
        """Close a session (its transport failed): the next call opens a new one."""
        entry = self._open.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    async def _own(self, key: tuple[Any, ...], ready: asyncio.Future[ClientSession], server: McpServer,
                   access: McpAccess, timeout_s: float, custom_header: dict[str, Any] | None) -> None:
        try:
            async with open_session(server, access, timeout_s, custom_header, shared=True) as session:
                ready.set_result(session)
                await asyncio.Event().wait()  # until the run ends (or `drop`) cancels this task
        except BaseException as exc:  # noqa: BLE001 - handed to the callers, who name the server
            if not ready.done():
                closed = isinstance(exc, asyncio.CancelledError)
                ready.set_exception(ConnectionError("the session was closed before it opened") if closed else exc)
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
        finally:
            if self._open.get(key, (None,))[0] is ready:
                del self._open[key]


_RUN_POOLS: dict[int, tuple[object, SessionPool]] = {}


def run_sessions(run: object, spawn: Callable[[Any], Any]) -> SessionPool | None:
    """The session pool of `run` (any object that lives as long as the run), or None when `spawn` is not a
    run's (asyncio.ensure_future: nothing would close the sessions, so each call opens its own)."""
    if spawn is asyncio.ensure_future:
        return None
    found = _RUN_POOLS.get(id(run))
    if found is not None and found[0] is run:
        return found[1]
    pool = SessionPool(spawn)
    _RUN_POOLS[id(run)] = (run, pool)

    async def forget() -> None:  # cancelled with the run's other background tasks
        try:
            await asyncio.Event().wait()
        finally:
            if _RUN_POOLS.get(id(run), (None,))[0] is run:
                del _RUN_POOLS[id(run)]

    spawn(forget())
    return pool


def result_text(result: types.CallToolResult) -> str:
    if result.isError:
        return f"MCP server error: {_content_text(result.content)}"
    if not result.content:
        if result.structuredContent is not None:
            return json.dumps(result.structuredContent, ensure_ascii=False)
        return "MCP server returned empty content."
    return _content_text(result.content)


def _content_text(content: list[Any]) -> str:
    from mcp import types

    parts = []
    for item in content:
        if isinstance(item, types.TextContent):
            parts.append(item.text)
        elif isinstance(item, types.EmbeddedResource) and isinstance(item.resource, types.TextResourceContents):
            parts.append(item.resource.text)
        else:
            parts.append(f"[{item.type} content]")
    return "\n".join(parts)


@asynccontextmanager
async def open_session(server: McpServer, access: McpAccess, timeout_s: float,
                       custom_header: dict[str, Any] | None = None, *,
                       shared: bool = False) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with `server`; `shared`: one that stays open between operations."""
    import httpx
    from mcp import ClientSession
    from mcp.client.sse import sse_client

    kind = server.server_type
    if kind not in SERVER_TYPES:
        raise McpError(f"MCP server {server.name!r}: unsupported server_type {kind!r} "
                       f"(supported: {', '.join(SERVER_TYPES)})")
    if kind == "stdio":
        streams = _stdio(server, access)
    else:
        await _check_url(server, access)
        headers = resolved_headers(server, custom_header)
        # One operation per session: no stream needs to stay quiet longer than the operation's own limit. A
        # shared session's streams wait between calls (each call still has its own limit).
        read_s = max(timeout_s + 1, SHARED_READ_S) if shared else timeout_s + 1
        if kind == "sse":
            streams = sse_client(server.url.strip(), headers=headers, timeout=timeout_s, sse_read_timeout=read_s,
                                 httpx_client_factory=functools.partial(_http_client, access.http))
        else:
            streams = _streamable(server.url.strip(),
                                  _http_client(access.http, headers=headers,
                                               timeout=httpx.Timeout(timeout_s, read=read_s)))
    async with streams as (read, write, *_):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=timeout_s)) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def _streamable(url: str, client: httpx.AsyncClient) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client

    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def _http_client(http: OutboundHttp, headers: dict[str, str] | None = None, timeout: httpx.Timeout | None = None,
                 auth: httpx.Auth | None = None) -> httpx.AsyncClient:
    import httpx

    from services.orchestrator.egress._guarded_httpx import guarded_transport

    # trust_env=False: a proxy from the environment must not route around the SSRF guard. Every connection
    # goes to an address the guard checked then (_guarded_httpx.py): a DNS rebind after _check_url gets nowhere.
    return httpx.AsyncClient(headers=headers, timeout=timeout, auth=auth, trust_env=False, follow_redirects=False,
                             transport=guarded_transport(http))


def _stdio(server: McpServer, access: McpAccess) -> Any:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    if not access.allow_stdio:
        raise McpError(f"MCP server {server.name!r}: stdio servers are disabled on this deployment "
                       "(TRELLIS_MCP_ALLOW_STDIO=1 allows them)")
    argv = shlex.split(server.url)
    if not argv:
        raise McpError(f"MCP server {server.name!r}: a stdio server's url is the command to run, and it is empty")
    env = server.variables.get("env") if isinstance(server.variables.get("env"), dict) else None
    return stdio_client(StdioServerParameters(command=argv[0], args=argv[1:],
                                              env={str(k): str(v) for k, v in env.items()} if env else None))


async def _check_url(server: McpServer, access: McpAccess) -> None:
    try:
        await access.http.check_url(server.url.strip())
    except EgressBlocked as exc:
        raise McpError(f"MCP server {server.name!r}: {exc}") from None
    except (ValueError, OSError) as exc:
        raise McpError(f"MCP server {server.name!r}: invalid url {server.url!r}: {exc}") from None


@asynccontextmanager
async def _guarded(server: McpServer, what: str, timeout_s: float) -> AsyncIterator[None]:
    """Turns whatever the transports raise (often inside exception groups) into one McpError."""
    where = f"MCP server {server.name!r} ({server.url})" if server.server_type != "stdio" else \
        f"MCP server {server.name!r}"
    try:
        # The session's and the HTTP client's own timeouts answer first; this bounds everything else.
        async with asyncio.timeout(timeout_s + 2):
            yield
    except McpError:
        raise
    except TimeoutError:
        raise McpError(f"{where}: could not {what}: no answer within {timeout_s:g} s") from None
    except (asyncio.CancelledError, GeneratorExit, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - exception groups from anyio task groups
        leaf = _leaf(exc)
        if isinstance(leaf, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
            raise  # a cancellation wrapped in a group is still ours to propagate
        raise McpError(f"{where}: could not {what}: {_describe(leaf, timeout_s)}") from None


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)), exc.exceptions[0])
    return exc


def _describe(exc: BaseException, timeout_s: float) -> str:
    import httpx
    from mcp.shared.exceptions import McpError as ProtocolError

    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        hint = " (check its headers: authorization token)" if status in (401, 403) else ""
        return f"it answered HTTP {status} {exc.response.reason_phrase}{hint}"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc or 'connection refused'})"
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, ProtocolError):
        text = exc.error.message
        if "Timed out" in text:
            return f"no answer within {timeout_s:g} s"
        return text
    return str(exc) or type(exc).__name__
