"""What the components that call a chat model share (LLM, Agent, Categorize).

- Params: `LlmParams` (`_llm_params.py`), which every helper here reads.
- `ModelConf.of(ctx, params)`: the model id (run override first) and RAGFlow's `gen_conf()` sampling:
  a value is sent only when its UI flag (`temperatureEnabled`...) is on and the value is > 0.
- `Prompt` (`_memory.py`): the messages in parts, trimmed to the model's context.
- `stream(ctx, conf, messages, ...)`: the gateway's deltas, with token usage added to the run.
- Runtime overrides (never written to the DSL: `RunRequest.overrides` in state.py) come from `RunRequest.overrides` (`overrides(ctx)`): "llm_id",
  "system_prompt", "enabled_tools", "attachments".
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

import json_repair

from services.clients.llm_models import (
    ChatDelta,
    ChatResult,
    Message,
    ResponseFormat,
    Sampling,
    Tool,
    ToolCallDelta,
    ToolChoice,
)
from services.orchestrator.components._fields import as_bool
from services.orchestrator.components._llm_params import LlmParams
from services.orchestrator.components._memory import Prompt, message_tokens, prompt_budget
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine.variables import StreamValue, to_text

log = logging.getLogger(__name__)

__all__ = ["ModelConf", "Prompt", "message_tokens", "prompt_budget", "overrides", "stream", "complete"]

DEFAULT_WINDOW = 13  # RAGFlow ComponentParamBase.message_history_window_size
_SAMPLING = (("temperature", "temperatureEnabled"), ("top_p", "topPEnabled"),
             ("presence_penalty", "presencePenaltyEnabled"), ("frequency_penalty", "frequencyPenaltyEnabled"))
_ROLES = ("system", "user", "assistant")

STRUCTURED_PROMPT = """
# Output format
Reply with ONE JSON value that follows this JSON schema, and nothing else (no markdown fence, no comment):
{schema}
"""

# RAGFlow's `citation_prompt()` (rag/prompts/citation_prompt.md), in our words: the rules that make the
# model write [ID:n] markers whose n is a key of the run's reference chunks (Retrieval's "ID: n" blocks).
CITATION_PROMPT = """
# Citations
The retrieved content comes in blocks that start with "ID: i". Cite the blocks your answer relies on.
- Format: [ID:i], with i the block's ID; several sources as [ID:i] [ID:j], never [ID:i, ID:j].
- Put the citations at the end of the sentence they support, before its final punctuation.
- At most 4 citations per sentence; cite only IDs that appear in the retrieved content, never invent one.
- Cite facts taken from the retrieved content: numbers, dates, definitions, causes, comparisons, quotes,
  predictions and disputed claims. Do not cite common knowledge, transitions, or your own reasoning.
