"""Reading datasets and records, and reading and updating the query backlog.

Small helpers over the `datasets`, `records` and `queries` tables for tasks, flows and the CLI. Query status
is 'pending', 'answered' or 'refused_budget' (a query the budget cannot pay for is refused).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

import duckdb

QUERY_STATUSES = ("pending", "answered", "refused_budget")


class Record(NamedTuple):
    record_id: str
    input: str
    output: str | None


class Query(NamedTuple):
    query_id: str
    input: str
    reference: str | None
    status: str


def get_dataset(con: duckdb.DuckDBPyConnection, name: str) -> dict[str, Any]:
    """The dataset's row as a dict (field_map parsed); LookupError if it was never ingested."""
    result = con.execute("SELECT * FROM datasets WHERE name = ?", [name])
    row = result.fetchone()
    if row is None:
        raise LookupError(f"no dataset named '{name}'; ingest it first: "
                          f"dpicl ingest dataset <file> --name {name} --kind private|public")
    dataset = dict(zip([column[0] for column in result.description], row))
    dataset["field_map"] = json.loads(dataset["field_map"])
    return dataset


def load_records(con: duckdb.DuckDBPyConnection, dataset: str) -> list[Record]:
    """All records of a dataset in file order."""
    get_dataset(con, dataset)
    rows = con.execute("SELECT record_id, input, output FROM records WHERE dataset = ? ORDER BY row_no",
                       [dataset]).fetchall()
    return [Record(*row) for row in rows]


def pending_queries(con: duckdb.DuckDBPyConnection, backlog: str, limit: int | None = None) -> list[str]:
    """Ids of the backlog's pending queries in backlog order (at most `limit`)."""
    rows = con.execute("SELECT query_id FROM queries WHERE backlog = ? AND status = 'pending' ORDER BY row_no "
                       "LIMIT ?", [backlog, limit]).fetchall()
    return [query_id for (query_id,) in rows]


def get_queries(con: duckdb.DuckDBPyConnection, backlog: str, ids: Iterable[str]) -> dict[str, Query]:
    """The backlog's queries with these ids (ids not in the backlog are absent from the dict)."""
    rows = con.execute("SELECT query_id, input, reference, status FROM queries "
                       "WHERE backlog = ? AND query_id = ANY(?) ORDER BY row_no",
                       [backlog, list(ids)]).fetchall()
    return {row[0]: Query(*row) for row in rows}


def set_query_status(con: duckdb.DuckDBPyConnection, backlog: str, ids: Iterable[str], status: str) -> None:
    """Set the status of these queries of the backlog."""
    if status not in QUERY_STATUSES:
        raise ValueError(f"query status must be one of {', '.join(QUERY_STATUSES)}, not '{status}'")
    con.execute("UPDATE queries SET status = ? WHERE backlog = ? AND query_id = ANY(?)",
                [status, backlog, list(ids)])


def backlog_counts(con: duckdb.DuckDBPyConnection, backlog: str) -> dict[str, int]:
    """Number of the backlog's queries per status (statuses with no query are absent)."""
    rows = con.execute("SELECT status, count(*) FROM queries WHERE backlog = ? GROUP BY status ORDER BY status",
                       [backlog]).fetchall()
    return dict(rows)


def copy_queries(con: duckdb.DuckDBPyConnection, backlog: str, new_backlog: str, ids: Iterable[str],
                 source_path: str) -> int:
    """Copy these queries of `backlog` into a new backlog `new_backlog` as 'pending' (a rerun answers its own copy,
    so that its releases sit beside, never over, the releases of the original backlog). Returns the count."""
    ids = list(ids)
    con.execute(
        "INSERT INTO queries (backlog, query_id, row_no, input, reference, status, source_path) "
        "SELECT ?, query_id, row_no, input, reference, 'pending', ? FROM queries "
        "WHERE backlog = ? AND query_id = ANY(?)",
        [new_backlog, source_path, backlog, ids],
    )
    return con.execute("SELECT count(*) FROM queries WHERE backlog = ?", [new_backlog]).fetchone()[0]
