"""Stage 1 — sample: refuse what the budget cannot pay for, then draw each query's fresh Poisson
subsample of the private pool, assigned to teachers by a keyed hash of the record (docs/ARCHITECTURE.md); each
teacher keeps the records of its own that a keyed rank puts first, or those most similar to the query."""

from __future__ import annotations

import dataclasses
import secrets

import numpy as np
from prefect import get_run_logger, task

from dpicl.embeddings.relevance import record_vectors, records_fingerprint, relevance
from dpicl.privacy.accounting.events import event_from_json
from dpicl.privacy.accounting.guard import require_paid
from dpicl.privacy.rng import make_rng
from dpicl.privacy.sampling import assign_teachers
from dpicl.storage import get_dataset, get_queries, load_records, recovery, set_query_status
from dpicl.storage.artifacts import artifact_key, get_artifacts, put_artifact
from dpicl.storage.ledger import payable_count
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="sample", **STAGE)
def sample(db_path: str, run_id: str, query_ids: list[str]) -> dict[str, str]:
    """Returns {query id: key of its sample artifact}; queries beyond the budget are marked refused."""
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, method, event_json = run.cfg, run.cfg.method, run.event_json
        # what the reservation will accept (the same incremental bound), so no inference is spent on the rest: the
        # queries whose charge a crashed run left unused (taken over, not paid again), then as many as the budget pays
        reusable = recovery.reusable_queries(con, dataset=cfg.private_dataset, run_id=run_id, backlog=cfg.backlog,
                                             query_ids=query_ids, mechanism=method.name, event_json=event_json)
        paying = [q for q in query_ids if q not in reusable]
        payable = set(paying[:payable_count(con, cfg.private_dataset, event_json, len(paying))])
        accepted = [q for q in query_ids if q in reusable or q in payable]
        refused = [q for q in query_ids if q not in reusable and q not in payable]
        set_query_status(con, cfg.backlog, refused, "refused_budget")

        dataset = get_dataset(con, cfg.private_dataset)
        records = load_records(con, cfg.private_dataset)
        queries = get_queries(con, cfg.backlog, accepted) if method.private_demonstrations == "nearest" else {}
    scores = {}  # each query's relevance of every record, where the teachers show the nearest of theirs
    if queries:
        vectors = _record_vectors(db_path, run_id, cfg, records)
        scores = dict(zip(queries, relevance(context.encoder(cfg), [q.input for q in queries.values()], records,
                                             vectors)))
    record_ids = [r.record_id for r in records]
    # the rate every subsample is drawn at is the rate the queries' events are charged at
    rate = run.plan.sampling_rate
    event = event_from_json(event_json)
    require_paid(event, dataclasses.replace(event, sampling_rate=rate), what="the subsamples")
    with context.database(db_path) as con:
        keys = {}
        for query_id in accepted:
            rng = make_rng()
            teachers = assign_teachers(record_ids, dataset["teacher_key"], method.teachers, method.shots, rate, rng,
                                       scores.get(query_id))
            # a fresh draw: the key is unique per draw, never a cache hit
            key = artifact_key("sample", [], {"run_id": run_id, "query_id": query_id, "draw": secrets.token_hex(16)})
            keys[query_id] = put_artifact(
                con, key, "sample", cfg.backlog, query_id, {"teachers": teachers}, private=True, run_id=run_id
            )
    get_run_logger().info("of %d queries: %d sampled, %d refused (the budget cannot pay for them)", len(query_ids),
                          len(accepted), len(refused))
    return keys


_held: dict[str, np.ndarray] = {}  # this process's latest record embeddings, by artifact key


def _record_vectors(db_path: str, run_id: str, cfg, records) -> np.ndarray:
    """The private records' embeddings: computed once per dataset and encoder (each record alone: about 19 SAMSum
    dialogues a second on one core, 13 minutes for SAMSum's 14,732 training ones), then stored as a private artifact
    for every later batch, run and worker, and held in memory."""
    key = artifact_key("record_embeddings", [], {"records": records_fingerprint(cfg.embedding.model, records)})
    if key not in _held:
        with context.database(db_path) as con:
            vectors = get_artifacts(con, [key]).get(key)
        if vectors is None:  # no connection open while the encoder runs (other processes may wait for the database)
            vectors = record_vectors(context.encoder(cfg), records)
            with context.database(db_path) as con:
                put_artifact(con, key, "record_embeddings", cfg.backlog, "", vectors, private=True, run_id=run_id)
        _held.clear()
        _held[key] = vectors
    return _held[key]
