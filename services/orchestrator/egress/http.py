"""The one outbound HTTP client of the engine, with an SSRF guard.

Every HTTP request a component or a tool makes (Invoke, web tools) goes through
:class:`OutboundHttp` (docs/ARCHITECTURE.md, "Tenants and egress"). A canvas is user input, so its URLs
are too: without a guard, an Invoke node could read cloud metadata
(169.254.169.254), Redis, the other services of the cluster or anything on
loopback, and hand the answer back in the chat.

How the guard works:

* The URL host, if it is an IP literal, is checked before anything is sent
  (aiohttp never calls the resolver for IP literals).
* A host name is resolved by :class:`_GuardedResolver`, which refuses the whole
  answer if any address in it is not public. aiohttp then connects to exactly
  the addresses that were checked, so a DNS rebind between "check" and
  "connect" has nothing to slip through: the IP is pinned by construction.
* Redirects are never followed (a public URL could redirect to a private one),
  and the process environment's proxy settings are ignored (``trust_env=False``).
* With an explicit proxy, the proxy address itself goes through the same guard;
  the target host is resolved and checked here too, as a best effort, since the
  proxy does its own resolution.

The allow-list (:class:`EgressPolicy`) comes from the engine settings: IPs and
CIDR networks (``10.0.0.0/8``, ``127.0.0.1``, ``::1``), and host names
(``localhost``, ``*.svc.cluster.local``) whose addresses are then not checked.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

log = logging.getLogger(__name__)

__all__ = [
    "EgressBlocked",
    "EgressPolicy",
    "HttpResponse",
    "OutboundHttp",
    "ResponseTooLarge",
    "blocked_reason",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024


class EgressBlocked(Exception):
    """A request would reach an address that is not public and not allowed.

    Not an ``OSError`` on purpose: aiohttp would wrap an ``OSError`` raised by
    the resolver into a generic "cannot connect" error and lose the reason.
    """

    def __init__(self, url: str, host: str, address: str, reason: str) -> None:
        self.url = url
        self.host = host
        self.address = address
        self.reason = reason
        where = address if host == address else f"{host} ({address})"
        super().__init__(
            f"refused to reach {url}: {where} is a {reason} address; requests to "
            "private, loopback, link-local, multicast and reserved addresses are blocked "
            "unless the address or host is in the engine's SSRF allow-list"
        )


class ResponseTooLarge(Exception):
    """The response body is larger than the client's limit."""


