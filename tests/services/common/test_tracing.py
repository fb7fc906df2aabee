"""services/common/tracing.py: configured by the OTEL_* variables (off without one), OTLP export to a real
local receiver, and trace ids in every log line."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.common import logs, tracing
from tests.support.fake_otlp import OtlpReceiver


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    yield
    if tracing._provider is not None:
        tracing._provider.shutdown()
    tracing.use(None)


@pytest.mark.parametrize("env", [
    {},
    {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
    {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
])
def test_off_unless_the_environment_names_an_exporter(monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert tracing.configure("orchestrator") is False
    assert tracing.ACTIVE is False
    assert tracing.inject() == {} and tracing.current_ids() == ("", "")


@pytest.mark.parametrize("name, value, message", [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported"),
    ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER='zipkin' is not supported"),
])
def test_an_unsupported_setting_is_one_clear_error(monkeypatch, name, value, message):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=message):
        tracing.configure("orchestrator")
    assert tracing.ACTIVE is False


def test_spans_go_over_otlp_http_to_the_endpoint(monkeypatch):
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        assert tracing.configure("orchestrator") is True
        with tracing.span("outer", attributes={"trellis.run.id": "r1", "skipped": None}):
            with tracing.span("inner"):
                headers = tracing.inject()
        assert tracing._provider.force_flush(10_000)
    assert headers["traceparent"].startswith("00-")
    assert [path for path, _ in receiver.requests] == ["/v1/traces"]
    assert {service for service, _ in receiver.spans()} == {"trellis-orchestrator"}
    spans = {s.name: s for _, s in receiver.spans()}
    assert set(spans) == {"outer", "inner"}
    assert spans["inner"].parent_span_id == spans["outer"].span_id
    assert spans["inner"].trace_id.hex() == headers["traceparent"].split("-")[1]
    assert {a.key: a.value.string_value for a in spans["outer"].attributes} == {"trellis.run.id": "r1"}


def test_otel_service_name_wins_over_the_default(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-orchestrator")
    assert tracing.configure("orchestrator") is True
    assert tracing._provider.resource.attributes["service.name"] == "my-orchestrator"


def test_log_records_carry_the_trace_and_span_ids():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    flt = logs._ContextFilter("orchestrator")

    def record() -> logging.LogRecord:
        r = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", (), None)
        flt.filter(r)
        return r

    assert (record().trace_id, record().span_id) == ("", "")  # tracing off
    tracing.use(provider)
    with tracing.span("work") as span:
        inside = record()
    outside = record()
    assert inside.trace_id == format(span.get_span_context().trace_id, "032x")
    assert inside.span_id == format(span.get_span_context().span_id, "016x")
    assert (outside.trace_id, outside.span_id) == ("", "")
