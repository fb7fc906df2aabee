"""JSON logs, configured once per process; every line carries the service, the request context and, when
tracing is on, the current trace_id and span_id (services/common/tracing.py)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable

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


class Outage:
    """How a background loop reports a dependency that fails pass after pass (Redis away, say): the first failure
    with its trace, then one line every `every_s` while it lasts, then one line when a pass works again; not a
    trace every pass (a failure of another kind meanwhile is told with its trace too). Call `failed()` inside the
    `except` block, `ok()` after a pass that worked."""

    def __init__(self, logger: logging.Logger, what: str, *, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = logger
        self.what = what
        self.every_s = every_s
        self.clock = clock
        self._since: float | None = None  # when the failures began
        self._said = 0.0  # when the last line about them went out
        self._failures = 0
        self._kind: type | None = None  # the failure's kind, as last told with its trace

    def failed(self) -> None:
        now = self.clock()
        exc = sys.exception()
        self._failures += 1
        if self._since is None or type(exc) is not self._kind:  # a new failure, or another kind: its trace
            self._since = self._since if self._since is not None else now
            self._said, self._kind = now, type(exc)
            self.log.warning("%s", self.what, exc_info=True)
        elif now - self._said >= self.every_s:
            self._said = now
            self.log.warning("%s: still failing, %d times in %.0f s (%s: %s)", self.what, self._failures,
                             now - self._since, type(exc).__name__, exc)

    def ok(self) -> None:
        if self._since is not None:
            self.log.info("%s: works again after %.0f s (%d failures)", self.what, self.clock() - self._since,
                          self._failures)
            self._since, self._failures, self._kind = None, 0, None
