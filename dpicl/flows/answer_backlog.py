"""Flow `answer_backlog`: drain a query backlog with a DP in-context-learning method (esa, rnm, ksa-jem,
ksa-ptr, sga, ksa-public, dps-mozo, adapmixed, synthetic-icl; the config's `method`).

Reads like DESIGN.md's pipeline: sample → prompt → infer → [embed: esa, sga] → aggregate (pay, then draw)
→ release; the token-level methods pay, then decode, query by query.
Tasks pass artifact keys; private text stays in DuckDB.
"""

from __future__ import annotations

from prefect import flow

from dpicl.config import resolve_config_path
from dpicl.storage import pending_queries
from dpicl.storage.db import default_db_path
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
    if cfg.method.name == "dp-fewshot":
        raise ValueError("method dp-fewshot does not answer queries: it writes DP synthetic demonstrations "
                         "(`dpicl synthesize CONFIG`); answer with them by a config whose method is synthetic-icl")
    with context.database(db_path) as con:
        pending = pending_queries(con, cfg.backlog, limit=max_queries)

    run = open_run(config_path, db_path)
    run_id, plan = run["run_id"], run["plan"]
    released: list[dict] = []
    for start in range(0, len(pending), cfg.batch_queries):
        batch = pending[start:start + cfg.batch_queries]
        if cfg.method.name in ("dps-mozo", "adapmixed"):  # token level: pay, then decode, per query
            released += decode(config_path, db_path, run_id, batch, plan, run["event_json"])
            continue
        if cfg.method.name == "synthetic-icl":  # public demonstrations only: free
            released += icl(config_path, db_path, run_id, batch, run["event_json"])
            continue
        samples = sample(config_path, db_path, run_id, batch, run["event_json"])
        prompts = prompt(config_path, db_path, run_id, samples)
        features = infer(config_path, db_path, run_id, prompts)
        if cfg.method.name in ("esa", "sga"):
            features = embed(config_path, db_path, run_id, features)
        aggregates = aggregate(config_path, db_path, run_id, features, plan, run["event_json"])
        released += release(config_path, db_path, run_id, aggregates, features, plan)
    return publish(config_path, db_path, run, pending, released)
