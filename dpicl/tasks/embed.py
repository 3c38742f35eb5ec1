"""Stage 4 — embed: unit-norm sentence embeddings of teacher outputs (private) and of public texts (cached by
content key): the public texts the method names (`public_texts`: ESA's zero-shot candidates, SGA's public ensemble
outputs)."""

from __future__ import annotations

import numpy as np
from prefect import get_run_logger, task

from dpicl.storage.artifacts import artifact_key, get_artifacts, has_artifact, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="embed", **STAGE)
def embed(db_path: str, run_id: str, outputs: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teachers": key, <public embeddings>: key, <public texts>: key, …the input keys}}."""
    run = context.run_at(db_path, run_id)  # the run's stored config, not the file (privacy invariant 9)
    cfg, public = run.cfg, run.method.public_texts
    params = cfg.embedding.model_dump()
    source, name, texts_name, stage = public.source, public.embeddings, public.texts, public.stage
    with context.database(db_path) as con:
        texts = get_artifacts(con, [o[k] for o in outputs.values() for k in ("teacher_outputs", source)])
        keys = {
            q: {
                **o,
                "teachers": artifact_key("teacher_embeddings", [o["teacher_outputs"]], params),
                name: artifact_key(stage, [o[source]], params),
                texts_name: o[source],
            }
            for q, o in outputs.items()
        }
        jobs = [(q, "teachers", "teacher_outputs", True) for q in outputs]
        jobs += [(q, name, source, False) for q in outputs if not has_artifact(con, keys[q][name])]
    embedded, done = 0, []
    # Private teacher outputs and public texts in separate encoder calls (privacy invariant 10): a public
    # embedding, which is released, never shares a batch with private texts; the public texts are batched with
    # each other. No connection is open meanwhile.
    encoder = context.encoder(cfg)
    for private in (True, False):
        part = [j for j in jobs if j[3] == private]
        flat = [t for q, _, src, _ in part for t in texts[outputs[q][src]]]
        vectors = encoder.encode(flat, progress=True, batched=not private) if flat else np.zeros((0, 0), np.float32)
        embedded += len(flat)
        done.append((part, vectors))
    with context.database(db_path) as con:
        for part, vectors in done:
            start = 0
            for q, kind, src, private in part:
                n = len(texts[outputs[q][src]])
                put_artifact(con, keys[q][kind], "teacher_embeddings" if private else stage,
                             cfg.backlog, q, vectors[start:start + n], private=private, run_id=run_id)
                start += n
    get_run_logger().info("embedded %d texts", embedded)
    return keys
