"""Components that stand in for tools in the Agent tests: slow, failing, echoing and a fixed weather report.
Not registered: a test registers them for its own duration with `tests.support.canvas.registered(...)`."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from services.orchestrator.components.base import Component, NodeContext

SPANS: list[tuple[str, float, float]] = []  # (label, start, end) of SlowTool calls


class SlowTool(Component):
    """Sleeps `seconds` (param) and answers "slept <label>"; records its time span in SPANS."""

    component_name = "TestSlowTool"

    async def run(self, ctx: NodeContext) -> None:
        label = str(self.params.given("query", ""))
        t0 = time.monotonic()
        await asyncio.sleep(float(self.params.given("seconds", 0.3)))
        SPANS.append((label, t0, time.monotonic()))
        ctx.set_output("result", f"slept {label}")


class FailTool(Component):
    component_name = "TestFailTool"

    async def run(self, ctx: NodeContext) -> None:
        raise RuntimeError(str(self.params.given("message", "disk on fire")))


class EchoTool(Component):
    """Echoes its `query` argument, as `formalized_content` (like RAGFlow's search tools)."""

    component_name = "TestEchoTool"

    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
        return {"name": "echo", "description": "Echoes the query.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("formalized_content", f"echo: {self.params.given('query', '')}")


class WeatherTool(Component):
    """get_weather(city): a fixed forecast (the local-model test's one tool)."""

    component_name = "TestWeatherTool"

    @classmethod
    def tool_meta(cls, params: dict) -> dict:
        return {"name": "get_weather", "description": "Get the current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}

    async def run(self, ctx: NodeContext) -> None:
        ctx.set_output("result", f"Sunny, 21 degrees in {self.params.given('city', '?')}")
