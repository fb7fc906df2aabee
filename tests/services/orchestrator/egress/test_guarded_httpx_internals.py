"""The one private name of httpx the stack relies on (egress/_guarded_httpx.py replaces the connection pool an
`httpx.AsyncHTTPTransport` keeps in `_pool`, because httpx takes no network backend): this fails, naming it,
when an httpx release moves it, and when the installed httpx is not the one pyproject.toml pins exactly."""

from __future__ import annotations

import tomllib
from pathlib import Path

import httpcore
import httpx

ROOT = Path(__file__).resolve().parents[4]


def _pinned(name: str) -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.split("==")[0].split(">")[0].split("<")[0].strip() == name)
    assert "==" in spec, f"{name} must be pinned exactly in pyproject.toml (egress/_guarded_httpx.py uses its internals)"
    return spec.split("==")[1].split(";")[0].split("#")[0].strip()


def test_the_installed_httpx_is_the_pinned_one():
    assert httpx.__version__ == _pinned("httpx")


def test_httpx_keeps_its_connection_pool_where_the_guard_replaces_it():
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    pool = getattr(transport, "_pool", None)
    assert isinstance(pool, httpcore.AsyncConnectionPool), (
        f"httpx {httpx.__version__} no longer keeps an httpcore.AsyncConnectionPool in AsyncHTTPTransport._pool: "
        "services/orchestrator/egress/_guarded_httpx.py must change with it")
