"""Stage 2 — prompt: each teacher's prompt (its own demonstrations + the query) and the public zero-shot prompt of
each query; for a method that needs public data (sga, ksa-public) also the public ensemble's prompts (demonstrations
from the public dataset), a public one-shot example (the last demonstration of the first public teacher) and, with
`public_fewshot`, the few-shot prompt's public demonstrations as (input, output) pairs (ksa-public shows them)."""

from __future__ import annotations

import hashlib

from prefect import get_run_logger, task

from dpicl.config import Config
from dpicl.embeddings.candidates import most_similar
from dpicl.prompts import fewshot_records, public_ensemble, public_key, render_prompt, zero_shot_prompt
from dpicl.storage import get_queries, load_public_records, load_records
from dpicl.storage.artifacts import artifact_key, get_artifacts, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="prompt", **STAGE)
def prompt(db_path: str, run_id: str, samples: dict[str, str]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teachers": key, "zero_shot": key, ["public_prompts": key, "public_example": key,
    ["public_demos": key]]}}."""
    run = context.run_at(db_path, run_id)  # the run's stored config, not the file (privacy invariant 9)
    cfg = run.cfg
    task_cfg = cfg.task.model_dump()
    with context.database(db_path) as con:
        records = {r.record_id: r for r in load_records(con, cfg.private_dataset)}
        queries = get_queries(con, cfg.backlog, list(samples))
        drawn = get_artifacts(con, list(samples.values()))
        public_records = _load_public(con, cfg) if run.method.needs_public else []
    # no connection open while the encoder runs (other processes may be waiting for the database)
    ranked = {}
    if run.method.needs_public and cfg.method.public_demonstrations == "nearest":
        encoder = context.encoder(cfg)
        rows = most_similar(encoder.encode([queries[q].input for q in samples], batched=True),
                            context.public_embeddings(encoder, tuple(r.input for r in public_records)),
                            cfg.method.public_ranked_count)
        ranked = {q: row.tolist() for q, row in zip(samples, rows)}
    with context.database(db_path) as con:
        keys = {}
        for query_id, sample_key in samples.items():
            query = queries[query_id].input
            prompts = [
                render_prompt(cfg.task, [(records[r].input, records[r].output) for r in ids], query)
                for ids in drawn[sample_key]["teachers"]
            ]
            teachers = put_artifact(
                con, artifact_key("teacher_prompts", [sample_key], task_cfg),
                "teacher_prompts", cfg.backlog, query_id, prompts, private=True, run_id=run_id,
            )
            public = zero_shot_prompt(cfg.task, query)
            # content-addressed: the same query and template give the same key in every run (cache)
            digest = hashlib.sha256(public.encode()).hexdigest()
            zero_shot = put_artifact(
                con, artifact_key("zero_shot_prompt", [], {"prompt_sha256": digest}),
                "zero_shot_prompt", cfg.backlog, query_id, public, private=False, run_id=run_id,
            )
            keys[query_id] = {"teachers": teachers, "zero_shot": zero_shot}
            if run.method.needs_public:
                keys[query_id].update(_public_ensemble(con, cfg, run_id, query_id, query, public_records,
                                                       ranked.get(query_id)))
    get_run_logger().info("built prompts for %d queries", len(keys))
    return keys


def _load_public(con, cfg: Config) -> list:
    """The public dataset's records, after checking it really is public (never a private dataset by mistake)."""
    records = load_public_records(con, cfg.public_dataset, "public_dataset")
    if not records:
        raise ValueError(f"public dataset {cfg.public_dataset!r} has no records")
    return records


def public_ensemble_params(cfg: Config, query: str) -> dict:
    """What the public ensemble's prompts of `query` are a function of (their artifacts' key)."""
    m = cfg.method
    params = {"public_dataset": cfg.public_dataset, "query_sha256": hashlib.sha256(query.encode()).hexdigest(),
              "teachers": m.teachers, "shots": m.public_shot_count, "task": cfg.task.model_dump()}
    if m.public_demonstrations == "nearest":  # absent for the random draw: its keys stay those of earlier runs
        params.update(public_demonstrations="nearest", embedding=cfg.embedding.model_dump())
    if m.public_fewshot is not None:  # absent without it, for the same reason
        params["public_fewshot"] = m.public_fewshot
    return params


def _public_ensemble(con, cfg: Config, run_id: str, query_id: str, query: str, records: list,
                     ranked: list[int] | None) -> dict[str, str]:
    """The public teachers' prompts and the public one-shot example of one query (public artifacts, cached by
    content: the demonstrations are a function of the query and the public dataset)."""
    m = cfg.method
    pairs = [(r.input, r.output) for r in records]
    prompts, example = public_ensemble(cfg.task, pairs, query, m.teachers, m.public_shot_count,
                                       public_key(cfg.public_dataset, query), ranked, m.public_fewshot)
    params = public_ensemble_params(cfg, query)
    keys = {
        "public_prompts": put_artifact(con, artifact_key("public_prompts", [], params), "public_prompts",
                                       cfg.backlog, query_id, prompts, private=False, run_id=run_id),
        "public_example": put_artifact(con, artifact_key("public_example", [], params), "public_example",
                                       cfg.backlog, query_id, example, private=False, run_id=run_id),
    }
    if m.public_fewshot is not None:  # the few-shot prompt's demonstrations, as pairs (KSA-public shows them)
        demos = [pairs[i] for i in fewshot_records(ranked, m.public_fewshot)]
        keys["public_demos"] = put_artifact(con, artifact_key("public_demos", [], params), "public_demos",
                                            cfg.backlog, query_id, demos, private=False, run_id=run_id)
    return keys
