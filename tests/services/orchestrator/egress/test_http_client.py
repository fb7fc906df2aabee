from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from services.orchestrator.egress.http import (
    EgressBlocked,
    EgressPolicy,
    OutboundHttp,
    ResponseTooLarge,
    blocked_reason,
)


@pytest.mark.parametrize(("ip", "reason"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.0.0.1", "private"), ("172.16.5.4", "private"),
    ("192.168.0.1", "private"), ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("224.0.0.251", "multicast"), ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("240.0.0.1", "reserved"), ("100.64.0.1", "non-public"), ("::ffff:10.0.0.1", "private"),
    ("fc00::1", "private"), ("8.8.8.8", None), ("2606:4700:4700::1111", None),
    ("64:ff9b::a9fe:a9fe", "link-local"), ("64:ff9b::a00:1", "private"), ("64:ff9b::808:808", None),
])
def test_blocked_reason(ip: str, reason: str | None) -> None:
    assert blocked_reason(ipaddress.ip_address(ip)) == reason


def test_policy_entries() -> None:
    policy = EgressPolicy.from_entries(["10.0.0.0/8", " ::1 ", "*.svc.cluster.local", "Redis.Local.", ""])
    assert policy.allows_ip(ipaddress.ip_address("10.9.9.9"))
    assert policy.allows_ip(ipaddress.ip_address("::ffff:10.0.0.2"))
    assert not policy.allows_ip(ipaddress.ip_address("11.0.0.1"))
    assert policy.allows_host("api.ns.svc.cluster.local") and policy.allows_host("redis.local")
    assert not policy.allows_host("svc.cluster.local.evil.com")
    with pytest.raises(ValueError, match="'http://x' is not an IP, a CIDR or a host name"):
        EgressPolicy.from_entries(["http://x"])


@pytest.fixture
async def big_server() -> AsyncIterator[int]:
    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # chunked: no Content-Length to trust
        await resp.prepare(request)
        for _ in range(64):
            await resp.write(b"x" * 1024)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/big", big)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await runner.cleanup()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1", "2130706433", "0x7f.0.0.1", "localhost"])
async def test_every_spelling_of_loopback_is_refused(big_server: int, host: str) -> None:
    async with OutboundHttp() as http:
        with pytest.raises((EgressBlocked, ValueError)) as err:
            await http.request("GET", f"http://{host}:{big_server}/big")
    assert "loopback" in str(err.value) or "canonical" in str(err.value)


async def test_response_size_is_bounded(big_server: int) -> None:
    policy = EgressPolicy.from_entries(["127.0.0.1"])
    async with OutboundHttp(policy, max_response_bytes=16 * 1024) as http:
        with pytest.raises(ResponseTooLarge, match="over the 16384-byte limit"):
            await http.request("GET", f"http://127.0.0.1:{big_server}/big")
    async with OutboundHttp(policy) as http:
        resp = await http.request("GET", f"http://127.0.0.1:{big_server}/big")
    assert resp.status == 200 and len(resp.body) == 64 * 1024


async def test_environment_proxy_is_ignored(big_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # An HTTP_PROXY pointing nowhere would fail the request if it were honoured.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    async with OutboundHttp(EgressPolicy.from_entries(["127.0.0.1"])) as http:
        resp = await http.request("GET", f"http://127.0.0.1:{big_server}/big")
    assert resp.status == 200
