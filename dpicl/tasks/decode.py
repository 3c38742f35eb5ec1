"""The answer stage of token-level methods (kind `token`, dpicl/methods/): replaces infer → aggregate → release
with a decode loop per query. Pay first, check that what is about to be used is what was paid for, then decode: the query's
data-independent cost for `generation.max_new_tokens` tokens is reserved in the ledger (committed) before the first
token is drawn, and the answer is stored with its ledger entry. Returns ids, statuses and ε only."""

from __future__ import annotations

from prefect import get_run_logger, task

from dpicl.inference.base import require
from dpicl.privacy.accounting.guard import require_paid
from dpicl.privacy.rng import make_rng
from dpicl.progress import track
from dpicl.storage import get_dataset, get_queries, load_records, set_query_status
from dpicl.storage.artifacts import artifact_key, put_artifact
from dpicl.storage.ledger import record_release
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="decode", **STAGE)
def decode(db_path: str, run_id: str, query_ids: list[str]) -> list[dict]:
    """Returns one row per answered query: query id, status and ε cost (no text); unpaid queries are refused.
    Every parameter comes from the run's stored config and plan (privacy invariant 9, docs/PRIVACY.md)."""
    rows, refused = [], []
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, plan, event_json, method = run.cfg, run.plan, run.event_json, run.method
        backend = context.backend(cfg)
        require(backend, "next_token_logprobs")
        shared = method.release_details(cfg.method, plan)
        records = load_records(con, cfg.private_dataset)
        teacher_key = get_dataset(con, cfg.private_dataset)["teacher_key"]
        queries = get_queries(con, cfg.backlog, query_ids)
        # the whole batch is paid for (one transaction) before the first token
        reservations = context.reserve_many(con, cfg, run_id, query_ids, method.name, event_json)
        refused = [q for q in query_ids if q not in reservations]
        set_query_status(con, cfg.backlog, refused, "refused_budget")
    for query_id in track([q for q in query_ids if q in reservations], f"{method.name} decode"):
        reservation = reservations[query_id]

        def paid(used, query_id=query_id):
            require_paid(event_json, used, what=f"query {query_id!r}")

        # no connection is open while the model decodes
        decoded = method.answer(cfg, backend, plan, records, teacher_key, queries[query_id].input, paid, make_rng())
        with context.database(db_path) as con:
            # numbers computed from private data (AdaPMixED's data-dependent RDP, DPS-MOZO's λ's) stay private
            put_artifact(con, artifact_key("settlement", [], {"entry_id": reservation.entry_id}), "settlement",
                         cfg.backlog, query_id, decoded.private, private=True, run_id=run_id)
            record_release(con, reservation, run_id=run_id, mechanism=method.name, answer=decoded.text,
                           details={**decoded.info, **shared})
        rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
    get_run_logger().info("decoded %d answers; %d refused (budget cannot pay)", len(rows), len(refused))
    return rows
