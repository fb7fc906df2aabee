"""Agent: the ReAct loop against the real llm_gateway (scripted provider) on port 0."""
from __future__ import annotations

import json

import pytest

from services.orchestrator.components import _react, _tools
from services.orchestrator.components.agent import Agent
from services.orchestrator.engine.events import (
    MessageDelta,
    NodeFinished,
    NodeStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from services.orchestrator.engine.settings import EngineSettings
from services.orchestrator.engine.validate import ValidationFailed
from tests.support.canvas import cpn, node_ctx, of, registered, run_canvas, services
from tests.support.llm_gateway import llm_gateway
from tests.support.tool_doubles import SPANS, EchoTool, FailTool, SlowTool, WeatherTool

SLOW = {"component_name": "TestSlowTool", "name": "Slow", "params": {"seconds": 0.3}}
ECHO = {"component_name": "TestEchoTool", "name": "Echo", "params": {}}
FAIL = {"component_name": "TestFailTool", "name": "Fail", "params": {}}


def two_calls(first: str, second: str) -> dict:
    return {"tool_calls": [{"name": first, "arguments": {"query": "a"}, "id": "call_a"},
                           {"name": second, "arguments": {"query": "b"}, "id": "call_b"}]}


@pytest.fixture(autouse=True)
def tools():
    SPANS.clear()
    with registered(SlowTool, FailTool, EchoTool):
        yield


STREAMED = {"on": True}  # run_agent's Agent has a Message directly downstream (set per test by the fixture)


@pytest.fixture(autouse=True, params=[True, False], ids=["streamed", "whole"])
def streamed(request):
    """Every test twice: with a Message directly downstream (each turn streams) and without (each turn comes
    whole from the gateway's Complete call)."""
    STREAMED["on"] = request.param
    yield request.param
    STREAMED["on"] = True


async def run_agent(llm, params, *, query="go", settings=None, overrides=None, cid="Agent:a"):
    ctx = node_ctx(services(llm, settings=settings), params, query=query, component_id=cid,
                   component_name="Agent", overrides=overrides)
    agent = Agent(cid, params)
    agent.streams_downstream = STREAMED["on"]  # what the planner sets for a Message directly downstream
    await agent.run(ctx)
    await ctx.finish_streams()
    content = ctx.output("content")
    return ctx, (content if isinstance(content, str) else content.text)


async def test_each_turn_streams_only_when_a_message_reads_the_answer(streamed):
    scripts = {"chat": {"m": [two_calls("test_slow_tool_0", "test_slow_tool_1"), "Both done: {last_tool}"]}}
    async with llm_gateway(scripts) as llm:
        chats, completes = llm.served("Chat"), llm.served("Complete")
        params = {"llm_id": "m@Scripted", "sys_prompt": "Use tools.", "tools": [SLOW, {**SLOW, "name": "Slow 2"}]}
        ctx, content = await run_agent(llm, params)
        assert (llm.served("Chat") - chats, llm.served("Complete") - completes) == ((2, 0) if streamed else (0, 2))
    assert content == "Both done: slept b" and len(ctx.output("agent_thoughts")) == 2
    assert ctx.env.usage["calls"] == 2 and ctx.env.usage["completion_tokens"] > 0


async def test_two_tools_in_one_turn_run_concurrently_and_results_go_back_as_tool_messages():
    scripts = {"chat": {"m": [two_calls("test_slow_tool_0", "test_slow_tool_1"), "Both done: {last_tool}"]}}
    async with llm_gateway(scripts) as llm:
        params = {"llm_id": "m@Scripted", "sys_prompt": "Use tools.", "tools": [SLOW, {**SLOW, "name": "Slow 2"}]}
        ctx, content = await run_agent(llm, params)
        first, second = llm.calls_to("m")
    (la, a0, a1), (lb, b0, b1) = sorted(SPANS)
    assert (la, lb) == ("a", "b") and a0 < b1 and b0 < a1  # their time overlaps
    assert [t.name for t in first.tools] == ["test_slow_tool_0", "test_slow_tool_1"]
    tool_msgs = [m for m in second.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_msgs] == [("call_a", "slept a"), ("call_b", "slept b")]
    assert [c.id for c in second.messages[-3].tool_calls] == ["call_a", "call_b"]
    assert content == "Both done: slept b"
    started, finished = of(ctx.env.events, ToolCallStarted), of(ctx.env.events, ToolCallFinished)
    assert [(e.call_id.split(".")[0], e.tool_name, e.arguments) for e in started] == [
        ("call_a", "test_slow_tool_0", {"query": "a"}), ("call_b", "test_slow_tool_1", {"query": "b"})]
    assert sorted(e.call_id for e in started) == sorted(e.call_id for e in finished)
    assert sorted(e.result for e in finished) == ["slept a", "slept b"] and all(e.error is None for e in finished)
    thoughts = ctx.output("agent_thoughts")
    assert [(t["position"], t["tool"], t["tool_input"], t["observation"]) for t in thoughts] == [
        (1, "test_slow_tool_0", {"query": "a"}, "slept a"), (2, "test_slow_tool_1", {"query": "b"}, "slept b")]
    assert [u["name"] for u in ctx.output("use_tools")] == ["test_slow_tool_0", "test_slow_tool_1"]


async def test_max_rounds_forces_a_final_answer_without_tools():
    scripts = {"chat": {"loop": {
        "rules": [{"when": {"tool_choice": "none"}, "reply": "Final answer after {turn} rounds."}],
        "turns": [{"tool_calls": [{"name": "echo_0", "arguments": {"query": "again"}}]}],
    }}}
    async with llm_gateway(scripts) as llm:
        ctx, content = await run_agent(llm, {"llm_id": "loop@Scripted", "max_rounds": 2, "tools": [ECHO]})
        calls = llm.calls_to("loop")
    assert content == "Final answer after 2 rounds."
    assert [c.tool_choice for c in calls] == [None, None, "none"]
    assert calls[-1].messages[-1].content.startswith("Exceed max rounds: 2.")
    assert len(of(ctx.env.events, ToolCallFinished)) == 2


async def test_a_failing_tool_returns_its_error_to_the_model_and_the_run_goes_on():
    scripts = {"chat": {"m": {
        "rules": [{"when": {"last_role": "tool", "contains": "disk on fire"}, "reply": "The tool failed ({last_tool})."}],
        "turns": [{"tool_calls": [{"name": "test_fail_tool_0", "arguments": {}}]}],
    }}}
    async with llm_gateway(scripts) as llm:
        ctx, content = await run_agent(llm, {"llm_id": "m@Scripted", "tools": [FAIL]})
    assert content == "The tool failed (Error: disk on fire)."
    [done] = of(ctx.env.events, ToolCallFinished)
    assert done.error == "disk on fire" and done.result == "Error: disk on fire"


async def test_a_tool_past_its_time_limit_reaches_the_model_as_a_timeout():
    scripts = {"chat": {"m": [{"tool_calls": [{"name": "test_slow_tool_0", "arguments": {"query": "z"}}]},
                              "Observed: {last_tool}"]}}
    settings = EngineSettings(component_timeouts={"Agent": 60.0, "TestSlowTool": 0.2})
    async with llm_gateway(scripts) as llm:
        params = {"llm_id": "m@Scripted", "tools": [{**SLOW, "params": {"seconds": 60}}]}
        ctx, content = await run_agent(llm, params, settings=settings)
    assert content == "Observed: Error: test_slow_tool_0 timed out after 0.2 s"
    assert of(ctx.env.events, ToolCallFinished)[0].elapsed_s < 30  # cut at its limit, not the tool's 60 s sleep


async def test_unknown_tool_and_broken_arguments_are_observations_too():
    scripts = {"chat": {"m": [
        {"tool_calls": [{"name": "no_such_tool", "arguments": {}}, {"name": "echo_0", "arguments": "{\"query\": \"ok\""}]},
        "done"]}}
    async with llm_gateway(scripts) as llm:
        ctx, content = await run_agent(llm, {"llm_id": "m@Scripted", "tools": [ECHO]})
        second = llm.calls_to("m")[1]
    unknown, repaired = [m.content for m in second.messages if m.role == "tool"]
    assert unknown.startswith("Error: there is no tool named 'no_such_tool'") and "echo_0" in unknown
    assert repaired == "echo: ok"  # '{"query": "ok"' is repaired, not rejected
    assert content == "done"


async def test_a_sub_agent_runs_with_its_own_model_and_tools():
    helper = {"component_name": "Agent", "name": "Math Helper", "id": "Agent:Helper", "params": {
        "llm_id": "helper@Scripted", "sys_prompt": "You do maths.", "description": "Solves maths questions.",
        "prompts": [{"role": "user", "content": "{sys.query}"}], "max_rounds": 2, "tools": [ECHO]}}
    scripts = {"chat": {
        "lead": [{"tool_calls": [{"name": "Math_Helper_0", "arguments": {
            "user_prompt": "what is 6*7", "reasoning": "it is maths", "context": "none"}}]},
                 "Lead says: {last_tool}"],
        "helper": [{"tool_calls": [{"name": "echo_0", "arguments": {"query": "6*7"}}]}, "42 ({last_tool})"],
    }}
    async with llm_gateway(scripts) as llm:
        ctx, content = await run_agent(llm, {"llm_id": "lead@Scripted", "tools": [helper]}, query="hard question")
        lead_first = llm.calls_to("lead")[0]
        helper_first = llm.calls_to("helper")[0]
    assert content == "Lead says: 42 (echo: 6*7)"
    [tool] = lead_first.tools
    assert tool.name == "Math_Helper_0" and tool.description == "Solves maths questions."
    assert set(tool.parameters["required"]) == {"user_prompt", "reasoning", "context"}
    user = helper_first.messages[-1].content
    assert "REASONING:\nit is maths" in user and "QUERY:\nwhat is 6*7" in user
    assert helper_first.messages[0].content == "You do maths."
    nested = [e for e in of(ctx.env.events, ToolCallStarted) if e.node_id == "Agent:a-->Math_Helper"]
    assert [e.tool_name for e in nested] == ["echo_0"]


async def test_json_in_text_protocol_for_models_without_native_tools():
    scripts = {"chat": {"plain": [
        'I will use a tool.\n```json\n[{"name": "echo_0", "arguments": {"query": "hi",}}]\n```',
        "Final: {last_user}"]}}
    async with llm_gateway(scripts) as llm:
        ctx, content = await run_agent(llm, {"llm_id": "plain@Scripted", "tool_calling": "text", "tools": [ECHO]})
        first, second = llm.calls_to("plain")
    assert not first.tools  # nothing native was sent
    assert "# Tools" in first.messages[0].content and "echo_0" in first.messages[0].content
    assert second.messages[-1].role == "user" and "echo: hi" in second.messages[-1].content
    assert content == "Final: Observations:\n[1] echo_0 returned:\necho: hi"  # the call itself is not shown
    assert ctx.output("agent_thoughts")[0]["thought"] == "I will use a tool."


async def test_native_turn_whose_text_is_a_json_call_is_understood_and_not_shown():
    scripts = {"chat": {"m": ['{"name": "echo", "arguments": {"query": "typed"}}', "Result {last_tool}"]}}
    async with llm_gateway(scripts) as llm:
        ctx, content = await run_agent(llm, {"llm_id": "m@Scripted", "tools": [ECHO]})
    assert content == "Result echo: typed"  # "echo" without its index still finds echo_0


async def test_a_model_that_refuses_tools_switches_to_the_text_protocol():
    _react.TEXT_ONLY_MODELS.discard("old@Scripted")
    scripts = {"chat": {"old": {
        "rules": [{"when": {"has_tools": True},
                   "error": {"code": "INVALID_ARGUMENT", "message": "this model does not support tools"}}],
        "turns": ['[{"name": "echo_0", "arguments": {"query": "x"}}]', "ok {last_user}"]}}}
    try:
        async with llm_gateway(scripts) as llm:
            ctx, content = await run_agent(llm, {"llm_id": "old@Scripted", "tools": [ECHO]})
        assert content.startswith("ok Observations:") and "echo: x" in content
        assert "old@Scripted" in _react.TEXT_ONLY_MODELS
    finally:
        _react.TEXT_ONLY_MODELS.discard("old@Scripted")


async def test_overrides_pick_tools_system_prompt_and_model_without_touching_the_dsl():
    scripts = {"chat": {"m": ["from m"], "n": ["from n"]}}
    params = {"llm_id": "m@Scripted", "sys_prompt": "Original.", "tools": [ECHO, SLOW]}
    snapshot = json.dumps(params, sort_keys=True)
    async with llm_gateway(scripts) as llm:
        _, content = await run_agent(llm, params, overrides={
            "llm_id": "n@Scripted", "system_prompt": "Overridden.", "enabled_tools": ["test_slow_tool"]})
        [call] = llm.calls_to("n")
    assert content == "from n" and not llm.calls_to("m")
    assert call.messages[0].content == "Overridden."
    assert [t.name for t in call.tools] == ["test_slow_tool_1"]
    assert json.dumps(params, sort_keys=True) == snapshot


async def test_through_the_engine_tool_events_then_the_answer_streams_into_the_message():
    scripts = {"chat": {"m": [{"tool_calls": [{"name": "echo_0", "arguments": {"query": "weather"}}]},
                              {"reply": "It is sunny today in the whole country.", "chunk_delay_s": 0.01}]}}
    dsl = {"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", ["Message:m"], {"llm_id": "m@Scripted", "sys_prompt": "Help.", "tools": [ECHO]}),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}),
    }}
    async with llm_gateway(scripts) as llm:
        events = await run_canvas(dsl, services(llm), query="weather?")
    started = of(events, NodeStarted, "Agent:a")[0]
    [call] = of(events, ToolCallStarted, "Agent:a")
    [end] = of(events, ToolCallFinished, "Agent:a")
    deltas = of(events, MessageDelta, "Message:m")
    assert events.index(started) < events.index(call) < events.index(end) < events.index(deltas[0])
    assert len(deltas) > 3 and "".join(d.content for d in deltas) == "It is sunny today in the whole country."
    [done] = of(events, NodeFinished, "Agent:a")
    assert done.outputs["agent_thoughts"][0]["observation"] == "echo: weather"
    assert events[-1].error is None and events[-1].usage["calls"] == 2


