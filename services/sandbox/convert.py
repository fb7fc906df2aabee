"""Protobuf <-> domain for the sandbox (the only module besides server.py that imports _pb2)."""

from __future__ import annotations

from dataclasses import fields

from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb

from services.common.json_fields import json_object
from services.common.errors import InvalidArgument
from services.sandbox.config import SandboxConfig
from services.sandbox.limits import Limits, resolve
from services.sandbox.models import ErrorKind, Event, ExecRequest, ExecResult, Language

_LANGUAGES = {sb_pb.LANGUAGE_PYTHON: Language.PYTHON, sb_pb.LANGUAGE_JAVASCRIPT: Language.JAVASCRIPT}
_STREAMS = {"stdout": sb_pb.OUTPUT_STREAM_STDOUT, "stderr": sb_pb.OUTPUT_STREAM_STDERR}
_KINDS = {kind: getattr(sb_pb, f"ERROR_KIND_{kind.name}") for kind in ErrorKind}


def request_from_proto(req: sb_pb.ExecuteRequest, cfg: SandboxConfig) -> ExecRequest:
    """Validate and convert; every problem is an InvalidArgument naming the field."""
    language = _LANGUAGES.get(req.language)
    if language is None:
        raise InvalidArgument("sandbox: language must be LANGUAGE_PYTHON or LANGUAGE_JAVASCRIPT")
    if not req.code.strip():
        raise InvalidArgument("sandbox: code is empty")
    if len(req.code.encode()) > cfg.max_code_bytes:
        raise InvalidArgument(f"sandbox: code is larger than {cfg.max_code_bytes} bytes")
    if len(req.arguments_json.encode()) > cfg.max_arguments_bytes:
        raise InvalidArgument(f"sandbox: arguments_json is larger than {cfg.max_arguments_bytes} bytes")
    args = _arguments(req.arguments_json, language)
    requested = {f.name: getattr(req.limits, f.name) for f in fields(Limits)}
    return ExecRequest(language=language, code=req.code, args=args, limits=resolve(requested, cfg.defaults, cfg.maxima))


def _arguments(text: str, language: Language) -> dict:
    args = json_object(text, "sandbox: arguments_json")
    if language is Language.PYTHON:
        bad = [k for k in args if not k.isidentifier()]
        if bad:
            raise InvalidArgument(f"sandbox: arguments_json key {bad[0]!r} is not a valid Python argument name")
    return args


def event_to_proto(event: Event) -> sb_pb.ExecuteResponse:
    if isinstance(event, ExecResult):
        return sb_pb.ExecuteResponse(result=result_to_proto(event))
    return sb_pb.ExecuteResponse(output=sb_pb.OutputChunk(stream=_STREAMS[event.stream], data=event.data))


def result_to_proto(r: ExecResult) -> sb_pb.ExecutionResult:
    msg = sb_pb.ExecutionResult(
        ok=r.ok,
        value_json=r.value_json,
        exit_code=r.exit_code,
        wall_time_ms=r.wall_time_ms,
        cpu_time_ms=r.cpu_time_ms,
        peak_memory_bytes=r.peak_memory_bytes,
        output_truncated=r.output_truncated,
        isolated=r.isolated,
    )
    if r.error is not None:
        msg.error.CopyFrom(
            sb_pb.ExecutionError(
                kind=_KINDS[r.error.kind],
                message=r.error.message,
                line=r.error.line,
                exception_type=r.error.exception_type,
                traceback=r.error.traceback,
            )
        )
    return msg
