"""Starting the orchestrator does not import the slow packages that only some runs need: `mcp` (and httpx
with it) is imported when a run first talks to an MCP server, playwright when a Browser runs."""
from __future__ import annotations

import subprocess
import sys

LAZY = ("mcp", "httpx", "httpcore", "playwright")


def test_the_app_module_leaves_mcp_httpx_and_playwright_unimported():
    code = ("import sys, services.orchestrator.app; "
            f"print(','.join(m for m in {LAZY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
