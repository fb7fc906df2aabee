"""Small helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import errno
import random
import socket

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc


# Below Linux's ephemeral range (32768-60999): a port handed out here is not also the local port that some
# outgoing connection (of this suite or of the processes a test starts) takes before the server binds it.
_PORTS = (20000, 32767)
_given: set[int] = set()
_random = random.Random()  # its own: the global one is seeded by tests and watched by Hypothesis


def free_port(*, with_offset: int = 0) -> int:
    """A port no other test of this run got and nothing listens on now, on any address. With `with_offset`, the
    port that much higher is free and below the ephemeral range too (a Redis Cluster node's bus is port + 10000)."""
    low, high = _PORTS
    while True:
        port = _random.randint(low, high - with_offset)
        if port not in _given and _bindable(port) and (not with_offset or _bindable(port + with_offset)):
            _given.add(port)
            return port


def _bindable(port: int) -> bool:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family) as s:
                s.bind((host, port))
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno == errno.EAFNOSUPPORT:  # no IPv6 here
                continue
            return False
    return True


async def health_status(channel: grpc.aio.Channel, service: str = "") -> str:
    resp = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


async def reflected_services(channel: grpc.aio.Channel) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
    async for resp in call:
        return {s.name for s in resp.list_services_response.service}
    return set()
