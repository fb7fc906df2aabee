"""StringTransform: split a string into a list, or merge values into one string.

Params (RAGFlow `agent/component/string_transform.py`): `method` ("split" | "merge"), `split_ref`
(the reference to split), `delimiters` (default [","]), `script` (the merge template).

- split: the text of `split_ref` is cut at every delimiter; the delimiters are dropped and empty
  pieces kept (`"a,,b"` -> ["a", "", "b"]). A missing value splits as "".
- merge: every `{ref}` in `script` is replaced by its value: a list is joined with the first
  delimiter, an object written as JSON, None as "". When the script also holds Jinja2 syntax
  (`{{ }}`, `{% %}`, `{# #}` besides the references), it is rendered in a sandbox: each reference
  becomes a variable named after it with `@ : . -` replaced by `_` (`{begin@items}` -> `begin_items`),
  holding the raw value; a name used only inside `{% %}` (`{% for x in begin_items %}`) is mapped
  back to its reference. Unlike RAGFlow, spaces around a reference are kept ("a {x@y} b" -> "a V b").
  Output `result`.
"""
from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any, Literal

from jinja2 import StrictUndefined, meta
from jinja2.sandbox import SandboxedEnvironment
from pydantic import AfterValidator

from services.orchestrator.components._fields import FieldError, type_name
from services.orchestrator.components.base import Component, NodeContext, register
from services.orchestrator.components.params import Params
from services.orchestrator.engine.variables import ALIAS_PATTERN, REF_PATTERN, Scope, StreamValue, to_text

_JINJA_MARKERS = ("{{", "{%", "{#")
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def split_text(text: str, delimiters: list[str]) -> list[str]:
    """Cut `text` at each delimiter (tried in the given order, like RAGFlow's alternation)."""
    pattern = "|".join(re.escape(d) for d in delimiters)
    return re.split(pattern, text, flags=re.DOTALL)


def merge_text(value: Any, delimiter: str) -> str:
    """How a value reads in a merge: lists joined by the first delimiter, the rest as in text."""
    if isinstance(value, (list, tuple)):
        return delimiter.join(to_text(v) for v in value)
    return to_text(value)


def jinja_name(ref: str) -> str:
    name = _NOT_IDENT.sub("_", ref)
    return name if not name[:1].isdigit() else f"_{name}"


def _delimiters(raw: Any) -> list[str] | None:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return None
    # An empty delimiter would split between every character: drop it.
    found = [d for d in raw if isinstance(d, str) and d]
    return found or None


def _some_delimiter(raw: Any) -> Any:
    if _delimiters(raw) is None:
        raise ValueError("must be a non-empty list of strings")
    return raw


class StringTransformParams(Params):
    method: Literal["split", "merge"] = "split"
    delimiters: Annotated[Any, AfterValidator(_some_delimiter)] = [","]  # str | [str]
    split_ref: str | None = None  # split: a reference to the text (or the text itself)
    script: str | None = None  # merge: the template


def _brace_span(m: re.Match[str]) -> tuple[int, int]:
    """The part of a reference match to replace: from its first "{" to its last "}".

    RAGFlow's pattern also swallows the spaces around a reference ("a {x@y} b" -> "aVb"); they
    are text, so they are kept here. Spaces inside extra braces ("{ {x@y} }") still go.
    """
    text = m.group(0)
    return m.start() + text.index("{"), m.start() + text.rindex("}") + 1


def _is_jinja(script: str) -> bool:
    stripped = REF_PATTERN.sub("", script)
    return any(marker in stripped for marker in _JINJA_MARKERS)


def _ref_for_name(ctx: NodeContext, name: str) -> str | None:
    """The reference a Jinja name stands for: a global (`env_x`), an Iteration alias
    (`item`), or a component output (`Agent_Foo_content` -> `Agent:Foo@content`)."""
    for key in ctx.env.globals:
        if jinja_name(key) == name:
            return key
    if name in ("item", "index", "result") and ctx.scope.alias(name)[0]:
        return name
    ids: set[str] = set(ctx.scope.declared)
    scope: Scope | None = ctx.scope
    while scope is not None:
        ids.update(scope.outputs)
        scope = scope.parent
    best: tuple[str, str] | None = None
    for cpn_id in ids:
        prefix = jinja_name(cpn_id) + "_"
        if name.startswith(prefix) and len(name) > len(prefix) and (best is None or len(cpn_id) > len(best[0])):
            best = (cpn_id, name[len(prefix):])
    return f"{best[0]}@{best[1]}" if best else None


