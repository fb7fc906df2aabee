from __future__ import annotations

import sys
from pathlib import Path
from typing import AsyncIterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # llm_helpers.py (tests import with --import-mode=importlib)

from fakes.openai_server import FakeOpenAI  # noqa: E402


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI()
    await fake.start()
    yield fake
    await fake.stop()
