"""RNM-Gaussian (paper 001 §3.1): Gaussian noise on the teachers' label-vote histogram (Δ = √2), then the noisy
argmax label is released."""

from __future__ import annotations

from typing import Literal

import numpy as np

from dpicl.methods import register
from dpicl.methods.base import EnsembleMethod, EnsembleSettings, GaussianPlan
from dpicl.privacy.mechanisms import rnm


class RNMSettings(EnsembleSettings):
    """RNM-Gaussian (paper 001 §3.1): the teachers' label votes → Gaussian noise → argmax."""

    name: Literal["rnm"] = "rnm"


class RNMPlan(GaussianPlan):
    def event(self, sampling_rate=None):
        return rnm.cost(self.noise_multiplier, self.sampling_rate if sampling_rate is None else sampling_rate)


@register
class RNM(EnsembleMethod):
    name = "rnm"
    summary = "Report-Noisy-Max voting: Gaussian noise on the teachers' label-vote histogram, Δ = √2"
    paper = "001: Wu, Panda, Wang, Mittal — Privacy-Preserving In-Context Learning for LLMs (§3.1)"
    Settings = RNMSettings
    Plan = RNMPlan
    task_types = ("classification",)
    inputs = ("teacher_votes",)
    plan_details = ("noise_multiplier", "sampling_rate")

    def calibrate(self, sampling_rate, queries, epsilon, delta):
        return RNMPlan(**rnm.plan(sampling_rate, queries, epsilon, delta))

    def aggregate(self, cfg, plan, rate, inputs, rng, paid):
        paid(plan.event(rate))
        return {"label": rnm.run(inputs["teacher_votes"], len(cfg.task.labels), plan.noise_multiplier, rng)}

    def nonprivate(self, cfg, inputs, rng):
        votes = np.asarray(inputs["teacher_votes"])
        return {"label": int(np.argmax(np.bincount(votes, minlength=len(cfg.task.labels))))}

    def release(self, cfg, aggregates, public, queries, backend):
        for query_id, result in aggregates.items():
            yield query_id, cfg.task.labels[result["label"]], {"label_index": result["label"]}
