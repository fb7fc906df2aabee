"""Variable references and values: `{cpn@var}`, `{sys.query}`, `{env.x}`, dotted paths, streams.

Reference forms (RAGFlow `ComponentBase.variable_ref_patt`):
- inside text: `{cpn_id@var}`, `{sys.query}`, `{env.name}`; extra braces/spaces are tolerated
  (`{{ cpn@var }}` matches too);
- bare refs, for params that hold a single variable: `cpn_id@var`, `sys.query`, `env.counter`;
- dotted paths: `cpn@var.a.b.0` walks dict keys and list indexes, JSON-decoding strings on the way;
- inside an Iteration body, `{item}`, `{index}` and `{result}` are aliases for the IterationItem outputs.

A streamed value (an LLM's content) is a `StreamValue`: a first-class object that any number of
readers can consume from the first chunk while it is being produced; once closed, `text` is the full
text. Text rendering awaits it; `render_parts` hands it over so a Message can forward the tokens live.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
from functools import lru_cache
from typing import Any, AsyncIterator, Iterable

log = logging.getLogger(__name__)

# RAGFlow's pattern, brace-tolerant (`{x}`, `{{x}}`, `{ {x} }`); group 1 is the reference without
# braces. RAGFlow's own regex also eats the spaces before a lone `{` ("said: {sys.query}" -> "said:ping"),
# but its substitution replaces only `{ref}`, so spaces are consumed here only next to an extra brace.
REF_PATTERN = re.compile(
    r"(?:\{+ *)?\{([a-zA-Z0-9_:]+@[A-Za-z0-9_.-]+|sys\.[A-Za-z0-9_.]+|env\.[A-Za-z0-9_.]+)\}(?: *\}+)?"
)
# Iteration aliases, only honoured inside an Iteration body.
ALIAS_PATTERN = re.compile(r"\{(item|index|result)\}")
ALIASES = frozenset({"item", "index", "result"})
_BARE_CPN = re.compile(r"^([a-zA-Z0-9_:]+)@([A-Za-z0-9_.-]+)$")
_BARE_GLOBAL = re.compile(r"^(?:sys|env)\.[A-Za-z0-9_.]+$")


class VariableError(Exception):
    """A reference that cannot be resolved (unknown component, malformed ref)."""

    def __init__(self, ref: str, message: str) -> None:
        super().__init__(f"{message}: '{ref}'")
        self.ref = ref


# ------------------------------------------------------------------------------------ parsing
@lru_cache(maxsize=4096)
def parse_ref(text: str) -> tuple[str, str, tuple[str, ...]] | None:
    """Parse a bare (or braced) reference.

    Returns `("cpn", cpn_id, (var, *path))`, `("global", "sys.query", ())` (the global key is kept
    whole; `rest` is resolved against the longest existing key at lookup time), `("alias", name, path)`
    or None when `text` is not a reference at all.
    """
    s = text.strip().strip("{} ").strip()
    if not s:
        return None
    m = _BARE_CPN.match(s)
    if m:
        return ("cpn", m.group(1), tuple(m.group(2).split(".")))
    if _BARE_GLOBAL.match(s):
        return ("global", s, ())
    head, _, rest = s.partition(".")
    if head in ALIASES:
        return ("alias", head, tuple(rest.split(".")) if rest else ())
    return None


def is_ref(text: Any) -> bool:
    return isinstance(text, str) and parse_ref(text) is not None


def find_refs(text: str) -> list[str]:
    """All references inside a text, in order (without braces)."""
    if "{" not in text:
        return []
    return [m.group(1) for m in REF_PATTERN.finditer(text)]


# ------------------------------------------------------------------------------------ values
def walk_path(value: Any, path: Iterable[str]) -> Any:
    """Follow dict keys / list indexes; JSON strings are decoded on the way. Missing -> None."""
    for key in path:
        if isinstance(value, StreamValue):
            value = value.text
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, (list, tuple)):
            try:
                value = value[int(key)]
            except (ValueError, IndexError):
                return None
        else:
            return None
    return value


def to_text(value: Any) -> str:
    """How a value reads inside text: None -> "", str as is, containers as JSON (like RAGFlow)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, StreamValue):
        return value.text
    if isinstance(value, bool):  # JSON spelling, as RAGFlow's Message renders non-strings
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def to_jsonable(value: Any) -> Any:
    """A JSON-serialisable copy for events: streams become their text, unknown objects str()."""
    t = type(value)
    if t in _SCALARS:
        return value
    if t is dict:
        for v in value.values():  # fast path: a flat dict of scalars is copied as is
            if type(v) not in _SCALARS:
                break
        else:
            return dict(value)
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, StreamValue):
        return value.text
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    return str(value)


