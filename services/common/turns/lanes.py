"""How many replicas a channel's target reaches: the lanes of a TurnClient (services/common/turns/client.py).

Why a count of our own: turns spread over replicas only if the client keeps one stream per replica, and grpc's
Python API does not say how many addresses a channel's resolver produced (its round_robin knows; only channelz,
a debugging service of a package of its own, would show them). A fixed number of lanes is no substitute:
round_robin puts consecutive streams on consecutive replicas, so more replicas than lanes leaves some without
runs until the lanes rotate, and a count that is not a multiple of the replicas loads some more than others. So
a list (`ipv4:a,b`, what `trellis up` gives) is counted once, and a name (a headless Service lists each pod) is
resolved as the channel's own `dns` resolver resolves it, again every time the lanes rotate (docs/transport.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

MAX_LANES = 64


def listed_replicas(target: str) -> int | None:
    """How many replicas a channel's target lists: an `ipv4:`/`ipv6:` list, or one literal address; None for a
    host name, which `resolved_replicas` resolves."""
    if target.startswith(("ipv4:", "ipv6:")):
        return max(1, min(MAX_LANES, len(target.split(":", 1)[1].split(","))))
    host, _ = _host_port(target)
    if host is None:
        return 1  # a scheme this does not know: one lane, as for one address
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return 1


async def resolved_replicas(target: str) -> int:
    """How many replicas a host name reaches, as round_robin spreads over them: the addresses it resolves to
    (a headless Service lists each pod); 1 when it cannot be resolved now (at most `MAX_LANES`)."""
    host, port = _host_port(target)
    if host is None:
        return 1
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return 1
    return max(1, min(MAX_LANES, len({info[4][:2] for info in infos})))


def _host_port(target: str) -> tuple[str | None, int]:
    """The host and port of `host:port` or `dns:///host:port`; (None, 0) for anything else."""
    if "://" in target:
        scheme, _, target = target.partition("://")
        if scheme != "dns":
            return None, 0
        target = target.lstrip("/")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return None, 0
    return host.strip("[]"), int(port)
