"""Migrations, read-only connections, the single-writer lock and transactions."""

import subprocess
import sys

import duckdb
import pytest

from dpicl.storage import db
from dpicl.storage.db import DatabaseLockedError, SchemaVersionError, connect, default_db_path, transaction


def test_default_db_path(monkeypatch):
    monkeypatch.delenv("DPICL_DB", raising=False)
    assert default_db_path().name == "dpicl.duckdb"
    monkeypatch.setenv("DPICL_DB", "/somewhere/else.duckdb")
    assert str(default_db_path()) == "/somewhere/else.duckdb"


def test_migrations_apply_once_and_are_recorded(db_path):
    con = connect(db_path)
    rows = con.execute("SELECT version, name, applied_at FROM schema_migrations").fetchall()
    assert [(v, n) for v, n, _ in rows] == [(v, n) for v, n, _ in db.migrations()]
    assert rows[0][:2] == (1, "initial") and rows[0][2] is not None
    tables = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert {"datasets", "records", "queries", "runs", "artifacts", "budgets", "ledger", "releases"} <= tables
    con.close()
    # reopening is a no-op: the same rows (same applied_at), no error from re-creating tables
    con = connect(db_path)
    assert con.execute("SELECT version, name, applied_at FROM schema_migrations").fetchall() == rows
    con.close()


def test_in_memory_database_is_migrated():
    con = connect(":memory:")
    assert con.execute("SELECT count(*) FROM datasets").fetchone()[0] == 0


def test_pending_migration_applied_in_order_and_read_only_refuses_older_schema(db_path, tmp_path, monkeypatch):
    connect(db_path).close()
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    for path in db.MIGRATIONS_DIR.glob("*.sql"):
        (migrations / path.name).write_text(path.read_text())
    known = [version for version, _, _ in db.migrations()]
    extra = f"{known[-1] + 1:04d}_extra"
    (migrations / f"{extra}.sql").write_text("CREATE TABLE extra (a INTEGER); INSERT INTO extra VALUES (42);")
    monkeypatch.setattr(db, "MIGRATIONS_DIR", migrations)

    with pytest.raises(SchemaVersionError, match=extra) as caught:
        connect(db_path, read_only=True)
    assert "read-write" in str(caught.value)

    con = connect(db_path)
    assert con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall() == [
        (v,) for v in [*known, known[-1] + 1]]
    assert con.execute("SELECT a FROM extra").fetchall() == [(42,)]
    con.close()
    con = connect(db_path, read_only=True)  # now current
    assert con.execute("SELECT count(*) FROM extra").fetchone()[0] == 1
    con.close()


def test_failed_migration_is_rolled_back_and_not_recorded(db_path, tmp_path, monkeypatch):
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    for path in db.MIGRATIONS_DIR.glob("*.sql"):
        (migrations / path.name).write_text(path.read_text())
    known = [version for version, _, _ in db.migrations()]
    broken = f"{known[-1] + 1:04d}_broken.sql"
    (migrations / broken).write_text("CREATE TABLE half (a INTEGER); SELECT * FROM no_such_table;")
    monkeypatch.setattr(db, "MIGRATIONS_DIR", migrations)
    with pytest.raises(SchemaVersionError, match=broken):
        connect(db_path)
    monkeypatch.undo()
    con = connect(db_path)
    assert con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall() == [(v,) for v in known]
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'half'").fetchone()[0] == 0


def test_database_from_newer_code_is_refused(db_path):
    con = connect(db_path)
    con.execute("INSERT INTO schema_migrations VALUES (9999, 'future', current_timestamp)")
    con.close()
    with pytest.raises(SchemaVersionError, match="newer"):
        connect(db_path)


def test_read_only_connection_cannot_write(db_path):
    connect(db_path).close()
    con = connect(db_path, read_only=True)
    assert con.execute("SELECT count(*) FROM datasets").fetchone()[0] == 0
    with pytest.raises(duckdb.Error, match="read-only"):
        con.execute("INSERT INTO runs (run_id, method, dataset, backlog, config, config_hash) "
                    "VALUES ('r', 'm', 'd', 'b', '{}', 'h')")
    con.close()


def test_read_only_on_missing_file_says_how_to_create_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="ingest"):
        connect(tmp_path / "nothing.duckdb", read_only=True)


@pytest.mark.parametrize("read_only", [False, True])
def test_file_held_by_another_process_gives_a_clear_error(db_path, read_only):
    connect(db_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
                               "time.sleep(60)", str(db_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(DatabaseLockedError) as caught:
            connect(db_path, read_only=read_only)
        message = str(caught.value)
        assert "one writing process" in message and str(holder.pid) in message and str(db_path) in message
    finally:
        holder.kill()
        holder.wait()


def test_transaction_commits_and_rolls_back(con):
    insert = ("INSERT INTO runs (run_id, method, dataset, backlog, config, config_hash) "
              "VALUES (?, 'm', 'd', 'b', '{}', 'h')")
    with transaction(con):
        con.execute(insert, ["kept"])
    with pytest.raises(RuntimeError, match="boom"):
        with transaction(con):
            con.execute(insert, ["dropped"])
            raise RuntimeError("boom")
    assert con.execute("SELECT run_id FROM runs").fetchall() == [("kept",)]
    # a failed statement inside is rolled back too, and the connection is usable afterwards
    with pytest.raises(db.DB_ERRORS):
        with transaction(con):
            con.execute(insert, ["also dropped"])
            con.execute(insert, ["kept"])  # primary key conflict
    assert con.execute("SELECT run_id FROM runs").fetchall() == [("kept",)]


def test_a_missing_database_names_the_ones_beside_it(tmp_path):
    """After `make demo` (dpicl-demo.duckdb), `dpicl releases` looked for ./dpicl.duckdb and only said to ingest."""
    with pytest.raises(FileNotFoundError, match=r"dpicl ingest`\)$"):
        connect(tmp_path / "dpicl.duckdb", read_only=True)
    connect(tmp_path / "dpicl-demo.duckdb").close()
    with pytest.raises(FileNotFoundError, match=r"pass one with --db \(here: dpicl-demo.duckdb\)"):
        connect(tmp_path / "dpicl.duckdb", read_only=True)
