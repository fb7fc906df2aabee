"""The memory allocator a process runs with (`AllocatorPolicy`, services/common/speed_policies.py; TRELLIS_ALLOCATOR,
docs/speed-policies.md), seen from inside and from the process that starts it.

The policy is applied by whatever starts the interpreter (`trellis up`: trellis_cli/stack.py; the image: its
Dockerfile): once Python runs, malloc is chosen. A service then keeps it to itself (`keep_to_self`), so that the
programs it starts (a browser, a sandboxed run) start with the system's allocator, not a preloaded one."""

from __future__ import annotations

import ctypes.util
import os

from services.common.speed_policies import ALLOCATOR_POLICIES, AllocatorPolicy

_VARIABLES = ("LD_PRELOAD", "PYTHONMALLOC", "MALLOC_CONF")


def installed(policy: AllocatorPolicy) -> bool:
    """Whether the policy's library is on this machine (`pymalloc`'s always is: it is CPython's)."""
    if not policy.preload:
        return True
    stem = policy.preload.removeprefix("lib").split(".so")[0]
    return ctypes.util.find_library(stem) is not None


def in_use(maps: str = "/proc/self/maps") -> str:
    """The allocator this process got: a policy's name when its library is loaded, else "malloc" (the C
    library's, PYTHONMALLOC=malloc) or "pymalloc"."""
    try:
        with open(maps) as f:
            loaded = f.read()
    except OSError:  # not Linux: no preloading here
        loaded = ""
    for policy in ALLOCATOR_POLICIES.values():
        if policy.preload and policy.preload in loaded:
            return policy.name
    return "malloc" if os.environ.get("PYTHONMALLOC", "").startswith("malloc") else "pymalloc"


def keep_to_self() -> None:
    """Take a policy's variables out of this process's environment (they did their work when it started), so
    its children start as the system starts them. A preload the policy did not set is left alone."""
    preloads = {p.preload for p in ALLOCATOR_POLICIES.values() if p.preload}
    if os.environ.get("LD_PRELOAD") in preloads:
        for name in _VARIABLES:
            os.environ.pop(name, None)
