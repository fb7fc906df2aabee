"""Message: streaming parts, live stream forwarding, Jinja2, stream=false, random template."""
from __future__ import annotations

import asyncio

from services.orchestrator.components.base import NodeContext
from services.orchestrator.components.message import Message
from services.orchestrator.engine.events import MessageDelta, MessageEnd
from services.orchestrator.engine.variables import StreamValue
from tests.support.waiting import eventually


async def message(content, outputs=None, globals_=None, **params) -> NodeContext:
    p = {"content": content, **params}
    ctx = NodeContext.for_test(p, component_id="Message:M", component_name="Message", outputs=outputs,
                               globals_=globals_)
    await Message("Message:M", p).run(ctx)
    return ctx


def deltas(ctx: NodeContext) -> list[str]:
    return [e.content for e in ctx.env.events if isinstance(e, MessageDelta)]


async def test_plain_template_is_sent_once_resolved_and_ends_with_message_end() -> None:
    ctx = await message(["Hi {begin@name}, you asked: {sys.query} ({begin@meta})"],
                        {"begin": {"name": "Ann", "meta": {"k": 1}}}, {"sys.query": "why?"})
    assert deltas(ctx) == ['Hi Ann, you asked: why? ({"k": 1})']
    assert ctx.output("content") == 'Hi Ann, you asked: why? ({"k": 1})'
    assert isinstance(ctx.env.events[-1], MessageEnd) and ctx.output("downloads") == []
    assert ctx.inputs == {"begin@name": "Ann", "sys.query": "why?", "begin@meta": '{"k": 1}'}


async def test_a_stream_is_forwarded_chunk_by_chunk_while_produced() -> None:
    s = StreamValue()
    p = {"content": ["A: {LLM:X@content}."]}
    ctx = NodeContext.for_test(p, outputs={"LLM:X": {"content": s}})
    task = asyncio.create_task(Message("Message:M", p).run(ctx))
    await asyncio.sleep(0)
    s.push("to")
    await eventually(lambda: len(deltas(ctx)) >= 2, what="the first chunk sent")
    assert deltas(ctx) == ["A: ", "to"] and not task.done()  # already out before the stream is done
    s.push("ken")
    s.close()
    await task
    assert deltas(ctx) == ["A: ", "to", "ken", "."] and ctx.output("content") == "A: token."


async def test_jinja_template_when_double_braces_appear() -> None:
    ctx = await message(["{% for x in ['a','b'] %}{{ x }}{% endfor %}-{begin@name}-{{begin@name}}"],
                        {"begin": {"name": "Zed"}})
    assert ctx.output("content") == "ab-Zed-Zed"
    assert deltas(ctx) == ["ab-Zed-Zed"]


async def test_broken_jinja_falls_back_to_plain_substitution() -> None:
    ctx = await message(["{{ oops( }} {begin@name}"], {"begin": {"name": "Zed"}})
    assert "Zed" in ctx.output("content")


async def test_stream_false_renders_once() -> None:
    ctx = await message(["x={begin@x}"], {"begin": {"x": 1}}, stream=False)
    assert deltas(ctx) == ["x=1"]


async def test_one_template_is_picked_among_several() -> None:
    seen = {(await message(["one", "two"])).output("content") for _ in range(40)}
    assert seen == {"one", "two"}


def test_check_requires_content() -> None:
    assert Message.check("Message:M", {"content": []})[0].field == "params.content"
    assert Message.check("Message:M", {"content": ["ok"]}) == []
