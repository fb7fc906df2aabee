"""LLM: one model call on the rendered prompts; the answer streams into a Message directly downstream.

Params (RAGFlow `agent/component/llm.py`): `llm_id`, `sys_prompt`, `prompts` ([{role, content}] or a
string, `{refs}` resolved), sampling values sent only with their UI flag (`temperatureEnabled`...),
`max_tokens` (with `maxTokensEnabled`), `message_history_window_size` (turns of session history,
then trimmed to the model's context by `_llm.Prompt.fit`), `cite`, and `outputs.structured` (a JSON
schema: the answer is requested as JSON and parsed tolerantly into the `structured` output).
`cite` (default on): when the run's references hold chunks (an upstream Retrieval), the citation
prompt is added to the system prompt (or the author's `<CITATION_GUIDELINES>...</CITATION_GUIDELINES>`
section of `sys_prompt`), so the answer's [ID:n] markers name keys of the reference that Message sends
with `message_end`. Tagged sections (RAGFlow `_extract_prompts`) never reach the model as such.
Outputs: `content` (a stream while it is generated when a Message is directly downstream, as in RAGFlow;
otherwise the whole answer, from the gateway's one-message Complete call), `structured` when a schema is
declared.
Run overrides: `llm_id`, `attachments` (see `_llm`).
"""
from __future__ import annotations

import logging
from typing import Any

from services.clients.llm_models import Message, ResponseFormat
from services.orchestrator.components import _llm
from services.orchestrator.components._llm_params import LlmParams
from services.orchestrator.components.base import Component, NodeContext, register

log = logging.getLogger(__name__)


async def build_prompt(ctx: NodeContext, params: LlmParams, *, sys_prompt: str | None = None,
                       prompts: list[dict[str, str]] | None = None, literal_prompts: bool = False,
                       extra_system: tuple[str, ...] = (), attachments: bool = True) -> _llm.Prompt:
    """System prompt (+ citation, schema and `extra_system` instructions), attachments, history, prompts."""
    system = await _llm.render_recorded(ctx, params.sys_prompt if sys_prompt is None else sys_prompt)
    user_defined, system = _llm.extract_prompts(system)
    if _llm.needs_citation(ctx, params):  # RAGFlow: cite on and chunks already in the run's references
        system += "\n" + _llm.citation_prompt(user_defined)
    for extra in extra_system:
        if extra:
            system += "\n" + extra
    head = [Message("system", system.strip())] if system.strip() else []
    attached = _llm.attachments_message(ctx) if attachments else None
    if attached is not None:
        head.append(attached)
    tail = await _llm.render_prompts(ctx, _llm.prompt_list(params) if prompts is None else prompts,
                                     literal=literal_prompts)
    hist = _llm.history(ctx, _llm.window_size(params))
    if hist and tail and hist[-1].role == tail[0].role:
        hist = hist[:-1]  # RAGFlow skips a prompt whose role repeats the last history message; keep the prompt
    return _llm.Prompt(head, hist, tail)


@register
class LLM(Component):
    component_name = "LLM"
    exception_output = "content"
    params_model = LlmParams
    params: LlmParams

    def thoughts(self, ctx: NodeContext) -> str:
        return _llm.thinking_text(ctx, self.params)

    async def run(self, ctx: NodeContext) -> None:
        conf = _llm.ModelConf.of(ctx, self.params)
        schema = _llm.output_schema(self.params)
        prompt = await build_prompt(ctx, self.params,
                                    extra_system=(_llm.structured_prompt(schema),) if schema else ())
        messages = prompt.fit(_llm.prompt_budget(ctx, conf))
        if schema is not None:
            await self._structured(ctx, conf, messages, schema)
            return
        if _llm.should_stream(self, schema):
            rest = await _llm.primed(d.content async for d in _llm.stream(ctx, conf, messages) if d.content)
            ctx.set_output("content", "" if rest is None else ctx.stream(rest))
        else:
            ctx.set_output("content", await _llm.complete(ctx, conf, messages))

    async def _structured(self, ctx: NodeContext, conf: _llm.ModelConf, messages: list[Message],
                          schema: dict[str, Any]) -> None:
        fmt = ResponseFormat("json_schema", schema=schema, name="structured")
        text = await _llm.complete(ctx, conf, messages, response_format=fmt)
        try:
            value = _llm.parse_structured(text)
        except ValueError:
            # One repair round, as RAGFlow does: show the model its answer and ask again.
            log.info("%s: structured answer is not JSON, asking again", ctx.component_id)
            retry = [*messages, Message("assistant", text),
                     Message("user", "The answer can't be parsed as JSON. Reply with the JSON value only.")]
            text = await _llm.complete(ctx, conf, retry, response_format=fmt)
            value = _llm.parse_structured(text)
        ctx.set_output("content", text)
        ctx.set_output("structured", value)
