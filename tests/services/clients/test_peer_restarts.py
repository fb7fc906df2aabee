"""The retry rule (services/clients/_rpc.py) across a peer's restart, against real servers on 127.0.0.1 stopped and
started again on the same port: a call that never reached its peer waits for it to come back; one whose peer
stays away fails after the budget, naming the peer; a stream that has given a message, or a sandbox run that may
have started, is never sent again; a sandbox that is still starting makes its runs wait instead of refusing them.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from services.clients import LlmClient, RetryPolicy, SandboxClient
from services.clients._rpc import PEER_RETRY_ENV
from services.clients.llm_models import Message
from services.common.errors import Unavailable
from services.common.testing import start_server
from services.llm_gateway.config import LlmGatewayConfig
from services.llm_gateway.gateway import LlmGateway
from services.sandbox.app import build, create_executor
from services.sandbox.config import SandboxConfig
from services.sandbox.server import SandboxServicer
from tests.support.llm_gateway import bindings, llm_gateway
from tests.support.sandbox import COMPONENT_LIMITS, host_processes_with, sandbox_server, sandbox_servicer
from tests.services.clients.away import away_for_a_restart
from tests.support.waiting import eventually

SCRIPTS = {"chat": {"hello": ["Hello there."],
                    "slow": [{"reply": "one two three four five six", "chunk_delay_s": 0.2}],
                    "stuck": [{"reply": "never", "delay_s": 600}]}}
AGAIN = {"chat": {"stuck": ["Answered after the restart."]}}  # the gateway that comes back, on the same port
PATIENT = RetryPolicy(budget_s=60.0)  # longer than any restart here, on a busy machine too
SHORT = RetryPolicy(budget_s=0.5)
SLEEPS = ("import subprocess, sys, time\n"
          "def main(marker):\n"  # a child process whose command line the host sees: the run has started
          "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', marker])\n"
          "    time.sleep(600)\n")


def said(text: str) -> list[Message]:
    return [Message("user", text)]


class Arrivals(SandboxServicer):
    """The sandbox's servicer, counting the runs that reached it."""

    def __init__(self, cfg: SandboxConfig, executor: Any = None) -> None:
        super().__init__(cfg, executor)
        self.calls = 0
        self.arrived = asyncio.Event()

    async def Execute(self, request, context):  # type: ignore[override]
        self.calls += 1
        self.arrived.set()
        async for message in super().Execute(request, context):
            yield message


async def test_calls_made_while_the_llm_gateway_is_down_succeed_once_it_is_back():
    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr, retry=PATIENT)
        try:
            assert (await client.chat("hello@Scripted", said("x"))).content == "Hello there."
            await llm.stop()
            whole = asyncio.ensure_future(client.chat("hello@Scripted", said("whole")))
            streamed = asyncio.ensure_future(_text(client.stream_chat("hello@Scripted", said("streamed"))))
            models = asyncio.ensure_future(client.list_models())
            await away_for_a_restart(client.channel)
            assert not (whole.done() or streamed.done() or models.done())
            await llm.start()
            assert (await whole).content == "Hello there."
            assert await streamed == "Hello there."
            assert await models
        finally:
            await client.close()


async def test_a_turn_in_flight_when_the_gateway_goes_away_is_sent_again_to_the_one_that_comes_back():
    """Nothing of it reached the caller (no chunk yet), so it is asked again, of the gateway now on that port."""
    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr, retry=PATIENT)
        back = LlmGateway.create(LlmGatewayConfig.for_tests(), scripts=AGAIN)
        server = None
        try:
            turn = asyncio.ensure_future(_text(client.stream_chat("stuck@Scripted", said("x"))))
            await eventually(lambda: llm.calls_to("stuck"), what="the turn reaching the first gateway")
            await llm.stop()
            await away_for_a_restart(client.channel)
            assert not turn.done()  # waiting for it
            server, _ = await start_server(bindings(back), service="llm_gateway", port=llm.port)
            assert await turn == "Answered after the restart."
        finally:
            await client.close()
            if server is not None:
                await server.stop(None)
            await back.aclose()


async def test_a_stream_that_gave_a_message_is_not_asked_again_after_the_gateway_restarted():
    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr, retry=PATIENT)
        try:
            stream = client.stream_chat("slow@Scripted", said("x"))
            assert (await anext(stream)).content.strip() == "one"
            await llm.stop()
            await llm.start()  # back at once: still, what the caller has seen is not repeated
            with pytest.raises(Unavailable, match="the llm_gateway is unavailable"):
                async for _ in stream:
                    pass
            assert len(llm.calls_to("slow")) == 1
            assert (await client.chat("hello@Scripted", said("next"))).content == "Hello there."
        finally:
            await client.close()


