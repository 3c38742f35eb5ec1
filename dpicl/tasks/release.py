"""Stage 6/7 — release: post-process the paid DP aggregate with public data only (the zero-shot
candidate nearest the noisy mean, via FAISS) and store the release with its ledger entry, atomically."""

from __future__ import annotations

from prefect import get_run_logger, task

from dpicl.embeddings.candidates import nearest_candidate
from dpicl.storage.artifacts import get_artifacts
from dpicl.storage.ledger import Reservation, record_release
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="release", **STAGE)
def release(
    config_path: str, db_path: str, run_id: str, aggregates: dict[str, dict], embeddings: dict[str, dict[str, str]],
    noise_multiplier: float, sampling_rate: float,
) -> list[dict]:
    """Returns one row per released query: query id, status and ε cost (no text)."""
    cfg = context.config(config_path)
    rows = []
    with context.database(db_path) as con:
        needed = [a["aggregate"] for a in aggregates.values()]
        needed += [embeddings[q][k] for q in aggregates for k in ("candidates", "candidate_texts")]
        payloads = get_artifacts(con, needed)
        for query_id, agg in aggregates.items():
            keys = embeddings[query_id]
            index = nearest_candidate(payloads[agg["aggregate"]], payloads[keys["candidates"]])
            reservation = Reservation(
                agg["entry_id"], cfg.private_dataset, cfg.backlog, query_id, agg["epsilon_before"], agg["epsilon_after"]
            )
            record_release(
                con, reservation, run_id=run_id, mechanism="esa",
                answer=payloads[keys["candidate_texts"]][index],
                details={
                    "candidate_index": int(index),
                    "candidates": cfg.method.candidates,
                    "teachers": cfg.method.teachers,
                    "noise_multiplier": noise_multiplier,
                    "sampling_rate": sampling_rate,
                },
            )
            rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
    get_run_logger().info("released %d answers", len(rows))
    return rows
