"""Component base class, registry, and the `ctx` every component runs with.

Writing a component
-------------------
    @register
    class StringTransform(Component):
        component_name = "StringTransform"          # RAGFlow's component_name, the registry key

        params_model = StringTransformParams       # a `Params` model (components/params.py)
        params: StringTransformParams

        async def run(self, ctx):                   # self.params: the parsed params, typed
            ctx.set_output("result", await ctx.render(self.params.script))

`params_model` is checked when the plan is compiled: a value that does not fit is a validation issue
naming the component, its type and the field; extra keys are kept. `Cls.check(cpn_id, params)` gives
those issues for a dict of params (a test, a tool entry).

`run` returns None, or `Route(next=[ids])` for a branch (Switch, Categorize). Raise any exception to
fail: the runner applies `max_retries`/`delay_after_error`, `exception_method` and the timeout.
One component instance serves every run of a compiled plan: keep per-run data in `ctx`, not `self`.

How the engine sees a class (the planner, the validator and the Agent ask these; none compares names)
----------------------------------------------------------------------------------------------------
    params_model          the pydantic model of its params (components/params.py), parsed once per plan
    routes(params)        a branching component: (field, id) of every target `run` may return in a Route
    is_container          a container (Iteration, Loop): runs its children with `ctx.run_children(...)`
    child_start           ... and the component_name of its body's one start child (IterationItem)
    parent_container      a component valid only inside that container (IterationItem, LoopItem, ExitLoop)
    tool_meta(params)     as an Agent tool: {"name", "description", "parameters"} the model sees
    call_tool(ctx, args)  as an Agent tool: run with the model's arguments, return the observation
    tool_params(args)     the params the default `call_tool` runs with (the arguments over the DSL's)
docs/adding-a-component.md and docs/adding-a-tool.md walk through them.

The ctx API (`NodeContext`)
---------------------------
Identity:    ctx.component_id, ctx.component_name (type), ctx.params (the DSL dict), ctx.path (Iteration/Loop
             nesting), ctx.run_id, ctx.session_id, ctx.request (RunRequest)
References:  ctx.get(ref, default=None)   raw value of a bare ref ("cpn@var.a.0", "sys.query",
                                          "env.x", "{cpn@var}"); a streamed value stays a StreamValue;
                                          not a reference -> default
             await ctx.value(ref)         the same with streams awaited to their full text
             await ctx.render(text)       text with every {ref} replaced by its text (JSON for
                                          dict/list, "" for None); streams awaited
             ctx.parts(text)              [str | StreamValue, ...] to forward streams live (Message)
             ctx.refs(text)               the refs inside a text
             ctx.is_ref(s)                whether s is a bare reference
Globals:     ctx.get_global("sys.query"), ctx.set_global("env.counter", 3)
             ctx.assign(ref, value)       write env.*/sys.* or another component's output (cpn@var)
Outputs:     ctx.set_output(name, value); ctx.output(name); ctx.outputs (this node's dict)
             ctx.set_input(name, value)   recorded into NodeFinished.inputs (what was resolved)
             ctx.stream(async_iterable_of_str) -> StreamValue, pumped in the background; downstream
                                          readers get tokens live, NodeFinished waits for the end
Events:      ctx.emit(MessageDelta, content="...")  run/session/node/path/timestamp filled in
             ctx.emit_delta(text), ctx.emit_message_end(reference=..., downloads=...)
             ctx.add_usage(prompt_tokens=.., completion_tokens=.., total_tokens=.., calls=1)
Services:    ctx.settings (EngineSettings), ctx.services (Services: llm, retrieval, sandbox),
             ctx.http (shared outbound HTTP client or None)
Cancellation is plain asyncio cancellation: never swallow `asyncio.CancelledError`.
Blocking work (CPU or sync I/O) must go through `await asyncio.to_thread(...)`.

Tests: `ctx = NodeContext.for_test(params, outputs={"cpn": {"var": 1}}, globals_={"env.x": 1})`,
then `await Cls("Cls:x", params).run(ctx)`; emitted events are in `ctx.env.events`.
"""
from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterable, Callable, ClassVar, Iterable, Iterator

from services.orchestrator.components.params import Params, ParamsInvalid, parse_params
from services.orchestrator.engine.dsl.issues import ValidationIssue
from services.orchestrator.engine.events import MessageDelta, MessageEnd
from services.orchestrator.engine.settings import EngineSettings, Services
from services.orchestrator.engine.state import RunRequest
from services.orchestrator.engine.variables import Resolver, Scope, StreamValue, find_refs, is_ref, to_jsonable, to_text

__all__ = ["Component", "NodeContext", "Pause", "Route", "RunEnv", "UnknownComponent", "ValidationIssue",
           "get_class", "id_list", "register", "registered"]


