"""Server interceptors: request context, metrics, error mapping.

Each one is an async context manager entered around the handler; `_AroundInterceptor` applies it to every
RPC arity, because a streaming handler must be wrapped while it iterates, not just while it is created.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import grpc

from services.common import context as ctxvars
from services.common import metrics, tracing
from services.common.errors import ServiceError

log = logging.getLogger(__name__)

Around = Callable[[str, grpc.aio.ServicerContext], Any]  # -> async context manager


async def _call_unary(inner: Callable, request: Any, context: grpc.aio.ServicerContext) -> Any:
    result = inner(request, context)
    return await result if inspect.isawaitable(result) else result


async def _iterate(inner: Callable, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    result = inner(request, context)
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    elif inspect.isawaitable(result):  # handler that writes with context.write()
        await result
    elif result is not None:
        for item in result:
            yield item


class _AroundInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, around: Around) -> None:
        self._around = around

    async def intercept_service(self, continuation, details):  # type: ignore[override]
        handler = await continuation(details)
        if handler is None:
            return None
        method, around = details.method, self._around
        kwargs = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        if handler.unary_unary:
            inner = handler.unary_unary

            async def unary_unary(request, context):
                async with around(method, context):
                    return await _call_unary(inner, request, context)

            return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
        if handler.unary_stream:
            inner = handler.unary_stream

            async def unary_stream(request, context):
                async with around(method, context):
                    async for item in _iterate(inner, request, context):
                        yield item

            return grpc.unary_stream_rpc_method_handler(unary_stream, **kwargs)
        if handler.stream_unary:
            inner = handler.stream_unary

            async def stream_unary(request_iterator, context):
                async with around(method, context):
                    return await _call_unary(inner, request_iterator, context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
        inner = handler.stream_stream

        async def stream_stream(request_iterator, context):
            async with around(method, context):
                async for item in _iterate(inner, request_iterator, context):
                    yield item

        return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)


@asynccontextmanager
async def _request_context(method: str, context: grpc.aio.ServicerContext):
    metadata = dict(context.invocation_metadata() or ())
    token = ctxvars.request_id.set(metadata.get(ctxvars.REQUEST_ID_HEADER) or ctxvars.new_request_id())
    try:
        yield
    finally:
        ctxvars.request_id.reset(token)


# The codes that mark a server span failed (OpenTelemetry rpc conventions): the others are the caller's doing.
_SERVER_ERRORS = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED,
                  grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS}


class _Outcome:
    """The final status code of one RPC: what the handler raised or set, as the tracing and metrics wrappers
    both need it."""

    __slots__ = ("code",)

    def __init__(self) -> None:
        self.code: Any = grpc.StatusCode.OK

    @asynccontextmanager
    async def watch(self, context: grpc.aio.ServicerContext):
        try:
            yield
        except asyncio.CancelledError:
            self.code = grpc.StatusCode.CANCELLED
            raise
        except BaseException:
            self.code = context.code() or grpc.StatusCode.UNKNOWN
            raise
        finally:
            if not isinstance(self.code, grpc.StatusCode) or self.code == grpc.StatusCode.OK:
                self.code = context.code() or grpc.StatusCode.OK


def _tracing(service: str) -> Around:
    """A SERVER span per RPC, child of the caller's `traceparent` metadata (rpc.* semantic conventions)."""

    @asynccontextmanager
    async def around(method: str, context: grpc.aio.ServicerContext):
        if not tracing.ACTIVE or method.startswith(metrics.UNMETERED_PREFIXES):
            yield
            return
        rpc_service, _, rpc_method = method.lstrip("/").rpartition("/")
        span = tracing.start(method.lstrip("/"), kind=tracing.SpanKind.SERVER,
                             parent=tracing.extract(context.invocation_metadata() or ()),
                             attributes={"rpc.system": "grpc", "rpc.service": rpc_service, "rpc.method": rpc_method,
                                         "trellis.service": service})
        token = tracing.attach(span)
        outcome = _Outcome()
        try:
            async with outcome.watch(context):
                yield
        finally:
            code = outcome.code
            tracing.detach(token)
            failed = code in _SERVER_ERRORS
            tracing.end(span, (context.details() or code.name) if failed else None,
                        **{"rpc.grpc.status_code": code.value[0] if isinstance(code, grpc.StatusCode) else 2})

    return around


def _metrics(service: str) -> Around:
    @asynccontextmanager
    async def around(method: str, context: grpc.aio.ServicerContext):
        if method.startswith(metrics.UNMETERED_PREFIXES):
            yield
            return
        start = time.perf_counter()
        outcome = _Outcome()
        try:
            async with outcome.watch(context):
                yield
        finally:
            code = outcome.code
            name = code.name if isinstance(code, grpc.StatusCode) else str(code)
            metrics.RPC_TOTAL.labels(service, method, name).inc()
            metrics.RPC_LATENCY.labels(service, method).observe(time.perf_counter() - start)
            if name != "OK":
                metrics.RPC_ERRORS.labels(service, method, name).inc()

    return around


@asynccontextmanager
async def _error_mapping(method: str, context: grpc.aio.ServicerContext):
    try:
        yield
    except ServiceError as exc:
        await context.abort(exc.code, exc.message)
    except NotImplementedError:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")
    except (asyncio.CancelledError, grpc.aio.AbortError):
        raise
    except Exception:
        # Logged once with its traceback here; the caller gets a sanitized message.
        log.exception("unhandled error in %s", method)
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method}; see the server log")


def server_interceptors(service: str) -> list[grpc.aio.ServerInterceptor]:
    """Outermost first: the request id and the span are set before metrics and errors are recorded."""
    return [_AroundInterceptor(_request_context), _AroundInterceptor(_tracing(service)),
            _AroundInterceptor(_metrics(service)), _AroundInterceptor(_error_mapping)]
