"""Run bookkeeping tasks: open a run (record config + Prefect flow-run id, calibrate the per-query noise
from the budget) and close it (publish the releases table and the budget summary as Prefect artifacts).
Artifacts carry ids, statuses and ε only — never text."""

from __future__ import annotations

import re
import uuid

from prefect import get_run_logger, runtime, task
from prefect.artifacts import (
    create_image_artifact,
    create_markdown_artifact,
    create_table_artifact,
)

from dpicl import methods
from dpicl.config import Config
from dpicl.methods.base import Budget, Facts, Plan
from dpicl.planning import for_people, payable_words
from dpicl.privacy.accounting import choose_accountant
from dpicl.privacy.accounting.composed import composed_events
from dpicl.privacy.accounting.events import PublicDataEvent, event_from_json
from dpicl.spend_plot import spend_data_url
from dpicl.storage import get_dataset
from dpicl.storage.ledger import (
    SHARE_EXPLAINED,
    budget_report,
    budget_state,
    require_budget,
    spend_history,
)
from dpicl.storage.ledger import Budget as OpenBudget
from dpicl.storage.runs import create_run, finish_run, latest_plan_event, store_plan
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "default"


def per_query_plan(con, cfg: Config) -> tuple[Plan, str]:
    """The data-independent per-query plan of `cfg`'s method against its dataset's open budget, and the privacy
    event one query then costs (JSON). Reads the budget and the dataset size only."""
    budget = require_budget(con, cfg.private_dataset)
    facts = Facts(dataset_size=get_dataset(con, cfg.private_dataset)["n_records"],
                  max_new_tokens=cfg.generation.max_new_tokens)
    plan = methods.get(cfg.method.name).plan(cfg.method, facts, Budget(budget.epsilon, budget.delta))
    return plan, plan.event().to_json()


def checked_plan(con, cfg: Config) -> tuple[OpenBudget, Plan, str]:
    """The dataset's open budget, `per_query_plan`, and its event; fails when no accountant can compose the event
    with what the budget already holds (before anything runs; also the pre-flight's check, dpicl.preflight)."""
    budget = require_budget(con, cfg.private_dataset)
    plan, event_json = per_query_plan(con, cfg)
    choose_accountant(composed_events({**budget_state(con, cfg.private_dataset), event_json: 1}))
    return budget, plan, event_json


@task(name="open-run", **STAGE)
def open_run(config_path: str, db_path: str) -> dict:
    """Returns the run id, the data-independent per-query plan (noise, ε per query, …) and its privacy event."""
    cfg = context.config(config_path)
    method = cfg.method
    with context.database(db_path) as con:
        budget, plan, event_json = checked_plan(con, cfg)
        run_id = uuid.uuid4().hex
        flow_run_id = runtime.flow_run.id
        numbers = plan.numbers()
        # the config and plan every task of this run reads (never the file again: privacy invariant 9, docs/PRIVACY.md)
        create_run(con, run_id, method.name, cfg.private_dataset, cfg.backlog, cfg.model_dump(mode="json"),
                   str(flow_run_id) if flow_run_id else None)
        store_plan(con, run_id, cfg.backlog, numbers, event_json)
    if isinstance(plan.event(), PublicDataEvent):
        get_run_logger().info("run %s: %s uses public data and earlier DP releases only: its answers cost nothing "
                              "(the budget, ε=%g, δ=%g, is not touched)", run_id, method.name, budget.epsilon,
                              budget.delta)
    else:
        get_run_logger().info("run %s: %s per query, planned for %d queries at ε=%g, δ=%g: %s", run_id,
                              method.name, plan.queries, budget.epsilon, budget.delta, for_people(numbers))
    for warning in methods.get(method.name).warnings(method, plan):
        get_run_logger().warning(warning)
    return {"run_id": run_id, "method": method.name, "batch_queries": cfg.batch_queries, "backlog": cfg.backlog}


@task(name="publish", **STAGE)
def publish(db_path: str, run_id: str, query_ids: list[str], released: list[dict]) -> dict:
    """Prefect artifacts for the run (table of query id / status / ε cost, budget summary); closes the run."""
    cost = {r["query_id"]: r["epsilon_cost"] for r in released}
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg = run.cfg
        status = dict(con.execute(
            "SELECT query_id, status FROM queries WHERE backlog = ? AND query_id = ANY(?)",
            [cfg.backlog, query_ids],
        ).fetchall())
        # a free run's own plan says nothing of what the budget still pays for: the latest paid plan does
        free = isinstance(event_from_json(run.event_json), PublicDataEvent)
        summary = budget_report(con, cfg.private_dataset,
                                latest_plan_event(con, cfg.private_dataset) if free else run.event_json)
        history = spend_history(con, cfg.private_dataset)
        finish_run(con, run_id, "completed")
    rows = [
        {"query_id": q, "status": status.get(q, "pending"), "epsilon_cost": round(cost.get(q, 0.0), 4),
         "share_of_budget": f"{cost.get(q, 0.0) / summary['epsilon_limit']:.2%}"}
        for q in query_ids
    ]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("answered", "refused_budget", "pending")}
    if rows:
        create_table_artifact(
            rows, key=f"releases-{_slug(cfg.backlog)}",
            description=f"Run {run_id}: {counts['answered']} answered, {counts['refused_budget']} refused. "
                        + SHARE_EXPLAINED,
        )
    create_markdown_artifact(
        "\n".join([
            f"### Privacy budget of `{cfg.private_dataset}`",
            "",
            "| limit ε | spent ε | remaining ε | δ | ledger entries | releases | queries still payable |",
            "|---|---|---|---|---|---|---|",
            f"| {summary['epsilon_limit']:g} | {summary['epsilon_spent']:.4f} | {summary['epsilon_remaining']:.4f} "
            f"| {summary['delta']:g} | {summary['ledger_entries']} | {summary['releases']} "
            f"| {payable_words(summary['queries_still_payable'], summary['plan_is_free'])} |",
        ]),
        key=f"budget-{_slug(cfg.private_dataset)}",
        description="ε spent is the accountant's upper bound over every ledger entry of the dataset",
    )
    create_image_artifact(spend_data_url(cfg.private_dataset, history, summary["epsilon_limit"]),
                          key=f"spend-{_slug(cfg.private_dataset)}",
                          description=f"ε spent over time on {cfg.private_dataset!r} against its limit")
    return {"run_id": run_id, **counts, "budget": summary}