@register
class StringTransform(Component):
    component_name = "StringTransform"
    params_model = StringTransformParams
    params: StringTransformParams

    def thoughts(self, ctx: NodeContext) -> str:
        return "Transforming strings."

    async def run(self, ctx: NodeContext) -> None:
        delimiters = _delimiters(self.params.delimiters) or [","]
        if self.params.method == "split":
            ctx.set_output("result", await self._split(ctx, delimiters))
        else:
            ctx.set_output("result", await self._merge(ctx, delimiters))

    async def _split(self, ctx: NodeContext, delimiters: list[str]) -> list[str]:
        ref = self.params.split_ref or ""
        # A non-reference is the text itself (RAGFlow would look it up as a global and find nothing).
        value = await ctx.value(ref) if ctx.is_ref(ref) else ref
        if value is None:
            value = ""
        if isinstance(value, (list, tuple, dict)):
            raise FieldError(ctx.component_id, "params.split_ref",
                             f"'{ref}' must be a string to split, got a {type_name(value)}")
        text = value if isinstance(value, str) else to_text(value)
        ctx.set_input(ref, text)
        return split_text(text, delimiters)

    async def _merge(self, ctx: NodeContext, delimiters: list[str]) -> str:
        script = self.params.script or ""
        matches = list(REF_PATTERN.finditer(script))
        if ctx.scope.alias("item")[0]:  # {item}/{index}/{result} inside an Iteration body
            matches += ALIAS_PATTERN.finditer(script)
            matches.sort(key=lambda m: m.start())
        values: dict[str, Any] = {}
        for m in matches:
            ref = m.group(1)
            if ref not in values:
                v = ctx.get(ref)
                values[ref] = await v.wait() if isinstance(v, StreamValue) else v
                ctx.set_input(ref, merge_text(values[ref], delimiters[0]))
        if _is_jinja(script):
            return await self._render_jinja(ctx, script, matches, values, delimiters[0])
        out: list[str] = []
        pos = 0
        for m in matches:
            start, end = _brace_span(m)
            out.append(script[pos:start])
            out.append(merge_text(values[m.group(1)], delimiters[0]))
            pos = end
        out.append(script[pos:])
        return "".join(out)

    async def _render_jinja(self, ctx: NodeContext, script: str, matches: list[re.Match[str]],
                            values: dict[str, Any], delimiter: str) -> str:
        pieces: list[str] = []
        pos = 0
        for m in matches:
            start, end = _brace_span(m)
            pieces.append(script[pos:start])
            pieces.append("{{ %s }}" % jinja_name(m.group(1)))
            pos = end
        pieces.append(script[pos:])
        source = "".join(pieces)
        context = {jinja_name(ref): value for ref, value in values.items()}
        env = SandboxedEnvironment(autoescape=False, undefined=StrictUndefined,
                                   finalize=lambda v: merge_text(v, delimiter))
        try:
            # Names used only inside {% %} (`{% for x in begin_items %}`) map back to references.
            for name in meta.find_undeclared_variables(env.parse(source)) - context.keys():
                ref = _ref_for_name(ctx, name)
                if ref is not None:
                    v = ctx.get(ref)
                    context[name] = await v.wait() if isinstance(v, StreamValue) else v
                    ctx.set_input(ref, merge_text(context[name], delimiter))
            # A template may loop: keep the event loop free for the other runs.
            return await asyncio.to_thread(lambda: env.from_string(source).render(context))
        except Exception as exc:  # syntax, undefined name, sandbox violation, error inside the template
            raise FieldError(ctx.component_id, "params.script",
                             f"Jinja2 template error: {type(exc).__name__}: {exc}") from None


__all__ = ["StringTransform", "jinja_name", "merge_text", "split_text"]
