"""OpenTelemetry traces for every Trellis process, configured by the standard OTEL_* variables.

    tracing.configure("orchestrator")      # once per process: serve() and the gateway's main call it
    if tracing.ACTIVE:                      # every hook checks this first: off costs one global read
        with tracing.span("retrieval", attributes={...}): ...

Tracing is on when the environment names a destination: `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (OTLP over `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: `http/protobuf`, the
spec's default, or `grpc`), or `OTEL_TRACES_EXPORTER=otlp|console`. `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER=none` keep it off. Off, no span object is made and no context is switched anywhere.
The SDK reads the rest itself: `OTEL_SERVICE_NAME` (default `trellis-<service>`), `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_HEADERS` / `_TIMEOUT` / `_CERTIFICATE`...;
`OTEL_PROPAGATORS` picks the propagation format (default W3C `traceparent` + baggage).

Context crosses processes as W3C `traceparent` in HTTP headers (gateway.tracing) and gRPC metadata (the
client interceptor of services.common.channels, the server interceptor of services.common.interceptors).
Tests install an in-memory exporter with `use(provider)`.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

log = logging.getLogger(__name__)

ACTIVE = False  # read by every hook before it does anything
_tracer: trace.Tracer = trace.NoOpTracer()
_provider: Any = None

INSTRUMENTATION = "trellis"


def configure(service: str) -> bool:
    """Install an exporting TracerProvider when the environment asks for one; True when tracing is on.
    The first configured provider wins (tests start several services in one process)."""
    if ACTIVE:
        return True
    exporter = _exporter_from_env()
    if exporter is None:
        return False
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from_env = OTELResourceDetector().detect()
    attributes = {} if from_env.attributes.get("service.name") else {"service.name": f"trellis-{service}"}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    use(provider)
    log.info("tracing on: %s spans of %s", type(exporter).__name__, provider.resource.attributes.get("service.name"))
    return True


def _exporter_from_env() -> Any:
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if "none" in names or not (names or endpoint):
        return None
    if names and names[0] == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if names and names[0] != "otlp":
        raise SystemExit(f"configuration error: OTEL_TRACES_EXPORTER={names[0]!r} is not supported (otlp, console or none)")
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    else:
        raise SystemExit(f"configuration error: OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported "
                         "(http/protobuf or grpc)")
    return OTLPSpanExporter()  # endpoint, headers, timeout, TLS: from the same OTEL_EXPORTER_OTLP_* variables


def use(provider: Any) -> None:
    """Trace into `provider` (an SDK TracerProvider), or stop tracing with None."""
    global ACTIVE, _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer(INSTRUMENTATION) if provider is not None else trace.NoOpTracer()
    ACTIVE = provider is not None


# ---- spans ---------------------------------------------------------------------------------------------

def start(name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None,
          parent: otel_context.Context | None = None) -> Span:
    """A started span (child of `parent`, or of the current span); end it with `end()`."""
    return _tracer.start_span(name, context=parent, kind=kind, attributes=_clean(attributes))


def end(span: Span, error: str | None = None, **attributes: Any) -> None:
    if attributes:
        span.set_attributes(_clean(attributes))
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:500]))
    span.end()


def attach(span: Span) -> object:
    """Make `span` the current one in this task until `detach(token)`."""
    return otel_context.attach(trace.set_span_in_context(span))


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


@contextmanager
def span(name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None,
         parent: otel_context.Context | None = None) -> Iterator[Span]:
    """A current span around a block; an exception marks it failed (and is recorded) before it goes on."""
    s = start(name, kind=kind, attributes=attributes, parent=parent)
    token = attach(s)
    try:
        yield s
    except BaseException as exc:
        s.record_exception(exc)
        s.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
        raise
    finally:
        detach(token)
        s.end()


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """OpenTelemetry attribute values are str, bool, int, float or lists of one of those; None is dropped."""
    if not attributes:
        return None
    out = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (tuple, set, frozenset)):
            value = list(value)
        if isinstance(value, list):
            value = [v if isinstance(v, (str, bool, int, float)) else str(v) for v in value]
        elif not isinstance(value, (str, bool, int, float)):
            value = str(value)
        out[key] = value
    return out


# ---- propagation ---------------------------------------------------------------------------------------

def extract(carrier: Mapping[str, str] | Iterable[tuple[str, Any]]) -> otel_context.Context:
    """The remote parent named by `traceparent` (and baggage) in HTTP headers or gRPC metadata."""
    if not isinstance(carrier, Mapping):
        carrier = {k: v for k, v in carrier if isinstance(v, str)}
    return propagate.extract(carrier)


def inject() -> dict[str, str]:
    """Headers that carry the current span to the next process (`traceparent`, maybe `tracestate`, baggage)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def current_ids() -> tuple[str, str]:
    """(trace_id, span_id) of the current span as hex, or ("", "") when there is none."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return "", ""
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")