@dataclass(frozen=True, slots=True)
class Route:
    """Returned by a branching component: the downstream ids to follow (others are pruned)."""

    next: tuple[str, ...] | list[str]


def id_list(value: Any) -> list[Any]:
    """A DSL field holding one component id or a list of them (`to`, `end_cpn_ids`, `exception_goto`)."""
    if value is None or value == "":
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


class Pause:
    """Returned by a component that waits for the user (UserFillUp): the run pauses here, unfinished, and a
    later run of the session resumes at this component with the user's answer (`ctx.take_resume_inputs()`)."""

    __slots__ = ()


# What a component without its own `tool_meta` takes as its one argument.
QUERY_ARGUMENT = {"query": {"type": "string", "required": True,
                            "description": "The search keywords: the most important words (and synonyms) of the request."}}
_OBSERVED = ("formalized_content", "content", "result")  # the outputs the default `call_tool` returns


class Component:
    component_name: ClassVar[str] = ""
    # The params this component reads (components/params.py); extra keys are allowed and kept.
    params_model: ClassVar[type[Params]] = Params
    # Output that receives `exception_default_value` with exception_method "comment"
    # (RAGFlow: "result"; LLM and Agent use "content").
    exception_output: ClassVar[str] = "result"
    # A container (Iteration, Loop) owns the components whose parent_id is its id: its body, which the
    # planner compiles as a scope of its own and the container runs with `ctx.run_children(...)`, once per
    # item or pass. The body starts at its one child of type `child_start` (IterationItem, LoopItem).
    is_container: ClassVar[bool] = False
    child_start: ClassVar[str] = ""
    # The component_name of the only container this component may sit in (IterationItem: "Iteration",
    # ExitLoop: "Loop"); validation refuses it anywhere else. "" = anywhere.
    parent_container: ClassVar[str] = ""
    # Reads a stream from the component before it (Message): an LLM or Agent directly upstream streams its
    # answer (`streams_downstream`, set by the planner); any other reader gets the whole text, as in RAGFlow.
    reads_streams: ClassVar[bool] = False

    __slots__ = ("id", "params", "streams_downstream")

    def __init__(self, cpn_id: str, params: Params | dict[str, Any]) -> None:
        """`params`: the model the validator parsed (a compiled plan), or a dict to parse (raises
        ParamsInvalid naming the component and the fields)."""
        self.id = cpn_id
        self.streams_downstream = False
        if not isinstance(params, Params):
            parsed, issues = parse_params(type(self), cpn_id, params)
            if parsed is None:
                raise ParamsInvalid(issues)
            params = parsed
        self.params: Any = params
        self.setup()

    def setup(self) -> None:
        """Parse params once per compiled plan (override; keep run() lean)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.is_container and not cls.child_start:
            raise TypeError(f"{cls.__name__} is a container: it needs `child_start` (its body's start component)")

    @classmethod
    def check(cls, cpn_id: str, params: dict[str, Any], *, require_available: bool = True) -> list[ValidationIssue]:
        """The problems `params_model` finds in `params`, each naming the component and the field."""
        return parse_params(cls, cpn_id, params, require_available=require_available)[1]

    @classmethod
    def routes(cls, params: Any) -> Iterator[tuple[str, Any]]:
        """A branching component's targets: (field, component id) for every id its `run` may return in
        `Route(next=...)`. The planner makes them edges and the validator checks each id. A field ends in
        `[index]`; the targets of one branch share the field before it ("params.conditions[0].to[1]").
        `params` is this class's `params_model`."""
        return iter(())

    def thoughts(self, ctx: NodeContext) -> str:
        return ""

    async def run(self, ctx: NodeContext) -> Route | None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- as an Agent's tool (an entry of an Agent's `tools`; components/_tools.py builds and calls them)
    @classmethod
    def tool_meta(cls, params: dict[str, Any]) -> dict[str, Any]:
        """What the model sees of this component as a tool: {"name", "description", "parameters"}, the
        parameters a JSON schema object or RAGFlow's ToolMeta shape ({arg: {"type", "description",
        "required"}}). An empty name means the tool entry's name, spaces as underscores (sub-agents); a
        non-empty `description` in the entry's params replaces the description.
        Default: the component name in snake_case with one `query` argument."""
        return {"name": re.sub(r"(?<!^)(?=[A-Z])", "_", cls.component_name).lower(),
                "description": f"The {cls.component_name} component.", "parameters": QUERY_ARGUMENT}

    async def call_tool(self, ctx: NodeContext, arguments: dict[str, Any]) -> Any:
        """Run as a tool with the model's arguments; return the observation (text; anything else reaches the
        model as JSON). `ctx` is the call's own context in a child scope of the Agent's. Raising gives the
        model an "Error: ..." observation. Default: a fresh instance with `tool_params(arguments)` runs as a
        node, and the observation is its first non-empty `formalized_content`, `content` or `result`, else
        its outputs as JSON."""
        params = self.tool_params(arguments)
        comp = type(self)(self.id, params)
        ctx.params = params
        await comp.run(ctx)
        await ctx.finish_streams()
        outputs = ctx.outputs
        for key in _OBSERVED:
            value = outputs.get(key)
            if isinstance(value, StreamValue):
                value = await value.wait()
            if value not in (None, ""):
                return to_text(value)
        return to_text(to_jsonable({k: v for k, v in outputs.items() if not k.startswith("_")}))

    def tool_params(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The params the default `call_tool` runs with: the model's arguments win over the DSL's."""
        return {**self.params.as_dict(), **arguments}


# ------------------------------------------------------------------------------------ registry
_REGISTRY: dict[str, type[Component]] = {}


class UnknownComponent(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown component_name '{name}' (known: {', '.join(sorted(_REGISTRY))})")
        self.name = name

    def __str__(self) -> str:
        return str(self.args[0])


def register(cls: type[Component]) -> type[Component]:
    if not cls.component_name:
        raise TypeError(f"{cls.__name__} has no component_name")
    _REGISTRY[cls.component_name] = cls
    return cls


def get_class(name: str) -> type[Component]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownComponent(name) from None


def registered() -> dict[str, type[Component]]:
    return dict(_REGISTRY)


# ------------------------------------------------------------------------------------ context
@dataclass(slots=True)
class RunEnv:
    """Everything a run shares between its nodes (built by the runner, or `for_test`)."""

    run_id: str
    session_id: str
    globals: dict[str, Any]
    emit: Callable[[Any], None]
    settings: EngineSettings = field(default_factory=EngineSettings)
    services: Services = field(default_factory=Services)
    request: RunRequest | None = None
    known: frozenset[str] | None = None  # component ids of the canvas (None: don't check)
    spawn: Callable[[Any], asyncio.Future[Any]] = asyncio.ensure_future
    executor: Any = None  # the runner's execution, for containers running their children
    display: dict[str, str] = field(default_factory=dict)  # component id -> display name
    usage: dict[str, int] = field(default_factory=dict)  # run total, reported in RunFinished
    state: Any = None  # the SessionState (retrieval references, history)
    events: list[Any] | None = None  # filled only by for_test
    replay: Any = None  # checkpoint.Replay when the run resumes an earlier attempt


class NodeContext:
    __slots__ = ("env", "component_id", "component_name", "params", "scope", "path", "outputs",
                 "inputs", "_resolver", "_pending", "writes")

    def __init__(self, env: RunEnv, component_id: str, component_name: str, params: dict[str, Any],
                 scope: Scope, path: tuple[str, ...] = ()) -> None:
        self.env = env
        self.component_id = component_id
        self.component_name = component_name
        self.params = params
        self.scope = scope
        self.path = path
        self.outputs: dict[str, Any] = {}
        self.inputs: dict[str, Any] = {}
        self._resolver: Resolver | None = None
        self._pending: list[asyncio.Future[Any]] | None = None
        self.writes: list[tuple[str, str, Any]] | None = None  # set_global/assign, for the checkpoint
        # Downstream readers see this node's outputs as soon as they are set.
        scope.outputs[component_id] = self.outputs

    # -- identity / services
    @property
    def run_id(self) -> str:
        return self.env.run_id

    @property
    def session_id(self) -> str:
        return self.env.session_id

    @property
    def request(self) -> RunRequest | None:
        return self.env.request

    @property
    def settings(self) -> EngineSettings:
        return self.env.settings

    @property
    def services(self) -> Services:
        return self.env.services

    @property
    def http(self) -> Any:
        return self.env.services.http

    # -- references
    @property
    def resolver(self) -> Resolver:
        r = self._resolver
        if r is None:
            r = self._resolver = Resolver(self.scope, self.env.globals, self.env.known)
        return r

    def get(self, ref: str, default: Any = None) -> Any:
        return self.resolver.get(ref, default)

    async def value(self, ref: str, default: Any = None) -> Any:
        return await self.resolver.value(ref, default)

    async def render(self, text: str) -> str:
        return await self.resolver.render(text)

    def parts(self, text: str) -> list[str | StreamValue]:
        return self.resolver.parts(text)

    @staticmethod
    def refs(text: str) -> list[str]:
        return find_refs(text)

    @staticmethod
    def is_ref(text: Any) -> bool:
        return is_ref(text)

    def get_global(self, key: str, default: Any = None) -> Any:
        return self.env.globals.get(key, default)

    def set_global(self, key: str, value: Any) -> None:
        self.env.globals[key] = value
        self._wrote("global", key, value)

    def assign(self, ref: str, value: Any) -> None:
        self.resolver.assign(ref, value)
        self._wrote("assign", ref, value)

    def _wrote(self, kind: str, ref: str, value: Any) -> None:
        if self.writes is None:
            self.writes = []
        self.writes.append((kind, ref, value))

    def take_resume_inputs(self) -> dict[str, Any] | None:
        """The user's answer when this run resumes at this (paused) component, once; else None."""
        replay = self.env.replay
        return None if replay is None else replay.take_resume_inputs(self.path, self.component_id)

    # -- outputs
    def set_output(self, name: str, value: Any) -> None:
        self.outputs[name] = value

    def output(self, name: str, default: Any = None) -> Any:
        return self.outputs.get(name, default)

    def set_input(self, name: str, value: Any) -> None:
        self.inputs[name] = value

    def add_usage(self, **tokens: int) -> None:
        """Add token counts (prompt_tokens, completion_tokens, total_tokens, calls) to the run total, and tell
        the tenant's limits (`Services.tokens_used`)."""
        env = self.env
        usage = env.usage
        for k, v in tokens.items():
            usage[k] = usage.get(k, 0) + int(v)
        used = int(tokens.get("total_tokens") or tokens.get("prompt_tokens", 0) + tokens.get("completion_tokens", 0))
        if used and env.services.tokens_used is not None and env.request is not None:
            env.services.tokens_used(env.request.tenant_id, env.run_id, used)

    def stream(self, source: AsyncIterable[str]) -> StreamValue:
        """A StreamValue fed from `source` in the background (cancelled with the run)."""
        sv = StreamValue()

        async def pump() -> None:
            try:
                async for chunk in source:
                    sv.push(chunk)
            except BaseException as exc:  # readers must see the failure, then it propagates
                sv.fail(exc if isinstance(exc, Exception) else RuntimeError("stream cancelled"))
                raise
            sv.close()

        task = self.env.spawn(pump())
        if self._pending is None:
            self._pending = []
        self._pending.append(task)
        return sv

    async def finish_streams(self) -> None:
        """Wait for every stream this node started (the runner calls it before NodeFinished)."""
        if self._pending:
            pending, self._pending = self._pending, None
            await asyncio.gather(*pending)

    # -- events
    def emit(self, event_cls: type, **fields: Any) -> None:
        env = self.env
        env.emit(event_cls.make(run_id=env.run_id, session_id=env.session_id,
                                node_id=self.component_id, timestamp=time.time(), path=self.path, **fields))

    def emit_delta(self, content: str, *, start_to_think: bool = False, end_to_think: bool = False) -> None:
        env = self.env  # per token: keep it short
        env.emit(MessageDelta.make(run_id=env.run_id, session_id=env.session_id,
                                   node_id=self.component_id, timestamp=time.time(), path=self.path,
                                   content=content, start_to_think=start_to_think, end_to_think=end_to_think))

    def emit_message_end(self, *, reference: dict[str, Any] | None = None,
                         attachment: dict[str, Any] | None = None,
                         downloads: list[Any] | None = None, status: str = "") -> None:
        self.emit(MessageEnd, reference=reference or {}, attachment=attachment,
                  downloads=downloads or [], status=status)

    # -- containers (Iteration / Loop): run the child sub-graph in a given scope
    async def run_children(self, scope: Scope, path: tuple[str, ...]) -> Any:
        if self.env.executor is None:
            raise RuntimeError(f"{self.component_id}: no executor to run child components")
        return await self.env.executor.run_body(self.component_id, scope, path)

    # -- tests
    @classmethod
    def for_test(cls, params: dict[str, Any] | None = None, *, component_id: str = "Test:node",
                 component_name: str = "Test", outputs: dict[str, dict[str, Any]] | None = None,
                 globals_: dict[str, Any] | None = None, settings: EngineSettings | None = None,
                 services: Services | None = None, request: RunRequest | None = None,
                 known: Iterable[str] | None = None) -> NodeContext:
        events: list[Any] = []
        svc = services or Services(settings=settings or EngineSettings())
        env = RunEnv(run_id="run-test", session_id="session-test", globals=dict(globals_ or {}),
                     emit=events.append, settings=svc.settings, services=svc,
                     request=request or RunRequest(run_id="run-test"),
                     known=frozenset(known) if known is not None else None, events=events)
        scope = Scope()
        for cpn, outs in (outputs or {}).items():
            scope.outputs[cpn] = dict(outs)
        return cls(env, component_id, component_name, dict(params or {}), scope)
