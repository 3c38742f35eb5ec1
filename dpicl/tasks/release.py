"""Stage 6/7 — release: turn each paid DP aggregate into an answer using public data only, and store the
release with its ledger entry, atomically. How an answer is made from a DP aggregate is the method's `release`
(dpicl/methods/), which reads the public artifacts the method names (`release_needs`) and the query text only.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task

from dpicl.config import Config
from dpicl.storage import get_queries
from dpicl.storage.artifacts import get_artifacts
from dpicl.storage.ledger import Reservation, record_release
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


def release_inputs(con, cfg: Config, method, aggregates: dict[str, Any], features: dict[str, dict[str, str]]):
    """What the method's release reads besides the DP aggregates: (the public artifacts it needs per query, the
    queries' texts)."""
    public_keys = [features[q][k] for q in aggregates for k in method.release_needs if k in features[q]]
    stored = get_artifacts(con, public_keys)
    public = {q: {k: stored[features[q][k]] for k in method.release_needs if k in features[q]} for q in aggregates}
    queries = {q: r.input for q, r in get_queries(con, cfg.backlog, list(aggregates)).items()}
    return public, queries


class _Lazy:
    """A backend loaded on first use (rnm, esa and sga's top-1 release never call the LLM)."""

    def __init__(self, load):
        self._load, self._backend = load, None

    def __getattr__(self, name):
        if self._backend is None:
            self._backend = self._load()
        return getattr(self._backend, name)


@task(name="release", **STAGE)
def release(db_path: str, run_id: str, aggregates: dict[str, dict], features: dict[str, dict[str, str]]) -> list[dict]:
    """Returns one row per released query: query id, status and ε cost (no text)."""
    run = context.run_at(db_path, run_id)
    cfg, method = run.cfg, run.method
    shared = method.release_details(cfg.method, run.plan)
    rows = []
    with context.database(db_path) as con:
        results = get_artifacts(con, [a["aggregate"] for a in aggregates.values()])
        dp_outputs = {q: results[a["aggregate"]] for q, a in aggregates.items()}
        public, queries = release_inputs(con, cfg, method, dp_outputs, features)
    # (query id, answer, details) per query; the backend is loaded only when the release calls the LLM (KSA's final
    # answer), and no connection is open while it runs
    answers = list(method.release(cfg, dp_outputs, public, queries, _Lazy(lambda: context.backend(cfg))))
    with context.database(db_path) as con:
        for query_id, answer, details in answers:
            agg = aggregates[query_id]
            reservation = Reservation(
                agg["entry_id"], cfg.private_dataset, cfg.backlog, query_id, agg["epsilon_before"], agg["epsilon_after"]
            )
            record_release(con, reservation, run_id=run_id, mechanism=method.name, answer=answer,
                           details={**details, **shared})
            rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
    get_run_logger().info("released %d answers", len(rows))
    return rows
