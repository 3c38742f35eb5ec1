"""Test-wide settings: offline models, a throw-away PREFECT_HOME (set before Prefect is imported)."""

import atexit
import os
import shutil
import tempfile

os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="dpicl-test-prefect-")
# removed at exit (each xdist worker has its own, ~30 MB of Prefect's database); registered before Prefect is imported,
# so it runs after Prefect's own exit handlers (atexit runs them last in, first out) have stopped its server
atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
os.environ.pop("PREFECT_API_URL", None)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"
# the benchmark datasets the bundled configs read (README, "Benchmark data"); on our machines a `shared/data`
# folder beside the checkout. Tests that need them skip where they are absent.
os.environ.setdefault("DPICL_DATA", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "data"))


def pytest_unconfigure(config):
    # Prefect stops its temporary server at interpreter exit and logs to streams pytest has closed by then;
    # without this the run ends with a harmless but alarming "--- Logging error ---" traceback.
    import logging

    logging.raiseExceptions = False


# A real PostgreSQL for the storage tests that run on both backends: one throw-away server per session (the
# machine's initdb/pg_ctl), a fresh database per test. Skipped where no binaries exist, never in CI.
import itertools  # noqa: E402

import pytest  # noqa: E402

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres_server():
    from dpicl.storage.throwaway_postgres import PostgresUnavailable, ThrowawayPostgres

    try:
        server = ThrowawayPostgres().start()
    except PostgresUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL tests: {error}")
        pytest.skip(str(error))
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The URL of a new, empty PostgreSQL database."""
    return postgres_server.create_database(f"test_{next(_databases)}")


@pytest.fixture(params=["duckdb", "postgres"])
def database(request, tmp_path) -> str:
    """A fresh database on each backend: a DuckDB file path, or a PostgreSQL URL."""
    if request.param == "duckdb":
        return str(tmp_path / "test.duckdb")
    return request.getfixturevalue("postgres_url")
