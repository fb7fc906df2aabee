"""Where the tests' data lives: tests/data (DSL examples, templates, documents)."""
from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
