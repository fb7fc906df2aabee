from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tool_kit.py

from fakes.web_api import FakeWebApi  # noqa: E402


@pytest.fixture
async def web_api():
    """A local server speaking a web API's shape; add routes with `web_api.route(...)`."""
    async with FakeWebApi() as api:
        yield api
