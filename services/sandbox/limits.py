"""Resource limits of one execution: the service defaults, the maxima, and how a request picks within them."""

from __future__ import annotations

from dataclasses import dataclass, fields

from services.common.errors import InvalidArgument

_MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one run may use. Every field is a positive number."""

    wall_time_ms: int = 30_000  # elapsed time, start to finish (above cpu_time_ms: busy loops meet the CPU limit)
    cpu_time_ms: int = 10_000  # CPU time of the process tree (rlimit: whole seconds, rounded up)
    memory_bytes: int = 256 * _MiB  # data memory of each process (RLIMIT_DATA)
    max_processes: int = 16  # processes + threads beyond the runtime's own
    max_output_bytes: int = 1 * _MiB  # stdout + stderr together
    max_file_bytes: int = 16 * _MiB  # the private work directory (tmpfs size) and any one file


# The largest values a request may ask for; a deployment can raise or lower them (config.py).
MAXIMA = Limits(
    wall_time_ms=600_000,
    cpu_time_ms=600_000,
    memory_bytes=4096 * _MiB,
    max_processes=256,
    max_output_bytes=64 * _MiB,
    max_file_bytes=1024 * _MiB,
)

# Below these a runtime cannot even start (Node needs ~64 MiB of data memory to boot).
MINIMA = Limits(
    wall_time_ms=100,
    cpu_time_ms=1,
    memory_bytes=64 * _MiB,
    max_processes=1,
    max_output_bytes=1,
    max_file_bytes=64 * 1024,
)


def resolve(requested: dict[str, int], defaults: Limits, maxima: Limits) -> Limits:
    """The limits of one run: each requested field (0 = default) checked against the maxima.

    Raises InvalidArgument naming the field when a value is negative, below what a runtime needs, or
    above what this deployment allows.
    """
    values: dict[str, int] = {}
    for f in fields(Limits):
        asked = int(requested.get(f.name, 0) or 0)
        if asked < 0:
            raise InvalidArgument(f"sandbox: limits.{f.name}={asked} must not be negative (0 = the default)")
        if asked == 0:
            values[f.name] = getattr(defaults, f.name)
            continue
        low, high = getattr(MINIMA, f.name), getattr(maxima, f.name)
        if asked < low:
            raise InvalidArgument(f"sandbox: limits.{f.name}={asked} is below the minimum {low}")
        if asked > high:
            raise InvalidArgument(f"sandbox: limits.{f.name}={asked} exceeds this deployment's maximum {high}")
        values[f.name] = asked
    return Limits(**values)
