"""LLM component against the real llm_gateway (scripted provider) on port 0."""
from __future__ import annotations

import grpc
import pytest

from services.common.errors import ServiceError
from services.orchestrator.components import _llm
from services.orchestrator.components._llm_params import LlmParams
from services.orchestrator.components.llm import LLM
from services.orchestrator.engine.events import MessageDelta, NodeFinished, RunFinished
from services.orchestrator.engine.state import SessionState
from services.orchestrator.engine.variables import StreamValue
from tests.support.canvas import cpn, node_ctx, of, plan_of, run_canvas, services
from tests.support.llm_gateway import llm_gateway

ANSWER = "Paris is the capital of France and its largest city."
SCRIPTS = {"chat": {
    "writer": {"turns": [{"reply": ANSWER, "chunk_delay_s": 0.02}]},
    "echo": ["{last_user}"],
    "other": ["other model"],
    "json": ['Sure:\n```json\n{"city": "Paris", "population": 2100000,}\n```'],
    "chatty": ["I think the city is Paris."],
}}


async def test_content_streams_token_by_token_while_generated():
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm), query="capital of France?")
        node = LLM("LLM:a", {"llm_id": "writer@Scripted"})
        node.streams_downstream = True  # what the planner sets when a Message is directly downstream
        await node.run(ctx)
        content = ctx.output("content")
        assert isinstance(content, StreamValue)
        seen = []
        async for chunk in content:
            seen.append((chunk, content.done))
        await ctx.finish_streams()
        assert "".join(c for c, _ in seen) == ANSWER == content.text
        assert len(seen) > 3 and not seen[0][1]  # the first word arrived before the answer was complete
        assert ctx.env.usage["calls"] == 1 and ctx.env.usage["completion_tokens"] > 0


async def test_prompts_refs_and_sampling_reach_the_model():
    async with llm_gateway(SCRIPTS) as llm:
        params = {"llm_id": "echo@Scripted", "sys_prompt": "You are {env.persona}.",
                  "prompts": [{"role": "user", "content": "Q: {sys.query} ({Begin:x@lang})"}],
                  "temperature": "0.3", "temperatureEnabled": True, "top_p": 0.9, "topPEnabled": False,
                  "max_tokens": 50, "maxTokensEnabled": True, "presence_penalty": 0, "presencePenaltyEnabled": True}
        ctx = node_ctx(services(llm), params, query="why?", globals_={"env.persona": "a pirate"},
                       outputs={"Begin:x": {"lang": "en"}})
        await LLM("LLM:a", params).run(ctx)
        await ctx.finish_streams()
        assert ctx.output("content") == "Q: why? (en)"  # no Message downstream: the whole answer
        [call] = llm.calls_to("echo")
        assert [(m.role, m.content) for m in call.messages] == [("system", "You are a pirate."), ("user", "Q: why? (en)")]
        assert call.sampling.temperature == pytest.approx(0.3) and call.sampling.top_p is None  # flag off: not sent
        assert call.sampling.presence_penalty is None  # 0 is never sent (RAGFlow gen_conf)
        assert call.max_tokens == 50
        assert ctx.inputs == {"env.persona": "a pirate", "sys.query": "why?", "Begin:x@lang": "en"}


async def test_history_window_keeps_the_last_turns_and_skips_the_current_query():
    state = SessionState.fresh()
    for i in range(10):
        state.history += [["user", f"question {i}"], ["assistant", f"answer {i}"]]
    state.history.append(["user", "now"])  # what prepare_run appends for this run
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm), query="now", state=state)
        await LLM("LLM:a", {"llm_id": "echo@Scripted", "message_history_window_size": 2}).run(ctx)
        await ctx.finish_streams()
        [call] = llm.calls_to("echo")
        assert [m.content for m in call.messages] == ["question 8", "answer 8", "question 9", "answer 9", "now"]


async def test_memory_trims_history_newest_first_to_the_context_budget():
    state = SessionState.fresh()
    for i in range(40):
        state.history += [["user", f"q{i} " + "word " * 60], ["assistant", f"a{i} " + "word " * 60]]
    async with llm_gateway(SCRIPTS) as llm:
        svc = services(llm, llm_context_tokens=1200)
        ctx = node_ctx(svc, query="latest question", state=state)
        params = {"llm_id": "echo@Scripted", "sys_prompt": "Be brief.", "message_history_window_size": 40}
        await LLM("LLM:a", params).run(ctx)
        await ctx.finish_streams()
        [call] = llm.calls_to("echo")
        budget = _llm.prompt_budget(ctx, _llm.ModelConf.of(ctx, LlmParams.model_validate(params)))
        assert sum(_llm.message_tokens(m) for m in call.messages) <= budget < 1200
        kept = [m.content.split()[0] for m in call.messages[1:-1]]
        assert 2 <= len(kept) < 80 and kept[-1] == "a39"  # the newest survive, the oldest went
        assert kept == [f"{r}{i}" for i in range(40) for r in ("q", "a")][-len(kept):]
        assert call.messages[0].content == "Be brief." and call.messages[-1].content == "latest question"