async def test_validation_names_bad_tools_and_rounds():
    dsl = {"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", [], {"llm_id": "m", "max_rounds": "many", "tools": [
            {"component_name": "NoSuchTool", "params": {}},
            {"component_name": "Agent", "name": "Sub", "params": {"tools": [{"component_name": "CodeExec",
                                                                              "params": {"lang": "cobol"}}]}}]}),
    }}
    with pytest.raises(ValidationFailed) as err:
        async with llm_gateway({}) as llm:
            await run_canvas(dsl, services(llm))
    fields = {(i.component_id, i.field) for i in err.value.issues}
    assert ("Agent:a", "params.max_rounds") in fields
    assert ("Agent:a", "params.tools[0].component_name") in fields
    assert ("Agent:a", "params.tools[1].params.tools[0].params.lang") in fields


async def test_a_one_tool_agent_canvas_answers_with_the_local_model():
    """SmolLM2-135M through the real gateway: it calls the tool, then the forced final turn answers."""
    dsl = {"components": {
        "begin": cpn("Begin", ["Agent:a"]),
        "Agent:a": cpn("Agent", ["Message:m"], {
            "llm_id": "", "sys_prompt": "You are a helpful assistant.", "max_rounds": 1,
            "max_tokens": 32, "maxTokensEnabled": True, "top_p": 0.01, "topPEnabled": True,
            "tools": [{"component_name": "TestWeatherTool", "name": "Weather", "params": {}}]}),
        "Message:m": cpn("Message", [], {"content": ["{Agent:a@content}"]}),
    }}
    with registered(WeatherTool):
        # Model deadlines against a hang only: the model loads and answers in seconds idle, far slower when loaded.
        async with llm_gateway(local_enabled=True, local_context=2048, timeout_s=100, stream_idle_s=100) as llm:
            events = await run_canvas(dsl, services(llm), query="What's the weather in Paris?")
    assert events[-1].error is None
    [call] = of(events, ToolCallStarted, "Agent:a")
    [done] = of(events, ToolCallFinished, "Agent:a")
    assert call.tool_name == "get_weather_0" and isinstance(call.arguments.get("city"), str)
    assert done.result.startswith("Sunny, 21 degrees in") and done.error is None
    answer = "".join(d.content for d in of(events, MessageDelta, "Message:m"))
    assert answer.strip() and len(of(events, MessageDelta, "Message:m")) > 1  # streamed tokens
    assert events[-1].usage["calls"] == 2 and events[-1].usage["completion_tokens"] <= 2 * 32


