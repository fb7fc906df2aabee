"""The MCP and ExeSQL settings a deployment sets in the environment reach the engine."""
from __future__ import annotations

from services.orchestrator.config import OrchestratorConfig


def test_defaults(monkeypatch):
    for name in ("TRELLIS_MCP_TIMEOUT_S", "TRELLIS_MCP_ALLOW_STDIO", "TRELLIS_EXESQL_TIMEOUT_S",
                 "TRELLIS_EXESQL_SQLITE_DIR"):
        monkeypatch.delenv(name, raising=False)
    engine = OrchestratorConfig.from_env().engine
    assert (engine.mcp_timeout_s, engine.mcp_allow_stdio, engine.sql_timeout_s, engine.sql_sqlite_dir) == (
        60.0, False, 30.0, None)


def test_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRELLIS_MCP_TIMEOUT_S", "120")
    monkeypatch.setenv("TRELLIS_MCP_ALLOW_STDIO", "1")
    monkeypatch.setenv("TRELLIS_EXESQL_TIMEOUT_S", "5")
    monkeypatch.setenv("TRELLIS_EXESQL_SQLITE_DIR", str(tmp_path))
    engine = OrchestratorConfig.from_env().engine
    assert (engine.mcp_timeout_s, engine.mcp_allow_stdio, engine.sql_timeout_s, engine.sql_sqlite_dir) == (
        120.0, True, 5.0, str(tmp_path))