async def test_a_prompt_longer_than_the_context_is_cut_not_sent_whole():
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm, llm_context_tokens=800), query="x " * 5000)
        params = {"llm_id": "echo@Scripted"}
        await LLM("LLM:a", params).run(ctx)
        await ctx.finish_streams()
        [call] = llm.calls_to("echo")
        assert sum(_llm.message_tokens(m) for m in call.messages) <= _llm.prompt_budget(ctx, _llm.ModelConf.of(ctx, LlmParams.model_validate(params)))
        assert call.messages[-1].content.endswith("[truncated]")


async def test_structured_output_is_parsed_tolerantly_and_requested_as_json():
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}}}
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm), query="Paris?")
        params = {"llm_id": "json@Scripted", "outputs": {"structured": schema, "content": {"type": "string"}}}
        await LLM("LLM:a", params).run(ctx)
        assert ctx.output("structured") == {"city": "Paris", "population": 2100000}
        [call] = llm.calls_to("json")
        assert call.response_format.type == "json_schema" and call.response_format.schema == schema
        assert '"population"' in call.messages[0].content  # the schema is in the system prompt too


async def test_structured_output_that_is_not_json_fails_after_one_repair_round():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm), query="Paris?")
        with pytest.raises(ValueError, match="cannot be parsed as JSON"):
            await LLM("LLM:a", {"llm_id": "chatty@Scripted", "outputs": {"structured": schema}}).run(ctx)
        assert len(llm.calls_to("chatty")) == 2
        assert "can't be parsed as JSON" in llm.calls_to("chatty")[1].messages[-1].content


async def test_unknown_model_fails_inside_run_so_retries_and_exception_policies_apply():
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm), query="hi")
        with pytest.raises(ServiceError) as err:
            await LLM("LLM:a", {"llm_id": "nope@Scripted"}).run(ctx)
        assert err.value.code == grpc.StatusCode.NOT_FOUND and "nope" in err.value.message


async def test_overrides_change_the_model_and_inject_attachments():
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm), query="summarise", overrides={
            "llm_id": "other@Scripted",
            "attachments": ["Q3 revenue grew 12%.", {"name": "notes.md", "content": "Ship on Friday."}]})
        await LLM("LLM:a", {"llm_id": "writer@Scripted", "sys_prompt": "Be precise."}).run(ctx)
        await ctx.finish_streams()
        assert ctx.output("content") == "other model" and not llm.calls_to("writer")
        [call] = llm.calls_to("other")
        assert [m.role for m in call.messages] == ["system", "system", "user"]
        attached = call.messages[1].content
        assert "Q3 revenue grew 12%." in attached and "### Attachment 2: notes.md" in attached
        assert "Ship on Friday." in attached


async def test_cite_adds_citation_instructions_only_when_chunks_were_retrieved():
    async with llm_gateway(SCRIPTS) as llm:
        state = SessionState.fresh()
        state.retrieval = [{"chunks": {"1": {"content": "x"}}, "doc_aggs": {}}]
        ctx = node_ctx(services(llm), query="q", state=state)
        await LLM("LLM:a", {"llm_id": "echo@Scripted", "sys_prompt": "S"}).run(ctx)
        ctx2 = node_ctx(services(llm), query="q")
        await LLM("LLM:b", {"llm_id": "echo@Scripted", "sys_prompt": "S"}).run(ctx2)
        ctx3 = node_ctx(services(llm), query="q", state=state)
        await LLM("LLM:c", {"llm_id": "echo@Scripted", "sys_prompt": "S", "cite": False}).run(ctx3)
        for c in (ctx, ctx2, ctx3):
            await c.finish_streams()
        first, second, third = llm.calls_to("echo")
        assert "[ID:i]" in first.messages[0].content
        assert "[ID:i]" not in second.messages[0].content and "[ID:i]" not in third.messages[0].content


