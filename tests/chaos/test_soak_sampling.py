"""What the soak says about a process's open sockets (chaos/sampling.py): each established TCP connection is
named by what is at its other end, so an `fds` gate row that grew says whether it was a pool to Redis, a peer
service or callers still connected."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import psutil

from chaos.gates import baseline_gate
from chaos.sampling import ProcessSample, _peers
from chaos.soak import _rss_by_minute


async def test_connections_are_named_by_their_far_end():
    async def hold(reader, writer):
        await reader.read()
        writer.close()

    redis_like = await asyncio.start_server(hold, "127.0.0.1", 0)
    own = await asyncio.start_server(hold, "127.0.0.1", 0)
    redis_port = redis_like.sockets[0].getsockname()[1]
    own_port = own.sockets[0].getsockname()[1]
    names = {redis_port: "redis", own_port: "orchestrator"}
    opened = [await asyncio.open_connection("127.0.0.1", redis_port) for _ in range(2)]
    opened.append(await asyncio.open_connection("127.0.0.1", own_port))
    try:
        peers = _peers(psutil.Process(), names)
        # this process holds both ends: 2 to "redis", 1 to "orchestrator", and the 3 it accepted, on named ports
        assert peers["redis"] == 2
        assert peers["orchestrator"] == 1 and peers["client"] == 1 + 2  # accepted on a named port: a caller
    finally:
        for _, writer in opened:
            writer.close()
        redis_like.close()
        own.close()


def test_the_fds_gate_reports_the_connections_of_each_quiet_window():
    def sample(t: float, fds: int, redis: int) -> ProcessSample:
        return ProcessSample(t, "orchestrator", 7, 100.0, fds, 5, {"redis": redis})

    samples = [sample(0.0, 30, 6)]
    quiet = [[sample(200.0, 30, 6)], [sample(400.0, 35, 11)]]
    gate = baseline_gate("fds", quiet, samples)
    assert gate.passed is False
    assert gate.rows[0]["connections"] == [{"redis": 6}, {"redis": 11}]
    assert "connections" not in baseline_gate("tasks", quiet, samples).rows[0]


def test_the_report_keeps_each_process_rss_about_once_a_minute():
    samples = [ProcessSample(t, "gateway", 9, 100.0 + t / 60, 20, 5) for t in range(0, 300, 10)]
    samples.append(ProcessSample(120.0, "sandbox", 11, 60.0, 20, 5))
    report = _rss_by_minute(SimpleNamespace(samples=samples, t0=0.0))
    assert [m for m, _ in report["gateway 9"]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert report["gateway 9"][2] == [2.0, 102.0]
    assert report["sandbox 11"] == [[2.0, 60.0]]
