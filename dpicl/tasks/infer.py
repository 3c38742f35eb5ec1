"""Stage 3 — infer: every teacher prompt of a batch of queries in one backend call.

Text tasks generate greedily; classification scores the label tokens after each prompt and each teacher votes for
its most likely label. A method that `samples_candidates` (ESA) also samples public zero-shot candidates, and one
that `needs_public` (sga, ksa-public) runs the public ensemble; both are public and cached by content key across
runs.
"""

from __future__ import annotations

from dataclasses import asdict

from prefect import get_run_logger, task

from dpicl.config import Config
from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.storage.artifacts import (
    artifact_key,
    get_artifacts,
    has_artifact,
    put_artifact,
)
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="infer", **STAGE)
def infer(db_path: str, run_id: str, prompts: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teacher_outputs" | "teacher_votes": key, ["candidates": key], "zero_shot": key,
    ["public_outputs": key, "public_example": key]}}."""
    run = context.run_at(db_path, run_id)  # the run's stored config, not the file (privacy invariant 9)
    cfg, method = run.cfg, run.method
    classify = cfg.task.type == "classification"
    stage = "teacher_votes" if classify else "teacher_outputs"
    params = {"model": cfg.model.model_dump(),
              "task": cfg.task.model_dump() if classify else cfg.generation.model_dump()}
    with context.database(db_path) as con:
        texts = get_artifacts(con, [p["teachers"] for p in prompts.values()])
        flat = [t for p in prompts.values() for t in texts[p["teachers"]]]
        backend = context.backend(cfg)
        outputs = label_votes(backend, flat, cfg) if classify else backend.generate(flat, greedy_params(cfg),
                                                                                     progress=True)
        keys: dict[str, dict[str, str]] = {}
        start = 0
        for query_id, p in prompts.items():
            n = len(texts[p["teachers"]])
            key = artifact_key(stage, [p["teachers"]], params)
            put_artifact(con, key, stage, cfg.backlog, query_id, outputs[start:start + n], private=True, run_id=run_id)
            keys[query_id] = {stage: key, "zero_shot": p["zero_shot"]}
            start += n
        cached = None
        if method.samples_candidates:
            cached = _sample_candidates(con, cfg, method, run_id, prompts, keys)
        elif method.needs_public:
            cached = _public_outputs(con, cfg, run_id, prompts, keys)
    get_run_logger().info("%d teacher %s for %d queries%s", len(flat), "votes" if classify else "outputs",
                          len(prompts), "" if cached is None else f"; public outputs cached for {cached}")
    return keys


def _public_outputs(con, cfg: Config, run_id: str, prompts: dict[str, dict[str, str]],
                    keys: dict[str, dict[str, str]]) -> int:
    """The public ensemble's greedy outputs (paper 004), generated once per public prompt set and cached."""
    params = {"model": cfg.model.model_dump(), "generation": cfg.generation.model_dump()}
    for query_id, p in prompts.items():
        keys[query_id]["public_outputs"] = artifact_key("public_outputs", [p["public_prompts"]], params)
        keys[query_id]["public_example"] = p["public_example"]
    todo = [q for q in prompts if not has_artifact(con, keys[q]["public_outputs"])]
    texts = get_artifacts(con, [prompts[q]["public_prompts"] for q in todo])
    flat = [t for q in todo for t in texts[prompts[q]["public_prompts"]]]
    outputs = context.backend(cfg).generate(flat, greedy_params(cfg), progress=True) if flat else []
    start = 0
    for query_id in todo:
        n = len(texts[prompts[query_id]["public_prompts"]])
        put_artifact(con, keys[query_id]["public_outputs"], "public_outputs", cfg.backlog, query_id,
                     outputs[start:start + n], private=False, run_id=run_id)
        start += n
    return len(prompts) - len(todo)


def candidates_key(cfg: Config, method, zero_shot_key: str) -> str:
    """The content key of a query's public zero-shot candidates (the same in every run: cached)."""
    params, n = method.candidate_params(cfg)
    return artifact_key("candidates", [zero_shot_key], {"model": cfg.model.model_dump(), "params": asdict(params),
                                                        "n": n})


def _sample_candidates(con, cfg: Config, method, run_id: str, prompts: dict[str, dict[str, str]],
                       keys: dict[str, dict[str, str]]) -> int:
    """Public candidates (ESA's): sampled zero-shot answers per query (no private data)."""
    params, c = method.candidate_params(cfg)
    for query_id, p in prompts.items():
        keys[query_id]["candidates"] = candidates_key(cfg, method, p["zero_shot"])
    todo = [q for q in prompts if not has_artifact(con, keys[q]["candidates"])]
    zero_shot = get_artifacts(con, [prompts[q]["zero_shot"] for q in todo])
    flat = [zero_shot[prompts[q]["zero_shot"]] for q in todo for _ in range(c)]
    sampled = context.backend(cfg).generate(flat, params, progress=True) if flat else []
    for i, query_id in enumerate(todo):
        put_artifact(con, keys[query_id]["candidates"], "candidates", cfg.backlog, query_id,
                     sampled[i * c:(i + 1) * c], private=False, run_id=run_id)
    return len(prompts) - len(todo)
