"""A problem found in a canvas, always naming the component and the field."""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field


@dataclass(frozen=True, slots=True)
class ValidationIssue:
    component_id: str  # "" for canvas-level problems (e.g. no `begin`)
    field: str  # dotted path inside the component, e.g. "params.conditions[0].to"
    message: str
    component_name: str = dc_field(default="", compare=False)  # its type, shown as "Switch:S (Switch)"

    def __str__(self) -> str:
        where = self.component_id or "<canvas>"
        if self.component_name:
            where = f"{where} ({self.component_name})"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
