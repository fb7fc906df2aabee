"""Start-up: isolation is checked before serving; without it the service refuses, unless dev mode allows it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc

from services.common.errors import FailedPrecondition
from services.common.testing import start_server
from services.sandbox.config import SandboxConfig
from services.sandbox.app import create_executor
from services.sandbox.server import SERVICE_NAME, SandboxServicer
from tests.support.net import health_status, reflected_services
from tests.support.sandbox import JS, TEST_DEFAULTS, Client

ROOT = Path(__file__).resolve().parents[3]


async def test_serves_health_and_reflection(servicer: SandboxServicer):
    server, port = await start_server([servicer.binding()], service="sandbox")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            assert await health_status(ch, SERVICE_NAME) == "SERVING"
            assert SERVICE_NAME in await reflected_services(ch)
    finally:
        await server.stop(None)


async def test_refuses_to_start_without_bwrap():
    with pytest.raises(FailedPrecondition) as err:
        await create_executor(SandboxConfig.for_tests(bwrap="/nonexistent/bwrap"))
    assert "isolation is unavailable" in err.value.message and "TRELLIS_SANDBOX_ALLOW_UNSANDBOXED" in err.value.message


async def test_refuses_to_start_when_the_sandbox_does_not_work(tmp_path: Path):
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(FailedPrecondition) as err:
        await create_executor(SandboxConfig.for_tests(bwrap=str(broken)))
    assert "does not start" in err.value.message and "No permissions to create new namespace" in err.value.message


async def test_dev_mode_runs_unsandboxed_but_keeps_the_limits():
    cfg = SandboxConfig.for_tests(bwrap="/nonexistent/bwrap", allow_unsandboxed=True, defaults=TEST_DEFAULTS)
    svc = SandboxServicer(cfg, await create_executor(cfg))
    server, port = await start_server([svc.binding()], service="sandbox")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            client = Client(sb_grpc.SandboxServiceStub(ch))
            run = await client.run("def main(x):\n    print('hi')\n    return x + 1", args={"x": 1})
            assert run.value == 2 and run.stdout == "hi\n" and run.result.isolated is False
            run = await client.run("import time\ndef main():\n    time.sleep(30)", wall_time_ms=800)
            assert run.kind == "ERROR_KIND_TIMEOUT"
            run = await client.run("function main() { for (;;) console.log('y'.repeat(1000)) }", JS, max_output_bytes=10_000)
            assert run.kind == "ERROR_KIND_OUTPUT_LIMIT" and len(run.stdout) == 10_000
    finally:
        await server.stop(None)


def test_entrypoint_exits_with_a_clear_message_without_isolation():
    env = {**os.environ, "TRELLIS_SANDBOX_BWRAP": "/nonexistent/bwrap", "TRELLIS_SANDBOX_PORT": "0", "TRELLIS_SANDBOX_METRICS_PORT": "0"}
    env.pop("TRELLIS_SANDBOX_ALLOW_UNSANDBOXED", None)
    proc = subprocess.run(
        [sys.executable, "-m", "services.sandbox"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "isolation is unavailable" in proc.stderr and "Traceback" not in proc.stderr
