"""The sandbox service as CodeExec sees it: one `execute()` call, protobuf kept in this file.

`Services.sandbox` is the `trellis.sandbox.v1.SandboxService` stub; this adapter turns a run into a
`SandboxRun` (value, stdout, stderr, error) and transport failures into `SandboxUnavailable`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc
from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb

from ..tracing import traced_sandbox

# RAGFlow spellings (CodeExecutionRequest.normalize_language) -> the service's languages.
LANGUAGES = {"python": sb_pb.LANGUAGE_PYTHON, "python3": sb_pb.LANGUAGE_PYTHON,
             "javascript": sb_pb.LANGUAGE_JAVASCRIPT, "nodejs": sb_pb.LANGUAGE_JAVASCRIPT,
             "js": sb_pb.LANGUAGE_JAVASCRIPT}


class SandboxUnavailable(RuntimeError):
    """The sandbox could not run the code at all (not configured, down, queue full, bad request)."""


@dataclass(frozen=True, slots=True)
class SandboxRun:
    ok: bool
    value: Any  # main's return value (decoded JSON) when ok
    stdout: str
    stderr: str
    error_kind: str  # "" when ok, else e.g. "EXCEPTION", "TIMEOUT", "SYNTAX"
    error_message: str
    traceback: str
    wall_time_ms: int
    output_truncated: bool


@traced_sandbox
async def execute(stub: Any, lang: str, code: str, arguments: dict[str, Any], *,
                  timeout_s: float | None) -> SandboxRun:
    if stub is None:
        raise SandboxUnavailable("no sandbox service is configured")
    language = LANGUAGES.get(lang.lower())
    if language is None:
        raise SandboxUnavailable(f"unsupported language {lang!r} (python or javascript)")
    req = sb_pb.ExecuteRequest(language=language, code=code,
                               arguments_json=json.dumps(arguments, ensure_ascii=False, default=str))
    out: list[bytes] = []
    err: list[bytes] = []
    result = None
    call = stub.Execute(req, timeout=timeout_s)
    try:
        async for msg in call:
            if msg.HasField("result"):
                result = msg.result
            elif msg.output.stream == sb_pb.OUTPUT_STREAM_STDERR:
                err.append(msg.output.data)
            else:
                out.append(msg.output.data)
    except grpc.aio.AioRpcError as exc:
        raise SandboxUnavailable(f"sandbox {exc.code().name}: {exc.details() or ''}".rstrip(": ")) from None
    finally:
        call.cancel()  # no-op once finished; stops the run if we are cancelled
    if result is None:
        raise SandboxUnavailable("the sandbox ended the run without a result")
    value = json.loads(result.value_json) if result.ok and result.value_json else None
    e = result.error
    return SandboxRun(
        ok=result.ok, value=value,
        stdout=b"".join(out).decode("utf-8", errors="replace"),
        stderr=b"".join(err).decode("utf-8", errors="replace"),
        error_kind="" if result.ok else sb_pb.ErrorKind.Name(e.kind).removeprefix("ERROR_KIND_"),
        error_message=e.message, traceback=e.traceback, wall_time_ms=result.wall_time_ms,
        output_truncated=result.output_truncated,
    )
