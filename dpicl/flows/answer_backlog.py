"""Flow `answer_backlog`: drain a query backlog with a DP in-context-learning method (the config's `method`; any
registered method that answers queries, `dpicl methods`).

Reads like the pipeline of docs/ARCHITECTURE.md: for an ensemble method sample → prompt → infer → [embed, when it
embeds public texts] → aggregate (pay, then draw) → release; a token-level method pays, then decodes, query by
query; a public-data method answers for free.
Tasks pass artifact keys; private text stays in the database. The run claims its pending queries one batch at a
time (`dpicl.storage.queries.claim_pending`, renewed by `dpicl.flows.claims`), so that runs in several processes
or on several machines sharing one PostgreSQL database drain one backlog together, never answering (or paying for)
a query twice. On a DuckDB file everything that touches the database also runs under the file's single-writer
lock (`dpicl.flows.locking`). A progress artifact shows the share of the claimable queries this run processed
after each batch (numbers only).
"""

from __future__ import annotations

import re

from prefect import flow, get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from dpicl import methods
from dpicl.config import resolve_config_path
from dpicl.flows.claims import claims_kept
from dpicl.flows.locking import database_writer
from dpicl.preflight import check_answer, nothing_pending
from dpicl.storage.db import default_db_path
from dpicl.storage.ledger import budget_report
from dpicl.storage.queries import claim_pending, claimable_count
from dpicl.storage.runs import latest_plan_event, mark_crashed_runs
from dpicl.tasks import context
from dpicl.tasks.aggregate import aggregate
from dpicl.tasks.decode import decode
from dpicl.tasks.embed import embed
from dpicl.tasks.icl import icl
from dpicl.tasks.infer import infer
from dpicl.tasks.prompt import prompt
from dpicl.tasks.release import release
from dpicl.tasks.run import open_run, publish
from dpicl.tasks.sample import sample


@flow(name="answer_backlog", persist_result=False)
def answer_backlog(config: str = "demo", db: str | None = None, max_queries: int | None = None) -> dict:
    """Answer the pending queries of the config's backlog; returns counts and the budget summary."""
    config_path = str(resolve_config_path(config))
    db_path = str(db or default_db_path())
    cfg = context.config(config_path)
    with database_writer(db_path):
        with context.database(db_path) as con:
            # what the run needs, before any work (dpicl.preflight); open-run, the first task, checks the plan
            claimable = check_answer(con, cfg, plan=False)
            if not claimable:  # a scheduled run on a drained backlog: one line, no run opened
                get_run_logger().info(nothing_pending(con, cfg.backlog))
                return {"run_id": None, "answered": 0, "refused_budget": 0, "pending": 0,
                        "budget": budget_report(con, cfg.private_dataset, latest_plan_event(con, cfg.private_dataset))}
        return _drain(config_path, db_path, max_queries)


def _progress_description(done: int, total: int, answered: int) -> str:
    return f"{done} of {total} pending queries of this run processed, {answered} answered (counts only)"


def _progress_key(backlog: str) -> str:
    """Artifact keys allow lowercase letters, digits and dashes only."""
    return "progress-" + (re.sub(r"[^a-z0-9-]+", "-", backlog.lower()).strip("-") or "default")


def _drain(config_path: str, db_path: str, max_queries: int | None) -> dict:
    # the file is read once more, by open-run, which stores the config and plan every later task reads
    run = open_run(config_path, db_path)
    run_id, method = run["run_id"], methods.get(run["method"])
    with context.database(db_path) as con:
        total = claimable_count(con, run["backlog"])
    total = total if max_queries is None else min(total, max_queries)
    progress = create_progress_artifact(
        0.0 if total else 100.0, key=_progress_key(run["backlog"]),
        description=_progress_description(0, total, 0))
    released: list[dict] = []
    claimed: list[str] = []
    with claims_kept(db_path, run_id):
        while max_queries is None or len(claimed) < max_queries:
            size = run["batch_queries"] if max_queries is None else min(run["batch_queries"],
                                                                         max_queries - len(claimed))
            with context.database(db_path) as con:
                batch = claim_pending(con, run["backlog"], run_id, size)
                if not batch and mark_crashed_runs(con):  # a run that died beside this one: its claims are free
                    batch = claim_pending(con, run["backlog"], run_id, size)
            if not batch:
                break
            claimed += batch
            released += _answer(db_path, run_id, method, batch)
            update_progress_artifact(progress, 100.0 * min(1.0, len(claimed) / max(total, 1)),
                                     description=_progress_description(len(claimed), max(total, len(claimed)),
                                                                       len(released)))
    return publish(db_path, run_id, claimed, released)


def _answer(db_path: str, run_id: str, method, batch: list[str]) -> list[dict]:
    """One claimed batch through the method's stages; the releases made."""
    if method.kind == "token":  # pay, then decode, per query
        return decode(db_path, run_id, batch)
    if method.kind == "public":  # public demonstrations only: free
        return icl(db_path, run_id, batch)
    samples = sample(db_path, run_id, batch)
    prompts = prompt(db_path, run_id, samples)
    features = infer(db_path, run_id, prompts)
    if method.public_texts is not None:
        features = embed(db_path, run_id, features)
    aggregates = aggregate(db_path, run_id, features)
    return release(db_path, run_id, aggregates, features)
