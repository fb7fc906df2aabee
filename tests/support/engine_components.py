"""Components registered for the engine tests (TestNoop, TestSleep, TestFail, TestEcho, TestStream, TestIncr):
importing this module registers them. Each appends (what, component id, monotonic time) to TRACE; call
`reset()` before a test that reads it. Canvas builders and the run collector are in tests/support/canvas.py."""
from __future__ import annotations

import asyncio
import time

from services.orchestrator.components.base import Component, NodeContext, register

TRACE: list[tuple[str, str, float]] = []
_FAILS: dict[str, int] = {}


def traced(what: str, cid: str) -> list[float]:
    return [t for w, c, t in TRACE if w == what and c == cid]


# ------------------------------------------------------------------ test-only components
@register
class TestNoop(Component):
    component_name = "TestNoop"

    async def run(self, ctx: NodeContext) -> None:
        TRACE.append(("run", ctx.component_id, time.monotonic()))
        ctx.set_output("result", self.params.given("value", ctx.component_id))


@register
class TestSleep(Component):
    """Waits `seconds`; records start/end (or cancel) so tests can check overlap and cancellation."""

    component_name = "TestSleep"

    async def run(self, ctx: NodeContext) -> None:
        TRACE.append(("start", ctx.component_id, time.monotonic()))
        try:
            await asyncio.sleep(float(self.params.given("seconds", 0.05)))
        except asyncio.CancelledError:
            TRACE.append(("cancelled", ctx.component_id, time.monotonic()))
            raise
        TRACE.append(("end", ctx.component_id, time.monotonic()))
        ctx.set_output("result", self.params.given("value", ctx.component_id))


@register
class TestFail(Component):
    """Fails its first `fail_times` executions (counted per `key`), then outputs "ok"."""

    component_name = "TestFail"

    async def run(self, ctx: NodeContext) -> None:
        key = self.params.given("key", ctx.component_id)
        n = _FAILS.get(key, 0)
        _FAILS[key] = n + 1
        TRACE.append(("attempt", ctx.component_id, time.monotonic()))
        if n < int(self.params.given("fail_times", 10**9)):
            raise RuntimeError(self.params.given("message", "boom"))
        ctx.set_output("result", "ok")


@register
class TestEcho(Component):
    """Renders `text` (references resolved) into `result`."""

    component_name = "TestEcho"

    async def run(self, ctx: NodeContext) -> None:
        if "seconds" in self.params:
            await asyncio.sleep(float(self.params.given("seconds")))
        ctx.set_output("result", await ctx.render(self.params.given("text", "")))


@register
class TestStream(Component):
    """Streams `tokens` into `content`, one every `gap` seconds (like an LLM feeding a Message)."""

    component_name = "TestStream"

    async def run(self, ctx: NodeContext) -> None:
        tokens = list(self.params.given("tokens", []))
        gap = float(self.params.given("gap", 0.01))

        async def gen():
            for t in tokens:
                await asyncio.sleep(gap)
                TRACE.append(("token", ctx.component_id, time.monotonic()))
                yield t
            if self.params.given("fail_at_end"):
                raise RuntimeError("stream broke")
        ctx.set_output("content", ctx.stream(gen()))


@register
class TestIncr(Component):
    """Adds `by` to the variable `target` (a ref such as Loop:X@count or env.n)."""

    component_name = "TestIncr"

    async def run(self, ctx: NodeContext) -> None:
        target = self.params.given("target")
        ctx.assign(target, (await ctx.value(target) or 0) + self.params.given("by", 1))
        TRACE.append(("incr", ctx.component_id, time.monotonic()))


def reset() -> None:
    TRACE.clear()
    _FAILS.clear()
