from __future__ import annotations

import re
from typing import Any

import pytest

from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.params import ParamsInvalid
from services.orchestrator.components.variable_aggregator import VariableAggregator
from services.orchestrator.engine.variables import StreamValue


async def aggregate(groups: Any, **kw: Any) -> NodeContext:
    params = {"groups": groups}
    ctx = NodeContext.for_test(params, component_id="VariableAggregator:T", **kw)
    await VariableAggregator("VariableAggregator:T", params).run(ctx)
    return ctx


def group(name: str, *refs: str) -> dict[str, Any]:
    return {"group_name": name, "type": "string", "variables": [{"value": r} for r in refs]}


async def test_first_truthy_variable_of_each_group_wins() -> None:
    ctx = await aggregate(
        [group("picked", "env.a", "env.b", "Agent:B@content"), group("other", "Agent:B@content", "env.a")],
        globals_={"env.a": "", "env.b": 0}, outputs={"Agent:B": {"content": "from B"}})
    assert ctx.outputs == {"picked": "from B", "other": "from B"}
    assert ctx.inputs["picked.variables"] == ["env.a", "env.b", "Agent:B@content"]


async def test_branch_that_did_not_run_is_skipped_and_nothing_gives_none() -> None:
    ctx = await aggregate([group("g", "Pruned:x@out", "env.a"), group("empty", "Pruned:x@out")],
                          globals_={"env.a": [1]})
    assert ctx.outputs == {"g": [1], "empty": None}


async def test_a_live_stream_is_passed_on_unconsumed() -> None:
    live = StreamValue()
    live.push("tok")
    ctx = await aggregate([group("g", "LLM:x@content")], outputs={"LLM:x": {"content": live}})
    assert ctx.output("g") is live
    finished_empty = StreamValue.of("")
    ctx = await aggregate([group("g", "LLM:x@content", "env.b")], outputs={"LLM:x": {"content": finished_empty}},
                          globals_={"env.b": "fallback"})
    assert ctx.output("g") == "fallback"


@pytest.mark.parametrize(("groups", "field"), [
    ([], "params.groups"),
    ([{"group_name": "", "variables": [{"value": "env.a"}]}], "params.groups[0].group_name"),
    ([{"group_name": "g", "variables": []}], "params.groups[0].variables"),
    ([{"group_name": "g", "variables": "env.a"}], "params.groups[0].variables"),
    ([{"group_name": "g", "variables": [{"value": 3}]}], "params.groups[0].variables[0].value"),
])
async def test_bad_groups_name_the_field(groups: Any, field: str) -> None:
    assert [i.field for i in VariableAggregator.check("VariableAggregator:T", {"groups": groups})][0] == field
    with pytest.raises(ParamsInvalid, match=f"^VariableAggregator:T \\(VariableAggregator\\): {re.escape(field)}:"):
        await aggregate(groups)