async def test_a_gateway_that_stays_down_fails_the_call_after_the_budget_naming_it():
    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr, retry=SHORT)
        try:
            await llm.stop()
            with pytest.raises(Unavailable, match=r"the llm_gateway is unavailable: .*waited .* s for it to come back"):
                await asyncio.wait_for(client.chat("hello@Scripted", said("x")), 60)  # (a guard against a hang)
            with pytest.raises(Unavailable, match=r"the llm_gateway is unavailable: .*waited .* s for it to come back"):
                await asyncio.wait_for(_text(client.stream_chat("hello@Scripted", said("y"))), 60)
        finally:
            await client.close()


async def test_the_calls_deadline_bounds_the_wait_and_the_error_still_names_the_peer():
    async with llm_gateway(SCRIPTS) as llm:
        client = LlmClient.connect(llm.addr, retry=RetryPolicy(budget_s=3600))
        try:
            await llm.stop()
            with pytest.raises(Unavailable, match=r"the llm_gateway is unavailable: .*waited"):
                await asyncio.wait_for(client.chat("hello@Scripted", said("x"), timeout=0.5), 60)
        finally:
            await client.close()


def test_the_budget_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(PEER_RETRY_ENV, "7.5")
    assert RetryPolicy.from_env().budget_s == 7.5
    monkeypatch.setenv(PEER_RETRY_ENV, "-1")
    with pytest.raises(SystemExit, match=PEER_RETRY_ENV):
        RetryPolicy.from_env()
    monkeypatch.setenv(PEER_RETRY_ENV, "soon")
    with pytest.raises(SystemExit, match=PEER_RETRY_ENV):
        RetryPolicy.from_env()


async def test_a_sandbox_run_made_while_the_sandbox_is_down_waits_and_runs_once_it_is_back():
    cfg = SandboxConfig.for_tests(defaults=COMPONENT_LIMITS)
    async with sandbox_server(await sandbox_servicer(cfg)) as sandbox:
        client = SandboxClient.connect(sandbox.addr, retry=PATIENT)
        try:
            assert (await client.execute("python", "def main():\n    return 1", {}, timeout_s=30)).value == 1
            await sandbox.stop()
            run = asyncio.ensure_future(client.execute("python", "def main(x):\n    return x + 1", {"x": 1}, timeout_s=60))
            await away_for_a_restart(client.channel)
            assert not run.done()  # waiting for it
            back = Arrivals(cfg, await create_executor(cfg))
            await sandbox.start(back)
            assert (await run).value == 2
            assert back.calls == 1
        finally:
            await client.close()


async def test_a_sandbox_run_that_may_have_started_is_not_sent_again_after_a_restart():
    cfg = SandboxConfig.for_tests(defaults=COMPONENT_LIMITS)
    first = Arrivals(cfg, await create_executor(cfg))
    async with sandbox_server(first) as sandbox:
        client = SandboxClient.connect(sandbox.addr, retry=PATIENT)
        try:
            marker = f"restart-{uuid.uuid4().hex}"
            run = asyncio.ensure_future(client.execute("python", SLEEPS, {"marker": marker}, timeout_s=120))
            await eventually(lambda: host_processes_with(marker=marker), what="the run's code running")
            await sandbox.stop()
            back = Arrivals(cfg, await create_executor(cfg))
            await sandbox.start(back)
            with pytest.raises(Unavailable, match="the sandbox is unavailable"):
                await run
            assert back.calls == 0
            await eventually(lambda: not host_processes_with(marker=marker), what="the stopped sandbox's run gone")
            assert (await client.execute("python", "def main():\n    return 3", {}, timeout_s=30)).value == 3
        finally:
            await client.close()


async def test_a_run_that_comes_while_the_sandbox_starts_waits_for_it_instead_of_being_refused():
    cfg = SandboxConfig.for_tests(defaults=COMPONENT_LIMITS)
    starting = Arrivals(cfg)  # serving, its executor not there yet (app.build's start-up hook sets it)
    async with sandbox_server(starting) as sandbox:
        client = SandboxClient.connect(sandbox.addr, retry=PATIENT)
        try:
            run = asyncio.ensure_future(client.execute("python", "def main():\n    return 'ran'", {}, timeout_s=60))
            await starting.arrived.wait()
            starting.started(await create_executor(cfg))
            assert (await run).value == "ran"
            assert starting.calls == 1
        finally:
            await client.close()


async def test_a_run_waiting_for_a_start_up_that_fails_hears_why_at_once():
    cfg = SandboxConfig.for_tests(bwrap="/nonexistent/bwrap", defaults=COMPONENT_LIMITS)
    service = build(cfg)
    server, port = await start_server(service.bindings, service="sandbox")
    client = SandboxClient.connect(f"127.0.0.1:{port}", retry=PATIENT)
    try:
        run = asyncio.ensure_future(client.execute("python", "def main():\n    return 1", {}, timeout_s=60))
        with pytest.raises(Exception, match="isolation is unavailable"):
            for hook in service.on_startup:
                await hook()
        with pytest.raises(Unavailable, match="the sandbox is unavailable: sandbox: start-up failed: .*isolation is unavailable"):
            await run
    finally:
        await client.close()
        await server.stop(None)


async def _text(deltas: Any) -> str:
    return "".join([d.content async for d in deltas])
