"""Builds the sandbox from its config: the servicer, and a start-up hook that assembles the executor and
refuses to run untrusted code where isolation does not hold."""

from __future__ import annotations

import json
import logging

from services.common.errors import FailedPrecondition, ServiceError
from services.common.server import Service
from services.sandbox.config import SandboxConfig
from services.sandbox.executor import Executor
from services.sandbox.isolation import Bubblewrap, IsolationUnavailable, Unsandboxed, find_bwrap
from services.sandbox.limits import Limits
from services.sandbox.models import ExecRequest, ExecResult, Language
from services.sandbox.pool import ExecutionPool
from services.sandbox.runtimes import RuntimeUnavailable, discover
from services.sandbox.seccomp import SeccompUnavailable, build_program
from services.sandbox.server import SandboxServicer

log = logging.getLogger(__name__)

# Run once at start-up inside a real sandbox: it must start, and it must not see the network or the host.
_SELF_TEST = """
def main():
    import os, socket
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        network = True
    except OSError:
        network = False
    return {"uid": os.getuid(), "network": network, "host_fs": os.path.exists("/etc/passwd")}
"""
_SELF_TEST_LIMITS = Limits(wall_time_ms=30_000, cpu_time_ms=10_000)


def build(cfg: SandboxConfig) -> Service:
    servicer = SandboxServicer(cfg)  # runs wait for the start-up hook to give it an executor

    async def start() -> None:
        try:
            executor = await create_executor(cfg)
        except Exception as exc:  # the runs waiting meanwhile hear why, then the service exits (serve())
            servicer.failed(exc.message if isinstance(exc, ServiceError) else f"{type(exc).__name__}: {exc}")
            raise
        servicer.started(executor)

    return Service([servicer.binding()], on_startup=[start])


async def create_executor(cfg: SandboxConfig) -> Executor:
    """The executor, checked. Raises FailedPrecondition (the service then exits with that message)."""
    try:
        runtimes = discover(cfg.python, cfg.node)
    except RuntimeUnavailable as exc:
        raise FailedPrecondition(f"sandbox: {exc}") from None
    pool = ExecutionPool(cfg.workers, cfg.queue)
    try:
        executor = Executor(Bubblewrap(find_bwrap(cfg.bwrap), runtimes, cfg.uid_base), runtimes, pool, build_program(), cfg.max_result_bytes)
        await _self_test(executor)
    except (IsolationUnavailable, SeccompUnavailable) as exc:
        if not cfg.allow_unsandboxed:
            raise FailedPrecondition(
                f"sandbox: isolation is unavailable on this host, refusing to run untrusted code: {exc}. "
                "For development only, TRELLIS_SANDBOX_ALLOW_UNSANDBOXED=1 runs code without isolation."
            ) from None
        log.warning("sandbox: RUNNING CODE WITHOUT ISOLATION (TRELLIS_SANDBOX_ALLOW_UNSANDBOXED): %s", exc)
        executor = Executor(Unsandboxed(runtimes), runtimes, pool, None, cfg.max_result_bytes)
    log.info(
        "sandbox: ready isolated=%s python=%s node=%s workers=%d queue=%d",
        executor.isolation.isolated,
        runtimes.python.version,
        runtimes.node.version if runtimes.node else "unavailable",
        cfg.workers,
        cfg.queue,
    )
    return executor


async def _self_test(executor: Executor) -> None:
    req = ExecRequest(Language.PYTHON, _SELF_TEST, {}, _SELF_TEST_LIMITS)
    stderr = bytearray()
    result: ExecResult | None = None
    async for event in executor.execute(req):
        if isinstance(event, ExecResult):
            result = event
        elif event.stream == "stderr":
            stderr += event.data
    if result is None or not result.ok:
        why = result.error.message if result and result.error else "no result"
        raise IsolationUnavailable(f"the sandbox does not start ({why}): {stderr.decode(errors='replace').strip()[-500:]}")
    seen = json.loads(result.value_json)
    leaks = [name for name in ("network", "host_fs") if seen.get(name)]
    if isinstance(executor.isolation, Bubblewrap) and executor.isolation.privileged and seen.get("uid") == 0:
        leaks.append("root uid")
    if leaks:
        raise IsolationUnavailable(f"the sandbox leaks: {', '.join(leaks)}")
