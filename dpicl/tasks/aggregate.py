"""Stage 5 — aggregate: pay first, then draw. For each query the method's privacy event is reserved in the
ledger (committed), and only then is the noise drawn; a query the budget cannot pay for is refused and no
noise is drawn. The output of this stage is already differentially private; what it is, is the method's
(`aggregate` of an ensemble method in dpicl/methods/), which draws with the parameters of the run's stored Plan after
checking that their event is the one reserved (privacy invariant 9).
"""

from __future__ import annotations


from prefect import get_run_logger, task

from dpicl.privacy.accounting.guard import require_paid
from dpicl.privacy.accounting.reuse import unamplified
from dpicl.privacy.rng import make_rng
from dpicl.storage import set_query_status
from dpicl.storage.artifacts import artifact_key, get_artifacts, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="aggregate", **STAGE)
def aggregate(db_path: str, run_id: str, features: dict[str, dict[str, str]], reused: bool = False
              ) -> dict[str, dict]:
    """Returns {query id: {"aggregate": key, "entry_id", "epsilon_before", "epsilon_after"}} for paid queries.
    The plan and its event are the run's stored ones; `reused`: the subsamples were used by earlier releases."""
    out: dict[str, dict] = {}
    refused: list[str] = []
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, method = run.cfg, run.method
        needed = method.inputs
        event_json = unamplified(run.event_json) if reused else run.event_json
        rate = 1.0 if reused else run.plan.sampling_rate
        payloads = get_artifacts(con, [keys[name] for keys in features.values() for name in needed])
        # the whole batch is paid for (one transaction) before the first draw
        reservations = context.reserve_many(con, cfg, run_id, list(features), method.name, event_json)
        for query_id, keys in features.items():
            reservation = reservations.get(query_id)
            if reservation is None:
                refused.append(query_id)
                continue
            inputs = {name: payloads[keys[name]] for name in needed}

            def paid(used, query_id=query_id):
                require_paid(event_json, used, what=f"query {query_id!r}")

            result = method.aggregate(cfg, run.plan, rate, inputs, make_rng(), paid)
            key = put_artifact(
                con, artifact_key("aggregate", [keys[n] for n in needed], {"entry_id": reservation.entry_id}),
                "aggregate", cfg.backlog, query_id, result, private=True, run_id=run_id,
            )
            out[query_id] = {
                "aggregate": key,
                "entry_id": reservation.entry_id,
                "epsilon_before": reservation.epsilon_before,
                "epsilon_after": reservation.epsilon_after,
            }
        set_query_status(con, cfg.backlog, refused, "refused_budget")
    get_run_logger().info("aggregated %d queries; %d refused (budget cannot pay)", len(out), len(refused))
    return out
