"""Begin: inputs become outputs ({begin@k}); query fallback; object decoding; webhook."""
from __future__ import annotations

from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.begin import Begin
from services.orchestrator.engine.state import RunRequest


async def begin(params: dict, **req) -> NodeContext:
    ctx = NodeContext.for_test(params, component_id="begin", request=RunRequest(run_id="r", **req),
                               globals_={"sys.query": req.get("query", "")})
    await Begin("begin", params).run(ctx)
    return ctx


FIELDS = {"inputs": {"name": {"type": "line", "value": "anon"}, "cfg": {"type": "object"}}}


async def test_api_inputs_become_outputs_and_inputs() -> None:
    ctx = await begin(FIELDS, inputs={"name": {"type": "line", "value": "Ann"}, "cfg": {"type": "object", "value": '{"a": 1}'}})
    assert ctx.outputs == {"name": "Ann", "cfg": {"a": 1}}
    assert ctx.inputs == ctx.outputs


async def test_plain_values_and_undeclared_keys_are_accepted_defaults_fill_the_rest() -> None:
    ctx = await begin(FIELDS, inputs={"cfg": {"b": 2}, "extra": 7})
    assert ctx.outputs == {"name": "anon", "cfg": {"b": 2}, "extra": 7}


async def test_single_field_takes_the_query_when_no_inputs() -> None:
    ctx = await begin({"inputs": {"review": {"type": "paragraph"}}}, query="great product")
    assert ctx.output("review") == "great product"


async def test_dict_query_maps_onto_fields() -> None:
    ctx = NodeContext.for_test(FIELDS, component_id="begin", request=RunRequest(run_id="r"),
                               globals_={"sys.query": {"name": "Bo", "junk": 1}})
    await Begin("begin", FIELDS).run(ctx)
    assert ctx.output("name") == "Bo" and "junk" not in ctx.outputs


async def test_webhook_payload() -> None:
    ctx = await begin({"mode": "Webhook"}, webhook_payload={"input": {"q": 1}, "source": "gh"})
    assert ctx.outputs == {"source": "gh", "request": {"q": 1}}


def test_check() -> None:
    assert Begin.check("begin", {"mode": "chat"})[0].field == "params.mode"
    assert Begin.check("begin", {"inputs": []})[0].field == "params.inputs"
    assert Begin.check("begin", {"mode": "task", "inputs": {}}) == []