async def test_through_the_engine_the_answer_streams_into_the_message():
    dsl = {"components": {
        "begin": cpn("Begin", ["LLM:a"]),
        "LLM:a": cpn("LLM", ["Message:m"], {"llm_id": "writer@Scripted", "sys_prompt": "Geography."}),
        "Message:m": cpn("Message", [], {"content": ["{LLM:a@content}"]}),
    }}
    async with llm_gateway(SCRIPTS) as llm:
        events = await run_canvas(dsl, services(llm), query="capital of France?")
    deltas = of(events, MessageDelta, "Message:m")
    assert len(deltas) > 3 and "".join(d.content for d in deltas) == ANSWER
    [done] = of(events, NodeFinished, "LLM:a")
    assert done.outputs["content"] == ANSWER and done.error is None
    assert events.index(done) > events.index(deltas[0])  # the Message forwarded tokens before the LLM finished
    assert events[-1].error is None and events[-1].usage["calls"] == 1


async def test_only_a_message_directly_downstream_gets_a_stream():
    """RAGFlow's rule: the answer streams into a Message right after the LLM. Any other reader (here a
    StringTransform before the Message) gets the whole answer, which the gateway sends in one message."""
    dsl = {"components": {
        "begin": cpn("Begin", ["LLM:a"]),
        "LLM:a": cpn("LLM", ["StringTransform:s"], {"llm_id": "writer@Scripted"}),
        "StringTransform:s": cpn("StringTransform", ["Message:m"], {"method": "merge", "script": "A: {LLM:a@content}"}),
        "Message:m": cpn("Message", [], {"content": ["{StringTransform:s@result} / {LLM:a@content}"]}),
    }}
    async with llm_gateway(SCRIPTS) as llm:
        streamed, whole = llm.served("Chat"), llm.served("Complete")
        events = await run_canvas(dsl, services(llm), query="capital of France?")
        assert (llm.served("Chat") - streamed, llm.served("Complete") - whole) == (0, 1)
    [delta] = of(events, MessageDelta, "Message:m")
    assert delta.content == f"A: {ANSWER} / {ANSWER}"
    assert events[-1].error is None and events[-1].usage["calls"] == 1 and events[-1].usage["completion_tokens"] > 0
    plan = plan_of(dsl["components"])
    assert [plan.top.nodes[n].component.streams_downstream for n in ("begin", "LLM:a", "StringTransform:s")] == \
        [False, False, True]  # set for every component; only an LLM or Agent reads it


async def test_a_message_reached_only_through_exception_goto_gets_no_stream():
    dsl = {"components": {
        "begin": cpn("Begin", ["LLM:a"]),
        "LLM:a": cpn("LLM", ["StringTransform:s"], {"llm_id": "writer@Scripted", "exception_method": "goto",
                                                     "exception_goto": ["Message:oops"]}),
        "StringTransform:s": cpn("StringTransform", [], {"method": "merge", "script": "{LLM:a@content}"}),
        "Message:oops": cpn("Message", [], {"content": ["failed"]}),
    }}
    assert plan_of(dsl["components"]).top.nodes["LLM:a"].component.streams_downstream is False


async def test_a_failing_model_with_exception_comment_gives_the_default_value():
    dsl = {"components": {
        "begin": cpn("Begin", ["LLM:a"]),
        "LLM:a": cpn("LLM", ["Message:m"], {"llm_id": "nope@Scripted", "exception_method": "comment",
                                             "exception_default_value": "Sorry, no model."}),
        "Message:m": cpn("Message", [], {"content": ["{LLM:a@content}"]}),
    }}
    async with llm_gateway(SCRIPTS) as llm:
        events = await run_canvas(dsl, services(llm), query="hi")
    [msg] = of(events, NodeFinished, "Message:m")
    assert msg.outputs["content"] == "Sorry, no model."
    assert isinstance(events[-1], RunFinished) and events[-1].error is None


async def test_a_max_tokens_beyond_the_context_does_not_eat_the_prompt():
    """RAGFlow templates ask for max_tokens 128000; the system prompt must still reach an 8192-token model."""
    async with llm_gateway(SCRIPTS) as llm:
        ctx = node_ctx(services(llm), query="question")
        params = {"llm_id": "echo@Scripted", "sys_prompt": "Rules: " + "be precise. " * 300,
                  "max_tokens": 128000, "maxTokensEnabled": True}
        assert _llm.prompt_budget(ctx, _llm.ModelConf.of(ctx, LlmParams.model_validate(params))) == int(8192 * 0.97) - 8192 // 2
        await LLM("LLM:a", params).run(ctx)
        await ctx.finish_streams()
        [call] = llm.calls_to("echo")
        assert call.messages[0].content == params["sys_prompt"].strip()  # whole, not truncated
