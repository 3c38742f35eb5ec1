"""Stage 3 — infer: every teacher prompt of a batch of queries in one backend call.

Text methods (esa, ksa-*) generate greedily; classification (rnm) scores the label tokens after each prompt and
each teacher votes for its most likely label. ESA also samples public zero-shot candidates, and sga / ksa-public
run the public ensemble; both are public and cached by content key across runs.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
from prefect import get_run_logger, task

from dpicl.config import PUBLIC_METHODS, Config
from dpicl.inference.base import GenerationParams, require
from dpicl.storage.artifacts import artifact_key, get_artifacts, has_artifact, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


def greedy_params(cfg: Config) -> GenerationParams:
    gen = cfg.generation
    return GenerationParams(max_new_tokens=gen.max_new_tokens, temperature=gen.temperature, top_p=gen.top_p,
                            stop=tuple(gen.stop))


def label_votes(backend, prompts: list[str], cfg: Config) -> list[int]:
    """Each prompt's most likely label (index into task.labels) by the next-token log-probabilities."""
    require(backend, "label_logprobs")
    if not prompts:
        return []
    scores = backend.label_logprobs(prompts, [cfg.task.label_prefix + label for label in cfg.task.labels],
                                    progress=True)
    return np.argmax(np.asarray(scores), axis=1).astype(int).tolist()


@task(name="infer", **STAGE)
def infer(db_path: str, run_id: str, prompts: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teacher_outputs" | "teacher_votes": key, ["candidates": key], "zero_shot": key,
    ["public_outputs": key, "public_example": key]}}."""
    cfg = context.run_at(db_path, run_id).cfg  # the run's stored config, not the file (privacy invariant 9)
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
        if cfg.method.name == "esa":
            cached = _sample_candidates(con, cfg, run_id, prompts, keys)
        elif cfg.method.name in PUBLIC_METHODS:
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


def _sample_candidates(con, cfg: Config, run_id: str, prompts: dict[str, dict[str, str]],
                       keys: dict[str, dict[str, str]]) -> int:
    """ESA's public candidates: `candidates` sampled zero-shot answers per query (no private data)."""
    method = cfg.method
    params = GenerationParams(max_new_tokens=cfg.generation.max_new_tokens, temperature=method.candidate_temperature,
                              top_p=method.candidate_top_p, stop=tuple(cfg.generation.stop))
    for query_id, p in prompts.items():
        keys[query_id]["candidates"] = artifact_key(
            "candidates", [p["zero_shot"]], {"model": cfg.model.model_dump(), "params": asdict(params),
                                             "n": method.candidates})
    todo = [q for q in prompts if not has_artifact(con, keys[q]["candidates"])]
    zero_shot = get_artifacts(con, [prompts[q]["zero_shot"] for q in todo])
    c = method.candidates
    flat = [zero_shot[prompts[q]["zero_shot"]] for q in todo for _ in range(c)]
    sampled = context.backend(cfg).generate(flat, params, progress=True) if flat else []
    for i, query_id in enumerate(todo):
        put_artifact(con, keys[query_id]["candidates"], "candidates", cfg.backlog, query_id,
                     sampled[i * c:(i + 1) * c], private=False, run_id=run_id)
    return len(prompts) - len(todo)
