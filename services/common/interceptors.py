"""The server interceptor: around every RPC, in this order, the request context, a span (when tracing is on),
metrics, and error mapping.

One interceptor wraps each handler once, for every RPC arity: a streaming handler is wrapped while it
iterates, not just while it is created, and each streamed message passes through one wrapper (four nested
wrappers cost a third of a short run's server time).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from contextlib import aclosing
from typing import Any, Callable

import grpc
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout

from services.common import context as ctxvars
from services.common import metrics, tracing
from services.common.errors import ServiceError

log = logging.getLogger(__name__)

# The codes that mark a server span failed (OpenTelemetry rpc conventions): the others are the caller's doing.
_SERVER_ERRORS = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED,
                  grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS}


class _Rpc:
    """One method of this server: what is recorded around each of its calls (labels resolved once)."""

    __slots__ = ("method", "metered", "latency", "_totals", "_errors", "service", "span_name", "span_attributes")

    def __init__(self, service: str, method: str) -> None:
        self.method = method
        self.service = service
        self.metered = not method.startswith(metrics.UNMETERED_PREFIXES)  # probes and discovery are not traffic
        self.latency = metrics.RPC_LATENCY.labels(service, method) if self.metered else None
        self._totals: dict[str, Any] = {}
        self._errors: dict[str, Any] = {}
        rpc_service, _, rpc_method = method.lstrip("/").rpartition("/")
        self.span_name = method.lstrip("/")
        self.span_attributes = {"rpc.system": "grpc", "rpc.service": rpc_service, "rpc.method": rpc_method,
                                "trellis.service": service}

    def begin(self, context: grpc.aio.ServicerContext) -> tuple[Any, Any, Any, float]:
        """Request id (the caller's or a new one), the span, the clock."""
        metadata = context.invocation_metadata() or ()
        rid = next((v for k, v in metadata if k == ctxvars.REQUEST_ID_HEADER), None)
        token = ctxvars.request_id.set(rid or ctxvars.new_request_id())
        span = span_token = None
        if tracing.ACTIVE and self.metered:
            span = tracing.start(self.span_name, kind=tracing.SpanKind.SERVER, parent=tracing.extract(metadata),
                                 attributes=self.span_attributes)
            span_token = tracing.attach(span)
        return token, span, span_token, time.perf_counter()

    def end(self, state: tuple[Any, Any, Any, float], code: Any, context: grpc.aio.ServicerContext) -> None:
        token, span, span_token, start = state
        try:
            ctxvars.request_id.reset(token)
            here = True
        except ValueError:  # closed from another task (a cancelled stream's finaliser): the call's context is gone
            here = False
        if not isinstance(code, grpc.StatusCode) or code == grpc.StatusCode.OK:
            code = context.code() or grpc.StatusCode.OK  # a handler may set its status without raising
        if span is not None:
            if here:
                tracing.detach(span_token)
            failed = code in _SERVER_ERRORS
            tracing.end(span, (context.details() or code.name) if failed else None,
                        **{"rpc.grpc.status_code": code.value[0] if isinstance(code, grpc.StatusCode) else 2})
        if self.metered:
            name = code.name if isinstance(code, grpc.StatusCode) else str(code)
            total = self._totals.get(name)
            if total is None:
                total = self._totals[name] = metrics.RPC_TOTAL.labels(self.service, self.method, name)
            total.inc()
            self.latency.observe(time.perf_counter() - start)
            if name != "OK":
                error = self._errors.get(name)
                if error is None:
                    error = self._errors[name] = metrics.RPC_ERRORS.labels(self.service, self.method, name)
                error.inc()

    async def fail(self, exc: BaseException, context: grpc.aio.ServicerContext) -> None:
        """Map the handler's exception to a status: `context.abort` raises; anything else is raised again."""
        status = self.status_of(exc)
        if status is not None:
            await context.abort(*status, trailing_metadata=trailing_of(exc))
        raise exc

    def status_of(self, exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
        """The status and message the caller gets for the handler's exception; None for what is not an error of
        the handler's (a cancel, an abort already made)."""
        if isinstance(exc, ServiceError):
            return exc.code, exc.message
        if isinstance(exc, NotImplementedError):
            return grpc.StatusCode.UNIMPLEMENTED, f"{self.method} is not implemented"
        if isinstance(exc, (RedisConnectionError, RedisTimeout)):  # a restart, a failover: worth a retry
            log.warning("Redis unavailable in %s: %s", self.method, exc)
            return grpc.StatusCode.UNAVAILABLE, f"the store (Redis) is unavailable in {self.method}; retry"
        if isinstance(exc, Exception) and not isinstance(exc, grpc.aio.AbortError):
            # Logged once with its traceback here; the caller gets a sanitized message.
            log.error("unhandled error in %s", self.method, exc_info=exc)
            return grpc.StatusCode.INTERNAL, f"internal error in {self.method}; see the server log"
        return None


def trailing_of(exc: BaseException) -> tuple[tuple[str, str | bytes], ...]:
    """The trailing metadata a handler's exception gives its call besides the status (ServiceError's)."""
    return exc.trailing_metadata if isinstance(exc, ServiceError) else ()


class InnerCall:
    """A call carried inside another call's stream (the turns of services/common/turns/),
    recorded as a call of its method of its own, as the interceptor records a call: its request id and span (from
    `metadata`, as a call's metadata carries them), its metrics and its status.

        call = InnerCall(service, method, metadata)
        with call:  # the request id and the span are this task's meanwhile
            ...     # call.fail(exc) gives the status for an exception, and records it
    """

    _rpcs: dict[tuple[str, str], _Rpc] = {}

    def __init__(self, service: str, method: str, metadata: tuple[tuple[str, str], ...]) -> None:
        key = (service, method)
        rpc = self._rpcs.get(key)
        if rpc is None:
            rpc = self._rpcs[key] = _Rpc(service, method)
        self._rpc = rpc
        self._metadata = metadata
        self._code = grpc.StatusCode.OK
        self._details = ""
        self._state: tuple | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def fail(self, exc: BaseException) -> tuple[grpc.StatusCode, str]:
        """The status a call would have ended with for `exc` (a cancel: CANCELLED), recorded for this one."""
        status = self._rpc.status_of(exc) if not isinstance(exc, asyncio.CancelledError) else None
        self._code, self._details = status or (grpc.StatusCode.CANCELLED, "the caller cancelled the turn")
        return self._code, self._details

    def __enter__(self) -> InnerCall:
        self._state = self._rpc.begin(self)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._rpc.end(self._state, self._code, self)  # type: ignore[arg-type]


async def _call_unary(inner: Callable, request: Any, context: grpc.aio.ServicerContext) -> Any:
    result = inner(request, context)
    return await result if inspect.isawaitable(result) else result


class _Interceptor(grpc.aio.ServerInterceptor):
    def __init__(self, service: str) -> None:
        self._service = service
        self._rpcs: dict[str, _Rpc] = {}

    def _rpc(self, method: str) -> _Rpc:
        rpc = self._rpcs.get(method)
        if rpc is None:
            rpc = self._rpcs[method] = _Rpc(self._service, method)
        return rpc

    async def intercept_service(self, continuation, details):  # type: ignore[override]
        handler = await continuation(details)
        if handler is None:
            return None
        rpc = self._rpc(details.method)
        kwargs = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        if handler.unary_unary or handler.stream_unary:
            inner = handler.unary_unary or handler.stream_unary

            async def unary(request, context):
                state = rpc.begin(context)
                code: Any = grpc.StatusCode.OK
                try:
                    return await _call_unary(inner, request, context)
                except asyncio.CancelledError:
                    code = grpc.StatusCode.CANCELLED
                    raise
                except BaseException as exc:
                    try:
                        await rpc.fail(exc, context)
                    finally:
                        code = context.code() or grpc.StatusCode.UNKNOWN
                finally:
                    rpc.end(state, code, context)

            make = grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
            return make(unary, **kwargs)
        inner = handler.unary_stream or handler.stream_stream

        async def stream(request, context):
            state = rpc.begin(context)
            code: Any = grpc.StatusCode.OK
            try:
                result = inner(request, context)
                if hasattr(result, "aclose"):
                    # A call the client cancelled closes the handler now (its sandbox, its run), not whenever
                    # the garbage collector finalises the handler's generator.
                    async with aclosing(result):
                        async for item in result:
                            yield item
                elif hasattr(result, "__aiter__"):
                    async for item in result:
                        yield item
                elif inspect.isawaitable(result):  # a handler that writes with context.write()
                    await result
                elif result is not None:
                    for item in result:
                        yield item
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except GeneratorExit:  # closed by the server: nothing may be awaited now
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except BaseException as exc:
                try:
                    await rpc.fail(exc, context)
                finally:
                    code = context.code() or grpc.StatusCode.UNKNOWN
            finally:
                rpc.end(state, code, context)

        make = grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
        return make(stream, **kwargs)


def server_interceptors(service: str) -> list[grpc.aio.ServerInterceptor]:
    """The request id and the span are set before metrics and errors are recorded."""
    return [_Interceptor(service)]
