"""What several `dpicl` commands share: the --db and --json options, opening the database, and the checks that
fail before anything opens (names, configs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from dpicl.cli.errors import fail

DbOption = Annotated[Optional[str], typer.Option(
    "--db", help="DuckDB file, or a postgresql:// URL (default: $DPICL_DB or ./dpicl.duckdb)")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


# A running flow holds a DuckDB file for a moment per task: a command waits this long for a gap before it fails.
WAIT_SECONDS = 15.0


def connect(db: str | Path | None, read_only: bool = False):
    """The database, or one `error:` line if it cannot be opened (locked past WAIT_SECONDS, unreachable, newer
    schema, missing, not DuckDB)."""
    from dpicl.storage import db as storage

    path = db or storage.default_db_path()
    try:
        return storage.connect(path, read_only=read_only, wait_seconds=WAIT_SECONDS)
    except (storage.DatabaseLockedError, storage.DatabaseUnavailableError, storage.SchemaVersionError,
            FileNotFoundError) as err:
        fail(str(err))
    except (*storage.DB_ERRORS, OSError, ValueError) as err:  # not a DuckDB file, a directory, a NUL in the path
        fail(f"cannot open the database {storage.describe_target(path)!r} ({type(err).__name__}); check --db")


def read(db: str | Path | None, query, *args):
    """``query(con, *args)`` on the database opened read-only, closed again before anything is printed."""
    con = connect(db, read_only=True)
    try:
        return query(con, *args)
    finally:
        con.close()


@contextmanager
def writing(db: str | Path | None) -> Iterator:
    """A read-write connection; if the command fails and it created the database file, the file is removed
    (a refused first ingest leaves no empty database behind; a PostgreSQL database is the server's to keep)."""
    from dpicl.storage.db import default_db_path, is_file_target

    target = db or default_db_path()
    path = Path(target) if is_file_target(target) else None
    new = path is not None and not path.exists()
    con = connect(target)
    try:
        yield con
    except BaseException:
        con.close()
        if new:
            for leftover in (path, Path(f"{path}.wal")):
                leftover.unlink(missing_ok=True)
        raise
    con.close()


def check_config(config: str):
    """The config; one that cannot be read fails (ConfigError: one `error:` line) before a flow (and Prefect)
    starts."""
    from dpicl.config import load_config

    return load_config(config)


def check_names(*names: tuple[str | None, str]) -> None:
    """One `error:` line for the first unusable dataset or backlog name (dpicl.names), before anything opens."""
    from dpicl.names import name_problem

    for name, what in names:
        problem = None if name is None else name_problem(name, what)
        if problem is not None:
            fail(problem)
