"""Browser: a model operates a headless Chromium to carry out a task (RAGFlow `agent/component/browser.py`).

Params (RAGFlow's BrowserParam): the LLM params (`llm_id`, sampling flags...), `prompts` (the task; default
"{sys.query}"), `max_steps` (30: model turns), `headless` (true), `chromium_sandbox` (false),
`upload_sources` (files the page may be given: references to files, or http(s) URLs fetched behind the
SSRF guard), `enable_default_extensions` and `persist_session` (accepted, not used: docs/attachments.md).
Outputs: `content` (the model's final answer) and `downloaded_files` (the download info of each file the
page downloaded: attachments of the run).

RAGFlow runs the browser-use library; here the model gets a few browser actions as tools (open a URL, read
the page, click, type, upload a file, go back, finish) and the browser is driven through its DevTools protocol
(_browser.py). Each action is a tool call in the run's events and trace. A deployment without Chromium
fails validation naming the component.
"""
from __future__ import annotations

import json
import mimetypes
import secrets
import time
from typing import Annotated, Any

from pydantic import model_validator

from services.clients.llm_models import Message, Tool, ToolCall, ToolCallAssembler
from services.orchestrator.components import _browser, _llm
from services.orchestrator.components._fields import as_bool, decode_json_container
from services.orchestrator.components._files import run_files
from services.orchestrator.components._llm_params import LlmParams
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import problem, validator
from services.orchestrator.engine.events import ToolCallFinished, ToolCallStarted
from services.orchestrator.store import attachments

DEFAULT_MAX_STEPS = 30
SYSTEM_PROMPT = """You operate a web browser to complete the user's task. Use the tools: open pages, read
their content, click links or buttons by their visible text, type into fields, go back. Read a page with
extract_content before you rely on what it says. When the task is complete, call done with your final
answer (or reply with the answer without calling a tool). Answer from what the pages said."""


def _tool(name: str, description: str, properties: dict[str, Any] | None = None, required: tuple[str, ...] = ()) -> Tool:
    return Tool(name, description, {"type": "object", "properties": properties or {}, "required": list(required)})


TOOLS = [
    _tool("go_to_url", "Open a URL in the browser tab.", {"url": {"type": "string", "description": "http(s) URL"}},
          ("url",)),
    _tool("extract_content", "Read the current page: its URL, title, visible text and links."),
    _tool("click_element", "Click the first element whose visible text contains `text`.",
          {"text": {"type": "string"}}, ("text",)),
    _tool("input_text", "Type text into the field matching a CSS selector; `submit` presses Enter.",
          {"selector": {"type": "string"}, "text": {"type": "string"}, "submit": {"type": "boolean"}},
          ("selector", "text")),
    _tool("upload_file", "Put one of the task's files into the file input matching a CSS selector.",
          {"selector": {"type": "string"}, "filename": {"type": "string"}}, ("selector", "filename")),
    _tool("go_back", "Go back to the previous page."),
    _tool("done", "Finish the task with the final answer.", {"text": {"type": "string"}}, ("text",)),
]


def _max_steps(value: Any) -> int | None:
    try:
        steps = int(value)
    except (TypeError, ValueError):
        return None
    return steps if steps > 0 else None


def _steps(value: Any) -> Any:
    if _max_steps(value) is None:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return value


def _task(prompts: Any) -> Any:
    if not isinstance(prompts, (str, list)) or not _prompt_text(prompts).strip():
        raise ValueError("the Browser needs a task (text)")
    return prompts


class BrowserParams(LlmParams):
    prompts: Annotated[Any, validator(_task)] = "{sys.query}"  # the task: text, or RAGFlow's prompt list
    max_steps: Annotated[Any, validator(_steps)] = DEFAULT_MAX_STEPS
    headless: Any = True
    chromium_sandbox: Any = False
    upload_sources: Any = None

    @model_validator(mode="after")
    def _runs_here(self) -> BrowserParams:
        reason = _browser.unavailable_reason()
        if reason:
            raise problem(f"the Browser component cannot run in this deployment: {reason}")
        return self


