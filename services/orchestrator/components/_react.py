"""The Agent's ReAct loop: the model calls tools, sees their results, and answers.

Each round the model gets the conversation with the tools; the tool calls of one turn run
concurrently and their results go back as `tool` messages. After `max_rounds` rounds a last turn is
forced with `tool_choice="none"` after RAGFlow's "Exceed max rounds" note. `answer()` yields the
answer's text as it is generated (text a model writes before calling tools is part of it too); with
`whole` (nothing streams the Agent's answer) each turn is asked for in one Complete call instead.

Models without native tool calling get RAGFlow-style JSON in text: the tools are described in the
system prompt, the model replies `[{"name": ..., "arguments": {...}}]`, results come back in a user
message. Used when the Agent's `tool_calling` param is "text", or from the moment the gateway refuses
tools for the model; a native turn whose text is such a JSON call is also understood (parsed
tolerantly with json-repair). Each tool call is one agent thought (position, thought, tool,
tool_input, observation: the Agent's `agent_thoughts` output) and a ToolCallStarted / ToolCallFinished event pair, whose `call_id` is the
model's id plus a random suffix (unique in the run).

Citations (`cite`, default on): from the first turn that starts with chunks in the run's references
(from an upstream Retrieval, or this Agent's own `search_my_dateset` calls), the citation prompt is part
of the system prompt, so the final answer carries [ID:n] markers as RAGFlow's does. RAGFlow's second
"gen_citations" pass for long conversations is not done.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from typing import Any, AsyncIterator

import grpc
import json_repair

from services.clients.llm_models import Message, ToolCall, ToolCallAssembler
from services.common.errors import ServiceError
from services.orchestrator.components import _llm, _tools
from services.orchestrator.components._llm_params import LlmParams
from services.orchestrator.components.base import NodeContext
from services.orchestrator.engine.events import ToolCallFinished, ToolCallStarted

log = logging.getLogger(__name__)

EVENT_RESULT_CHARS = 8_000
THOUGHT_CHARS = 4_000
# Models the gateway refused tools for (INVALID_ARGUMENT/UNIMPLEMENTED naming tools): text protocol.
TEXT_ONLY_MODELS: set[str] = set()

TEXT_PROTOCOL = """
# Tools
You can call the tools listed below. To call tools, reply with ONLY a JSON array and no other text:
[{{"name": "<tool name>", "arguments": {{<arguments as described>}}}}]
All calls in one array run at the same time. Their results come back in a message starting with
"Observations". When you can answer, reply with the answer itself in plain text, not JSON.

{tools}
"""


def text_protocol(tools: list[_tools.ToolSpec]) -> str:
    lines = [f"## {t.function}\n{t.schema.description}\nArguments (JSON schema): "
             f"{json.dumps(t.schema.parameters, ensure_ascii=False)}" for t in tools]
    return TEXT_PROTOCOL.format(tools="\n\n".join(lines))


_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_CALL_START = re.compile(r'\[\s*\{|\{\s*"(?:name|tool|action|function|tool_calls)"')


def parse_text_calls(text: str) -> list[tuple[str, Any]] | None:
    """[(name, arguments)] when `text` holds a JSON tool call (or a list of them), else None.

    The call may follow some prose ("I'll look it up: [...]") or sit in a ```json fence.
    """
    s = re.sub(r"^.*</think>", "", text, flags=re.DOTALL).strip()
    fenced = _FENCED.search(s)
    if fenced:
        s = fenced.group(1).strip()
    else:
        m = _CALL_START.search(s)
        if m is None:
            return None
        s = s[m.start():]
    try:
        value = json.loads(s)
    except ValueError:
        value = json_repair.loads(s)
    if isinstance(value, dict):
        value = value.get("tool_calls") if isinstance(value.get("tool_calls"), list) else [value]
    if not isinstance(value, list) or not value:
        return None
    calls = []
    for item in value:
        if not isinstance(item, dict):
            return None
        fn = item.get("function") if isinstance(item.get("function"), dict) else {}
        name = item.get("name") or item.get("tool") or item.get("action") or fn.get("name")
        args = next((a for a in (item.get("arguments"), item.get("parameters"), item.get("args"),
                                 item.get("action_input"), fn.get("arguments")) if a is not None), {})
        if not isinstance(name, str) or not name:
            return None
        calls.append((name, args))
    return calls


def prose_before_call(text: str) -> str:
    """The text a model wrote before its JSON tool call (its thought)."""
    cuts = [m.start() for m in (_FENCED.search(text), _CALL_START.search(text)) if m is not None]
    return text[:min(cuts)].strip() if cuts else text.strip()


class _Gate:
    """Forwards a turn's text live, except text that may be a tool call: held to the end of the turn.

    Natively, only text that opens like JSON is held; with the text protocol (`hold_all`) a call may
    follow some prose, so the whole turn is held (the final, tool-less turn still streams live).
    """

    __slots__ = ("hold_json", "buf", "live")

    def __init__(self, hold_json: bool, hold_all: bool = False) -> None:
        self.hold_json = hold_json
        self.buf: list[str] = []
        self.live: bool | None = False if hold_all else None

    def feed(self, chunk: str) -> str:
        if self.live:
            return chunk
        self.buf.append(chunk)
        if self.live is False:
            return ""
        text = "".join(self.buf)
        head = text.lstrip()
        if not head:
            return ""
        if self.hold_json and head[0] in "[{`":
            self.live = False
            return ""
        self.live, self.buf = True, []
        return text

    def flush(self) -> str:
        text, self.buf = "".join(self.buf), []
        return text


