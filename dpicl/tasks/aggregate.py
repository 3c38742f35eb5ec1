"""Stage 5 — aggregate: pay first, then draw. For each query the ESA event is reserved in the ledger
(committed), and only then is the Gaussian noise drawn on the sum of teacher embeddings (paper 001 Alg 3,
Δ = 2). A query the budget cannot pay for is refused and no noise is drawn."""

from __future__ import annotations

from prefect import get_run_logger, task

from dpicl.privacy.mechanisms import esa
from dpicl.storage import set_query_status
from dpicl.storage.artifacts import artifact_key, get_artifacts, put_artifact
from dpicl.storage.ledger import reserve
from dpicl.tasks import context
from dpicl.tasks.common import STAGE, rng_for


@task(name="aggregate", **STAGE)
def aggregate(
    config_path: str, db_path: str, run_id: str, embeddings: dict[str, dict[str, str]], noise_multiplier: float,
    sampling_rate: float,
) -> dict[str, dict]:
    """Returns {query id: {"aggregate": key, "entry_id", "epsilon_before", "epsilon_after"}} for paid queries."""
    cfg = context.config(config_path)
    event_json = esa.cost(noise_multiplier, sampling_rate).to_json()
    out: dict[str, dict] = {}
    refused: list[str] = []
    with context.database(db_path) as con:
        vectors = get_artifacts(con, [e["teachers"] for e in embeddings.values()])
        for query_id, keys in embeddings.items():
            reservation = reserve(
                con, dataset=cfg.private_dataset, run_id=run_id, backlog=cfg.backlog, query_id=query_id,
                mechanism="esa", event_json=event_json, epsilon_of=context.epsilon_of,
            )
            if reservation is None:
                refused.append(query_id)
                continue
            noisy = esa.noisy_mean(vectors[keys["teachers"]], noise_multiplier, rng_for(cfg, run_id, "noise", query_id))
            key = put_artifact(
                con, artifact_key("aggregate", [keys["teachers"]], {"entry_id": reservation.entry_id}),
                "aggregate", cfg.backlog, query_id, noisy, private=True, run_id=run_id,
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
