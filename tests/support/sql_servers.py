"""Real PostgreSQL and MariaDB servers for the ExeSQL tests (the fixtures are in tests/services/orchestrator/exesql/conftest.py) (Debian's `postgresql` and `mariadb-server`,
installed by scripts/install_system_deps.sh).

Each server runs once per test session from a fresh temporary directory, on a free loopback port, as an
unprivileged user: both refuse to run as root, so under root (CI) they run as `nobody` through `runuser`.
Each gets a database `shop` (tables `products` and `orders`) and a login `trellis` / `s3cret` that needs its
password over TCP. No Docker, no system service.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.net import free_port
from tests.support.waiting import eventually_sync

USER, PASSWORD, DATABASE = "trellis", "s3cret", "shop"
START_TIMEOUT_S = 60

SCHEMA = [
    "CREATE TABLE products (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, category VARCHAR(32), "
    "unit_price DECIMAL(10,2), added DATE)",
    "CREATE TABLE orders (id INT PRIMARY KEY, product_id INT NOT NULL, quantity INT NOT NULL, "
    "status VARCHAR(16), order_date DATE)",
    "INSERT INTO products VALUES (1, 'Trail shoe', 'shoes', 89.90, '2025-01-05'), "
    "(2, 'Rain jacket', 'outerwear', 129.00, '2025-02-11'), (3, 'Wool socks', 'accessories', 12.50, NULL), "
    "(4, 'Running cap', 'accessories', 19.99, '2025-03-01')",
    "INSERT INTO orders VALUES (10, 1, 2, 'Completed', '2025-01-20'), (11, 2, 1, 'Completed', '2025-02-14'), "
    "(12, 3, 5, 'Pending', '2025-02-15'), (13, 1, 1, 'Completed', '2025-03-02')",
]


@dataclass(frozen=True)
class Database:
    db_type: str
    host: str
    port: int

    def params(self, **extra) -> dict:
        """ExeSQL params reaching this server as the test login."""
        return {"db_type": self.db_type, "host": self.host, "port": self.port, "database": DATABASE,
                "username": USER, "password": PASSWORD, **extra}


def _as_unprivileged() -> tuple[list[str], str | None]:
    """(command prefix, owner for the data directory): `runuser -u nobody --` when running as root."""
    if os.geteuid() != 0:
        return [], None
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.fail("running as root needs `runuser` (util-linux) to start the database servers as nobody")
    return [runuser, "-u", "nobody", "--"], "nobody"


def _workdir(prefix: str, owner: str | None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if owner:
        pw = pwd.getpwnam(owner)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def _tool(pattern: str, package: str) -> str:
    found = sorted(glob.glob(pattern)) or ([shutil.which(Path(pattern).name)] if shutil.which(Path(pattern).name) else [])
    if not found:
        pytest.fail(f"{Path(pattern).name} not found: install Debian's `{package}` (scripts/install_system_deps.sh)")
    return found[-1]


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        pytest.fail(f"{what} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")


def _wait(connect, proc: subprocess.Popen | None, log: Path, what: str) -> None:
    def answered_or_exited() -> str:
        if proc is not None and proc.poll() is not None:
            return f"exited with {proc.returncode}"
        connect().close()
        return "up"

    try:  # any error is "not up yet"
        outcome = eventually_sync(answered_or_exited, what=what, timeout=START_TIMEOUT_S, ignoring=(Exception,))
    except AssertionError as exc:
        outcome = str(exc)
    if outcome != "up":
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        pytest.fail(f"{what} did not start: {outcome}\n{tail}")


def postgres_server() -> Iterator[Database]:
    import psycopg

    initdb = _tool("/usr/lib/postgresql/*/bin/initdb", "postgresql")
    pg_ctl = str(Path(initdb).with_name("pg_ctl"))
    prefix, owner = _as_unprivileged()
    root = _workdir("trellis-pg-", owner)
    data, sockets, log = root / "data", root, root / "server.log"
    (root / "pw").write_text("superpw\n")
    if owner:
        pw = pwd.getpwnam(owner)
        os.chown(root / "pw", pw.pw_uid, pw.pw_gid)
    _run([*prefix, initdb, "-D", str(data), "-U", "postgres", "--pwfile", str(root / "pw"), "-E", "UTF8",
          "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"], "initdb")
    port = free_port()
    opts = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    _run([*prefix, pg_ctl, "-D", str(data), "-o", opts, "-l", str(log), "-w", "-t", str(START_TIMEOUT_S), "start"],
         "pg_ctl start")
    try:
        admin = dict(host=str(sockets), port=port, user="postgres", dbname="postgres", autocommit=True)
        _wait(lambda: psycopg.connect(**admin), None, log, "PostgreSQL")
        with psycopg.connect(**admin) as conn:
            conn.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
            conn.execute(f"CREATE DATABASE {DATABASE} OWNER {USER}")
        with psycopg.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD, dbname=DATABASE,
                             autocommit=True) as conn:
            for sql in SCHEMA:
                conn.execute(sql)
        yield Database("postgres", "127.0.0.1", port)
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True,
                       timeout=START_TIMEOUT_S)
        shutil.rmtree(root, ignore_errors=True)


def mariadb_server() -> Iterator[Database]:
    import pymysql

    install = _tool("/usr/bin/mariadb-install-db", "mariadb-server")
    server = _tool("/usr/sbin/mariadbd", "mariadb-server")
    prefix, owner = _as_unprivileged()
    root = _workdir("trellis-mariadb-", owner)
    data, sock, log = root / "data", root / "mariadb.sock", root / "server.log"
    _run([*prefix, install, "--no-defaults", f"--datadir={data}", "--auth-root-authentication-method=normal",
          "--skip-test-db", "--skip-name-resolve"], "mariadb-install-db")
    port = free_port()
    proc = subprocess.Popen(
        [*prefix, server, "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={port}",
         "--bind-address=127.0.0.1", f"--pid-file={root / 'mariadb.pid'}", f"--log-error={log}",
         "--skip-name-resolve", "--skip-log-bin", "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M",
         "--skip-innodb-doublewrite", "--innodb-flush-log-at-trx-commit=0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        admin = dict(unix_socket=str(sock), user="root", password="", autocommit=True)
        _wait(lambda: pymysql.connect(**admin), proc, log, "MariaDB")
        with pymysql.connect(**admin) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
            cur.execute(f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'%'")
        with pymysql.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD, database=DATABASE,
                             autocommit=True) as conn, conn.cursor() as cur:
            for sql in SCHEMA:
                cur.execute(sql)
        yield Database("mariadb", "127.0.0.1", port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)
