"""SQLite connections with FTS5 and sqlite-vec, run off the event loop: one writer thread, a few readers.

Python's own `sqlite3` is often built without extension loading (ours is), so we use `pysqlite3`
(pysqlite3-binary: the same DB-API over a recent SQLite with FTS5 and loadable extensions) when it is
installed, and the standard module otherwise. WAL lets readers run while the writer commits;
`synchronous=FULL` makes every commit durable, including against power loss.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from services.common.errors import FailedPrecondition

try:  # pragma: no cover - which one depends on the installation
    from pysqlite3 import dbapi2 as sqlite3
except ImportError:  # pragma: no cover
    import sqlite3  # type: ignore[no-redef]

T = TypeVar("T")
Error = sqlite3.Error
IntegrityError = sqlite3.IntegrityError
Connection = sqlite3.Connection


def connect(path: Path) -> Any:
    try:
        import sqlite_vec
    except ImportError:
        raise FailedPrecondition("the embedded retrieval backend needs the sqlite-vec package (pip install sqlite-vec)") from None
    conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
    if not hasattr(conn, "enable_load_extension"):
        conn.close()
        raise FailedPrecondition("this Python's sqlite3 cannot load extensions; pip install pysqlite3-binary")
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA cache_size=-65536")  # 64 MB of page cache per connection
    conn.execute("PRAGMA mmap_size=1073741824")
    return conn


class SqliteRunner:
    """Runs functions `fn(conn, *args)` on a dedicated thread with its own connection."""

    def __init__(self, path: Path, readers: int = 2) -> None:
        self.path = path
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sqlite-write")
        self._readers = ThreadPoolExecutor(max(1, readers), thread_name_prefix="sqlite-read")
        self._local = threading.local()
        self._conns: list[Any] = []
        self._conns_lock = threading.Lock()
        self._closed = False

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path)
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        return fn(self._conn(), *args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn` runs on the single writer thread: writes never contend with each other."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, functools.partial(self._call, fn, args))

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, functools.partial(self._call, fn, args))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._conns_lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()


class Transaction:
    """`with Transaction(conn): ...`: BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