- Do not change the wording of what you write to fit a citation, and use no other markup (no ~~).
"""
# Sections a system prompt may carry in tags (RAGFlow `LLM._extract_prompts`): taken out of the system
# prompt; `<CITATION_GUIDELINES>` replaces CITATION_PROMPT. The others tune RAGFlow's text-protocol
# agent prompts, which native tool calling does not use.
PROMPT_TAGS = ("TASK_ANALYSIS", "PLAN_GENERATION", "REFLECTION", "CONTEXT_SUMMARY", "CONTEXT_RANKING",
               "CITATION_GUIDELINES")
CITATION_MARK = re.compile(r"\[ID:\s*(\d+)\]")

ATTACHMENTS_PROMPT = ("The user provided the following attachments. Answer with both these files and the "
                      "new question in mind; ignore an attachment that has nothing to do with the question.\n\n")


class LlmUnavailable(RuntimeError):
    pass


# ------------------------------------------------------------------------------------ params
def overrides(ctx: NodeContext) -> dict[str, Any]:
    req = ctx.request
    o = getattr(req, "overrides", None) if req is not None else None
    return o if isinstance(o, dict) else {}


@dataclass(frozen=True, slots=True)
class ModelConf:
    model_id: str
    sampling: Sampling
    max_tokens: int
    timeout_s: float | None

    @classmethod
    def of(cls, ctx: NodeContext, params: LlmParams) -> ModelConf:
        model = overrides(ctx).get("llm_id") or params.llm_id or ""
        values: dict[str, float] = {}
        for key, flag in _SAMPLING:
            v = _positive(getattr(params, key)) if as_bool(getattr(params, flag)) else None
            if v is not None:
                values[key] = v
        max_tokens = 0
        if as_bool(params.maxTokensEnabled):
            max_tokens = int(_positive(params.max_tokens) or 0)
        return cls(str(model), Sampling(**values), max_tokens, ctx.settings.timeout_for(ctx.component_name))


def _positive(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f > 0 else None


def window_size(params: LlmParams, default: int = DEFAULT_WINDOW) -> int:
    size = params.message_history_window_size
    try:
        return default if size is None else max(0, int(size))
    except (TypeError, ValueError):
        return default


# ------------------------------------------------------------------------------------ prompt parts
async def render_recorded(ctx: NodeContext, text: str) -> str:
    """`text` with its references resolved; each reference is recorded as a NodeFinished input."""
    out = await ctx.render(text)
    for ref in ctx.refs(text):
        v = ctx.get(ref)
        ctx.set_input(ref, v.text if isinstance(v, StreamValue) else to_text(v))
    return out


def prompt_list(params: LlmParams) -> list[dict[str, str]]:
    prompts = params.prompts
    if prompts is None:
        return [{"role": "user", "content": "{sys.query}"}]
    if isinstance(prompts, str):
        return [{"role": "user", "content": prompts}]
    return [{"role": p.role, "content": p.content} for p in prompts]


async def render_prompts(ctx: NodeContext, prompts: list[dict[str, str]], *, literal: bool = False) -> list[Message]:
    """Each prompt with references resolved; neighbours with the same role are joined."""
    out: list[Message] = []
    for p in prompts:
        role = p.get("role") or "user"
        role = role if role in _ROLES else "user"
        content = p.get("content") or ""
        if not literal:
            content = await render_recorded(ctx, content)
        if out and out[-1].role == role:
            out[-1] = Message(role, f"{out[-1].content}\n\n{content}")  # type: ignore[arg-type]
        else:
            out.append(Message(role, content))  # type: ignore[arg-type]
    return out


def history(ctx: NodeContext, window: int, *, include_current: bool = False) -> list[Message]:
    """The last `window` turns of the session (RAGFlow `get_history`), oldest first.

    The run's own query (appended to the history at run start) is left out unless `include_current`:
    the component's prompts carry the current turn.
    """
    raw = list(getattr(ctx.env.state, "history", None) or [])
    if not include_current and raw:
        last = raw[-1]
        if _role_of(last) == "user" and _content_of(last) == to_text(ctx.get_global("sys.query")):
            raw.pop()
    if window <= 0:
        return []
    out = []
    for entry in raw[-2 * window:]:
        role = _role_of(entry)
        if role in ("user", "assistant"):
            out.append(Message(role, _content_of(entry)))  # type: ignore[arg-type]
    return out


def _role_of(entry: Any) -> str:
    if isinstance(entry, dict):
        return str(entry.get("role", ""))
    return str(entry[0]) if isinstance(entry, (list, tuple)) and entry else ""


def _content_of(entry: Any) -> str:
    if isinstance(entry, dict):
        obj = entry.get("content")
    else:
        obj = entry[1] if isinstance(entry, (list, tuple)) and len(entry) > 1 else ""
    if isinstance(obj, dict):
        obj = obj.get("content", "")
    return to_text(obj)


def attachments_message(ctx: NodeContext) -> Message | None:
    """The run's attachments (override `attachments`) as one system message (a system message before the prompt)."""
    items = overrides(ctx).get("attachments") or []
    if not isinstance(items, list):
        items = [items]
    chunks = []
    for i, item in enumerate(items, 1):
        if isinstance(item, dict):
            name = item.get("file_name") or item.get("name") or f"Attachment {i}"
            text = item.get("content") or item.get("markdown") or item.get("text") or ""
        else:
            name, text = f"Attachment {i}", item
        text = to_text(text).strip()
        if text:
            chunks.append(f"### Attachment {i}: {name}\n\n{text}")
    return Message("system", ATTACHMENTS_PROMPT + "\n\n".join(chunks)) if chunks else None


