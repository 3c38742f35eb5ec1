"""Stage 3 — infer: every teacher prompt of a batch of queries in one backend call.

Text methods (esa, ksa-*) generate greedily; classification (rnm) scores the label tokens after each prompt and
each teacher votes for its most likely label. ESA also samples public zero-shot candidates, cached by content
key across runs.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
from prefect import get_run_logger, task

from dpicl.config import Config
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
def infer(config_path: str, db_path: str, run_id: str, prompts: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teacher_outputs" | "teacher_votes": key, ["candidates": key], "zero_shot": key}}."""
    cfg = context.config(config_path)
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
        cached = 0
        if cfg.method.name == "esa":
            cached = _sample_candidates(con, cfg, run_id, prompts, keys)
    get_run_logger().info("%d teacher %s for %d queries%s", len(flat), "votes" if classify else "outputs",
                          len(prompts), f"; zero-shot candidates cached for {cached}" if cfg.method.name == "esa"
                          else "")
    return keys


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
