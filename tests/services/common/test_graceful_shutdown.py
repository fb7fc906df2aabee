"""A real service process: SERVING after start, NOT_SERVING while it drains on SIGTERM, then a clean exit."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import grpc

from tests.support.net import free_port, health_status


async def _wait_status(channel: grpc.aio.Channel, want: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    last = ""
    while asyncio.get_running_loop().time() < deadline:
        try:
            last = await health_status(channel)
            if last == want:
                return
        except grpc.aio.AioRpcError as exc:
            last = exc.code().name
        await asyncio.sleep(0.05)
    raise AssertionError(f"health never became {want} (last: {last})")


async def test_sigterm_drains_then_exits_cleanly(tmp_path):
    port = free_port()
    env = {**os.environ, "TRELLIS_RETRIEVAL_PORT": str(port), "TRELLIS_RETRIEVAL_METRICS_PORT": "0", "TRELLIS_DRAIN_S": "1.5"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.retrieval", env=env, stderr=asyncio.subprocess.PIPE
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        await _wait_status(channel, "SERVING")
        proc.send_signal(signal.SIGTERM)
        await _wait_status(channel, "NOT_SERVING", timeout_s=1.4)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        logs = (await proc.stderr.read()).decode()
        assert "retrieval stopped" in logs
    finally:
        await channel.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