@register
class Browser(Component):
    component_name = "Browser"
    exception_output = "content"
    params_model = BrowserParams
    params: BrowserParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "Operating the browser..."

    async def run(self, ctx: NodeContext) -> None:
        p = self.params
        conf = _llm.ModelConf.of(ctx, p)
        task = await _llm.render_recorded(ctx, _prompt_text(p.prompts))
        uploads = await _upload_files(ctx, p.upload_sources)
        if uploads:
            task += ("\n\nYou can upload these files with upload_file when operating web pages:\n"
                     + "\n".join(f"- {name}" for name in uploads))
        messages = [Message("system", SYSTEM_PROMPT), Message("user", task)]
        steps = _max_steps(p.max_steps) or DEFAULT_MAX_STEPS
        session = _browser.BrowserSession(ctx.http, headless=as_bool(p.headless),
                                          chromium_sandbox=as_bool(p.chromium_sandbox), uploads=uploads,
                                          max_download_bytes=ctx.settings.browser_max_download_bytes)
        answer = ""
        async with session:
            for step in range(steps):
                last = step == steps - 1
                text, calls = await _turn(ctx, conf, messages, last)
                if not calls:
                    answer = text
                    break
                messages.append(Message("assistant", text, tool_calls=calls))
                finished = None
                for call in calls:
                    observation, finished = await _act(ctx, session, call)
                    messages.append(Message("tool", observation, tool_call_id=call.id, name=call.name))
                    if finished is not None:
                        break
                if finished is not None:
                    answer = finished
                    break
            await session.settle_downloads()
        files = [await attachments.save(ctx, d.filename, _mime(d.filename), d.content) for d in session.downloads]
        ctx.set_output("content", answer)
        ctx.set_output("downloaded_files", files)


async def _upload_files(ctx: NodeContext, sources: Any) -> dict[str, bytes]:
    """{filename: bytes} of `upload_sources`: references to files, or literal http(s) URLs (RAGFlow's forms:
    a list, a JSON list, or comma-separated text)."""
    sources = decode_json_container(sources)
    if isinstance(sources, str):
        sources = [s for s in sources.split(",") if s.strip()]
    files: dict[str, bytes] = {}
    for item in sources if isinstance(sources, list) else []:
        text = str(item).strip()
        ref = text[1:-1].strip() if text.startswith("{") and text.endswith("}") else text
        value = await ctx.value(ref) if ctx.is_ref(ref) else text
        for name, content in await run_files(ctx, ref, value, "params.upload_sources", data_name="upload.bin",
                                             text_name="upload.txt", fetch_urls=True):
            files[name] = content
    return files


def _prompt_text(prompts: Any) -> str:
    if isinstance(prompts, list):
        return "\n\n".join(str(p.get("content", "")) for p in prompts if isinstance(p, dict))
    return str(prompts or "")


async def _turn(ctx: NodeContext, conf: _llm.ModelConf, messages: list[Message], last: bool) -> tuple[str, tuple[ToolCall, ...]]:
    """One model turn: its text and its tool calls (none on the last allowed turn)."""
    text: list[str] = []
    calls = ToolCallAssembler()
    async for d in _llm.stream(ctx, conf, messages, tools=TOOLS, tool_choice="none" if last else None):
        if d.content:
            text.append(d.content)
        for tc in d.tool_calls:
            calls.add(tc)
    return "".join(text), () if last else calls.calls()


async def _act(ctx: NodeContext, session: _browser.BrowserSession, call: ToolCall) -> tuple[str, str | None]:
    """Run one browser action: (observation, final answer when the model called `done`)."""
    call_id = f"{call.id}-{secrets.token_hex(3)}"
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        args = None
    args = args if isinstance(args, dict) else {}
    ctx.emit(ToolCallStarted, call_id=call_id, tool_name=call.name, arguments=args)
    start = time.perf_counter()
    finished: str | None = None
    error: str | None = None
    if call.name == "go_to_url":
        observation = await session.go_to_url(str(args.get("url", "")))
    elif call.name == "extract_content":
        observation = await session.extract_content()
    elif call.name == "click_element":
        observation = await session.click(str(args.get("text", "")))
    elif call.name == "input_text":
        observation = await session.input_text(str(args.get("selector", "")), str(args.get("text", "")),
                                               as_bool(args.get("submit", False)))
    elif call.name == "upload_file":
        observation = await session.upload_file(str(args.get("selector", "")), str(args.get("filename", "")))
    elif call.name == "go_back":
        observation = await session.go_back()
    elif call.name == "done":
        finished = str(args.get("text", ""))
        observation = "Task finished."
    else:
        error = f"unknown browser action {call.name!r}; use one of {', '.join(t.name for t in TOOLS)}"
        observation = error
    ctx.emit(ToolCallFinished, call_id=call_id, tool_name=call.name, result=observation[:8000], error=error,
             elapsed_s=time.perf_counter() - start)
    return observation, finished


def _mime(filename: str) -> str:
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"
