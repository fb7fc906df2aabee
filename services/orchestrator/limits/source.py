"""Where the limits in force come from: the limits file (`TRELLIS_LIMITS_FILE`), read at start-up and again
whenever it changes, without a restart.

A background task looks at the file's modification time (and size) about once a second; a change is read and
parsed, and the new table replaces the old one at once for every admission that follows (runs admitted earlier
keep going). A file that cannot be used (bad YAML, a wrong field, gone) is logged once, naming the field, and the
limits in force stay as they were. At start-up a bad file stops the replica, naming the field (a typo must not
silently run a tenant unlimited).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Callable

import yaml

from services.orchestrator.limits.policy import LimitsFileError, LimitsTable, parse

log = logging.getLogger(__name__)

POLL_S = 1.0


def read_file(path: str | Path) -> LimitsTable:
    """The table of the file at `path`; LimitsFileError names what is wrong (the field, or the YAML's line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LimitsFileError(f"limits file {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LimitsFileError(f"limits file {path}: not YAML: {exc}") from None
    return parse(data, f"limits file {path}")


class LimitsSource:
    """The limits in force (`table`), from `path` (empty: the embedded defaults, no limits) over its changes.
    `on_change(table)` is called after each reload that took."""

    def __init__(self, path: str = "", *, poll_s: float = POLL_S,
                 on_change: Callable[[LimitsTable], None] | None = None) -> None:
        self.path = path
        self.poll_s = poll_s
        self.on_change = on_change
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the file read last
        self._failed: tuple[int, int] | None = None  # ...and of the one that failed last (logged once)
        self._task: asyncio.Task | None = None
        self.table = self._load_at_start()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _load_at_start(self) -> LimitsTable:
        if not self.path:
            return LimitsTable()
        self._seen = self._stat()
        return read_file(self.path)  # raises: a replica does not start on a bad file

    def start(self) -> None:
        if self.path and self._task is None:
            self._task = asyncio.create_task(self._watch(), name="limits-file")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            self.check()

    def check(self) -> bool:
        """Reload when the file changed; True when a new table took."""
        seen = self._stat()
        if seen == self._seen or (seen is not None and seen == self._failed):
            return False
        if seen is None:
            if self._failed != (0, 0):
                log.error("limits file %s is gone: the limits in force stay as they were", self.path)
                self._failed = (0, 0)
            return False
        try:
            table = read_file(self.path)
        except LimitsFileError as exc:
            log.error("%s; the limits in force stay as they were", exc)
            self._failed = seen
            return False
        self._seen, self._failed, self.table = seen, None, table
        log.info("limits file %s reloaded", self.path)
        if self.on_change is not None:
            self.on_change(table)
        return True
