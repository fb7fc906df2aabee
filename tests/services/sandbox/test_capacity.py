"""The bounded pool and queue through gRPC: a full queue answers RESOURCE_EXHAUSTED at once; a cancelled
call frees its worker and takes its sandbox down."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from services.sandbox.config import SandboxConfig
from services.sandbox.server import SandboxServicer
from tests.support.sandbox import Client, host_processes_with
from tests.support.waiting import eventually

SLOW = "import time, sys\ndef main(marker=''):\n    print('started', flush=True)\n    time.sleep(30)\n"


@pytest.fixture
def sandbox_cfg() -> SandboxConfig:
    from tests.support.sandbox import TEST_DEFAULTS

    return SandboxConfig.for_tests(workers=1, queue=1, defaults=TEST_DEFAULTS)


async def test_full_queue_is_refused_at_once_and_cancel_frees_the_worker(client: Client, servicer: SandboxServicer):
    pool = servicer.executor.pool  # type: ignore[union-attr]
    running = client.call(SLOW)
    first = await running.read()
    assert first.output.data.startswith(b"started")  # the only worker is busy
    queued = client.call(SLOW)
    queued_task = asyncio.ensure_future(queued.read())
    await eventually(lambda: pool.waiting == 1, what="the second call queued")

    refused = client.call(SLOW)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(refused.read(), 5)  # under the 8 s the running call may take (TEST_DEFAULTS)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "busy" in err.value.details() and "queued" in err.value.details()
    assert pool.busy == 1 and pool.waiting == 1  # the refused call took nothing

    running.cancel()
    started = await asyncio.wait_for(queued_task, 30)  # the queued call gets the freed worker
    assert started.output.data.startswith(b"started")
    queued.cancel()
    await eventually(lambda: pool.busy == 0 and pool.waiting == 0, what="the pool idle")
    await client.assert_serving()


async def test_cancelled_call_kills_its_sandbox(client: Client, servicer: SandboxServicer):
    marker = f"cancel-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys, time\n"
        "def main(marker):\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', marker])\n"
        "    print('started', flush=True)\n"
        "    time.sleep(60)\n"
    )
    call = client.call(code, args={"marker": marker})
    assert (await call.read()).output.data.startswith(b"started")
    await eventually(lambda: host_processes_with(marker=marker), what="the child running")
    call.cancel()
    pool = servicer.executor.pool  # type: ignore[union-attr]
    await eventually(lambda: pool.busy == 0, what="the worker freed")
    await eventually(lambda: not host_processes_with(marker=marker), what="the sandbox gone")
