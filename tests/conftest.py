"""Fixtures shared across the test folders: a throwaway PostgreSQL server (issue 30; tests/deployment.py)."""

from __future__ import annotations

import itertools
import os
from typing import Iterator

import pytest

from tests.deployment import POSTGRES_REQUIRED, PostgresServer, postgres_absent

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the test session (started on first use, removed at the end); skips, saying why,
    where PostgreSQL or psycopg is absent, unless ARC_REQUIRE_POSTGRES=1 (CI), where that fails."""
    why = postgres_absent()
    if why is not None:
        if os.environ.get(POSTGRES_REQUIRED) == "1":
            pytest.fail(f"{POSTGRES_REQUIRED}=1 but {why}")
        pytest.skip(why)
    server = PostgresServer.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> str:
    """The URL of a new empty database on the session's server (one per test)."""
    return postgres.create_database(f"arc_test_{os.getpid()}_{next(_databases)}")
