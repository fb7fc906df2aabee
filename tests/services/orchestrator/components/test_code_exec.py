"""CodeExec as a component and as the Agent's `execute_code` tool, running in the real sandbox service."""
from __future__ import annotations

import pytest

from services.orchestrator.components._sandbox import SandboxUnavailable
from services.orchestrator.components.agent import Agent
from services.orchestrator.components.code_exec import CodeExec, CodeExecFailed
from services.orchestrator.engine.events import NodeFinished, RunError, ToolCallFinished
from services.orchestrator.engine.validate import ValidationFailed
from tests.support.canvas import cpn, node_ctx, of, run_canvas, services
from tests.support.llm_gateway import llm_gateway


async def test_arguments_from_references_in_the_declared_business_output_out(sandbox):
    params = {"lang": "python", "arguments": {"city": "begin@city", "days": "{env.days}"},
              "script": "def main(city, days):\n    print('planning', city)\n    return {'plan': [city] * int(days)}",
              "outputs": {"plan": {"type": "Object", "value": None}}}
    ctx = node_ctx(services(sandbox=sandbox), params, outputs={"begin": {"city": "Oslo"}}, globals_={"env.days": 2})
    await CodeExec("CodeExec:x", params).run(ctx)
    assert ctx.output("plan") == {"plan": ["Oslo", "Oslo"]} == ctx.output("raw_result")
    assert ctx.output("actual_type") == "Object"
    assert ctx.output("content") == '{\n  "plan": [\n    "Oslo",\n    "Oslo"\n  ]\n}'
    assert ctx.output("stdout") == "planning Oslo\n" and ctx.output("attachments") == []
    assert ctx.inputs == {"city": "Oslo", "days": 2}


async def test_javascript_and_a_typed_array_output(sandbox):
    params = {"lang": "javascript", "arguments": {"n": "sys.query"},
              "script": "function main({n}) { return Array.from({length: Number(n)}, (_, i) => i * i) }",
              "outputs": {"squares": {"type": "Array<Number>"}}}
    ctx = node_ctx(services(sandbox=sandbox), params, query="4")
    await CodeExec("CodeExec:x", params).run(ctx)
    assert ctx.output("squares") == [0, 1, 4, 9] and ctx.output("actual_type") == "Array<Number>"


async def test_a_value_of_the_wrong_type_breaks_the_contract(sandbox):
    params = {"script": "def main():\n    return 42", "outputs": {"result": {"type": "String"}}}
    ctx = node_ctx(services(sandbox=sandbox), params)
    with pytest.raises(CodeExecFailed, match="expects String, main returned Number"):
        await CodeExec("CodeExec:x", params).run(ctx)
    assert ctx.output("result") is None and ctx.output("raw_result") == 42


async def test_an_exception_in_a_canvas_fails_the_run_with_the_user_traceback(sandbox):
    dsl = {"components": {
        "begin": cpn("Begin", ["CodeExec:x"]),
        "CodeExec:x": cpn("CodeExec", [], {"lang": "python", "script": "def main():\n    x = 1\n    return x / 0"}),
    }}
    events = await run_canvas(dsl, services(sandbox=sandbox))
    [err] = of(events, RunError)
    assert err.component_id == "CodeExec:x"
    assert "EXCEPTION: ZeroDivisionError: division by zero" in err.message and "line 3" in err.message
    assert "orchestrator" not in err.message  # the traceback shows the user's code only
    [done] = of(events, NodeFinished, "CodeExec:x")
    assert done.error and done.outputs["_ERROR"]


async def test_no_sandbox_configured_is_a_clear_error():
    ctx = node_ctx(services(), {"script": "def main():\n    return 1"})
    with pytest.raises(SandboxUnavailable, match="no sandbox service is configured"):
        await CodeExec("CodeExec:x", {"script": "def main():\n    return 1"}).run(ctx)


async def test_as_a_tool_the_model_writes_code_and_errors_come_back_as_observations(sandbox):
    good = "def main():\n    values = [3, 1, 4, 1, 5]\n    print('n =', len(values))\n    return {'mean': sum(values) / len(values)}"
    bad = "def main():\n    return undefined_name"
    scripts = {"chat": {"coder": [
        {"tool_calls": [{"name": "execute_code_0", "arguments": {"lang": "python", "script": bad}}]},
        {"tool_calls": [{"name": "execute_code_0", "arguments": {"lang": "python", "script": good}}]},
        "Done: {last_tool}"]}}
    tool = {"component_name": "CodeExec", "name": "CodeExec", "id": "CodeExec:t", "params": {}}
    async with llm_gateway(scripts) as llm:
        params = {"llm_id": "coder@Scripted", "max_rounds": 3, "tools": [tool]}
        ctx = node_ctx(services(llm, sandbox), params, query="mean?", component_id="Agent:a", component_name="Agent")
        await Agent("Agent:a", params).run(ctx)
        await ctx.finish_streams()
        calls = llm.calls_to("coder")
    [schema] = calls[0].tools
    assert schema.name == "execute_code_0" and set(schema.parameters["required"]) == {"lang", "script"}
    first_obs = calls[1].messages[-1]
    assert first_obs.role == "tool" and "NameError" in first_obs.content and first_obs.content.startswith("Error:")
    assert ctx.output("content") == 'Done: {\n  "mean": 2.8\n}\n\nstdout:\nn = 5'
    errors = [e.error for e in of(ctx.env.events, ToolCallFinished)]
    assert errors[0] and "NameError" in errors[0] and errors[1] is None


def test_validation_of_lang_script_and_outputs():
    issues = CodeExec.check("CodeExec:x", {"lang": "ruby", "script": "", "arguments": [],
                                           "outputs": {"a": {}, "b": {}, "content": {}}})
    assert [i.field for i in issues] == ["params.lang", "params.script", "params.arguments", "params.outputs"]
    assert CodeExec.check("CodeExec:x", {}) == []  # RAGFlow defaults (a tool entry has no params)


async def test_invalid_canvas_is_refused_before_running():
    dsl = {"components": {"begin": cpn("Begin", ["CodeExec:x"]),
                          "CodeExec:x": cpn("CodeExec", [], {"lang": "cobol", "script": "x"})}}
    with pytest.raises(ValidationFailed, match="params.lang"):
        await run_canvas(dsl, services())
