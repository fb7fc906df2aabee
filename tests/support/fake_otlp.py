"""An OTLP/HTTP trace receiver, as a collector listens on :4318: POST /v1/traces with a protobuf
ExportTraceServiceRequest. It runs in a thread (the exporting SDK posts from its own thread, and may be in
this very process)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.waiting import eventually_sync


class OtlpReceiver:
    def __init__(self) -> None:
        self.requests: list[tuple[str, ExportTraceServiceRequest]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                msg = ExportTraceServiceRequest()
                msg.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, msg))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> "OtlpReceiver":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[str, Any]]:
        """Every span received so far, as (the service.name of its resource, the OTLP span)."""
        out = []
        for _, msg in list(self.requests):
            for rs in msg.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
                out += [(service, s) for scope in rs.scope_spans for s in scope.spans]
        return out

    def wait_for(self, predicate: Callable[[list[tuple[str, Any]]], bool], timeout_s: float = 30.0) -> list[tuple[str, Any]]:
        def complete() -> tuple[list[tuple[str, Any]]] | None:
            spans = self.spans()
            return (spans,) if predicate(spans) else None

        try:
            return eventually_sync(complete, what="the spans", timeout=timeout_s)[0]
        except AssertionError:
            raise AssertionError(f"the receiver did not get the spans in {timeout_s}s: "
                                 f"{[(s, sp.name) for s, sp in self.spans()]}") from None
