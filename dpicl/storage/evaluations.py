"""Results of privacy–utility sweeps (flow `evaluate`): numbers only, one row per setting, repetition and metric."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb

from dpicl.storage.db import transaction

COLUMNS = ("setting", "method", "epsilon", "repetition", "metric", "value")


def store_evaluation(con: duckdb.DuckDBPyConnection, sweep_id: str, meta: Mapping, rows: Sequence[Mapping]) -> None:
    """Write a sweep's rows in one transaction (all or none). `meta`: dataset, backlog, queries, delta,
    flow_run_id."""
    with transaction(con):
        con.executemany(
            "INSERT INTO evaluations (sweep_id, flow_run_id, dataset, backlog, queries, delta, "
            + ", ".join(COLUMNS) + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [[sweep_id, meta.get("flow_run_id"), meta["dataset"], meta["backlog"], meta["queries"], meta["delta"],
              *(r[c] for c in COLUMNS)] for r in rows],
        )


def load_evaluation(con: duckdb.DuckDBPyConnection, sweep_id: str) -> list[dict]:
    """A sweep's rows in the order they were measured; LookupError for an unknown sweep."""
    cursor = con.execute("SELECT " + ", ".join(COLUMNS) + " FROM evaluations WHERE sweep_id = ? "
                         "ORDER BY rowid", [sweep_id])
    rows = [dict(zip(COLUMNS, r)) for r in cursor.fetchall()]
    if not rows:
        raise LookupError(f"no evaluation sweep with id {sweep_id!r} (list them: SELECT DISTINCT sweep_id FROM "
                          "evaluations)")
    return rows
