"""The retry rule (services/clients/_rpc.py) against real service processes killed -9 and started again on the same
port, as the chaos suite's faults do (`make chaos`) and `trellis up` restarts them: the orchestrator's clients
see no failure for what never reached the peer, nor for an LLM turn that had not streamed yet."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import AsyncIterator

import grpc
import pytest

from services.clients import LlmClient, RetryPolicy, SandboxClient
from services.clients.llm_models import Message
from tests.support.fake_openai import FakeOpenAI, Reply, text_chunks
from tests.support.net import free_port, health_status
from tests.services.clients.away import away_for_a_restart
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[3]
PATIENT = RetryPolicy(budget_s=90.0)  # longer than a start-up of a service on a busy machine


class Process:
    """`python -m services.<name>` on `port`, killed -9 and started again there."""

    def __init__(self, name: str, port: int, log: Path, **env: str) -> None:
        self.name, self.port, self.log = name, port, log
        key = name.upper()
        self.env = {**os.environ, f"TRELLIS_{key}_PORT": str(port), f"TRELLIS_{key}_METRICS_PORT": "0",
                    "TRELLIS_HOST": "127.0.0.1", **env}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", f"services.{self.name}"], cwd=ROOT, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    async def serving(self) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            await eventually(lambda: self._serving(channel), what=f"the {self.name} serving ({self.log})", timeout=120)

    async def _serving(self, channel: grpc.aio.Channel) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-2000:]
        try:
            return await health_status(channel) == "SERVING"
        except grpc.aio.AioRpcError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


async def test_llm_calls_across_a_kill_of_the_gateway_process(tmp_path: Path, processes: list[Process]):
    model = FakeOpenAI()  # the provider behind the gateway: it sees which requests reached it
    model.chat(Reply.stream(text_chunks("Hello there.")),
               Reply.stream(text_chunks("never"), stall_after=0),  # the turn in flight when the gateway dies
               *[Reply.stream(text_chunks("Answered.")) for _ in range(2)])
    gateway = Process("llm_gateway", free_port(), tmp_path / "llm_gateway.log",
                      TRELLIS_LLM_LOCAL="0", OPENAI_BASE_URL=await model.start(), OPENAI_API_KEY="test")
    processes.append(gateway)
    gateway.start()
    await gateway.serving()
    client = LlmClient.connect(f"127.0.0.1:{gateway.port}", retry=PATIENT)
    try:
        assert (await client.chat("m@OpenAI", [Message("user", "x")])).content == "Hello there."
        stuck = asyncio.ensure_future(client.chat("m@OpenAI", [Message("user", "in flight")]))
        await eventually(lambda: len(model.chat_requests()) == 2, what="the turn reaching the provider")
        gateway.kill()  # the turn is at the gateway, and no chunk of it came back
        made_while_down = asyncio.ensure_future(client.chat("m@OpenAI", [Message("user", "y")]))
        await away_for_a_restart(client.channel)
        assert not (made_while_down.done() or stuck.done())  # waiting for it
        gateway.start()
        assert (await made_while_down).content == "Answered."
        assert (await stuck).content == "Answered."
        assert [r["messages"][-1]["content"] for r in model.chat_requests()[2:]].count("in flight") == 1
    finally:
        await client.close()
        await model.stop()


async def test_a_sandbox_run_made_while_the_sandbox_process_restarts_runs_once_it_is_back(tmp_path: Path,
                                                                                         processes: list[Process]):
    sandbox = Process("sandbox", free_port(), tmp_path / "sandbox.log")
    processes.append(sandbox)
    sandbox.start()
    await sandbox.serving()
    client = SandboxClient.connect(f"127.0.0.1:{sandbox.port}", retry=PATIENT)
    try:
        assert (await client.execute("python", "def main():\n    return 1", {}, timeout_s=60)).value == 1
        sandbox.kill()
        # A run sent on the dead connection before the client saw it close is not sent again (it may have started:
        # services/clients/sandbox.py); this test is about one made once the sandbox is known to be away.
        await eventually(lambda: client.channel.get_state() != grpc.ChannelConnectivity.READY,
                         what="the client seeing its connection closed")
        run = asyncio.ensure_future(client.execute("python", "def main(x):\n    return x * 2", {"x": 21}, timeout_s=120))
        await away_for_a_restart(client.channel)
        assert not run.done()  # waiting for it
        sandbox.start()  # it listens before its start-up checks are done: the run waits for them there
        assert (await run).value == 42
    finally:
        await client.close()
