"""The memory allocator a process runs with (`AllocatorPolicy`, services/common/speed_policies.py; TRELLIS_ALLOCATOR,
docs/speed-policies.md), seen from inside and from the process that starts it.

The policy is applied by whatever starts the interpreter (`trellis up`: trellis_cli/stack.py; the image: its
Dockerfile): once Python runs, malloc is chosen. A service then keeps it to itself (`keep_to_self`), so that the
programs it starts (the Browser component's driver and browser, a tool's subprocess) start with the system's
allocator, not a preloaded one. (The sandbox's runs never see the service's environment.)"""

from __future__ import annotations

import ctypes.util
import logging
import os
from typing import Mapping

from services.common.speed_policies import ALLOCATOR_POLICIES, AllocatorPolicy

_VARIABLES = ("LD_PRELOAD", "PYTHONMALLOC", "MALLOC_CONF")


def installed(policy: AllocatorPolicy) -> bool:
    """Whether the policy's library, that very version, is on this machine (`pymalloc`'s always is)."""
    if not policy.preload:
        return True
    stem = policy.preload.removeprefix("lib").split(".so")[0]
    return ctypes.util.find_library(stem) == policy.preload


def in_use(maps: str = "/proc/self/maps") -> str:
    """The allocator this process's objects get: under PYTHONMALLOC=malloc, a policy's name when its library is
    loaded, else "malloc" (the C library's); without it, "pymalloc" (a preloaded library then serves only
    what pymalloc passes on, its large blocks)."""
    if not os.environ.get("PYTHONMALLOC", "").startswith("malloc"):
        return "pymalloc"
    try:
        with open(maps) as f:
            loaded = f.read()
    except OSError:  # not Linux: no preloading here
        loaded = ""
    for policy in ALLOCATOR_POLICIES.values():
        if policy.preload and policy.preload in loaded:
            return policy.name
    return "malloc"


def without_policy(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without a policy's variables, when a policy set them (its preload is LD_PRELOAD); a preload the
    policy did not set is left alone, and so are the others then."""
    preloads = {p.preload for p in ALLOCATOR_POLICIES.values() if p.preload}
    if env.get("LD_PRELOAD") not in preloads:
        return dict(env)
    return {k: v for k, v in env.items() if k not in _VARIABLES}


def keep_to_self() -> str:
    """Call first thing at a service's start (before any thread that reads the environment): takes a policy's
    variables out of this process's environment, so its children start as the system starts them. Returns the
    allocator in use (`in_use`)."""
    got = in_use()
    for name in set(os.environ) - set(without_policy(os.environ)):
        os.environ.pop(name)
    return got


def log_in_use(log: logging.Logger, service: str, got: str) -> None:
    """One line at start-up; a warning when a preload asked for did not load (the process then allocates with
    the C library's malloc, far slower than either policy: docs/speed-policies.md)."""
    if got == "malloc":
        log.warning("%s: allocator: the C library's malloc (PYTHONMALLOC=malloc, but no preloaded allocator loaded;"
                    " is libjemalloc2 installed?)", service)
    else:
        log.info("%s: allocator: %s", service, got)