class StreamValue:
    """A value produced incrementally (token by token) that several readers can consume.

    The producer calls `push(chunk)` then `close()` (or `fail(exc)`). Every reader iterating
    `async for chunk in stream` sees every chunk from the first one, live; `await stream.wait()`
    returns the full text; `stream.text` is the text so far (the full text once `done`).
    """

    __slots__ = ("_chunks", "_done", "_error", "_waiters", "_full")

    def __init__(self) -> None:
        self._chunks: list[str] = []
        self._done = False
        self._error: BaseException | None = None
        self._waiters: list[asyncio.Future[None]] = []  # one per waiting reader
        self._full: str | None = None

    @classmethod
    def of(cls, text: str) -> StreamValue:
        s = cls()
        s.push(text)
        s.close()
        return s

    @property
    def done(self) -> bool:
        return self._done

    @property
    def error(self) -> BaseException | None:
        return self._error

    @property
    def text(self) -> str:
        if self._full is not None:
            return self._full
        text = "".join(self._chunks)
        if self._done:  # cache: later readers get the full text without re-joining
            self._full = text
        return text

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def push(self, chunk: str) -> None:
        if self._done:
            raise RuntimeError("push() on a closed StreamValue")
        if chunk:
            self._chunks.append(chunk)
            self._wake()

    def close(self) -> None:
        self._done = True
        self._wake()

    def fail(self, exc: BaseException) -> None:
        self._error = exc
        self._done = True
        self._wake()

    async def _changed(self) -> None:
        # A future per reader (no shield hop): a cancelled reader cannot disturb the others, and a
        # chunk reaches every reader on the next loop iteration.
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    async def __aiter__(self) -> AsyncIterator[str]:
        i = 0
        while True:
            # Read the live list (not .text) so that readers keep their own position.
            chunks = self._chunks
            while i < len(chunks):
                yield chunks[i]
                i += 1
            if self._done:
                if self._error is not None:
                    raise self._error
                return
            await self._changed()

    async def wait(self) -> str:
        while not self._done:
            await self._changed()
        if self._error is not None:
            raise self._error
        return self.text

    def __repr__(self) -> str:
        return f"StreamValue(done={self._done}, chars={sum(map(len, self._chunks))})"


# ------------------------------------------------------------------------------------ scopes
class Scope:
    """Component outputs visible at one level: the run, or one Iteration item / Loop pass.

    Lookups fall through to the parent scope, so a child of an Iteration reads its siblings (in
    its own item's scope) and everything outside. `declared` holds each component's DSL-declared
    outputs (`params.outputs[name].value`), used when a component has not set that output.
    """

    __slots__ = ("outputs", "parent", "aliases", "declared", "exit_requested")

    def __init__(self, parent: Scope | None = None, aliases: dict[str, Any] | None = None,
                 declared: dict[str, dict[str, Any]] | None = None) -> None:
        self.outputs: dict[str, dict[str, Any]] = {}
        self.parent = parent
        self.aliases = aliases
        self.exit_requested = False  # set by ExitLoop in a Loop body scope
        self.declared = declared if declared is not None else (parent.declared if parent else {})

    def owner(self, cpn_id: str) -> Scope | None:
        s: Scope | None = self
        while s is not None:
            if cpn_id in s.outputs:
                return s
            s = s.parent
        return None

    def output(self, cpn_id: str, var: str) -> Any:
        s: Scope | None = self
        while s is not None:
            outs = s.outputs.get(cpn_id)
            if outs is not None and var in outs:
                return outs[var]
            s = s.parent
        decl = self.declared.get(cpn_id)
        if decl is not None:
            spec = decl.get(var)
            if isinstance(spec, dict):
                return spec.get("value")
        return None

    def alias(self, name: str) -> tuple[bool, Any]:
        s: Scope | None = self
        while s is not None:
            if s.aliases is not None and name in s.aliases:
                return True, s.aliases[name]
            s = s.parent
        return False, None


