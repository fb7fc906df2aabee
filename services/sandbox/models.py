"""Domain types of one execution: what is asked, what streams out, how it ended (no protobuf here)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Union

from services.sandbox.limits import Limits


class Language(str, enum.Enum):
    PYTHON = "python"
    JAVASCRIPT = "javascript"


class ErrorKind(str, enum.Enum):
    SYNTAX = "syntax"
    EXCEPTION = "exception"
    NO_MAIN = "no_main"
    BAD_RETURN = "bad_return"
    TIMEOUT = "timeout"
    CPU_LIMIT = "cpu_limit"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    EXIT = "exit"
    INTERNAL = "internal"


@dataclass(frozen=True)
class ExecRequest:
    language: Language
    code: str
    args: dict[str, Any]
    limits: Limits


@dataclass(frozen=True)
class Output:
    stream: str  # "stdout" | "stderr"
    data: bytes


@dataclass(frozen=True)
class ExecError:
    kind: ErrorKind
    message: str
    line: int = 0
    exception_type: str = ""
    traceback: str = ""


@dataclass(frozen=True)
class ExecResult:
    ok: bool
    value_json: str = ""  # main's return value as JSON; "" unless ok
    exit_code: int = 0  # -N: killed by signal N
    wall_time_ms: int = 0
    cpu_time_ms: int = 0
    peak_memory_bytes: int = 0
    error: ExecError | None = None
    output_truncated: bool = False
    isolated: bool = True


Event = Union[Output, ExecResult]