def extract_prompts(sys_prompt: str) -> tuple[dict[str, str], str]:
    """({tag in lower case: text}, the system prompt without those tagged sections)."""
    found: dict[str, str] = {}
    for tag in PROMPT_TAGS:
        pattern = re.compile(rf"<{tag}>(.*?)</{tag}>", re.DOTALL | re.IGNORECASE)
        m = pattern.search(sys_prompt)
        if m:
            found[tag.lower()] = m.group(1)
            sys_prompt = pattern.sub("", sys_prompt)
    return found, sys_prompt


def citation_prompt(user_defined: dict[str, str] | None = None) -> str:
    """The citation instructions: the canvas author's `<CITATION_GUIDELINES>`, else CITATION_PROMPT."""
    custom = (user_defined or {}).get("citation_guidelines", "")
    return custom if custom.strip() else CITATION_PROMPT


def cited_ids(text: str) -> list[str]:
    """The ids of the [ID:n] markers in an answer, in order, once each: keys of the reference's chunks."""
    return list(dict.fromkeys(CITATION_MARK.findall(text)))


def needs_citation(ctx: NodeContext, params: LlmParams) -> bool:
    """RAGFlow: `cite` on and chunks retrieved in this run (never for a sub-agent)."""
    if not as_bool(params.cite) or "-->" in ctx.component_id:
        return False
    retrieval = getattr(ctx.env.state, "retrieval", None)
    return bool(isinstance(retrieval, list) and retrieval and isinstance(retrieval[-1], dict)
                and retrieval[-1].get("chunks"))


def sync_preview(ctx: NodeContext, text: str) -> str:
    """`text` with the references that are already known filled in (for `thoughts()`, which is sync)."""
    out = []
    for part in ctx.parts(text):
        if isinstance(part, StreamValue):
            out.append(part.text if part.done else "…")
        else:
            out.append(part)
    return "".join(out)


def thinking_text(ctx: NodeContext, params: LlmParams) -> str:
    prompts = prompt_list(params)
    start = sync_preview(ctx, prompts[-1].get("content", "")) if prompts else ""
    start = re.sub(r"(User's query:|[\\]+)", "", start)
    return f"⌛Give me a moment—starting from: \n\n{start}\n\nI’ll figure out our best next move."


# ------------------------------------------------------------------------------------ structured output
def output_schema(params: LlmParams) -> dict[str, Any] | None:
    """The JSON schema declared in `outputs.structured` (RAGFlow `_get_output_schema`), or None."""
    outputs = params.outputs
    cand = outputs.get("structured") if isinstance(outputs, dict) else None
    if isinstance(cand, dict):
        if isinstance(cand.get("properties"), dict) and cand["properties"]:
            return cand
        for k in ("schema", "structured", "value"):
            sub = cand.get(k)
            if isinstance(sub, dict) and isinstance(sub.get("properties"), dict) and sub["properties"]:
                return sub
    return None


def structured_prompt(schema: dict[str, Any]) -> str:
    return STRUCTURED_PROMPT.format(schema=json.dumps(schema, ensure_ascii=False, indent=2))


def parse_structured(text: str) -> Any:
    """The JSON value in a model's answer, repaired tolerantly; ValueError when there is none."""
    cleaned = re.sub(r"^.*</think>", "", text, flags=re.DOTALL)
    cleaned = re.sub(r"^.*?```(?:json)?", "", cleaned, count=1, flags=re.DOTALL) if "```" in cleaned else cleaned
    cleaned = re.sub(r"```\s*$", "", cleaned).strip()
    try:
        value = json.loads(cleaned)
    except ValueError:
        value = json_repair.loads(cleaned) if cleaned else ""
    if not isinstance(value, (dict, list)):
        raise ValueError("the answer cannot be parsed as JSON")
    return value


# ------------------------------------------------------------------------------------ calls
def client(ctx: NodeContext) -> Any:
    llm = ctx.services.llm
    if llm is None:
        raise LlmUnavailable(f"{ctx.component_id}: no LLM service is configured (llm_gateway)")
    return llm


