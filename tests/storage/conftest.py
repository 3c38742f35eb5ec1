"""Fixtures for the storage tests: a fresh database file per test and small helpers for fixture files."""

import traceback
from pathlib import Path

import pytest

from dpicl.storage.db import connect, dialect

TABLES = ("datasets", "records", "record_hashes", "queries", "runs", "artifacts", "budgets", "ledger", "releases")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture
def con(database: str):
    """A connection to a fresh database, once on DuckDB and once on PostgreSQL."""
    connection = connect(database)
    yield connection
    connection.close()


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def snapshot(con) -> dict[str, list]:
    """Every row of every table, to compare before and after a failed operation."""
    return {table: sorted(map(repr, con.execute(f"SELECT * FROM {table}").fetchall())) for table in TABLES}


def temp_tables(con) -> list[str]:
    if dialect(con) == "postgres":
        query = "SELECT table_name FROM information_schema.tables WHERE table_type = 'LOCAL TEMPORARY'"
    else:
        query = "SELECT table_name FROM duckdb_tables() WHERE temporary"
    return [name for (name,) in con.execute(query).fetchall()]


def full_text(error: BaseException) -> str:
    """The error as it would be printed or logged, traceback and chained exceptions included."""
    return "".join(traceback.format_exception(error))
