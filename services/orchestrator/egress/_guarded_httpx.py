"""An httpx transport that connects only to addresses the SSRF guard (`egress/http.py`'s `OutboundHttp`) checked.

The MCP and A2A transports (egress/mcp.py, egress/a2a.py) are httpx clients, and httpx resolves a host name by
itself when it connects. Checking the URL first and letting httpx resolve again afterwards would let a DNS answer that
changes in between (a rebind) reach a private address. Here every new connection, the first one and
any later one, asks `OutboundHttp.resolve` for the checked addresses of its host and connects to one of
them; TLS still verifies the certificate against the host name. Redirects are not followed (the clients
are made with follow_redirects=False); a request to another host is checked when it connects.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from services.orchestrator.egress.http import OutboundHttp

__all__ = ["guarded_transport"]


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, http: OutboundHttp) -> None:
        self._http = http
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        last: Exception | None = None
        for address in await self._http.resolve(host, port):  # EgressBlocked when one is not allowed
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"{host} has no address")

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a Unix socket is not reachable through the SSRF guard")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_transport(http: OutboundHttp) -> httpx.AsyncHTTPTransport:
    """httpx's own transport with its connection pool built on the guarded network backend."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    # httpx takes no network backend; the pool it made (and never used) is replaced by the same kind of
    # pool with the guard's backend and the same TLS settings (trust_env=False: no SSL_CERT_* either).
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)  # httpx's
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=_GuardedBackend(http))
    return transport