def _as_ip(host: str) -> IPAddress | None:
    """The IP a host string denotes, including legacy IPv4 forms (``127.1``)."""
    text = host.strip("[]")
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        pass
    if text and all(c in "0123456789abcdefABCDEFxX." for c in text):
        try:
            # inet_aton accepts "127.1", "2130706433", "0x7f.1": forms that a
            # socket would map onto an address even though they do not look like one.
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def blocked_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be reached by default, or None when it is public."""
    if isinstance(ip, ipaddress.IPv6Address):
        # ::ffff:127.0.0.1 and friends reach the IPv4 address they embed.
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and any(ip in net for net in _NAT64):
            # NAT64 gateways translate 64:ff9b::a.b.c.d to a.b.c.d (e.g. the cloud metadata address).
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return blocked_reason(embedded)
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:  # before is_private, which also covers 240.0.0.0/4
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        # Carrier-grade NAT (100.64.0.0/10), benchmarking and documentation ranges...
        return "non-public"
    return None


@dataclass(frozen=True)
class EgressPolicy:
    """What the SSRF guard lets through beyond the public internet.

    Attributes:
        networks: addresses and networks that may be reached even if not public.
        hosts: host names (exact, or ``*.suffix``) whose addresses are not checked.
    """

    networks: tuple[IPNetwork, ...] = ()
    hosts: tuple[str, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> EgressPolicy:
        """Build a policy from allow-list strings: IPs, CIDRs or host names.

        Raises:
            ValueError: an entry is neither a network nor a plausible host name.
        """
        networks: list[IPNetwork] = []
        hosts: list[str] = []
        for raw in entries:
            entry = str(raw).strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            name = entry.lower().rstrip(".")
            body = name[2:] if name.startswith("*.") else name
            if not body or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-." for c in body):
                raise ValueError(f"SSRF allow-list entry {entry!r} is not an IP, a CIDR or a host name")
            hosts.append(name)
        return cls(networks=tuple(networks), hosts=tuple(hosts))

    def allows_host(self, host: str) -> bool:
        name = host.lower().rstrip(".")
        for pattern in self.hosts:
            if pattern.startswith("*."):
                if name.endswith(pattern[1:]):
                    return True
            elif name == pattern:
                return True
        return False

    def allows_ip(self, ip: IPAddress) -> bool:
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            if self.allows_ip(ip.ipv4_mapped):
                return True
        return any(ip.version == net.version and ip in net for net in self.networks)

    def check(self, url: str, host: str, ip: IPAddress) -> None:
        """Raise :class:`EgressBlocked` unless ``ip`` is public or allowed."""
        reason = blocked_reason(ip)
        if reason is None or self.allows_ip(ip) or self.allows_host(host):
            return
        raise EgressBlocked(url, host, str(ip), reason)


class _GuardedResolver(AbstractResolver):
    """Resolves through ``inner`` and refuses answers that contain a blocked address."""

    def __init__(self, policy: EgressPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner
        self._owns_inner = inner is None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self._inner is None:
            self._inner = ThreadedResolver()
        answers = await self._inner.resolve(host, port, family)
        if not self._policy.allows_host(host):
            for answer in answers:
                # Refuse the whole answer rather than filter it: a name that mixes
                # public and private addresses is a rebinding attempt more often than not.
                self._policy.check(host, host, ipaddress.ip_address(answer["host"].split("%", 1)[0]))
        return answers

    async def close(self) -> None:
        if self._inner is not None and self._owns_inner:
            await self._inner.close()


@dataclass(frozen=True)
class HttpResponse:
    """A fully read response."""

    status: int
    url: str
    headers: Mapping[str, str]
    body: bytes
    charset: str | None = None
    content_type: str = ""
    history: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        return self.body.decode(self.charset or "utf-8", errors="replace")


def _check_url(url: URL, text: str) -> None:
    if url.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {url.scheme!r} in {text!r}: only http and https")
    if not url.host:
        raise ValueError(f"URL {text!r} has no host")


class OutboundHttp:
    """HTTP client for components and tools: guarded, no redirects, bounded bodies.

    Use it as an async context manager (or call :meth:`aclose`) so the pooled
    session is closed; it is created lazily inside the running event loop.

    Args:
        policy: what may be reached besides public addresses.
        resolver: the DNS resolver to guard (tests inject one; default: the system's).
        max_response_bytes: larger bodies raise :class:`ResponseTooLarge`.
    """

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        *,
        resolver: AbstractResolver | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.policy = policy or EgressPolicy()
        self._resolver = _GuardedResolver(self.policy, resolver)
        self._max_bytes = max_response_bytes
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> OutboundHttp:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(resolver=self._resolver, use_dns_cache=False)
            # trust_env=False: an HTTP_PROXY in the environment must not route around the guard.
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def resolve(self, host: str, port: int = 0) -> list[str]:
        """The addresses ``host`` may be reached at, all checked; raises :class:`EgressBlocked`.

        For clients that connect by themselves (the MCP transports): connecting only to these, never
        to the name again, leaves a DNS rebind nothing to slip through."""
        ip = _as_ip(host)
        if ip is not None:
            self.policy.check(host, host, ip)
            return [str(ip)]
        answers = await self._resolver.resolve(host, port, socket.AF_UNSPEC)
        return list(dict.fromkeys(a["host"] for a in answers))

    async def check_url(self, url: str) -> None:
        """Resolve and check ``url``'s host now; raises :class:`EgressBlocked`."""
        parsed = URL(url)
        _check_url(parsed, url)
        host = parsed.raw_host or ""
        ip = _as_ip(host)
        if ip is not None:
            self.policy.check(url, host, ip)
            return
        try:
            await self._resolver.resolve(host, parsed.port or 0, socket.AF_UNSPEC)
        except EgressBlocked as exc:
            raise EgressBlocked(url, exc.host, exc.address, exc.reason) from None

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        data: Mapping[str, Any] | bytes | None = None,
        headers: Mapping[str, str] | None = None,
        proxy: str | None = None,
        timeout_s: float = 60.0,
    ) -> HttpResponse:
        """Send one request and read the whole body.

        Raises:
            EgressBlocked: the target (or proxy) is not public and not allowed.
            ResponseTooLarge: the body exceeds ``max_response_bytes``.
            ValueError: the URL is not http(s) or has no host.
            asyncio.TimeoutError: no complete answer within ``timeout_s``.
            aiohttp.ClientError: connection or protocol failure.
        """
        parsed = URL(url)
        _check_url(parsed, url)
        host = parsed.raw_host or ""
        literal = _as_ip(host)
        if literal is not None:
            self.policy.check(url, host, literal)
        if proxy:
            proxy_url = URL(proxy)
            _check_url(proxy_url, proxy)
            proxy_ip = _as_ip(proxy_url.raw_host or "")
            if proxy_ip is not None:
                self.policy.check(proxy, proxy_url.raw_host or "", proxy_ip)
            if literal is None:
                # The proxy resolves the target itself; check what we can see from here.
                await self.check_url(url)
        session = self._get_session()
        try:
            async with session.request(
                method.upper(),
                parsed,
                params=dict(params) if params else None,
                json=json,
                data=data,
                headers=dict(headers) if headers else None,
                proxy=proxy or None,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                body = await self._read_body(resp, url)
                return HttpResponse(
                    status=resp.status,
                    url=str(resp.url),
                    headers={k: v for k, v in resp.headers.items()},
                    body=body,
                    charset=resp.charset,
                    content_type=resp.content_type,
                )
        except EgressBlocked as exc:
            # Raised by the resolver with the bare host as "url": name the real URL.
            raise EgressBlocked(url, exc.host, exc.address, exc.reason) from None

    async def _read_body(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        if resp.content_length is not None and resp.content_length > self._max_bytes:
            raise ResponseTooLarge(
                f"response from {url} is {resp.content_length} bytes, over the {self._max_bytes}-byte limit"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > self._max_bytes:
                raise ResponseTooLarge(f"response from {url} is over the {self._max_bytes}-byte limit")
            chunks.append(chunk)
        return b"".join(chunks)

