"""Stage 4 — embed: unit-norm sentence embeddings of teacher outputs (private) and of the public
candidates (cached by content key)."""

from __future__ import annotations

import numpy as np
from prefect import get_run_logger, task

from dpicl.storage.artifacts import artifact_key, get_artifacts, has_artifact, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="embed", **STAGE)
def embed(config_path: str, db_path: str, run_id: str, outputs: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teachers": key, "candidates": key, "candidate_texts": key}}."""
    cfg = context.config(config_path)
    params = cfg.embedding.model_dump()
    with context.database(db_path) as con:
        texts = get_artifacts(con, [o[k] for o in outputs.values() for k in ("teacher_outputs", "candidates")])
        keys = {
            q: {
                "teachers": artifact_key("teacher_embeddings", [o["teacher_outputs"]], params),
                "candidates": artifact_key("candidate_embeddings", [o["candidates"]], params),
                "candidate_texts": o["candidates"],
            }
            for q, o in outputs.items()
        }
        jobs = [(q, "teachers", "teacher_outputs", True) for q in outputs]
        jobs += [(q, "candidates", "candidates", False) for q in outputs if not has_artifact(con, keys[q]["candidates"])]
        flat = [t for q, _, src, _ in jobs for t in texts[outputs[q][src]]]
        vectors = context.encoder(cfg).encode(flat, progress=True) if flat else np.zeros((0, 0), np.float32)
        start = 0
        for q, kind, src, private in jobs:
            n = len(texts[outputs[q][src]])
            put_artifact(con, keys[q][kind], f"{kind[:-1]}_embeddings",
                         cfg.backlog, q, vectors[start:start + n], private=private, run_id=run_id)
            start += n
    get_run_logger().info("embedded %d texts", len(flat))
    return keys
