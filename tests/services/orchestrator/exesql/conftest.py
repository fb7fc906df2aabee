"""Session fixtures `postgres_db` and `mariadb_db`: real database servers (tests/support/sql_servers.py)."""
from __future__ import annotations

import pytest

from tests.support.sql_servers import mariadb_server, postgres_server

postgres_db = pytest.fixture(scope="session")(postgres_server)
mariadb_db = pytest.fixture(scope="session")(mariadb_server)
