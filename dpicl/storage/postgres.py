"""The PostgreSQL backend: a psycopg 3 connection that speaks the storage layer's SQL.

The storage modules are written once, in the SQL that DuckDB and PostgreSQL share, with DuckDB's parameter style
(`?` and `$name`). `PostgresConnection` gives a psycopg connection the part of DuckDB's Python API they use
(`execute(...)` returning something to `fetchone`/`fetchall`, `executemany`, `close`) and rewrites the parameter
markers to psycopg's (`%s`, `%(name)s`) outside string literals. It runs in autocommit mode, so that
`db.transaction` (BEGIN … COMMIT) is the only transaction boundary, as on DuckDB.

What differs between the two engines is named where it is used, through `db.dialect(con)`: the DDL of the
migrations (`migrations/postgres/`), row locks (`SELECT … FOR UPDATE`, `FOR UPDATE SKIP LOCKED`) and the ingest's
file readers (files are read and validated by an in-memory DuckDB, then copied in: `ingest.py`).

The URL may hold a password: it is never put into an error message (`redacted`). A failed statement's error keeps
PostgreSQL's primary message and drops its DETAIL, which may quote a row's values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DIALECT = "postgres"
URL_SCHEMES = ("postgresql://", "postgres://")

# a string literal, a quoted identifier, a $name parameter, a ? parameter, or a % sign (escaped for psycopg)
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$([A-Za-z_]\w*)|\?|%")


def is_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(URL_SCHEMES)


def redacted(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def to_pyformat(sql: str) -> str:
    """DuckDB's parameter markers (`?`, `$name`) as psycopg's (`%s`, `%(name)s`), except inside string literals
    and quoted identifiers; every % is doubled (psycopg reads % anywhere as a marker)."""

    def replace(match: re.Match) -> str:
        token = match.group(0)
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        if match.group(1):
            return f"%({match.group(1)})s"
        return token.replace("%", "%%")  # a literal or quoted identifier: its ? and $ stay, % is escaped

    return _TOKENS.sub(replace, sql)


class PostgresConnection:
    """A psycopg 3 connection with the DuckDB-like API the storage modules use (see the module docstring)."""

    dialect = DIALECT

    def __init__(self, url: str, read_only: bool = False):
        import psycopg
        from psycopg.types.json import set_json_loads

        self.url = url
        self._conn = psycopg.connect(url, autocommit=True)
        # JSON columns come back as their text, as DuckDB gives them (the callers parse them)
        set_json_loads(lambda data: data.decode() if isinstance(data, bytes | bytearray | memoryview) else data,
                       self._conn)
        # the ledger's locking reads a fresh snapshot after `SELECT … FOR UPDATE` (a budget replace counts the
        # entries committed meanwhile): READ COMMITTED whatever the server's default
        self._conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
        if read_only:
            self._conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")

    def execute(self, sql: str, parameters: Sequence[Any] | Mapping[str, Any] | None = None):
        """Run one statement (or, without parameters, a script); fetch from what it returns. A statement that
        returns no rows (INSERT, UPDATE, DELETE without RETURNING) returns its row count, as DuckDB does."""
        import psycopg

        cursor = self._conn.cursor()
        try:
            if parameters is None:
                cursor.execute(sql.encode(), prepare=False)  # bytes: psycopg leaves % and ? alone
            else:
                cursor.execute(to_pyformat(sql), _params(parameters), prepare=False)
        except psycopg.Error as error:
            raise _without_values(error) from None
        return cursor if cursor.description is not None else _RowCount(cursor.rowcount)

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]]) -> None:
        import psycopg

        with self._conn.cursor() as cursor:
            try:
                cursor.executemany(to_pyformat(sql), [_params(p) for p in parameters])
            except psycopg.Error as error:
                raise _without_values(error) from None

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Rows into `table` by COPY (the ingest's staged records: one round trip, not one per row)."""
        with self._conn.cursor() as cursor, cursor.copy(
                f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def close(self) -> None:
        self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn.closed


def _without_values(error):
    """The same error with PostgreSQL's primary message only: its DETAIL may quote the row's values ("Failing row
    contains (…)", "Key (…)=(…)"), which can be private text."""
    return type(error)(error.diag.message_primary or type(error).__name__)


class _RowCount:
    def __init__(self, count: int):
        self.rows = [(count,)]

    def fetchone(self):
        return self.rows[0]

    def fetchall(self):
        return self.rows


def _params(parameters):
    if parameters is None or isinstance(parameters, Mapping):
        return parameters
    return [list(p) if isinstance(p, tuple | set | frozenset) else p for p in parameters]
