"""How a run ended, in words a person or a model can act on: the guest's own record when it wrote one,
else what the service saw (its own deadline or caps, the exit status, a runtime's dying words)."""

from __future__ import annotations

import re
import signal
from typing import Any

from services.sandbox._process import Exit
from services.sandbox.limits import Limits
from services.sandbox.models import ErrorKind, ExecError, ExecResult

_GUEST_KINDS = {
    "syntax": ErrorKind.SYNTAX,
    "exception": ErrorKind.EXCEPTION,
    "no_main": ErrorKind.NO_MAIN,
    "bad_return": ErrorKind.BAD_RETURN,
    "memory": ErrorKind.MEMORY_LIMIT,
    "exit": ErrorKind.EXIT,
}
# What runtimes print when they run out of memory without raising something catchable.
_OOM = re.compile(rb"heap out of memory|MemoryError|std::bad_alloc|Cannot allocate memory|out of memory", re.I)
_SIGNAL_RANGE = range(129, 129 + 64)  # bwrap reports "killed by signal N" as exit code 128 + N


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def exit_code(exit_: Exit, isolated: bool) -> int:
    """The program's own exit code; -N when a signal killed it (bwrap folds that into 128 + N)."""
    code = exit_.code
    if isolated and code in _SIGNAL_RANGE:
        return -(code - 128)
    return code


def classify(
    *,
    limits: Limits,
    stopped: str | None,
    record: dict[str, Any] | None,
    usage: dict[str, Any] | None,
    exit_: Exit,
    stderr_tail: bytes,
    wall_ms: int,
    truncated: bool,
    isolated: bool,
) -> ExecResult:
    code, cpu_ms, peak = exit_code(exit_, isolated), 0, 0
    if usage is not None:  # the supervisor inside saw the run itself: exact status and usage
        code, cpu_ms, peak = _int(usage, "exit_code", code), _int(usage, "cpu_ms", 0), _int(usage, "peak_rss_bytes", 0)
        if usage.get("timed_out") is True and stopped is None:
            stopped = "timeout"
    common = dict(
        exit_code=code,
        wall_time_ms=wall_ms,
        cpu_time_ms=cpu_ms,
        peak_memory_bytes=peak,
        output_truncated=truncated,
        isolated=isolated,
    )
    error = _service_stop(limits, stopped)
    if error is None and record is not None:
        if record.get("status") == "ok" and isinstance(record.get("value_json"), str):
            return ExecResult(ok=True, value_json=record["value_json"], **common)  # type: ignore[arg-type]
        error = _guest_error(record)
    if error is None:
        error = _death(limits, code, cpu_ms, stderr_tail)
    return ExecResult(ok=False, error=error, **common)  # type: ignore[arg-type]


def _service_stop(limits: Limits, stopped: str | None) -> ExecError | None:
    if stopped == "timeout":
        return ExecError(ErrorKind.TIMEOUT, f"the code ran longer than its wall-time limit of {limits.wall_time_ms} ms and was stopped")
    if stopped == "output":
        return ExecError(
            ErrorKind.OUTPUT_LIMIT, f"the code wrote more than {limits.max_output_bytes} bytes of output and was stopped"
        )
    if stopped == "result":
        return ExecError(ErrorKind.OUTPUT_LIMIT, "main's return value is too large and was dropped")
    return None


def _guest_error(record: dict[str, Any]) -> ExecError:
    kind = _GUEST_KINDS.get(str(record.get("kind")), ErrorKind.INTERNAL)
    line = record.get("line")
    return ExecError(
        kind=kind,
        message=str(record.get("message") or kind.value),
        line=line if isinstance(line, int) and line > 0 else 0,
        exception_type=str(record.get("type") or ""),
        traceback=str(record.get("traceback") or ""),
    )


def _int(d: dict[str, Any], key: str, default: int) -> int:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _death(limits: Limits, code: int, cpu_ms: int, stderr_tail: bytes) -> ExecError:
    """No record: the process died or exited before main returned. Say which limit, if one did it."""
    sig = -code if code < 0 else 0
    cpu_limit_ms = max(1, -(-limits.cpu_time_ms // 1000)) * 1000
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_ms >= cpu_limit_ms - 50):
        return ExecError(ErrorKind.CPU_LIMIT, f"the code used more than its CPU-time limit of {limits.cpu_time_ms} ms and was stopped")
    if _OOM.search(stderr_tail):
        return ExecError(ErrorKind.MEMORY_LIMIT, f"the code ran out of memory (limit {_mib(limits.memory_bytes)})")
    if sig == signal.SIGXFSZ:
        return ExecError(ErrorKind.EXIT, f"the code wrote a file larger than the limit of {limits.max_file_bytes} bytes")
    if sig:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        return ExecError(ErrorKind.EXIT, f"the process was killed by {name} before main returned")
    return ExecError(ErrorKind.EXIT, f"the process exited with status {code} before main returned")
