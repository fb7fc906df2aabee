"""Every process runs on uvloop unless TRELLIS_UVLOOP=0 (services/common/event_loop.py); `trellis up`'s
processes are checked in tests/cli/test_trellis_up.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from services.common import event_loop


async def _loop_kind() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_by_default(monkeypatch):
    monkeypatch.delenv("TRELLIS_UVLOOP", raising=False)
    assert event_loop.run(_loop_kind()).startswith("uvloop")


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_trellis_uvloop_off_runs_asyncio_own_loop(monkeypatch, value):
    monkeypatch.setenv("TRELLIS_UVLOOP", value)
    assert event_loop.run(_loop_kind()) == "asyncio.unix_events"


def test_a_process_on_asyncio_own_loop_never_loads_uvloop():
    code = ("import asyncio, sys\nfrom services.common import event_loop\n"
            "async def main(): return 0\nevent_loop.run(main())\nprint('uvloop' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"TRELLIS_UVLOOP": "0", "PATH": "/usr/bin:/bin"}, cwd=Path(__file__).parents[3])
    assert out.stdout.strip() == "False"


async def test_the_tests_run_on_the_services_loop():
    assert (await _loop_kind()).startswith("uvloop" if event_loop.uses_uvloop() else "asyncio")
