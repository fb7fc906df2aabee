"""SandboxClient: how the orchestrator's CodeExec component runs code in the sandbox service.

    client = SandboxClient.connect("127.0.0.1:50054")
    run = await client.execute("python", "def main(x):\n    return x * 2", {"x": 21}, timeout_s=65)
    run.ok, run.value, run.stdout          # True, 42, ""

The output streams back in pieces; `execute` gathers them and returns one `SandboxRun`. A run the code
lost (an exception, a time or memory limit) is a `SandboxRun` with `ok` False, not an error: errors are
for a sandbox that could not run the code at all (down, queue full, bad request), and are the typed errors
of services/clients/_rpc.py.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Literal

from trellis.sandbox.v1 import sandbox_service_pb2 as sb_pb
from trellis.sandbox.v1 import sandbox_service_pb2_grpc as sb_grpc

from services.clients._rpc import Peer
from services.common.errors import InvalidArgument, ServiceError

Language = Literal["python", "javascript"]
_LANGUAGES: dict[str, int] = {"python": sb_pb.LANGUAGE_PYTHON, "javascript": sb_pb.LANGUAGE_JAVASCRIPT}


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


class SandboxClient(Peer):
    """The sandbox's `SandboxService`. No default deadline: the caller knows how long its code may run."""

    peer = "sandbox"
    stub = sb_grpc.SandboxServiceStub

    async def execute(self, language: Language, code: str, arguments: dict[str, Any], *,
                      timeout_s: float | None = None) -> SandboxRun:
        """Run `main(**arguments)` of `code`. A sandbox that is away (restarting) is waited for before the run is
        sent; once sent it is never sent again (it may have started: services/clients/_rpc.py)."""
        if language not in _LANGUAGES:
            raise InvalidArgument(f"unsupported language {language!r} (python or javascript)")
        req = sb_pb.ExecuteRequest(language=_LANGUAGES[language], code=code,
                                   arguments_json=json.dumps(arguments, ensure_ascii=False, default=str))
        out: list[bytes] = []
        err: list[bytes] = []
        result = None
        async with aclosing(self._stream(self._stub.Execute, req, _same, timeout_s, once=True)) as messages:
            async for msg in messages:  # leaving early (cancelled) cancels the call, and the run
                if msg.HasField("result"):
                    result = msg.result
                elif msg.output.stream == sb_pb.OUTPUT_STREAM_STDERR:
                    err.append(msg.output.data)
                else:
                    out.append(msg.output.data)
        if result is None:
            raise ServiceError("the sandbox ended the run without a result")
        e = result.error
        return SandboxRun(
            ok=result.ok, value=json.loads(result.value_json) if result.ok and result.value_json else None,
            stdout=b"".join(out).decode("utf-8", errors="replace"),
            stderr=b"".join(err).decode("utf-8", errors="replace"),
            error_kind="" if result.ok else sb_pb.ErrorKind.Name(e.kind).removeprefix("ERROR_KIND_"),
            error_message=e.message, traceback=e.traceback, wall_time_ms=result.wall_time_ms,
            output_truncated=result.output_truncated,
        )


def _same(msg: sb_pb.ExecuteResponse) -> sb_pb.ExecuteResponse:
    return msg
