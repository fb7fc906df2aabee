"""examples/node/ against a real stack: `npm ci` from its committed lock file, then `node client.js` against a real
orchestrator (test Redis) and llm_gateway (a scripted model that streams slowly enough to be cancelled and
rejoined mid-answer). The example checks its own steps and exits non-zero when one fails; this test also reads
what it printed."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.support.llm_gateway import llm_gateway
from tests.support.orchestrator import orchestrator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node"
LONG = " ".join(f"word{i}" for i in range(200))  # 200 chunks, 50 ms apart: still streaming when cancelled
SCRIPTS = {"chat": {"story": {"rules": [{"when": {"contains": "long story"}, "reply": LONG, "chunk_delay_s": 0.05}],
                              "turns": [{"reply": "Hello from Trellis."}]}}}

pytestmark = [pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                                 reason="needs Node.js and npm on PATH"),
              pytest.mark.timeout(300)]


async def _run(*cmd: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=EXAMPLE, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def test_node_client_creates_streams_cancels_and_rejoins(redis_server):
    code, out = await _run("npm", "ci", "--no-audit", "--no-fund")
    assert code == 0, out
    tenant = f"node-{uuid.uuid4().hex[:8]}"
    async with llm_gateway(SCRIPTS, default_chat_model="story@Scripted") as llm, \
            orchestrator(redis_server.url, llm_gateway_addr=llm.addr) as orch:
        env = {**os.environ, "TRELLIS_ORCHESTRATOR": orch.addr, "TRELLIS_TENANT": tenant}
        code, out = await _run("node", "client.js", env=env)
    assert code == 0, out
    lines = out.splitlines()
    assert any(line.startswith("created agent ") for line in lines), out
    assert any(line.endswith('succeeded: "Hello from Trellis."') for line in lines), out
    assert any(" cancelled (Cancel found it running: true)" in line for line in lines), out
    [rejoined] = [line for line in lines if line.startswith("rejoined run ")]
    assert rejoined.endswith(f'succeeded: "{LONG}"'), out
