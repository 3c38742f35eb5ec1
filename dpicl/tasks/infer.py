"""Stage 3 — infer: all teacher prompts of a batch of queries in one backend call (greedy), and the
public zero-shot candidates (sampled), which are cached by content key across runs."""

from __future__ import annotations

from dataclasses import asdict

from prefect import get_run_logger, task

from dpicl.inference.base import GenerationParams
from dpicl.storage.artifacts import artifact_key, get_artifacts, has_artifact, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="infer", **STAGE)
def infer(config_path: str, db_path: str, run_id: str, prompts: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Returns {query id: {"teacher_outputs": key, "candidates": key}}."""
    cfg = context.config(config_path)
    gen = cfg.generation
    teacher_params = GenerationParams(
        max_new_tokens=gen.max_new_tokens, temperature=gen.temperature, top_p=gen.top_p, stop=tuple(gen.stop)
    )
    candidate_params = GenerationParams(
        max_new_tokens=gen.max_new_tokens,
        temperature=cfg.method.candidate_temperature,
        top_p=cfg.method.candidate_top_p,
        stop=tuple(gen.stop),
    )
    model_id = cfg.model.model_dump()
    with context.database(db_path) as con:
        texts = get_artifacts(con, [k for p in prompts.values() for k in p.values()])
        keys: dict[str, dict[str, str]] = {}
        flat: list[str] = []
        for query_id, p in prompts.items():
            out_key = artifact_key("teacher_outputs", [p["teachers"]], {"model": model_id, "gen": gen.model_dump()})
            cand_key = artifact_key(
                "candidates", [p["zero_shot"]],
                {"model": model_id, "params": asdict(candidate_params), "n": cfg.method.candidates},
            )
            keys[query_id] = {"teacher_outputs": out_key, "candidates": cand_key}
            flat += texts[p["teachers"]]

        outputs = context.backend(cfg).generate(flat, teacher_params, progress=True) if flat else []
        start = 0
        for query_id, p in prompts.items():
            n = len(texts[p["teachers"]])
            put_artifact(con, keys[query_id]["teacher_outputs"], "teacher_outputs", cfg.backlog, query_id,
                         outputs[start:start + n], private=True, run_id=run_id)
            start += n

        todo = [q for q in prompts if not has_artifact(con, keys[q]["candidates"])]
        zero_shot = [texts[prompts[q]["zero_shot"]] for q in todo for _ in range(cfg.method.candidates)]
        sampled = context.backend(cfg).generate(zero_shot, candidate_params, progress=True) if zero_shot else []
        c = cfg.method.candidates
        for i, query_id in enumerate(todo):
            put_artifact(con, keys[query_id]["candidates"], "candidates", cfg.backlog, query_id,
                         sampled[i * c:(i + 1) * c], private=False, run_id=run_id)
    get_run_logger().info(
        "generated %d teacher outputs; zero-shot candidates for %d queries (%d cached)",
        len(flat), len(todo), len(prompts) - len(todo),
    )
    return keys
