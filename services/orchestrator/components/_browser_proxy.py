"""The Browser's only way out: an HTTP proxy on loopback that connects where the SSRF guard allows.

Chromium is started with this proxy for every destination, loopback included (`<-loopback>`), so it
never resolves a name or opens a connection by itself. For each request (`GET http://host/...`) or
tunnel (`CONNECT host:443`, HTTPS and WebSockets) the proxy asks `OutboundHttp.resolve` for the host's
checked addresses and connects to one of them: an address that is not public and not allowed
(TRELLIS_SSRF_ALLOWLIST) is refused with 403, a DNS answer that changes after an earlier check
included, and each redirect Chromium follows is a new request checked in turn. A plain HTTP request
is sent with `Connection: close`, so one connection carries one response; what comes back through a
connection is cut off past `max_bytes`. Every refusal is appended to `refused` as ((host, port), why): the
session tells the model about those its page asked for (Chromium's own background requests are refused too).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from yarl import URL

log = logging.getLogger(__name__)

HEAD_LIMIT = 64 * 1024  # bytes of request line and headers
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 20.0
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade"}


class GuardedProxy:
    def __init__(self, http: Any, max_bytes: int, limit_hint: str = "") -> None:
        self.http = http  # OutboundHttp
        self.max_bytes = max_bytes
        self.limit_hint = limit_hint  # the setting that raises max_bytes, named in the refusal
        self.refused: list[tuple[tuple[str, int] | None, str]] = []  # ((host, port), why)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> str:
        """Listen on a free loopback port; the proxy's URL."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        tasks, self._tasks = self._tasks, set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except Exception:  # noqa: BLE001 - one connection's failure ends that connection only
            log.warning("browser proxy: a connection failed", exc_info=True)
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        line, *fields = head.decode("latin-1").split("\r\n")
        method, target, version = (line.split(" ", 2) + ["", ""])[:3]
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            where, port = target, int(port_text) if port_text.isdigit() else 443
            host = host.strip("[]")
        else:
            url = URL(target)
            if url.scheme != "http" or not url.host:
                await _answer(writer, 400, f"the proxy takes absolute http URLs, not {target!r}")
                return
            host, port, where = url.host, url.port or 80, str(url)
        upstream = await self._connect(host, port, where, writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        key = (host.lower(), port)
        try:
            if method.upper() == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                kept = [f for f in fields if f and f.split(":", 1)[0].strip().lower() not in _HOP]
                up_writer.write(f"{method} {url.raw_path_qs or '/'} {version}\r\n".encode("latin-1")
                                + "".join(f"{f}\r\n" for f in kept).encode("latin-1") + b"Connection: close\r\n\r\n")
            forward = asyncio.ensure_future(_pipe(reader, up_writer, None))
            try:
                await self._pipe_back(up_reader, writer, where, key)  # the answer is complete when upstream closes
            finally:
                forward.cancel()
                await asyncio.gather(forward, return_exceptions=True)
        finally:
            up_writer.close()

    async def _connect(self, host: str, port: int, where: str, writer: asyncio.StreamWriter
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            addresses = await self.http.resolve(host, port)
        except Exception as exc:  # EgressBlocked, or a name that does not resolve
            self.refused.append(((host.lower(), port), f"{where}: {_first_line(exc)}"))
            await _answer(writer, 403, _first_line(exc))
            return None
        last: Exception | None = None
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                last = exc
        await _answer(writer, 502, f"cannot connect to {where}: {last}")
        return None

    async def _pipe_back(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str,
                         key: tuple[str, int]) -> None:
        if await _pipe(reader, writer, self.max_bytes):
            return
        hint = f" ({self.limit_hint})" if self.limit_hint else ""
        self.refused.append((key, f"{where}: the response is over the {self.max_bytes}-byte limit{hint}; "
                                  "it was cut off"))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int | None) -> bool:
    """Copy until EOF (True), or until more than `limit` bytes came (False); then end the writer's side."""
    total = 0
    try:
        while chunk := await reader.read(64 * 1024):
            total += len(chunk)
            if limit is not None and total > limit:
                writer.transport.abort()
                return False
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()
    except (ConnectionError, OSError):
        pass
    return True


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = text.encode("utf-8", "replace")
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1") + body)
    with contextlib.suppress(ConnectionError, OSError):
        await writer.drain()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
