"""A tool written for the tests, following docs/adding-a-tool.md and nothing else: `Temperature` converts
degrees Celsius to Fahrenheit. Not in the registry's `_MODULES`: a test registers it with
`tests.support.canvas.registered(Temperature)` for its own duration."""
from __future__ import annotations

from typing import Any

from services.orchestrator.components.base import Component, NodeContext, ValidationIssue


class Temperature(Component):
    component_name = "Temperature"

    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
        return {"name": "to_fahrenheit",
                "description": "Converts degrees Celsius to Fahrenheit.",
                "parameters": {"celsius": {"type": "number", "description": "Degrees Celsius.", "required": True}}}

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any]) -> list[ValidationIssue]:
        celsius = params.get("celsius", 0)
        if isinstance(celsius, bool) or not isinstance(celsius, (int, float)):
            return [ValidationIssue(cpn_id, "params.celsius", f"must be a number, got {celsius!r}")]
        return []

    async def call_tool(self, ctx: NodeContext, arguments: dict[str, Any]) -> Any:
        return f"{float(arguments['celsius']) * 9 / 5 + 32:g} °F"

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("result", await self.call_tool(ctx, {"celsius": self.params.get("celsius", 0)}))
