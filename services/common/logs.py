"""JSON logs, configured once per process; every line carries the service, the request context and, when
tracing is on, the current trace_id and span_id (services/common/tracing.py)."""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

from services.common import context, tracing

_configured = False


class _ContextFilter(logging.Filter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        record.request_id = context.request_id.get()
        record.run_id = context.run_id.get()
        record.node_id = context.node_id.get()
        record.trace_id, record.span_id = tracing.current_ids() if tracing.ACTIVE else ("", "")
        return True


def configure(service: str, level: str = "INFO") -> None:
    """Idempotent: the first call wins, so a test that starts several servicers keeps one handler."""
    global _configured
    if _configured:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ContextFilter(service))
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(service)s %(request_id)s %(run_id)s %(node_id)s"
            " %(trace_id)s %(span_id)s",
            rename_fields={"levelname": "level", "asctime": "time"},
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    _configured = True