def test_tools_are_named_as_ragflow_names_them():
    entries = [
        {"component_name": "CodeExec", "name": "CodeExec", "params": {}},
        {"component_name": "Retrieval", "name": "Retrieval", "params": {"kb_ids": ["kb1"]}},
        {"component_name": "Agent", "name": "Web Search Specialist", "params": {"description": "Finds URLs."}},
        {"component_name": "Invoke", "name": "Weather API", "params": {
            "url": "http://x", "variables": [{"key": "city", "ref": "sys.query"}, {"key": "unit", "value": "C"}]}},
        {"component_name": "NotInstalled", "name": "Gone", "params": {}},
    ]
    specs = _tools.build_toolset("Agent:Lead", entries)
    assert [(s.function, s.instance_id) for s in specs] == [
        ("execute_code_0", "Agent:Lead-->CodeExec"), ("search_my_dateset_1", "Agent:Lead-->Retrieval"),
        ("Web_Search_Specialist_2", "Agent:Lead-->Web_Search_Specialist"), ("invoke_3", "Agent:Lead-->Weather_API")]
    assert specs[2].schema.description == "Finds URLs."
    assert set(specs[3].schema.parameters["properties"]) == {"city", "unit"}
    merged = specs[3].component.tool_params({"city": "Oslo"})
    assert merged["variables"] == [{"key": "city", "value": "Oslo"}, {"key": "unit", "value": "C"}]
    assert [s.function for s in _tools.enabled(specs, ["CodeExec", "search_my_dateset_1"])] == [
        "execute_code_0", "search_my_dateset_1"]


async def test_structured_output_is_reformatted_to_the_schema_when_the_answer_is_prose():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    scripts = {"chat": {"m": {"rules": [{"when": {"system_contains": "Output ONLY valid JSON"}, "reply": '{"city": "Paris"}'}],
                              "turns": [{"tool_calls": [{"name": "echo_0", "arguments": {"query": "capital"}}]},
                                        "It is Paris."]}}}
    async with llm_gateway(scripts) as llm:
        params = {"llm_id": "m@Scripted", "tools": [ECHO], "outputs": {"structured": schema}}
        ctx, content = await run_agent(llm, params)
        calls = llm.calls_to("m")
    assert content == "It is Paris." and ctx.output("structured") == {"city": "Paris"}
    assert '"city"' in calls[0].messages[0].content  # the schema is asked for up front
    assert calls[-1].response_format.type == "json_schema" and calls[-1].messages[-1].content == "It is Paris."
