"""Message: renders one of its `content` templates and sends it to the client.

One template is picked at random (RAGFlow). Plain templates stream: literal text and resolved values
go out as MessageDelta as soon as they are known, and an upstream StreamValue (an LLM's content) is
forwarded chunk by chunk while it is produced. A template with `{{`, `}}` or `{%` is Jinja2 (sandboxed),
rendered once the values are known. Outputs: `content` (full text), `downloads`.

A reference to a file a component produced (DocGenerator's `download`, ExcelProcessor's `attachment`: see
attachments.py) renders as nothing and is listed in `downloads` and the message_end event instead, as RAGFlow
does (unless the info asks for `include_download_info_in_content`).
"""
from __future__ import annotations

import asyncio
import logging
import random
import re
from typing import Annotated, Any

from jinja2.sandbox import SandboxedEnvironment
from pydantic import AfterValidator, Field

from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params
from services.orchestrator.engine.variables import REF_PATTERN, StreamValue, to_text
from services.orchestrator.store.attachments import download_infos

log = logging.getLogger(__name__)

_jinja = SandboxedEnvironment()
_JINJA_MARK = re.compile(r"\{\{|\}\}|\{%.*%\}", re.DOTALL)


def _templates(content: Any) -> list[str]:
    if isinstance(content, str):
        content = [content]
    if not isinstance(content, list):
        return []
    return [c for c in content if isinstance(c, str) and c.strip()]


def _some_template(content: Any) -> Any:
    if not _templates(content):
        raise ValueError("a Message needs at least one non-empty content template")
    return content


class MessageParams(Params):
    content: Annotated[Any, AfterValidator(_some_template), Field(validate_default=True)] = None  # str | [str]
    stream: Any = True  # False: render the whole text first, then send it


@register
class Message(Component):
    component_name = "Message"
    params_model = MessageParams
    reads_streams = True
    params: MessageParams
    __slots__ = ("_templates",)

    def setup(self) -> None:
        self._templates = _templates(self.params.content)

    async def run(self, ctx: NodeContext) -> None:
        template = random.choice(self._templates) if len(self._templates) > 1 else self._templates[0]
        template, downloads = _take_downloads(ctx, template)
        if _JINJA_MARK.search(template):
            text = await self._render_jinja(ctx, template)
            if text:
                ctx.emit_delta(text)
        elif self.params.stream is False:
            text = await ctx.render(template)
            self._record_inputs(ctx, template)
            if text:
                ctx.emit_delta(text)
        else:
            text = await self._stream(ctx, template)
        ctx.set_output("content", text)
        ctx.set_output("downloads", downloads)
        ctx.emit_message_end(reference=_reference(ctx), downloads=downloads)

    async def _stream(self, ctx: NodeContext, template: str) -> str:
        # Literal text and already-known values go out as one delta; a stream is forwarded live.
        out: list[str] = []
        pending: list[str] = []
        for part in ctx.parts(template):
            if isinstance(part, StreamValue):
                if pending:
                    ctx.emit_delta("".join(pending))
                    pending.clear()
                async for chunk in part:
                    ctx.emit_delta(chunk)
                    out.append(chunk)
            elif part:
                pending.append(part)
                out.append(part)
        if pending:
            ctx.emit_delta("".join(pending))
        self._record_inputs(ctx, template)
        return "".join(out)

    @staticmethod
    def _record_inputs(ctx: NodeContext, template: str) -> None:
        for ref in ctx.refs(template):
            v = ctx.get(ref)
            ctx.set_input(ref, v.text if isinstance(v, StreamValue) else to_text(v))

    async def _render_jinja(self, ctx: NodeContext, template: str) -> str:
        # Like RAGFlow: each {ref} becomes a Jinja variable named after it (`cpn_x_var`); a bare
        # name left in the output (single braces outside a Jinja tag) is replaced by its value.
        kwargs: dict[str, str] = {}
        bare: set[str] = set()

        def sub(m: re.Match[str]) -> str:
            name = re.sub(r"[@:.\-]", "_", m.group(1))
            kwargs[name] = m.group(1)
            whole = m.group(0).replace(" ", "")
            if whole.startswith("{{") and whole.endswith("}}"):
                return "{{ " + name + " }}"
            bare.add(name)
            return name

        script = REF_PATTERN.sub(sub, template)
        values = {name: to_text(await ctx.value(ref)) for name, ref in kwargs.items()}
        for name, ref in kwargs.items():
            ctx.set_input(ref, values[name])
        try:
            tpl = _jinja.from_string(script)
            # Loops in a user template can be slow: keep them off the event loop.
            if "{%" in script:
                text = await asyncio.to_thread(tpl.render, values)
            else:
                text = tpl.render(values)
        except Exception as exc:  # a broken template falls back to plain substitution (RAGFlow)
            log.warning("Message %s: Jinja2 rendering failed: %s", ctx.component_id, exc)
            text, bare = script, set(values)
        for name in sorted(bare, key=len, reverse=True):
            text = text.replace(name, values[name])
        return text


def _take_downloads(ctx: NodeContext, template: str) -> tuple[str, list[dict[str, Any]]]:
    """The template without its references to download infos, and those infos (RAGFlow `_extract_downloads`)."""
    downloads: list[dict[str, Any]] = []
    blank: set[str] = set()
    for ref in ctx.refs(template):
        value = ctx.get(ref)
        infos = [] if isinstance(value, StreamValue) else download_infos(value)
        for info in infos:
            downloads.append({k: v for k, v in info.items() if k != "include_download_info_in_content"})
        if infos and not any(i.get("include_download_info_in_content") for i in infos):
            blank.add(ref)
    if blank:
        template = REF_PATTERN.sub(lambda m: "" if m.group(1) in blank else m.group(0), template)
    return template, downloads


def _reference(ctx: NodeContext) -> dict[str, Any]:
    state = ctx.env.state
    retrieval = getattr(state, "retrieval", None)
    if isinstance(retrieval, list) and retrieval and isinstance(retrieval[-1], dict) and retrieval[-1].get("chunks"):
        return dict(retrieval[-1])
    return {}
