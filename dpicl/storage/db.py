"""Opening the dpicl database: where it lives, schema migrations, transactions.

One database holds everything (docs/ARCHITECTURE.md, "Storage"): a DuckDB file (the embedded default) or a
PostgreSQL database, chosen by the target: a `postgresql://` URL (in `$DPICL_DB` or `--db`) opens PostgreSQL
(`dpicl.storage.postgres`, for many processes and machines sharing one ledger: docs/SCALING.md), anything else is a
DuckDB file path. Both have the same tables and migration versions; `dialect(con)` says which one a connection is.

DuckDB allows one writing process per file, and while
that process holds it no other process can open it at all, not even read-only (docs/STACK.md): `connect` turns
that lock error into one that says so and what to do.

The database holds private records: its files are the owner's only. `connect` narrows the process's umask to
owner-only (0600 files, 0700 directories) before opening a file, for the rest of the process, because DuckDB
creates the WAL (`<db>.wal`) and spill files (`<db>.tmp/`) later, on its own, at the first write after each
checkpoint; and a read-write `connect` takes group and other permissions away from an existing database file
and WAL of its owner (one created before this rule, or copied in). docs/SECURITY.md says what this protects.

Migrations are the files `migrations/NNNN_name.sql`, applied in order, each in its own transaction, and
recorded in `schema_migrations`. Read-write connections apply pending ones; read-only connections never
migrate and refuse a database whose schema is older than this code.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import psycopg

from dpicl.settings import settings
from dpicl.storage import postgres

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
POSTGRES_MIGRATIONS_DIR = MIGRATIONS_DIR / "postgres"
# what either engine raises for a failed statement
DB_ERRORS = (duckdb.Error, psycopg.Error)
# the PostgreSQL advisory lock held while migrating (any fixed 64-bit number of ours)
MIGRATION_LOCK_KEY = 0x6470_69636C_0001
_MIGRATION_NAME = re.compile(r"^(\d{4})_(\w+)\.sql$")


class DatabaseLockedError(RuntimeError):
    """The database file is held by another process."""


class DatabaseUnavailableError(RuntimeError):
    """The database server cannot be reached (PostgreSQL)."""


class SchemaVersionError(RuntimeError):
    """The database's schema does not match the migrations this code knows."""


def default_db_path() -> Path | str:
    """`$DPICL_DB` if set (a DuckDB file path, or a `postgresql://` URL, returned as it is), else
    `./dpicl.duckdb`."""
    target = settings().db
    return target if postgres.is_url(target) else Path(target)


def is_file_target(target: str | Path) -> bool:
    """Whether a database target is a DuckDB file (not ":memory:", not a PostgreSQL URL)."""
    return not postgres.is_url(str(target)) and str(target) != ":memory:"


def dialect(con) -> str:
    """"duckdb" or "postgres": which engine a connection of `connect` talks to."""
    return getattr(con, "dialect", "duckdb")


def describe_target(target: str | Path) -> str:
    """A database target as it may be shown: a file path, or a URL without its password."""
    return postgres.redacted(target) if postgres.is_url(target) else str(target)


def migrations(engine: str = "duckdb") -> list[tuple[int, str, Path]]:
    """The migration files of an engine ("duckdb" or "postgres") as (version, name, path), in version order."""
    folder = POSTGRES_MIGRATIONS_DIR if engine == postgres.DIALECT else MIGRATIONS_DIR
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if match is None:
            raise SchemaVersionError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append((int(match.group(1)), match.group(2), path))
    versions = [version for version, _, _ in found]
    if len(set(versions)) != len(versions):
        raise SchemaVersionError(f"two migration files share a version number in {folder}")
    return found


