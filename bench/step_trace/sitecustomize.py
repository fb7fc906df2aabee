"""Loaded by `bench/first_token_trace.py` (it puts this directory on PYTHONPATH, nothing else does): with
TRELLIS_STEP_TRACE_DIR set, wraps the functions below as their modules are imported and appends one line per
step, `<step> <perf_counter>`, to a file per process. perf_counter is CLOCK_MONOTONIC, the same in every process
of the machine, so steps of different processes line up."""

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
    "services.orchestrator.server": [("CanvasServicer", "Run", "orchestrator: Run")],
    "services.orchestrator.store.agents": [("AgentStore", "resolve_dsl", "orchestrator: agent read")],
    "services.orchestrator.run_manager": [("_Pump", "_run", "orchestrator: run task"),
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


if _DIR:
    _install(_DIR)
