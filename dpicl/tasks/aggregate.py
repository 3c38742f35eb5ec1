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

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from prefect import get_run_logger, task

from dpicl import planning
from dpicl.config import Config
from dpicl.keywords import keywords
from dpicl.privacy.accounting.events import SubsampledDPMEvent, event_from_json
from dpicl.privacy.accounting.guard import PrivacyGuardError, require_paid
from dpicl.privacy.mechanisms import dpm, esa, joint_em, ksa_ptr, rnm, sga
from dpicl.privacy.rng import make_rng
from dpicl.storage import set_query_status
from dpicl.storage.artifacts import artifact_key, get_artifacts, put_artifact
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


# Each aggregator takes the plan numbers it passes to its mechanism, hands the event of exactly those numbers to
# `paid` (which raises unless the ledger reserved that event: privacy invariant 9), and only then draws. `rate` is
# the sampling rate the charge may assume for this query's subsample (1 when a rerun reuses one).

def _esa(cfg: Config, plan: dict, rate: float, inputs: dict[str, Any], rng, paid) -> Any:
    nm = plan["noise_multiplier"]
    paid(esa.cost(nm, rate))
    return esa.noisy_mean(inputs["teachers"], nm, rng)


def _rnm(cfg: Config, plan: dict, rate: float, inputs: dict[str, Any], rng, paid) -> Any:
    nm = plan["noise_multiplier"]
    paid(rnm.cost(nm, rate))
    return {"label": rnm.run(inputs["teacher_votes"], len(cfg.task.labels), nm, rng)}


def _ksa_jem(cfg: Config, plan: dict, rate: float, inputs: dict[str, Any], rng, paid) -> Any:
    domain = keywords(inputs["zero_shot"])  # public: words of the query's zero-shot prompt
    counts = joint_em.histogram_on_domain([keywords(t) for t in inputs["teacher_outputs"]], domain)
    epsilon_em = plan["epsilon_em"]
    paid(joint_em.cost(epsilon_em, rate))
    return {"keywords": joint_em.select_keywords(domain, counts, cfg.method.k, epsilon_em, rng)}


def _ksa_ptr(cfg: Config, plan: dict, rate: float, inputs: dict[str, Any], rng, paid) -> Any:
    tokens, counts = ksa_ptr.histogram([keywords(t) for t in inputs["teacher_outputs"]])
    epsilon_em, nm, delta0 = plan["epsilon_em"], plan["noise_multiplier"], plan["delta0"]
    paid(ksa_ptr.cost(epsilon_em, nm, delta0, rate))
    return {"keywords": ksa_ptr.release_set(tokens, counts, epsilon_em, nm, delta0, rng, k_max=cfg.method.k_max)}


def _sga(cfg: Config, plan: dict, rate: float, inputs: dict[str, Any], rng, paid) -> Any:
    public = inputs["public"]
    em_epsilons, count_scales, sigma = tuple(plan["em_epsilons"]), tuple(plan["count_scales"]), plan["sigma"]
    paid(SubsampledDPMEvent(em_epsilons, tuple(1 / b for b in count_scales), sigma / sga.SENSITIVITY, rate,
                            sensitivity=sga.SENSITIVITY, mechanism=sga.MECHANISM))
    params = dpm.DPMParams(em_epsilons=em_epsilons, count_scales=count_scales, noise_std=sigma,
                           interval=dpm.interval_size(public, rng))
    clusters = dpm.cluster(np.concatenate([inputs["teachers"], public]), params, rng)
    return {"centres": [c.centre.tolist() for c in clusters], "counts": [c.noisy_count for c in clusters]}


def public_domain(public_outputs: list[str], zero_shot: str) -> list[str]:
    """KSA-public's keyword domain: the distinct words of the public outputs and of the query's public prompt."""
    return list(dict.fromkeys(w for text in [*public_outputs, zero_shot] for w in keywords(text)))


def _ksa_public(cfg: Config, plan: dict, rate: float, inputs: dict[str, Any], rng, paid) -> Any:
    domain = public_domain(inputs["public_outputs"], inputs["zero_shot"])
    counts = joint_em.histogram_on_domain([keywords(t) for t in inputs["teacher_outputs"]], domain)
    epsilon_em = plan["epsilon_em"]
    paid(joint_em.cost(epsilon_em, rate, mechanism="ksa_public"))
    return {"keywords": joint_em.select_keywords(domain, counts, cfg.method.k, epsilon_em, rng)}


# method -> (its inputs among the stage keys, the DP aggregate of one query)
AGGREGATORS: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    "esa": (("teachers",), _esa),
    "rnm": (("teacher_votes",), _rnm),
    "ksa-jem": (("teacher_outputs", "zero_shot"), _ksa_jem),
    "ksa-ptr": (("teacher_outputs",), _ksa_ptr),
    "sga": (("teachers", "public"), _sga),
    "ksa-public": (("teacher_outputs", "public_outputs", "zero_shot"), _ksa_public),
}


def aggregate_as_planned(cfg: Config, plan: dict, inputs: dict[str, Any], rng) -> Any:
    """One DP aggregate outside the ledger (evaluation and benchmarks, which release nothing), checked against
    the event of its own plan as the pipeline checks it against the reservation."""
    planned = planning.METHODS[cfg.method.name].event(plan)
    return AGGREGATORS[cfg.method.name][1](cfg, plan, plan["sampling_rate"], inputs, rng,
                                           lambda used: require_paid(planned, used))


def unamplified(event_json: str) -> str:
    """The same mechanism charged without amplification by subsampling (rate 1): what a draw on a subsample that a
    release already used pays (dpicl/tasks/rerun.py)."""
    event = event_from_json(event_json)
    if not hasattr(event, "sampling_rate"):
        raise PrivacyGuardError(f"a ledger event of kind {event.kind!r} has no sampling rate; a draw on a reused "
                                "subsample cannot be charged soundly")
    return dataclasses.replace(event, sampling_rate=1.0).to_json()


@task(name="aggregate", **STAGE)
def aggregate(db_path: str, run_id: str, features: dict[str, dict[str, str]], reused: bool = False
              ) -> dict[str, dict]:
    """Returns {query id: {"aggregate": key, "entry_id", "epsilon_before", "epsilon_after"}} for paid queries.
    The plan and its event are the run's stored ones; `reused`: the subsamples were used by earlier releases."""
    out: dict[str, dict] = {}
    refused: list[str] = []
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, method = run.cfg, run.cfg.method.name
        needed, noisy_aggregate = AGGREGATORS[method]
        event_json = unamplified(run.event_json) if reused else run.event_json
        rate = 1.0 if reused else run.plan["sampling_rate"]
        payloads = get_artifacts(con, [keys[name] for keys in features.values() for name in needed])
        for query_id, keys in features.items():
            reservation = context.reserve(con, cfg, run_id, query_id, method, event_json)
            if reservation is None:
                refused.append(query_id)
                continue
            inputs = {name: payloads[keys[name]] for name in needed}

            def paid(used, query_id=query_id):
                require_paid(event_json, used, what=f"query {query_id!r}")

            result = noisy_aggregate(cfg, run.plan, rate, inputs, make_rng(), paid)
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
