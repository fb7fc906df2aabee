"""How many lanes a turn client's target has (services/common/turns/lanes.py)."""

from __future__ import annotations

import asyncio

import pytest

from services.common.turns.lanes import MAX_LANES, listed_replicas, resolved_replicas


@pytest.mark.parametrize(("target", "lanes"), [
    ("ipv4:127.0.0.1:50051,127.0.0.1:51051", 2),  # trellis up's replicas
    ("ipv4:127.0.0.1:50051", 1),
    ("ipv6:[::1]:50051,[::1]:51051,[::1]:52051", 3),
    ("127.0.0.1:50051", 1),
    ("[::1]:50051", 1),
    ("unix:/run/trellis.sock", 1),  # a scheme of its own: one address
    ("orchestrator:50051", None),  # a name: resolved, as round_robin resolves it
    ("dns:///orchestrator.trellis.svc:50051", None),
    ("ipv4:" + ",".join(f"10.0.0.{i}:50051" for i in range(100)), MAX_LANES),
])
def test_the_lanes_of_a_target_are_the_replicas_it_lists(target, lanes):
    assert listed_replicas(target) == lanes


async def test_a_name_has_as_many_lanes_as_it_resolves_to_and_one_when_it_does_not_resolve():
    assert await resolved_replicas("localhost:50051") == len(
        {info[4][:2] for info in await asyncio.get_running_loop().getaddrinfo("localhost", 50051, type=1)})
    assert await resolved_replicas("no-such-host.invalid:50051") == 1
    assert await resolved_replicas("unix:/run/trellis.sock") == 1
