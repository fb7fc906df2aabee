"""Loaded by `bench/first_token_trace.py` and `bench/burst_trace.py` (they put this directory on PYTHONPATH,
nothing else does): with TRELLIS_STEP_TRACE_DIR set, wraps the functions below as their modules are imported
and appends one line per step, `<step> <perf_counter>`, to a file per process. perf_counter is CLOCK_MONOTONIC, the same in every process
of the machine, so steps of different processes line up. With TRELLIS_LOOP_TRACE=1 the orchestrator also times
each loop turn and each callback."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import inspect
import os
import sys
import time

# module -> [(class or "" for the module, function, step name)]. `name>` marks the entry, `name<` the return
# of a coroutine, `name^` each item an async generator yields.
STEPS = {
    "gateway.protocol": [("", "read_body", "gateway: request body read")],
    "gateway.orchestrator": [("RunStream", "start", "gateway: Run called"), ("RunStream", "_read", "gateway: event read")],
    "aiohttp.web_response": [("StreamResponse", "write", "gateway: HTTP write")],
    "services.orchestrator.api.canvas": [("CanvasServicer", "Run", "orchestrator: Run")],
    "services.orchestrator.store.agents": [("AgentStore", "resolve_dsl", "orchestrator: agent read")],
    "services.orchestrator.runs.manager": [("_Pump", "_run", "orchestrator: run task"),
                                          ("_Pump", "write_start", "orchestrator: start written"),
                                          ("_Pump", "_emit", "orchestrator: event to the run's stream"),
                                          ("RunManager", "execute", "orchestrator: event to the caller")],
    "services.orchestrator.components.base": [("NodeContext", "emit_delta", "orchestrator: delta emitted")],
    "services.orchestrator.components.llm": [("LLM", "run", "orchestrator: LLM component")],
    "services.clients.llm": [("LlmClient", "stream_chat", "orchestrator: model stream")],
    "services.orchestrator.components.message": [("Message", "run", "orchestrator: Message component")],
    "services.llm_gateway.server": [("LlmServicer", "Chat", "llm_gateway: Chat")],
    "services.llm_gateway.providers.openai": [("OpenAIProvider", "stream", "llm_gateway: provider stream")],
}

_DIR = os.environ.get("TRELLIS_STEP_TRACE_DIR")


def _install(out_dir: str) -> None:
    out = open(os.path.join(out_dir, f"steps-{os.getpid()}.txt"), "a", buffering=1)
    clock = time.perf_counter

    def mark(step: str) -> None:
        out.write(f"{step}\t{clock():.6f}\n")

    def wrapped(fn, step: str):
        if inspect.isasyncgenfunction(fn):
            @functools.wraps(fn)
            async def agen(*args, **kwargs):
                mark(step + " >")
                async for item in fn(*args, **kwargs):
                    mark(step + " ^")
                    yield item
            return agen
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def coro(*args, **kwargs):
                mark(step + " >")
                try:
                    return await fn(*args, **kwargs)
                finally:
                    mark(step + " <")
            return coro

        @functools.wraps(fn)
        def plain(*args, **kwargs):
            mark(step + " >")
            return fn(*args, **kwargs)
        return plain

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname not in STEPS:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                for owner, name, step in STEPS[fullname]:
                    holder = getattr(module, owner) if owner else module
                    setattr(holder, name, wrapped(getattr(holder, name), step))

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())



def _install_loop_trace(out_dir: str) -> None:
    """The orchestrator's loop: one line per loop turn (`T start end`) and per callback run
    (`H name start end`, a task's callbacks named after its coroutine), for bench/burst_trace.py."""
    import asyncio.base_events
    import asyncio.events

    out = open(os.path.join(out_dir, f"loop-{os.getpid()}.txt"), "a", buffering=1 << 16)
    import atexit
    atexit.register(out.flush)
    clock = time.perf_counter
    run_once, handle_run = asyncio.base_events.BaseEventLoop._run_once, asyncio.events.Handle._run

    def timed_turn(self):
        start = clock()
        run_once(self)
        out.write(f"T\t{start:.6f}\t{clock():.6f}\n")

    def timed_callback(self):
        start = clock()
        try:
            return handle_run(self)
        finally:
            callback = self._callback
            name = getattr(callback, "__qualname__", None) or type(callback).__name__
            coro = getattr(getattr(callback, "__self__", None), "get_coro", None)
            if coro is not None:
                name = "task:" + str(getattr(coro(), "__qualname__", None) or "?")
            out.write(f"H\t{name}\t{start:.6f}\t{clock():.6f}\n")

    asyncio.base_events.BaseEventLoop._run_once = timed_turn
    asyncio.events.Handle._run = timed_callback


if _DIR:
    _install(_DIR)
    if os.environ.get("TRELLIS_LOOP_TRACE") and b"services.orchestrator" in open("/proc/self/cmdline", "rb").read():
        _install_loop_trace(_DIR)
