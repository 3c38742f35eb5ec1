"""What a rerun reads from the database (`dpicl rerun`, dpicl/tasks/rerun.py): the stored artifacts of a run, its
releases, the backlog's query ids and the ledger entries charged on the subsamples it reuses.

Reads only; runs, their lineage (`run_sources`) and plans are in `dpicl.storage.runs`, the ledger in
`dpicl.storage.ledger`, charges taken over from crashed runs in `dpicl.storage.recovery`. What the entries read here
cost a rerun is `dpicl.privacy.accounting.reuse`.
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

from dpicl.privacy.accounting.reuse import TOP_UP
from dpicl.storage.recovery import reused_entries
from dpicl.storage.runs import lineage_runs


def subsample_charges(con: duckdb.DuckDBPyConnection, root_run_id: str,
                      query_ids: list[str]) -> list[tuple[str, str, str]]:
    """(query id, mechanism, event JSON) of every ledger entry of these queries paid by the root run, by a rerun of
    it, or taken over by one of them from a crashed run (it paid for a draw on that run's subsample too), oldest
    first: the charges on the queries' subsamples, free public-data entries included."""
    runs = lineage_runs(con, root_run_id)
    return con.execute("SELECT query_id, mechanism, event FROM ledger WHERE (run_id = ANY(?) "
                       "OR entry_id = ANY(?)) AND query_id = ANY(?) ORDER BY entry_id",
                       [runs, reused_entries(con, runs), query_ids]).fetchall()


def run_artifact_keys(con: duckdb.DuckDBPyConnection, run_id: str, stage: str) -> dict[str, str]:
    """{query id: artifact key} of the artifacts of `stage` (e.g. teacher_outputs) that run `run_id` stored."""
    return dict(con.execute("SELECT query_id, key FROM artifacts WHERE run_id = ? AND stage = ?",
                            [run_id, stage]).fetchall())


def stored_aggregates(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, dict[str, object]]:
    """{query id: {"aggregate": artifact key, "source_entry_id": ledger entry}} of the DP aggregates run `run_id`
    stored, each with the entry that paid for its draw (the run's own, or one it took over; never a top-up)."""
    rows = con.execute(
        "SELECT a.query_id, a.key, l.entry_id, l.epsilon_before, l.epsilon_after FROM artifacts a "
        "JOIN ledger l ON (l.run_id = a.run_id OR l.entry_id IN (SELECT u.entry_id FROM ledger_reuses u "
        "WHERE u.run_id = a.run_id)) AND l.query_id = a.query_id AND l.mechanism NOT LIKE ? "
        "WHERE a.run_id = ? AND a.stage = 'aggregate'", [f"%{TOP_UP}", run_id]).fetchall()
    return {q: {"aggregate": key, "source_entry_id": entry} for q, key, entry, _, _ in rows}


def backlog_query_ids(con: duckdb.DuckDBPyConnection, backlog: str) -> list[str]:
    """Ids of every query of the backlog (any status), in backlog order."""
    return [r[0] for r in con.execute("SELECT query_id FROM queries WHERE backlog = ? ORDER BY row_no",
                                      [backlog]).fetchall()]


def stored_keys(con: duckdb.DuckDBPyConnection, keys: Iterable[str]) -> set[str]:
    """Those of `keys` that have a stored artifact (payloads are not read)."""
    return {r[0] for r in con.execute("SELECT key FROM artifacts WHERE key = ANY(?)",
                                      [sorted(keys)]).fetchall()}


def release_backlogs(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, str]:
    """{query id: backlog} of the releases run `run_id` made."""
    return dict(con.execute("SELECT query_id, backlog FROM releases WHERE run_id = ?", [run_id]).fetchall())
