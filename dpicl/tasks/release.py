"""Stage 6/7 — release: turn each paid DP aggregate into an answer using public data only, and store the
release with its ledger entry, atomically.

* esa: the zero-shot candidate nearest the noisy mean (FAISS);
* rnm: the name of the noisy-argmax label;
* ksa-*: the LLM answers the public query with the DP keywords as hints (the reconstruction prompt; ksa-public
  with a public one-shot example); when KSA-PTR's test failed, the zero-shot answer — either way
  post-processing of DP outputs and public text;
* sga: the public outputs nearest the largest noisy cluster centres are the candidates; the LLM picks one with a
  public one-shot example (`select: llm`), or the first is released (`select: top1`, or only one candidate).
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task

from dpicl.config import Config
from dpicl.embeddings.candidates import nearest_candidate, public_candidates
from dpicl.prompts import keyword_prompt, selection_prompt
from dpicl.storage import get_queries
from dpicl.storage.artifacts import get_artifacts
from dpicl.storage.ledger import Reservation, record_release
from dpicl.tasks import context
from dpicl.tasks.common import STAGE
from dpicl.tasks.infer import greedy_params

# the per-query parameters worth keeping with each release, per method
PLAN_DETAILS = {
    "esa": ("noise_multiplier", "sampling_rate"),
    "rnm": ("noise_multiplier", "sampling_rate"),
    "ksa-jem": ("epsilon_em", "sampling_rate"),
    "ksa-ptr": ("epsilon_em", "noise_multiplier", "delta0", "sampling_rate"),
    "sga": ("em_epsilon", "count_epsilon", "noise_multiplier", "levels", "sampling_rate"),
    "ksa-public": ("epsilon_em", "sampling_rate"),
}


def _esa_answers(con, cfg: Config, aggregates: dict[str, Any], features: dict[str, dict[str, str]]):
    public = get_artifacts(con, [features[q][k] for q in aggregates for k in ("candidates", "candidate_texts")])
    for query_id, noisy_mean in aggregates.items():
        keys = features[query_id]
        index = nearest_candidate(noisy_mean, public[keys["candidates"]])
        yield query_id, public[keys["candidate_texts"]][index], {"candidate_index": int(index),
                                                                 "candidates": cfg.method.candidates}


def _rnm_answers(con, cfg: Config, aggregates: dict[str, Any], features: dict[str, dict[str, str]]):
    for query_id, result in aggregates.items():
        yield query_id, cfg.task.labels[result["label"]], {"label_index": result["label"]}


def _ksa_answers(con, cfg: Config, aggregates: dict[str, Any], features: dict[str, dict[str, str]]):
    queries = get_queries(con, cfg.backlog, list(aggregates))
    public = get_artifacts(con, [features[q][k] for q in aggregates for k in ("zero_shot", "public_example")
                                 if k in features[q]])
    prompts = [
        public[features[q]["zero_shot"]] if result["keywords"] is None
        else keyword_prompt(cfg.task, cfg.method.keyword_template, queries[q].input, result["keywords"],
                            example=public.get(features[q].get("public_example"), ""))
        for q, result in aggregates.items()
    ]
    answers = context.backend(cfg).generate(prompts, greedy_params(cfg), progress=True) if prompts else []
    for (query_id, result), answer in zip(aggregates.items(), answers, strict=True):
        yield query_id, answer, {"keywords": result["keywords"]}


def sga_prompt(cfg: Config, query: str, candidates: list[str], example: str) -> str | None:
    """The final selection prompt, or None when the first candidate is released as is."""
    if cfg.method.select == "top1" or len(candidates) == 1:
        return None
    return selection_prompt(cfg.task, cfg.method.selection_template, query, candidates, example)


def _sga_answers(con, cfg: Config, aggregates: dict[str, Any], features: dict[str, dict[str, str]]):
    queries = get_queries(con, cfg.backlog, list(aggregates))
    public = get_artifacts(con, [features[q][k] for q in aggregates for k in ("public", "public_texts",
                                                                               "public_example")])
    chosen, prompts = {}, {}
    for query_id, result in aggregates.items():
        keys = features[query_id]
        texts = public[keys["public_texts"]]
        chosen[query_id] = public_candidates(result["centres"], public[keys["public"]], texts, cfg.method.k)
        prompt = sga_prompt(cfg, queries[query_id].input, [texts[i] for i in chosen[query_id]],
                             public[keys["public_example"]])
        if prompt is not None:
            prompts[query_id] = prompt
    answers = context.backend(cfg).generate(list(prompts.values()), greedy_params(cfg), progress=True) \
        if prompts else []
    picked = dict(zip(prompts, answers, strict=True))
    for query_id, result in aggregates.items():
        texts = public[features[query_id]["public_texts"]]
        answer = picked.get(query_id, texts[chosen[query_id][0]])
        yield query_id, answer, {"candidate_indices": chosen[query_id], "clusters": len(result["counts"]),
                                 "llm_selection": query_id in picked}


ANSWERS = {"esa": _esa_answers, "rnm": _rnm_answers, "ksa-jem": _ksa_answers, "ksa-ptr": _ksa_answers,
           "sga": _sga_answers, "ksa-public": _ksa_answers}


@task(name="release", **STAGE)
def release(db_path: str, run_id: str, aggregates: dict[str, dict], features: dict[str, dict[str, str]]) -> list[dict]:
    """Returns one row per released query: query id, status and ε cost (no text)."""
    run = context.run_at(db_path, run_id)
    cfg, method = run.cfg, run.cfg.method.name
    shared = {"teachers": cfg.method.teachers, **{k: run.plan[k] for k in PLAN_DETAILS[method]}}
    rows = []
    with context.database(db_path) as con:
        results = get_artifacts(con, [a["aggregate"] for a in aggregates.values()])
        dp_outputs = {q: results[a["aggregate"]] for q, a in aggregates.items()}
        for query_id, answer, details in ANSWERS[method](con, cfg, dp_outputs, features):
            agg = aggregates[query_id]
            reservation = Reservation(
                agg["entry_id"], cfg.private_dataset, cfg.backlog, query_id, agg["epsilon_before"], agg["epsilon_after"]
            )
            record_release(con, reservation, run_id=run_id, mechanism=method, answer=answer,
                           details={**details, **shared})
            rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
    get_run_logger().info("released %d answers", len(rows))
    return rows
