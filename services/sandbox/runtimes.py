"""The interpreters code runs on, and the host paths each one needs to see (read-only) inside a sandbox."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GUEST_DIR = Path(__file__).resolve().parent / "guest"

# Shared libraries of both runtimes. Binaries, /usr/share, /etc, /home, /root, /work... stay hidden.
SYSTEM_LIB_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32")
SYSTEM_FILES = ("/etc/ld.so.cache",)

_PROBE = (
    "import json, sys, sysconfig;"
    "p = sysconfig.get_paths();"
    "lib = sysconfig.get_config_var('LIBDIR') or '';"
    "ld = sysconfig.get_config_var('LDLIBRARY') or '';"
    "print(json.dumps({'exe': sys.executable, 'version': sys.version.split()[0],"
    " 'paths': [p.get(k, '') for k in ('stdlib', 'platstdlib', 'purelib', 'platlib')],"
    " 'libpython': (lib + '/' + ld) if lib and ld.endswith(('.so', '.so.1.0')) else ''}))"
)


class RuntimeUnavailable(RuntimeError):
    """A configured interpreter is missing or does not run."""


@dataclass(frozen=True)
class Runtime:
    language: str  # "python" | "javascript"
    executable: str  # absolute, symlinks resolved
    version: str
    ro_paths: tuple[str, ...]  # host paths bound read-only at the same place inside the sandbox


@dataclass(frozen=True)
class Runtimes:
    python: Runtime
    node: Runtime | None  # None: JavaScript is unavailable in this deployment (requests get FAILED_PRECONDITION)
    boot_py: str  # guest/boot.py source
    runner_js: str  # guest/runner.js source

    @property
    def ro_paths(self) -> tuple[str, ...]:
        paths = [*self.python.ro_paths, *(self.node.ro_paths if self.node else ())]
        paths += [p for p in (*SYSTEM_LIB_DIRS, *SYSTEM_FILES) if os.path.lexists(p)]
        return _outermost(paths)


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """Drop duplicates and paths already inside another one (one bind covers them)."""
    out: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return tuple(sorted(out))


def default_python() -> str:
    """The interpreter behind the service's virtualenv: its stdlib, none of the service's packages."""
    # _base_executable: a venv made with --copies has its own binary, which would see the venv's packages.
    return os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)


def default_node() -> str:
    return shutil.which("node") or "/usr/bin/node"


def _probe_python(executable: str) -> Runtime:
    exe = os.path.realpath(executable)
    try:
        out = subprocess.run([exe, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30, check=True).stdout
        info = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise RuntimeUnavailable(f"python runtime {executable!r} does not run: {exc}") from None
    paths = [exe, *(p for p in info["paths"] if p), *([info["libpython"]] if info["libpython"] else [])]
    paths = [os.path.realpath(p) for p in paths if os.path.exists(p)]
    return Runtime("python", exe, info["version"], _outermost(paths))


def _probe_node(executable: str) -> Runtime:
    exe = os.path.realpath(executable)
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeUnavailable(f"node runtime {executable!r} does not run: {exc}") from None
    return Runtime("javascript", exe, out.strip().lstrip("v"), (exe,))


def discover(python: str = "", node: str = "") -> Runtimes:
    """Find and check both runtimes. Python is required (it also boots JavaScript runs); Node is optional."""
    py = _probe_python(python or default_python())
    js: Runtime | None
    try:
        js = _probe_node(node or default_node())
    except RuntimeUnavailable as exc:
        if node:  # configured explicitly: a missing binary is a configuration error, not a silent downgrade
            raise
        log.warning("sandbox: JavaScript disabled: %s", exc)
        js = None
    return Runtimes(
        python=py,
        node=js,
        boot_py=(GUEST_DIR / "boot.py").read_text(),
        runner_js=(GUEST_DIR / "runner.js").read_text(),
    )
