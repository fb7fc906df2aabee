"""Session fixtures `postgres_db` and `mariadb_db`: real database servers (sql_servers.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sql_servers.py (tests import with importlib)
from sql_servers import mariadb_server, postgres_server  # noqa: E402

postgres_db = pytest.fixture(scope="session")(postgres_server)
mariadb_db = pytest.fixture(scope="session")(mariadb_server)
