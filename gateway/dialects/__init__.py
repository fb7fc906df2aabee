"""Renderers of the orchestrator's one RunEvent stream into the wire dialects (docs/ARCHITECTURE.md, "The event
stream"), each implementing `Dialect` and `DialectRun` (base.py). The built-in three are reachable as
`Dialect.RAGFLOW`, `Dialect.OPENAI` and `Dialect.ENVELOPE`; another dialect needs no entry here."""

from gateway.dialects.base import Dialect, DialectRun
from gateway.dialects.envelope import ENVELOPE
from gateway.dialects.openai import OPENAI
from gateway.dialects.ragflow import RAGFLOW

Dialect.RAGFLOW, Dialect.OPENAI, Dialect.ENVELOPE = RAGFLOW, OPENAI, ENVELOPE

__all__ = ["Dialect", "DialectRun", "RAGFLOW", "OPENAI", "ENVELOPE"]
