"""A tool written for the tests, following docs/adding-a-tool.md and nothing else: `Temperature` converts
degrees Celsius to Fahrenheit. Not in the registry's `_MODULES`: a test registers it with
`tests.support.canvas.registered(Temperature)` for its own duration."""
from __future__ import annotations

from typing import Any

from services.orchestrator.components.base import Component, NodeContext
from services.orchestrator.components.params import Number, Params


class TemperatureParams(Params):
    celsius: Number(text=False) = 0  # type: ignore[valid-type]  # checked for a node and a tool entry alike


class Temperature(Component):
    component_name = "Temperature"
    params_model = TemperatureParams
    params: TemperatureParams

    @classmethod
    def tool_meta(cls, params: TemperatureParams) -> dict[str, Any]:
        return {"name": "to_fahrenheit",
                "description": "Converts degrees Celsius to Fahrenheit.",
                "parameters": {"celsius": {"type": "number", "description": "Degrees Celsius.", "required": True}}}

    async def call_tool(self, ctx: NodeContext, arguments: dict[str, Any]) -> Any:
        return f"{float(arguments['celsius']) * 9 / 5 + 32:g} °F"

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("result", await self.call_tool(ctx, {"celsius": self.params.celsius}))