class React:
    def __init__(self, ctx: NodeContext, conf: _llm.ModelConf, tools: list[_tools.ToolSpec], prompt: _llm.Prompt,
                 *, max_rounds: int, text_mode: bool, params: LlmParams, whole: bool = False) -> None:
        self.ctx = ctx
        self.whole = whole  # nobody reads the answer as it is written: each turn comes in one message
        self.params = params  # the Agent's
        self.conf = conf
        self.tools = tools
        self.prompt = prompt
        self.max_rounds = max_rounds
        self.text_mode = False
        self.budget = _llm.prompt_budget(ctx, conf)
        self.steps: list[dict[str, Any]] = []  # agent thoughts
        self.use_tools: list[dict[str, Any]] = []  # RAGFlow's `use_tools` output
        # build_prompt added the citation prompt when chunks were there from the start.
        self.cited = _llm.needs_citation(ctx, params)
        if text_mode and tools:
            self._to_text_mode()

    def _to_text_mode(self) -> None:
        self.text_mode = True
        self._add_system(text_protocol(self.tools))

    def _add_system(self, text: str) -> None:
        head = self.prompt.head
        if head and head[0].role == "system":
            head[0] = Message("system", head[0].content + "\n" + text)
        else:
            head.insert(0, Message("system", text.strip()))

    def _cite_when_chunks_arrive(self) -> None:
        """RAGFlow adds the citation prompt to the system prompt of the final answer once the run holds
        chunks; here they often come from this Agent's own Retrieval tool, so check before every turn."""
        if not self.cited and _llm.needs_citation(self.ctx, self.params):
            user_defined, _ = _llm.extract_prompts(self.params.sys_prompt)
            self._add_system(_llm.citation_prompt(user_defined))
            self.cited = True

    async def answer(self) -> AsyncIterator[str]:
        rounds = 0
        said = False  # some text went out already: separate the next turn's text from it
        while True:
            final = rounds >= self.max_rounds or not self.tools
            if final and rounds:
                self.prompt.tail.append(Message("user", f"Exceed max rounds: {self.max_rounds}. Do not call tools "
                                                "any more; give your final answer now with the information you have."))
            self._cite_when_chunks_arrive()
            kwargs: dict[str, Any] = {}
            if self.tools and not self.text_mode:
                kwargs = {"tools": [t.schema for t in self.tools], "tool_choice": "none" if final else None}
            gate = _Gate(hold_json=bool(self.tools) and not final, hold_all=self.text_mode and not final)
            started = False
            parts: list[str] = []
            calls = ToolCallAssembler()
            try:
                async for d in _llm.turn(self.ctx, self.conf, self.prompt.fit(self.budget), whole=self.whole,
                                         **kwargs):
                    if d.content:
                        parts.append(d.content)
                        out = gate.feed(d.content)
                        if out:
                            if said and not started:
                                yield "\n\n"
                            said = started = True
                            yield out
                    for tc in d.tool_calls:
                        calls.add(tc)
            except ServiceError as exc:
                if kwargs and not parts and _refuses_tools(exc):
                    log.warning("model %r refused tools (%s): using JSON-in-text tool calls",
                                self.conf.model_id, exc.message)
                    TEXT_ONLY_MODELS.add(self.conf.model_id)
                    self._to_text_mode()
                    continue
                raise
            text = "".join(parts)
            found = [] if final else [(c.id, c.name, c.arguments) for c in calls.calls()]
            from_text = not found
            if not found and gate.live is False:
                parsed = parse_text_calls(text) if not final else None
                answer = self._completion(parsed)
                if parsed is not None and answer is None and any(self.resolve(n) for n, _ in parsed):
                    found = [(f"call_{rounds}_{i}", n, a if isinstance(a, str) else json.dumps(a, ensure_ascii=False))
                             for i, (n, a) in enumerate(parsed)]
                else:
                    out = answer if answer is not None else gate.flush()
                    if out:
                        if said and not started:
                            yield "\n\n"
                        said = True
                        yield out
            if not found:
                return
            rounds += 1
            await self._round(rounds, text, found, from_text)

    def _completion(self, parsed: list[tuple[str, Any]] | None) -> str | None:
        """RAGFlow's `complete_task` pseudo-tool carries the final answer."""
        if parsed and len(parsed) == 1 and parsed[0][0] == "complete_task":
            args = parsed[0][1]
            if isinstance(args, str):
                args = json_repair.loads(args)
            return str(args.get("answer", "")) if isinstance(args, dict) else str(args)
        return None

    def resolve(self, name: str) -> _tools.ToolSpec | None:
        """A called name to its tool: exact, else the name without the index when that is unambiguous."""
        for t in self.tools:
            if t.function == name:
                return t
        same = [t for t in self.tools if name.lower() in (t.base.lower(), t.function.lower())]
        return same[0] if len(same) == 1 else None

    async def _round(self, rnd: int, text: str, found: list[tuple[str, str, str]], from_text: bool) -> None:
        if self.text_mode:
            self.prompt.tail.append(Message("assistant", text))
        else:
            self.prompt.tail.append(Message("assistant", text, tool_calls=tuple(ToolCall(*c) for c in found)))
        first = len(self.steps) + 1
        thought = (prose_before_call(text) if from_text else text.strip())[:THOUGHT_CHARS]
        results = await asyncio.gather(*(self._call(rnd, first + i, thought, *c) for i, c in enumerate(found)))
        if self.text_mode:
            body = "\n\n".join(f"[{i + 1}] {c[1]} returned:\n{obs}" for i, (c, obs) in enumerate(zip(found, results)))
            self.prompt.tail.append(Message("user", f"Observations:\n{body}"))
        else:
            for (call_id, name, _), obs in zip(found, results):
                self.prompt.tail.append(Message("tool", obs, tool_call_id=call_id, name=name))

    async def _call(self, rnd: int, position: int, thought: str, call_id: str, name: str, raw: str) -> str:
        ctx = self.ctx
        # The model's id plus a random suffix: providers reuse ids ("call_0") across turns and agents,
        # and a run's tool-call log is keyed by the event's id.
        event_id = f"{call_id}.{secrets.token_hex(4)}"
        spec = self.resolve(name)
        args: dict[str, Any] | None
        error: str | None = None
        try:
            args = _tools.parse_arguments(raw)
        except ValueError as exc:
            args, error = None, f"the arguments of {name} are not valid JSON: {exc}"
        ctx.emit(ToolCallStarted, call_id=event_id, tool_name=name,
                 arguments=args if args is not None else {"_raw": raw})
        t0 = time.perf_counter()
        if spec is None:
            error = f"there is no tool named {name!r}; the tools are: {', '.join(t.function for t in self.tools)}"
        if error is not None:
            observation = f"Error: {error}"
        else:
            observation, error = await _tools.call_tool(ctx, spec, args or {})  # type: ignore[arg-type]
        elapsed = time.perf_counter() - t0
        ctx.emit(ToolCallFinished, call_id=event_id, tool_name=name, result=observation[:EVENT_RESULT_CHARS],
                 error=error, elapsed_s=elapsed)
        self.steps.append({"position": position, "round": rnd, "thought": thought, "tool": name,
                           "tool_input": args if args is not None else raw,
                           "observation": observation[:THOUGHT_CHARS], "error": error,
                           "elapsed_s": round(elapsed, 4), "call_id": event_id})
        self.steps.sort(key=lambda s: s["position"])
        self.use_tools.append({"name": name, "arguments": args if args is not None else raw,
                               "results": observation[:THOUGHT_CHARS]})
        return observation


def _refuses_tools(exc: ServiceError) -> bool:
    codes = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION)
    msg = exc.message.lower()
    return exc.code in codes and ("tool" in msg or "function" in msg)
