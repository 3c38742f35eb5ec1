"""Stage 3 — infer: every teacher prompt of a batch of queries in one backend call.

Text tasks generate greedily; classification scores the label tokens after each prompt and each teacher votes for
its most likely label. A method that `samples_candidates` (ESA) also samples public zero-shot candidates, and one
that `needs_public` (sga, ksa-public) runs the public ensemble; both are public and cached by content key across
runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from prefect import get_run_logger, task

from dpicl.config import Config
from dpicl.inference.base import GenerationParams
from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.storage.artifacts import (
    artifact_key,
    get_artifacts,
    has_artifact,
    put_artifact,
)
from dpicl.storage.queries import get_queries
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="infer", **STAGE)
def infer(db_path: str, run_id: str, prompts: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teacher_outputs" | "teacher_votes": key, ["candidates": key], "zero_shot": key,
    ["public_outputs": key, "public_example": key, ["public_demos": key]]}}.

    Three steps, so that no database connection is open while the model runs (other processes read and write
    meanwhile: docs/SCALING.md): read what is to be generated, generate, write the outputs."""
    run = context.run_at(db_path, run_id)  # the run's stored config, not the file (privacy invariant 9)
    cfg, method = run.cfg, run.method
    classify = cfg.task.type == "classification"
    stage = "teacher_votes" if classify else "teacher_outputs"
    params = {"model": cfg.model.model_dump(),
              "task": cfg.task.model_dump() if classify else cfg.generation.model_dump()}
    keys = {q: {stage: artifact_key(stage, [p["teachers"]], params), "zero_shot": p["zero_shot"]}
            for q, p in prompts.items()}
    with context.database(db_path) as con:
        texts = get_artifacts(con, [p["teachers"] for p in prompts.values()])
        # calibrated votes replace each prompt's query by content-free inputs: they need the query texts
        inputs = {q: r.input for q, r in get_queries(con, cfg.backlog, list(prompts)).items()} \
            if classify and cfg.task.calibrate else None
        extra = None
        if method.samples_candidates:
            extra = _candidates_to_sample(con, cfg, method, prompts, keys)
        elif method.needs_public:
            extra = _public_to_generate(con, cfg, prompts, keys)
    backend = context.backend(cfg)
    flat = [t for p in prompts.values() for t in texts[p["teachers"]]]
    if classify:
        queries = None if inputs is None else [inputs[q] for q, p in prompts.items() for _ in texts[p["teachers"]]]
        outputs = label_votes(backend, flat, cfg, queries)
    else:
        outputs = backend.generate(flat, greedy_params(cfg), progress=True)
    extra_outputs = extra.generate(backend) if extra is not None else None
    with context.database(db_path) as con:
        start = 0
        for query_id, p in prompts.items():
            n = len(texts[p["teachers"]])
            put_artifact(con, keys[query_id][stage], stage, cfg.backlog, query_id, outputs[start:start + n],
                         private=True, run_id=run_id)
            start += n
        if extra is not None:
            extra.store(con, extra_outputs, run_id)
    cached = None if extra is None else len(prompts) - len(extra.todo)
    what = "" if cached is None else f"; {extra.stage} cached for {cached}"
    get_run_logger().info("%d teacher %s for %d queries%s", len(flat), "votes" if classify else "outputs",
                          len(prompts), what)
    return keys


@dataclass
class _Public:
    """Public generations a batch still needs (not cached by content key): what to generate and where it goes."""

    stage: str  # "candidates" or "public_outputs"
    cfg: Config
    todo: list[str]  # query ids
    inputs: list[list[str]]  # per query: the prompts to generate from
    params: GenerationParams
    keys: dict[str, str]  # query id → artifact key

    def generate(self, backend) -> list[str]:
        flat = [t for group in self.inputs for t in group]
        return backend.generate(flat, self.params, progress=True) if flat else []

    def store(self, con, outputs: list[str], run_id: str) -> None:
        start = 0
        for query_id, group in zip(self.todo, self.inputs):
            put_artifact(con, self.keys[query_id], self.stage, self.cfg.backlog, query_id,
                         outputs[start:start + len(group)], private=False, run_id=run_id)
            start += len(group)


@dataclass
class _Candidates(_Public):
    """ESA's public candidates, sampled as the method says (`sample_candidates`); `inputs` repeats each query's
    zero-shot prompt once per candidate."""

    method: object = None

    def generate(self, backend) -> list[str]:
        zero_shot = [group[0] for group in self.inputs]
        if not zero_shot:
            return []
        return [t for group in self.method.sample_candidates(self.cfg, backend, zero_shot, progress=True)
                for t in group]


def _public_to_generate(con, cfg: Config, prompts: dict[str, dict[str, str]],
                        keys: dict[str, dict[str, str]]) -> _Public:
    """The public ensemble's greedy outputs (paper 004), generated once per public prompt set and cached."""
    params = {"model": cfg.model.model_dump(), "generation": cfg.generation.model_dump()}
    for query_id, p in prompts.items():
        keys[query_id]["public_outputs"] = artifact_key("public_outputs", [p["public_prompts"]], params)
        keys[query_id]["public_example"] = p["public_example"]
        if "public_demos" in p:
            keys[query_id]["public_demos"] = p["public_demos"]
    todo = [q for q in prompts if not has_artifact(con, keys[q]["public_outputs"])]
    texts = get_artifacts(con, [prompts[q]["public_prompts"] for q in todo])
    return _Public("public_outputs", cfg, todo, [texts[prompts[q]["public_prompts"]] for q in todo],
                   replace(greedy_params(cfg), public_prompts=True), {q: keys[q]["public_outputs"] for q in todo})


def candidates_key(cfg: Config, method, zero_shot_key: str) -> str:
    """The content key of a query's public zero-shot candidates (the same in every run: cached)."""
    params, n = method.candidate_params(cfg)
    return artifact_key("candidates", [zero_shot_key], {"model": cfg.model.model_dump(), "params": asdict(params),
                                                        "n": n, "greedy": cfg.method.greedy_candidate})


def _candidates_to_sample(con, cfg: Config, method, prompts: dict[str, dict[str, str]],
                          keys: dict[str, dict[str, str]]) -> _Public:
    """Public candidates (ESA's): sampled zero-shot answers per query (no private data)."""
    params, c = method.candidate_params(cfg)
    c += cfg.method.greedy_candidate
    for query_id, p in prompts.items():
        keys[query_id]["candidates"] = candidates_key(cfg, method, p["zero_shot"])
    todo = [q for q in prompts if not has_artifact(con, keys[q]["candidates"])]
    zero_shot = get_artifacts(con, [prompts[q]["zero_shot"] for q in todo])
    return _Candidates("candidates", cfg, todo, [[zero_shot[prompts[q]["zero_shot"]]] * c for q in todo], params,
                       {q: keys[q]["candidates"] for q in todo}, method)
