"""RAGFlow's own restful API tests (ragflow/, vendored unchanged; see README.md) against a real Trellis stack.

RAGFlow runs them from its repository root against a deployment whose address is HOST_ADDRESS, with a
parent conftest that registers a user and makes an API token. Here the parent's part is ours: the stack
(tests/support/ragflow_stack.py) runs on a port chosen before the vendored modules are imported (they read
HOST_ADDRESS when imported), and `token` is the stack's API key. The vendored imports (`test.testcases...`,
`configs`, `utils`, `libs`) resolve through the two paths put first on sys.path below.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.net import free_port

VENDORED = Path(__file__).resolve().parent / "ragflow"
API_KEY = "ragflow-restful-tests"
PORT = free_port()

# configs.py stops the run without the keys of RAGFlow's CI models; Trellis serves scripted models by those
# names (tests/support/ragflow_stack.py), so any value does.
for name, value in (("HOST_ADDRESS", f"http://127.0.0.1:{PORT}"), ("ZHIPU_AI_API_KEY", "unused"),
                    ("SILICONFLOW_API_KEY", "unused"), ("API_PROXY_SCHEME", "python")):
    os.environ[name] = value
for path in (VENDORED / "test" / "testcases", VENDORED):
    sys.path.insert(0, str(path))
# RAGFlow's `test` package, not the standard library's regression tests of the same name.
for module in [m for m in sys.modules if m == "test" or m.startswith("test.")]:
    if not str(getattr(sys.modules[module], "__file__", "") or "").startswith(str(VENDORED)):
        del sys.modules[module]


def pytest_configure(config: pytest.Config) -> None:
    for level in ("p1", "p2", "p3"):
        config.addinivalue_line("markers", f"{level}: RAGFlow's test level ({level})")


@pytest.fixture(scope="session", autouse=True)
def trellis_stack(redis_server, tmp_path_factory):
    from tests.support.ragflow_stack import threaded_stack

    with threaded_stack(redis_server.url, tmp_path_factory.mktemp("ragflow-restful"), port=PORT,
                        api_key=API_KEY) as url:
        yield url


@pytest.fixture(scope="session")
def token(trellis_stack) -> str:
    return API_KEY


@pytest.fixture(scope="session")
def auth(token) -> str:
    return f"Bearer {token}"
