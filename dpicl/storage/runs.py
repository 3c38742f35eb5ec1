"""Runs: one row per execution of a flow over a dataset and a backlog, with its config and config hash.

The config hash lets artifacts and reports tell which configuration produced them; the Prefect flow-run id
links a run to the Prefect UI. The process that runs it (pid, host, start time) lets the next writer mark a run
whose process died as `crashed` (`mark_crashed_runs`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import duckdb

from dpicl import liveness
from dpicl.storage.artifacts import canonical_json
from dpicl.storage.db import table_exists

RUNNING, CRASHED = "running", "crashed"


def config_hash(config: Mapping) -> str:
    """sha256 hex of the canonical JSON of `config`."""
    return hashlib.sha256(canonical_json(dict(config)).encode("utf-8")).hexdigest()


def create_run(con: duckdb.DuckDBPyConnection, run_id: str, method: str, dataset: str, backlog: str,
               config: Mapping, flow_run_id: str | None) -> None:
    """Record a new run with status 'running', run by this process."""
    me = liveness.this_process()
    con.execute(
        "INSERT INTO runs (run_id, flow_run_id, method, dataset, backlog, config, config_hash, pid, host, "
        "process_started) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [run_id, flow_run_id, method, dataset, backlog, canonical_json(dict(config)), config_hash(config),
         me.pid, me.host, me.started],
    )


def mark_crashed_runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Mark as 'crashed' every 'running' run whose process (on this host) no longer exists; returns their ids.
    Runs of other hosts, and runs opened before their process was recorded, are left as they are."""
    rows = con.execute("SELECT run_id, pid, host, process_started FROM runs WHERE status = ? AND pid IS NOT NULL",
                       [RUNNING]).fetchall()
    dead = [run_id for run_id, pid, host, started in rows
            if liveness.alive(liveness.ProcessId(pid, host, started)) is False]
    if dead:
        con.execute("UPDATE runs SET status = ?, finished_at = current_timestamp "
                    "WHERE status = ? AND run_id = ANY(?)", [CRASHED, RUNNING, dead])
    return dead


def store_plan(con: duckdb.DuckDBPyConnection, run_id: str, backlog: str, plan: Mapping, event_json: str) -> None:
    """Store the run's per-query plan (public numbers) and the privacy event one query costs: every task of the run
    reads them from here, never from a config file (privacy invariant 9, docs/PRIVACY.md)."""
    con.execute(
        "INSERT INTO artifacts (key, stage, backlog, query_id, private, format, payload, run_id) "
        "VALUES (?, 'run_plan', ?, '', false, 'json', ?, ?)",
        [_plan_key(run_id), backlog, canonical_json({"plan": dict(plan), "event_json": event_json}).encode(), run_id],
    )


def stored_plan(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[dict[str, Any], str]:
    """(plan numbers, event JSON) stored when run `run_id` opened; LookupError when it has none."""
    row = con.execute("SELECT payload FROM artifacts WHERE key = ?", [_plan_key(run_id)]).fetchone()
    if row is None:
        raise LookupError(f"run {run_id!r} has no stored plan")
    stored = json.loads(bytes(row[0]).decode("utf-8"))
    return stored["plan"], stored["event_json"]


def latest_plan_event(con: duckdb.DuckDBPyConnection, dataset: str) -> str | None:
    """The per-query event of the latest run on `dataset` that stored a paid plan (the current plan), else of the
    latest free one (public data only, or a rerun that post-processes: it says nothing of what the budget still
    pays for while a paid plan exists), or None."""
    rows = con.execute(
        "SELECT a.payload FROM runs r JOIN artifacts a ON a.run_id = r.run_id AND a.stage = 'run_plan' "
        "WHERE r.dataset = ? ORDER BY r.started_at DESC, r.run_id", [dataset])
    latest_free = None
    while (row := rows.fetchone()) is not None:
        event_json = json.loads(bytes(row[0]).decode("utf-8"))["event_json"]
        if json.loads(event_json).get("kind") != "public_data":
            return event_json
        latest_free = latest_free or event_json
    return latest_free


def _plan_key(run_id: str) -> str:
    return hashlib.sha256(f"run_plan:{run_id}".encode()).hexdigest()


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
    generation = run["config"].get("generation")
    if isinstance(generation, dict):  # stored before `empty_answers` existed: its answers could end blank
        generation.setdefault("empty_answers", True)
    return run


def link_rerun(con: duckdb.DuckDBPyConnection, run_id: str, source_run_id: str, root_run_id: str,
               from_stage: str) -> None:
    """Record that run `run_id` re-ran `source_run_id` from `from_stage`, reusing the artifacts of `root_run_id`."""
    con.execute("INSERT INTO run_sources (run_id, source_run_id, root_run_id, from_stage) VALUES (?, ?, ?, ?)",
                [run_id, source_run_id, root_run_id, from_stage])


def _has_run_sources(con: duckdb.DuckDBPyConnection) -> bool:
    # a database opened read-only before migration 0003 has no run_sources table: then no run is a rerun
    return table_exists(con, "run_sources")


def run_source(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any] | None:
    """{source_run_id, root_run_id, from_stage} of a rerun, or None for a run that is not a rerun."""
    if not _has_run_sources(con):
        return None
    row = con.execute("SELECT source_run_id, root_run_id, from_stage FROM run_sources WHERE run_id = ?",
                      [run_id]).fetchone()
    return dict(zip(("source_run_id", "root_run_id", "from_stage"), row)) if row else None


def lineage_runs(con: duckdb.DuckDBPyConnection, root_run_id: str) -> list[str]:
    """The root run and every rerun that reuses its artifacts (its subsamples and teacher outputs)."""
    if not _has_run_sources(con):
        return [root_run_id]
    rows = con.execute("SELECT run_id FROM run_sources WHERE root_run_id = ? ORDER BY created_at",
                       [root_run_id]).fetchall()
    return [root_run_id, *[r[0] for r in rows]]


def recent_run_ids(con: duckdb.DuckDBPyConnection, limit: int = 5) -> list[str]:
    """Ids of the most recent runs (for error messages that name what exists)."""
    return [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT ?",
                                      [limit]).fetchall()]