def note_fallback(ctx: NodeContext, notice: str) -> None:
    """Adds a fallback notice to the node's `model_fallback` input (once each: a node may run several models,
    and an Agent's sub-agents pass theirs up, see _tools.call_tool)."""
    seen = str(ctx.inputs.get("model_fallback") or "")
    for line in notice.splitlines():
        if line and line not in seen.splitlines():
            seen = f"{seen}\n{line}" if seen else line
    ctx.set_input("model_fallback", seen)


async def stream(ctx: NodeContext, conf: ModelConf, messages: Sequence[Message], *,
                 tools: Sequence[Tool] = (), tool_choice: ToolChoice | None = None,
                 response_format: ResponseFormat | None = None) -> AsyncIterator[ChatDelta]:
    """One model turn's deltas; its token usage is added to the run's total. When the gateway ran its
    default model in place of an unconfigured one (TRELLIS_MODEL_FALLBACK), the notice saying so becomes the
    node's `model_fallback` input, which the run's node_finished event carries to the client."""
    usage = None
    deltas = client(ctx).stream_chat(conf.model_id, list(messages), tools=list(tools), tool_choice=tool_choice,
                                     response_format=response_format, sampling=conf.sampling,
                                     max_tokens=conf.max_tokens, timeout=conf.timeout_s)
    try:
        async for d in deltas:
            if d.usage is not None:
                usage = d.usage
            if d.notice:
                note_fallback(ctx, d.notice)
            yield d
    finally:
        await deltas.aclose()
        if usage is not None:
            ctx.add_usage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                          total_tokens=usage.total_tokens, calls=1)
        else:
            ctx.add_usage(calls=1)


async def complete(ctx: NodeContext, conf: ModelConf, messages: Sequence[Message], *,
                   response_format: ResponseFormat | None = None) -> str:
    """A whole turn's text, in one message from the gateway; usage and fallback notice as for `stream`."""
    return (await complete_turn(ctx, conf, messages, response_format=response_format)).content


async def turn(ctx: NodeContext, conf: ModelConf, messages: Sequence[Message], *, whole: bool,
               **kw: Any) -> AsyncIterator[ChatDelta]:
    """One turn's deltas: streamed, or (`whole`) the whole turn as one delta from one Complete call."""
    if not whole:
        async for d in stream(ctx, conf, messages, **kw):
            yield d
        return
    r = await complete_turn(ctx, conf, messages, **kw)
    yield ChatDelta(r.content, tuple(ToolCallDelta(i, c.id, c.name, c.arguments) for i, c in enumerate(r.tool_calls)),
                    r.finish_reason)


async def complete_turn(ctx: NodeContext, conf: ModelConf, messages: Sequence[Message], *,
                        tools: Sequence[Tool] = (), tool_choice: ToolChoice | None = None,
                        response_format: ResponseFormat | None = None) -> ChatResult:
    """A whole turn in one message from the gateway (Complete); usage and fallback notice as for `stream`."""
    result = await client(ctx).chat(conf.model_id, list(messages), tools=list(tools), tool_choice=tool_choice,
                                    response_format=response_format, sampling=conf.sampling,
                                    max_tokens=conf.max_tokens, timeout=conf.timeout_s)
    if result.notice:
        note_fallback(ctx, result.notice)
    u = result.usage
    if u.prompt_tokens or u.completion_tokens or u.total_tokens:
        ctx.add_usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
                      total_tokens=u.total_tokens, calls=1)
    else:  # the provider reported none
        ctx.add_usage(calls=1)
    return result


async def primed(chunks: AsyncIterator[str]) -> AsyncIterator[str] | None:
    """Wait for the first chunk, then hand over the rest as a stream.

    A failure before any text (unknown model, provider down) surfaces here, inside the component's
    run(), where the runner's retries and exception_method apply; only a failure mid-answer has to
    fail the stream. None when the stream is empty.
    """
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        return None

    async def rest() -> AsyncIterator[str]:
        yield first
        async for c in chunks:
            yield c

    return rest()


def should_stream(component: Any, schema: dict[str, Any] | None) -> bool:
    """RAGFlow streams into a Message directly downstream (`Component.streams_downstream`) unless an
    exception policy or a schema needs the whole answer first (here `comment` too: its default value must
    replace a failed answer, not follow it). Any other reader gets the whole answer, asked for in one call."""
    return (component.streams_downstream and schema is None
            and (component.params.exception_method or "") not in ("comment", "goto"))
