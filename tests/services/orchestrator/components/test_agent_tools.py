"""A tool added the way docs/adding-a-tool.md says (tests/support/temperature_tool.py, no engine file
touched) runs in an Agent whose model is the real llm_gateway's scripted provider on port 0."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from services.orchestrator.components.agent import Agent
from services.orchestrator.engine.dsl import load_canvas
from services.orchestrator.engine.events import ToolCallFinished, ToolCallStarted
from services.orchestrator.engine.validate import ValidationFailed, compile_plan
from tests.support.canvas import cpn, node_ctx, of, registered, run_canvas, services
from tests.support.llm_gateway import llm_gateway
from tests.support.temperature_tool import Temperature

TOOL = {"component_name": "Temperature", "name": "T", "params": {}}
CALLS_THE_TOOL = {"chat": {"m": [{"tool_calls": [{"name": "to_fahrenheit_0", "arguments": {"celsius": 100}}]},
                                 "It is {last_tool}."]}}


@pytest.fixture(autouse=True)
def temperature():
    with registered(Temperature):
        yield


async def test_an_agent_calls_the_tool_and_reads_its_observation():
    params = {"llm_id": "m@Scripted", "tools": [TOOL]}
    async with llm_gateway(CALLS_THE_TOOL) as llm:
        ctx = node_ctx(services(llm), params, query="boiling?", component_id="Agent:a", component_name="Agent")
        await Agent("Agent:a", params).run(ctx)
        await ctx.finish_streams()
        first, second = llm.calls_to("m")
    [offered] = first.tools
    assert offered.name == "to_fahrenheit_0" and offered.description == "Converts degrees Celsius to Fahrenheit."
    assert offered.parameters["required"] == ["celsius"]
    [observation] = [m.content for m in second.messages if m.role == "tool"]
    assert observation == "212 °F"
    assert ctx.output("content") == "It is 212 °F."  # no Message downstream: the whole answer
    [done] = of(ctx.env.events, ToolCallFinished)
    assert (done.tool_name, done.result, done.error) == ("to_fahrenheit_0", "212 °F", None)


@pytest.mark.parametrize("llm", [CALLS_THE_TOOL], indirect=True)  # the `llm` fixture (tests/conftest.py)
async def test_the_tool_runs_in_an_agent_of_a_canvas(llm):
    dsl = {"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", ["Message:m"], {"llm_id": "m@Scripted", "tools": [TOOL]}, up=["begin"]),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}, up=["Agent:a"]),
    }}
    events = await run_canvas(dsl, services(llm), query="boiling?")
    assert events[-1].error is None and events[-1].outputs["content"] == "It is 212 °F."
    [started] = of(events, ToolCallStarted, "Agent:a")
    assert started.arguments == {"celsius": 100}


def test_the_tools_params_are_checked_with_the_canvas():
    dsl = {"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", [], {"llm_id": "m@Scripted", "tools": [{**TOOL, "params": {"celsius": "hot"}}]},
                       up=["begin"]),
    }}
    with pytest.raises(ValidationFailed) as err:
        compile_plan(load_canvas(dsl))
    assert [(i.component_id, i.field) for i in err.value.issues] == [("Agent:a", "params.tools[0].params.celsius")]


def test_the_tool_is_the_class_docs_adding_a_tool_shows():
    """The doc's classes and tests/support/temperature_tool.py's are the same code (the doc's tool has `@register`)."""
    root = Path(__file__).resolve().parents[4]
    doc = (root / "docs" / "adding-a-tool.md").read_text(encoding="utf-8")
    [shown] = [block for block in re.findall(r"```python\n(.*?)```", doc, re.S) if "class Temperature" in block]

    def classes(source: str) -> dict[str, str]:
        found = {}
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef):
                node.decorator_list = []
                found[node.name] = ast.dump(node)
        return found

    written = (root / "tests" / "support" / "temperature_tool.py").read_text(encoding="utf-8")
    assert classes(shown) == classes(written)
