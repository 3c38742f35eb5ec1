"""Runs: one row per execution of a flow over a dataset and a backlog, with its config and config hash.

The config hash lets artifacts and reports tell which configuration produced them; the Prefect flow-run id
links a run to the Prefect UI.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import duckdb

from dpicl.storage.artifacts import canonical_json


def config_hash(config: Mapping) -> str:
    """sha256 hex of the canonical JSON of `config`."""
    return hashlib.sha256(canonical_json(dict(config)).encode("utf-8")).hexdigest()


def create_run(con: duckdb.DuckDBPyConnection, run_id: str, method: str, dataset: str, backlog: str,
               config: Mapping, flow_run_id: str | None) -> None:
    """Record a new run with status 'running'."""
    con.execute(
        "INSERT INTO runs (run_id, flow_run_id, method, dataset, backlog, config, config_hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [run_id, flow_run_id, method, dataset, backlog, canonical_json(dict(config)), config_hash(config)],
    )


def finish_run(con: duckdb.DuckDBPyConnection, run_id: str, status: str) -> None:
    """Set the run's final status (e.g. 'completed', 'failed') and its finish time."""
    updated = con.execute(
        "UPDATE runs SET status = ?, finished_at = current_timestamp WHERE run_id = ?", [status, run_id]
    ).fetchone()[0]
    if updated == 0:
        raise LookupError(f"no run with id '{run_id}'")


def get_run(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """The run as a dict (config parsed back from JSON), or None."""
    result = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
    row = result.fetchone()
    if row is None:
        return None
    run = dict(zip([column[0] for column in result.description], row))
    run["config"] = json.loads(run["config"])
    return run
