"""Stage 5 — aggregate: pay first, then draw. For each query the method's privacy event is reserved in the
ledger (committed), and only then is the noise drawn; a query the budget cannot pay for is refused and no
noise is drawn. The output of this stage is already differentially private:

* esa: the noisy mean of the teachers' answer embeddings (paper 001 Alg 3, Δ = 2);
* rnm: the noisy-argmax label of the teachers' votes (Alg 2, Δ = √2);
* ksa-jem: k ranked keywords from the words of the public zero-shot prompt (joint EM, Δ = 2);
* ksa-ptr: the certified top keyword set, or None when the PTR test fails (App A.3.2);
* sga: the noisy centres and counts of DPM's clusters over the private and public outputs' embeddings (004);
* ksa-public: k ranked keywords from the words of public text only (the public outputs and the query; 004).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from prefect import get_run_logger, task

from dpicl.config import Config
from dpicl.keywords import keywords
from dpicl.privacy.mechanisms import dpm, esa, joint_em, ksa_ptr, rnm
from dpicl.storage import set_query_status
from dpicl.storage.artifacts import artifact_key, get_artifacts, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE, rng_for


def _esa(cfg: Config, plan: dict, inputs: dict[str, Any], rng) -> Any:
    return esa.noisy_mean(inputs["teachers"], plan["noise_multiplier"], rng)


def _rnm(cfg: Config, plan: dict, inputs: dict[str, Any], rng) -> Any:
    return {"label": rnm.run(inputs["teacher_votes"], len(cfg.task.labels), plan["noise_multiplier"], rng)}


def _ksa_jem(cfg: Config, plan: dict, inputs: dict[str, Any], rng) -> Any:
    domain = keywords(inputs["zero_shot"])  # public: words of the query's zero-shot prompt
    counts = joint_em.histogram_on_domain([keywords(t) for t in inputs["teacher_outputs"]], domain)
    return {"keywords": joint_em.select_keywords(domain, counts, cfg.method.k, plan["epsilon_em"], rng)}


def _ksa_ptr(cfg: Config, plan: dict, inputs: dict[str, Any], rng) -> Any:
    tokens, counts = ksa_ptr.histogram([keywords(t) for t in inputs["teacher_outputs"]])
    chosen = ksa_ptr.release_set(tokens, counts, plan["epsilon_em"], plan["noise_multiplier"], plan["delta0"], rng,
                                 k_max=cfg.method.k_max)
    return {"keywords": chosen}


def _sga(cfg: Config, plan: dict, inputs: dict[str, Any], rng) -> Any:
    public = inputs["public"]
    params = dpm.DPMParams(em_epsilons=tuple(plan["em_epsilons"]), count_scales=tuple(plan["count_scales"]),
                           noise_std=plan["sigma"], interval=dpm.interval_size(public, rng))
    clusters = dpm.cluster(np.concatenate([inputs["teachers"], public]), params, rng)
    return {"centres": [c.centre.tolist() for c in clusters], "counts": [c.noisy_count for c in clusters]}


def public_domain(public_outputs: list[str], zero_shot: str) -> list[str]:
    """KSA-public's keyword domain: the distinct words of the public outputs and of the query's public prompt."""
    return list(dict.fromkeys(w for text in [*public_outputs, zero_shot] for w in keywords(text)))


def _ksa_public(cfg: Config, plan: dict, inputs: dict[str, Any], rng) -> Any:
    domain = public_domain(inputs["public_outputs"], inputs["zero_shot"])
    counts = joint_em.histogram_on_domain([keywords(t) for t in inputs["teacher_outputs"]], domain)
    return {"keywords": joint_em.select_keywords(domain, counts, cfg.method.k, plan["epsilon_em"], rng)}


# method -> (its inputs among the stage keys, the DP aggregate of one query)
AGGREGATORS: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    "esa": (("teachers",), _esa),
    "rnm": (("teacher_votes",), _rnm),
    "ksa-jem": (("teacher_outputs", "zero_shot"), _ksa_jem),
    "ksa-ptr": (("teacher_outputs",), _ksa_ptr),
    "sga": (("teachers", "public"), _sga),
    "ksa-public": (("teacher_outputs", "public_outputs", "zero_shot"), _ksa_public),
}


@task(name="aggregate", **STAGE)
def aggregate(
    config_path: str, db_path: str, run_id: str, features: dict[str, dict[str, str]], plan: dict, event_json: str,
) -> dict[str, dict]:
    """Returns {query id: {"aggregate": key, "entry_id", "epsilon_before", "epsilon_after"}} for paid queries."""
    cfg = context.config(config_path)
    method = cfg.method.name
    needed, noisy_aggregate = AGGREGATORS[method]
    out: dict[str, dict] = {}
    refused: list[str] = []
    with context.database(db_path) as con:
        payloads = get_artifacts(con, [keys[name] for keys in features.values() for name in needed])
        for query_id, keys in features.items():
            reservation = context.reserve(con, cfg, run_id, query_id, method, event_json)
            if reservation is None:
                refused.append(query_id)
                continue
            inputs = {name: payloads[keys[name]] for name in needed}
            result = noisy_aggregate(cfg, plan, inputs, rng_for(cfg, run_id, "noise", query_id))
            key = put_artifact(
                con, artifact_key("aggregate", [keys[n] for n in needed], {"entry_id": reservation.entry_id}),
                "aggregate", cfg.backlog, query_id, result, private=True, run_id=run_id,
            )
            out[query_id] = {
                "aggregate": key,
                "entry_id": reservation.entry_id,
                "epsilon_before": reservation.epsilon_before,
                "epsilon_after": reservation.epsilon_after,
            }
        set_query_status(con, cfg.backlog, refused, "refused_budget")
    get_run_logger().info("aggregated %d queries; %d refused (budget cannot pay)", len(out), len(refused))
    return out
