"""Flow `rerun`: re-run a past run's stages from a chosen stage with a different method or parameters, on the
stored teacher outputs / votes / embeddings (no LLM call before that stage; docs/ops/rerun-and-plan.md).


* `from_stage="aggregate"`: a new DP aggregate per query from the stored private artifacts — a new release,
  paid through the ledger before the draw (`aggregate` task, the same as `answer_backlog`'s), then the `release`
  task. Queries whose subsample a release already used are charged without amplification, after a top-up of the
  earlier use (dpicl/privacy/accounting/reuse.py explains why).
* `from_stage="release"`: post-processing of the source run's stored DP aggregates with public data — free
  (ledger entries of ε 0); unchanged settings serve the stored releases again.

The rerun answers a copy of the source backlog (`<backlog>@rerun-<run id>`), so its releases sit beside the
originals; its run row is linked to the source run (`run_sources`). Parameters are ids, names, paths and
`KEY=VALUE` config settings — never private text. Nothing is written when the analysis refuses.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import yaml
from prefect import flow, get_run_logger, task

from dpicl.storage.db import default_db_path
from dpicl.tasks import context
from dpicl.tasks.aggregate import aggregate
from dpicl.tasks.common import STAGE
from dpicl.tasks.release import release
from dpicl.tasks.rerun import (
    RerunError,
    analyse,
    derived_backlog,
    open_rerun,
    refusal,
    reserve_free,
    serve,
    top_up,
)
from dpicl.tasks.run import publish


def _database_writer(db_path: str):
    """THE single call site of the one-writer-per-database lock: every write of the rerun happens inside it."""
    from dpicl.flows.locking import database_writer

    return database_writer(db_path)


@task(name="plan-rerun", **STAGE)
def plan_rerun(run_id: str, from_stage: str, config: str | None, method: str | None, overrides: list[str] | None,
               max_queries: int | None, db_path: str) -> dict:
    """What the rerun does per query and what it costs (ids, keys, counts, ε); refuses before anything is written."""
    with context.database(db_path) as con:
        report = analyse(con, run_id, from_stage, config=config, method=method, overrides=overrides,
                         max_queries=max_queries)
    if not report["payable"]:
        raise RerunError(refusal(report))
    c = report["counts"]
    get_run_logger().info("rerun of %s from %s with %s: %d new releases (%d fresh, %d reused subsamples, %d top-ups), "
                          "%d served, %d post-processed; ε %.4f charged", run_id, from_stage, report["method"],
                          c["fresh"] + c["reused"], c["fresh"], c["reused"], report["top_up_entries"], c["served"],
                          c["post-processed"], report["epsilon_charged"])
    return report


def _batches(ids: list[str], size: int):
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


@flow(name="rerun", persist_result=False)
def rerun(run_id: str, from_stage: str = "aggregate", config: str | None = None, method: str | None = None,
          overrides: list[str] | None = None, max_queries: int | None = None, db: str | None = None) -> dict:
    """Re-run run `run_id` from `from_stage` (aggregate | release) with `config` (default: the run's own config),
    `method` and `overrides` (`KEY=VALUE`, e.g. `method.planned_queries=50`); returns counts and the budget."""
    db_path = str(db or default_db_path())
    with _database_writer(db_path):
        report = plan_rerun(run_id, from_stage, config, method, overrides, max_queries, db_path)
        new_run_id = uuid.uuid4().hex
        settings = {**report["config"], "backlog": derived_backlog(report["backlog"], new_run_id)}
        with tempfile.TemporaryDirectory(prefix="dpicl-rerun-") as tmp:
            config_path = str(Path(tmp) / "rerun.yaml")
            Path(config_path).write_text(yaml.safe_dump(settings, sort_keys=False, allow_unicode=True),
                                         encoding="utf-8")
            open_rerun(config_path, db_path, new_run_id, report["source_run"], report["root_run"], from_stage,
                       report["backlog"], report["queries"], report["plan"], report["event_json"])
            features, category = report["features"], report["category"]
            batch_size = report["config"]["batch_queries"]
            released: list[dict] = []
            if from_stage == "aggregate":
                for kind in ("fresh", "reused"):
                    ids = [q for q in report["queries"] if category[q] == kind]
                    for batch in _batches(ids, batch_size):
                        if kind == "reused":  # pay the top-ups of the earlier uses before any new draw
                            batch = top_up(db_path, new_run_id, {q: report["top_ups"][q] for q in batch})
                        aggregates = aggregate(db_path, new_run_id, {q: features[q] for q in batch},
                                               reused=kind == "reused")
                        if aggregates:
                            released += release(db_path, new_run_id, aggregates, {q: features[q] for q in aggregates})
            else:
                if report["served_from"]:
                    released += serve(db_path, new_run_id, report["served_from"])
                ids = [q for q in report["queries"] if category[q] == "post-processed"]
                for batch in _batches(ids, batch_size):
                    aggregates = reserve_free(db_path, new_run_id, {q: report["aggregates"][q] for q in batch})
                    if aggregates:
                        released += release(db_path, new_run_id, aggregates, {q: features[q] for q in aggregates})
            result = publish(db_path, new_run_id, report["queries"], released)
    return {**result, "source_run": report["source_run"], "from_stage": from_stage, "method": report["method"],
            "backlog": settings["backlog"], "counts": report["counts"], "top_up_entries": report["top_up_entries"],
            "epsilon_planned": report["epsilon_charged"]}
