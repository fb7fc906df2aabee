"""Iteration: runs its child sub-graph once per item of `items_ref`, results in item order.

Items run concurrently up to `EngineSettings.iteration_concurrency`, each in a scope of its own (so
`{item}`/`{index}` and sibling outputs never mix between items). `params.outputs` declares what to
collect: `{name: {"ref": "Child:X@var"}}` gives the output `name` = [value of item 0, item 1, ...].
"""
from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from pydantic import Field

from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Entry, OptionalRef, Params, Ref
from services.orchestrator.engine.variables import Resolver, Scope


class Collected(Entry):
    ref: OptionalRef = None  # "Child:X@var": its value in each pass, collected into a list


class IterationParams(Params):
    items_ref: Annotated[Ref, Field(validate_default=True)] = None  # type: ignore[assignment]
    outputs: dict[str, Collected] | None = None


def _collected(params: IterationParams) -> dict[str, str]:
    return {k: v.ref for k, v in (params.outputs or {}).items() if v.ref}


@register
class Iteration(Component):
    component_name = "Iteration"
    is_container = True
    child_start = "IterationItem"
    params_model = IterationParams
    params: IterationParams

    def thoughts(self, ctx: NodeContext) -> str:
        items = ctx.get(self.params.items_ref)
        return f"Need to process {len(items)} items." if isinstance(items, list) else ""

    async def run(self, ctx: NodeContext) -> None:
        ref = self.params.items_ref
        items = await ctx.value(ref)
        if isinstance(items, str):
            try:
                items = json.loads(items)
            except ValueError:
                pass
        if not isinstance(items, list):
            raise ValueError(f"items_ref '{ref}' must be an array, got {type(items).__name__}")
        ctx.set_input("items", items)
        collect = _collected(self.params)
        results: list[dict[str, Any] | None] = [None] * len(items)

        async def one(i: int) -> None:
            scope = Scope(parent=ctx.scope, aliases={"item": items[i], "index": i, "result": items[i]})
            await ctx.run_children(scope, (*ctx.path, ctx.component_id, str(i)))
            r = Resolver(scope, ctx.env.globals, ctx.env.known)
            results[i] = {name: await r.value(vref) for name, vref in collect.items()}

        await _bounded(one, len(items), max(1, ctx.settings.iteration_concurrency))
        for name in collect:
            ctx.set_output(name, [res[name] if res else None for res in results])


async def _bounded(fn: Any, n: int, limit: int) -> None:
    """Call fn(0..n-1) with at most `limit` running; the first failure cancels the rest."""
    if limit == 1 or n <= 1:
        for i in range(n):
            await fn(i)
        return
    indexes = iter(range(n))

    async def worker() -> None:
        for i in indexes:  # shared iterator: each index is taken once
            await fn(i)

    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(min(limit, n)):
                tg.create_task(worker())
    except BaseExceptionGroup as eg:  # surface the first real cause, not the group
        first = eg.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
