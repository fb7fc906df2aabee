"""A problem found in a canvas, always naming the component and the field."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ValidationIssue:
    component_id: str  # "" for canvas-level problems (e.g. no `begin`)
    field: str  # dotted path inside the component, e.g. "params.conditions[0].to"
    message: str

    def __str__(self) -> str:
        where = self.component_id or "<canvas>"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
