"""Reading datasets and records, and reading and updating the query backlog.

Small helpers over the `datasets`, `records` and `queries` tables for tasks, flows and the CLI. Query status
is 'pending', 'answered' or 'refused_budget' (a query the budget cannot pay for is refused).

Runs that drain a backlog take its pending queries by *claims* (`claim_pending`): a claim is the run's for
`CLAIM_LEASE_SECONDS`, renewed while the run works (`renew_claims`) and given back when it ends
(`release_claims`); the claims of a run that died expire and other runs claim those queries (at once when the run
is marked crashed). On PostgreSQL the
claiming SELECT takes its rows `FOR UPDATE SKIP LOCKED`: runs that claim at the same moment get disjoint batches
and never wait for each other. A DuckDB file has one writing process at a time, so there claims only matter across
runs that follow each other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

import duckdb

from dpicl.storage.db import dialect, transaction

QUERY_STATUSES = ("pending", "answered", "refused_budget")
# how long a claim lasts without renewal: a dead run's queries wait this long before others take them
CLAIM_LEASE_SECONDS = 300.0


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
                          f"dpicl ingest <file> --name {name} --as private|public")
    dataset = dict(zip([column[0] for column in result.description], row))
    dataset["field_map"] = json.loads(dataset["field_map"])
    return dataset


def require_backlog(con: duckdb.DuckDBPyConnection, backlog: str) -> None:
    """LookupError (one `error:` line in the CLI) if no query was ever ingested into `backlog`."""
    if con.execute("SELECT 1 FROM queries WHERE backlog = ? LIMIT 1", [backlog]).fetchone() is None:
        raise LookupError(f"no backlog named '{backlog}'; ingest it first: "
                          f"dpicl ingest <file> --name {backlog} --as queries")


def load_records(con: duckdb.DuckDBPyConnection, dataset: str) -> list[Record]:
    """All records of a dataset in file order."""
    get_dataset(con, dataset)
    rows = con.execute("SELECT record_id, input, output FROM records WHERE dataset = ? ORDER BY row_no",
                       [dataset]).fetchall()
    return [Record(*row) for row in rows]


def load_public_records(con: duckdb.DuckDBPyConnection, dataset: str, setting: str) -> list[Record]:
    """All records of `dataset` in file order, which must have been ingested as public (`setting`: the config key
    that named it, for the error). The kind is read by the statement that reads the records: PostgreSQL gives each
    statement its own snapshot, so a replace by a private dataset committed between a separate check and read would
    put private records into answers charged nothing."""
    rows = con.execute("SELECT d.kind, r.record_id, r.input, r.output FROM datasets d "
                       "LEFT JOIN records r ON r.dataset = d.name WHERE d.name = ? ORDER BY r.row_no",
                       [dataset]).fetchall()
    if not rows:
        get_dataset(con, dataset)  # LookupError: never ingested, with the ingest command
        return []
    if rows[0][0] != "public":
        raise ValueError(f"{setting} {dataset!r} was ingested as {rows[0][0]}, not public; point {setting} at a "
                         "dataset ingested with `--as public`")
    return [Record(*row[1:]) for row in rows if row[1] is not None]


def pending_queries(con: duckdb.DuckDBPyConnection, backlog: str, limit: int | None = None) -> list[str]:
    """Ids of the backlog's pending queries in backlog order (at most `limit`)."""
    rows = con.execute("SELECT query_id FROM queries WHERE backlog = ? AND status = 'pending' ORDER BY row_no "
                       "LIMIT ?", [backlog, limit]).fetchall()
    return [query_id for (query_id,) in rows]


# no live claim: none, expired, or held by a run known to have died (`dpicl.storage.runs.mark_crashed_runs`)
_UNCLAIMED = ("(claimed_until IS NULL OR claimed_until < ? "
              "OR claimed_by IN (SELECT run_id FROM runs WHERE status = 'crashed'))")


def claim_pending(con, backlog: str, run_id: str, limit: int,
                  lease_seconds: float = CLAIM_LEASE_SECONDS) -> list[str]:
    """Claim up to `limit` of the backlog's pending queries that no live claim holds, in backlog order, for run
    `run_id`; returns their ids (empty: nothing left to claim). Never a query this run claimed before."""
    lock = " FOR UPDATE SKIP LOCKED" if dialect(con) == "postgres" else ""
    now = time.time()
    with transaction(con):
        rows = con.execute(
            f"SELECT query_id FROM queries WHERE backlog = ? AND status = 'pending' AND {_UNCLAIMED} "
            f"AND (claimed_by IS NULL OR claimed_by <> ?) ORDER BY row_no LIMIT ?{lock}",
            [backlog, now, run_id, limit]).fetchall()
        ids = [query_id for (query_id,) in rows]
        if ids:
            con.execute("UPDATE queries SET claimed_by = ?, claimed_until = ? WHERE backlog = ? AND query_id = ANY(?)",
                        [run_id, now + lease_seconds, backlog, ids])
    return ids


def claimable_count(con, backlog: str) -> int:
    """How many of the backlog's pending queries no live claim holds (what runs can still claim)."""
    return con.execute(f"SELECT count(*) FROM queries WHERE backlog = ? AND status = 'pending' AND {_UNCLAIMED}",
                       [backlog, time.time()]).fetchone()[0]


def renew_claims(con, run_id: str, lease_seconds: float = CLAIM_LEASE_SECONDS) -> int:
    """Extend the claims run `run_id` holds on queries still pending; returns how many."""
    return con.execute("UPDATE queries SET claimed_until = ? WHERE claimed_by = ? AND status = 'pending'",
                       [time.time() + lease_seconds, run_id]).fetchone()[0]


def release_claims(con, run_id: str) -> int:
    """Give back the claims of run `run_id` on queries it left pending (others may claim them at once)."""
    return con.execute("UPDATE queries SET claimed_by = NULL, claimed_until = NULL "
                       "WHERE claimed_by = ? AND status = 'pending'", [run_id]).fetchone()[0]


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