class Resolver:
    """Resolves references against a scope chain plus the run's globals (`sys.*`, `env.*`).

    `known` is the set of component ids in the canvas: a reference to anything else raises
    `VariableError` (validation catches those before a run; this guards ad-hoc use).
    """

    __slots__ = ("scope", "globals", "known")

    def __init__(self, scope: Scope, globals_: dict[str, Any], known: frozenset[str] | set[str] | None = None) -> None:
        self.scope = scope
        self.globals = globals_
        self.known = known

    # -- reading
    def get(self, ref: str, default: Any = None) -> Any:
        """Raw value of a bare/braced ref (a StreamValue stays a StreamValue). Not a ref -> default."""
        parsed = parse_ref(ref)
        if parsed is None:
            return default
        kind, name, path = parsed
        if kind == "cpn":
            if self.known is not None and name not in self.known:
                raise VariableError(ref, "reference to a component that does not exist")
            value = self.scope.output(name, path[0])
            return walk_path(value, path[1:]) if len(path) > 1 else value
        if kind == "global":
            return self._global(name)
        found, value = self.scope.alias(name)
        if not found:
            return default
        return walk_path(value, path) if path else value

    def _global(self, key: str) -> Any:
        g = self.globals
        if key in g:
            return g[key]
        # `sys.files.0` / `env.obj.a`: longest existing key, then walk the rest.
        parts = key.split(".")
        for cut in range(len(parts) - 1, 1, -1):
            head = ".".join(parts[:cut])
            if head in g:
                return walk_path(g[head], parts[cut:])
        return None

    async def value(self, ref: str, default: Any = None) -> Any:
        """Like `get`, but a stream is awaited and returned as its full text."""
        v = self.get(ref, default)
        if isinstance(v, StreamValue):
            return await v.wait()
        return v

    def parts(self, text: str) -> list[str | StreamValue]:
        """Split a text into literal strings and resolved values (streams kept as StreamValue)."""
        if "{" not in text:
            return [text]
        out: list[str | StreamValue] = []
        pos = 0
        for m in _iter_matches(text, self.scope.aliases is not None or self._in_alias_scope()):
            if m.start() > pos:
                out.append(text[pos:m.start()])
            v = self.get(m.group(1))
            out.append(v if isinstance(v, StreamValue) else to_text(v))
            pos = m.end()
        if pos < len(text):
            out.append(text[pos:])
        return out

    def _in_alias_scope(self) -> bool:
        return self.scope.alias("item")[0]

    async def render(self, text: str) -> str:
        """Replace every reference in `text` by its text value (streams awaited)."""
        if "{" not in text:
            return text
        parts = self.parts(text)
        for i, p in enumerate(parts):
            if isinstance(p, StreamValue):
                parts[i] = await p.wait()
        return "".join(parts)  # type: ignore[arg-type]

    # -- writing
    def assign(self, ref: str, value: Any) -> None:
        """Write a value to `env.*`/`sys.*` or to a component output (`cpn@var`, no deeper path)."""
        parsed = parse_ref(ref)
        if parsed is None:
            raise VariableError(ref, "not a variable reference")
        kind, name, path = parsed
        if kind == "global":
            self.globals[name] = value
            return
        if kind != "cpn" or len(path) != 1:
            raise VariableError(ref, "only env.*, sys.* or cpn@var can be assigned")
        if self.known is not None and name not in self.known:
            raise VariableError(ref, "reference to a component that does not exist")
        owner = self.scope.owner(name) or self.scope
        owner.outputs.setdefault(name, {})[path[0]] = value


def _iter_matches(text: str, with_aliases: bool) -> list[re.Match[str]]:
    matches = list(REF_PATTERN.finditer(text))
    if with_aliases:
        matches += ALIAS_PATTERN.finditer(text)
        matches.sort(key=lambda m: m.start())
    return matches
