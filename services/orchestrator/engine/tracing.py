"""Spans of a canvas run (services/common/tracing.py has the set-up): one per run, one per component, one per
tool call, retrieval and sandbox execution.

    run span "run"                              trellis.run.id, trellis.session.id, status, tokens
      component span "component Agent"         trellis.component.id / .type / .name / .path / .status / .retries
        tool span "execute_tool search_0"       gen_ai.tool.name, gen_ai.operation.name = execute_tool
          retrieval span "retrieval"            trellis.retrieval.chunks
            -> the services' own gRPC SERVER spans (traceparent in the metadata)

The runner calls `RunTrace` at a handful of points, only when `tracing.ACTIVE` (`start_run` returns None
otherwise, and every call site checks that): a component's span is current while its `run()` executes, so
the LLM, retrieval and sandbox calls it makes (and the stream pumps it spawns) are its children; containers'
spans are the parents of their children's.
"""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, TypeVar

from services.common import tracing

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class RunTrace:
    """The spans of one run. Made in the run's driver task, whose context it sets (never restored: the task
    ends with the run), so every component task the run starts inherits the run span."""

    __slots__ = ("span", "open")

    def __init__(self, request: Any) -> None:
        self.span = tracing.start("run", attributes={
            "trellis.run.id": request.run_id, "trellis.session.id": request.session_id or None,
            "trellis.tenant.id": request.tenant_id or None, "trellis.user.id": request.user_id or None})
        tracing.attach(self.span)
        self.open: dict[tuple[tuple[str, ...], str], Any] = {}  # (path, component id) -> its span

    def node_started(self, node_id: str, node: Any, path: tuple[str, ...]) -> tuple[Any, object]:
        """Start the component's span and make it current in this task: (span, token for `node_ran`)."""
        span = tracing.start(f"component {node.name}", attributes={
            "trellis.component.id": node_id, "trellis.component.type": node.name,
            "trellis.component.name": node.display if node.display != node_id else None,
            "trellis.component.path": list(path) or None})
        self.open[(path, node_id)] = span
        return span, tracing.attach(span)

    @staticmethod
    def node_ran(started: tuple[Any, object], retries: int) -> None:
        """The component's run() returned (its streams may still be going): back to the enclosing span."""
        span, token = started
        tracing.detach(token)
        span.set_attribute("trellis.component.retries", retries)

    def node_finished(self, node_id: str, path: tuple[str, ...], error: str | None, elapsed_s: float) -> None:
        span = self.open.pop((path, node_id), None)
        if span is not None:
            tracing.end(span, error, **{"trellis.component.status": "failed" if error else "succeeded",
                                        "trellis.component.elapsed_s": elapsed_s})

    def run_finished(self, error: str | None, cancelled: bool, usage: dict[str, Any]) -> None:
        left_open = bool(self.open)
        # Components still open: cut short by a cancel or by another's failure, or waiting for the user (UserFillUp).
        left = "cancelled" if cancelled or error else "waiting_for_user"
        for span in self.open.values():
            tracing.end(span, None, **{"trellis.component.status": left})
        self.open.clear()
        status = "cancelled" if cancelled else "failed" if error else "waiting_for_user" if left_open else "succeeded"
        tracing.end(self.span, None if cancelled else error, **{
            "trellis.run.status": status,
            "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
            "gen_ai.usage.output_tokens": usage.get("completion_tokens")})


def start_run(request: Any) -> RunTrace | None:
    """The run's spans, or None when tracing is off. A run the sampler drops keeps its (non-recording) run
    span as the current context, so the services it calls drop theirs too, and makes no component spans."""
    if not tracing.ACTIVE:
        return None
    trace = RunTrace(request)
    return trace if trace.span.is_recording() else None


# ---- tool calls, retrievals, sandbox executions: decorators on the one function that does each ----------

def traced_tool(fn: F) -> F:
    """`call_tool(parent, spec, args) -> (observation, error)`: an `execute_tool` span (GenAI conventions)."""

    @functools.wraps(fn)
    async def call_tool(parent: Any, spec: Any, args: dict[str, Any]) -> Any:
        if not tracing.ACTIVE:
            return await fn(parent, spec, args)
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": spec.function,
                      "gen_ai.tool.type": "function", "trellis.component.id": parent.component_id,
                      "trellis.tool.component": spec.component_name}
        with tracing.span(f"execute_tool {spec.function}", attributes=attributes) as span:
            observation, error = await fn(parent, spec, args)
            if error:
                span.set_status(tracing.Status(tracing.StatusCode.ERROR, str(error)[:500]))
            return observation, error

    return call_tool  # type: ignore[return-value]


def traced_retrieval(fn: F) -> F:
    """`Retrieval.retrieve(self, ctx, query)`: a `retrieval` span with how many chunks came back."""

    @functools.wraps(fn)
    async def retrieve(self: Any, ctx: Any, query: str) -> None:
        if not tracing.ACTIVE:
            return await fn(self, ctx, query)
        attributes = {"trellis.component.id": ctx.component_id, "trellis.retrieval.top_n": self.params.given("top_n")}
        with tracing.span("retrieval", attributes=attributes) as span:
            await fn(self, ctx, query)
            found = ctx.outputs.get("json")
            span.set_attribute("trellis.retrieval.chunks", len(found) if isinstance(found, list) else 0)

    return retrieve  # type: ignore[return-value]


def traced_sandbox(fn: F) -> F:
    """`execute(client, lang, code, arguments, timeout_s=...) -> SandboxRun`: a `sandbox execute` span."""

    @functools.wraps(fn)
    async def execute(client: Any, lang: str, code: str, arguments: dict[str, Any], **kwargs: Any) -> Any:
        if not tracing.ACTIVE:
            return await fn(client, lang, code, arguments, **kwargs)
        with tracing.span("sandbox execute", attributes={"trellis.sandbox.language": lang,
                                                         "trellis.sandbox.code_bytes": len(code)}) as span:
            result = await fn(client, lang, code, arguments, **kwargs)
            span.set_attributes({"trellis.sandbox.ok": result.ok, "trellis.sandbox.wall_time_ms": result.wall_time_ms,
                                 "trellis.sandbox.error_kind": result.error_kind or "",
                                 "trellis.sandbox.output_truncated": result.output_truncated})
            if not result.ok:
                span.set_status(tracing.Status(tracing.StatusCode.ERROR, f"{result.error_kind}: {result.error_message}"[:500]))
            return result

    return execute  # type: ignore[return-value]
