"""Stage 2 — prompt: each teacher's prompt (its own demonstrations + the query) and the public
zero-shot prompt of each query."""

from __future__ import annotations

import hashlib

from prefect import get_run_logger, task

from dpicl.prompts import render_prompt, zero_shot_prompt
from dpicl.storage import get_queries, load_records
from dpicl.storage.artifacts import artifact_key, get_artifacts, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="prompt", **STAGE)
def prompt(config_path: str, db_path: str, run_id: str, samples: dict[str, str]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teachers": key, "zero_shot": key}}."""
    cfg = context.config(config_path)
    task_cfg = cfg.task.model_dump()
    with context.database(db_path) as con:
        records = {r.record_id: r for r in load_records(con, cfg.private_dataset)}
        queries = get_queries(con, cfg.backlog, list(samples))
        drawn = get_artifacts(con, list(samples.values()))
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
    get_run_logger().info("built prompts for %d queries", len(keys))
    return keys