def connect(path: str | Path | None = None, read_only: bool = False, wait_seconds: float = 0.0):
    """Open the database (default `default_db_path()`; ":memory:" allowed; a `postgresql://` URL opens
    PostgreSQL) with its schema up to date. `wait_seconds`: how long to retry while another process holds the
    DuckDB file (a flow's task holds it for moments; a CLI reader too) before DatabaseLockedError."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

    return Retrying(retry=retry_if_exception_type(DatabaseLockedError), wait=wait_fixed(0.2),
                    stop=stop_after_delay(wait_seconds), reraise=True)(_connect, path, read_only)


def _connect(path: str | Path | None, read_only: bool):
    target = str(default_db_path() if path is None else path)
    if postgres.is_url(target):
        return _connect_postgres(target, read_only)
    if read_only and target != ":memory:" and not Path(target).exists():
        nearby = sorted(p.name for p in Path(target).parent.glob("*.duckdb"))
        raise FileNotFoundError(
            f"no dpicl database at {target}; create it first with a command that writes (e.g. `dpicl ingest`)"
            + (f", or pass one with --db (here: {', '.join(nearby[:5])})" if nearby else "")
        )
    if target != ":memory:":
        restrict_new_files()
    try:
        con = duckdb.connect(target, read_only=read_only)
    except duckdb.IOException as error:
        if "lock" not in str(error).lower():
            raise
        holder = re.search(r"PID (\d+)", str(error))
        by = f" (process {holder.group(1)})" if holder else ""
        raise DatabaseLockedError(
            f"{target} is in use by another process{by}. DuckDB allows one writing process per database file, "
            "and while that process holds the file no other process can open it, not even read-only. "
            "Wait for it (e.g. a running flow) to finish or stop it, then retry; flows that write to this "
            "database must run under a concurrency limit of one."
        ) from None
    try:
        if read_only:
            _check_current(con, target)
        else:
            _owner_only(Path(target), Path(f"{target}.wal"))
            _migrate(con)
    except BaseException:
        con.close()
        raise
    return con


def _connect_postgres(url: str, read_only: bool) -> postgres.PostgresConnection:
    try:
        con = postgres.PostgresConnection(url, read_only=read_only)
    except psycopg.OperationalError as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise DatabaseUnavailableError(
            f"cannot connect to the PostgreSQL database {postgres.redacted(url)}: {reason}. Check that the server "
            "runs and the URL (host, port, user, database name) is right"
        ) from None
    try:
        if read_only:
            _check_current(con, postgres.redacted(url))
        else:
            _migrate(con)
    except BaseException:
        con.close()
        raise
    return con


def restrict_new_files() -> None:
    """Files and directories this process creates from now on are its owner's only (umask 077 added to the
    current one, never loosened)."""
    current = os.umask(0o077)
    os.umask(current | 0o077)


def _owner_only(*paths: Path) -> None:
    """chmod go-rwx on those of `paths` that exist, are regular files and belong to this user."""
    for path in paths:
        try:
            info = path.stat()
            if info.st_uid == os.getuid() and info.st_mode & 0o077 and path.is_file():
                path.chmod(info.st_mode & 0o700)
        except FileNotFoundError:
            continue


@contextmanager
def transaction(con) -> Iterator:
    """BEGIN; COMMIT on success; ROLLBACK on any exception, which is re-raised. Not reentrant."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def table_exists(con, table: str) -> bool:
    """Whether the database (its current schema) has a table of that name."""
    return con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() "
                       "AND table_name = ?", [table]).fetchone()[0] > 0


def applied_versions(con) -> set[int]:
    """Versions recorded in `schema_migrations` (empty when the table does not exist yet)."""
    if not table_exists(con, "schema_migrations"):
        return set()
    return {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}


def _check_unknown(applied: set[int], known: list[tuple[int, str, Path]], target: str) -> None:
    unknown = applied - {version for version, _, _ in known}
    if unknown:
        raise SchemaVersionError(
            f"{target} has schema migrations this code does not know ({sorted(unknown)}); "
            "it was written by a newer dpicl: upgrade dpicl to open it"
        )


def _check_current(con, target: str) -> None:
    known = migrations(dialect(con))
    applied = applied_versions(con)
    _check_unknown(applied, known, target)
    missing = [f"{version:04d}_{name}" for version, name, _ in known if version not in applied]
    if missing:
        raise SchemaVersionError(
            f"{target} has an older schema than this code (missing migrations: {', '.join(missing)}) and a "
            "read-only connection does not migrate; open it once read-write (any dpicl command that writes) "
            "to apply them"
        )


def _migrate(con) -> None:
    engine = dialect(con)
    known = migrations(engine)
    with transaction(con):
        if engine == postgres.DIALECT:
            # processes that connect at once (workers starting together) migrate one after the other
            con.execute("SELECT pg_advisory_xact_lock(?)", [MIGRATION_LOCK_KEY])
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        applied = applied_versions(con)
        _check_unknown(applied, known, "the database")
        if all(version in applied for version, _, _ in known):
            return
    for version, name, path in known:
        if version in applied:
            continue
        try:
            with transaction(con):
                if engine == postgres.DIALECT:
                    con.execute("SELECT pg_advisory_xact_lock(?)", [MIGRATION_LOCK_KEY])
                    if version in applied_versions(con):  # another process applied it meanwhile
                        continue
                con.execute(path.read_text(encoding="utf-8"))
                con.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, current_timestamp)", [version, name]
                )
        except DB_ERRORS as error:
            raise SchemaVersionError(f"migration {path.name} failed and was rolled back: {error}") from error
