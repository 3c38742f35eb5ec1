"""KSA with the joint exponential mechanism (paper 001 §3.2.2): k ranked keywords from the words of the public
zero-shot prompt (Δ = 2), then the LLM answers with them as hints."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from dpicl.keywords import keywords
from dpicl.methods import register
from dpicl.methods.base import Plan
from dpicl.methods.keyword_hints import KeywordMethod, KeywordSettings
from dpicl.privacy.mechanisms import joint_em


class KSAJointEMSettings(KeywordSettings):
    """KSA with the joint exponential mechanism: k keywords, ranked, from the public domain of the words of
    the zero-shot prompt."""

    name: Literal["ksa-jem"] = "ksa-jem"
    k: int = Field(10, ge=1)
    """Keywords released per query (at most; ranked, by the joint exponential mechanism) and shown as hints."""
    # None: the task's own query prompt with a "Keywords:" line (`prompts.keyword_prompt`)
    keyword_template: str | None = None
    """The query prompt with keyword hints ({input}: the query, {keywords}: the released keywords, ", "-joined);
    None: the task's own query prompt with a "Keywords:" line before its answer cue."""


class JointEMPlan(Plan):
    """Per-query ε of the joint exponential mechanism, certified by the RDP accountant."""

    sampling_rate: float
    epsilon_em: float
    sensitivity: float
    epsilon_certified: float
    mechanism: str = joint_em.MECHANISM  # the ledger's label of the event

    def event(self, sampling_rate=None):
        return joint_em.cost(self.epsilon_em, self.sampling_rate if sampling_rate is None else sampling_rate,
                             mechanism=self.mechanism)

    def describe(self) -> str:
        return (f"  per-query ε_EM = {self.epsilon_em:.5f} (joint exponential mechanism, utility sensitivity "
                f"{self.sensitivity:g}); the RDP accountant certifies ε = {self.epsilon_certified:.5f}")


def top_keywords(cfg, domain: list[str], teacher_outputs) -> dict:
    """The k most frequent words of `domain` among the teachers' keywords, without noise (ε = ∞ rows only)."""
    counts = joint_em.histogram_on_domain([keywords(t) for t in teacher_outputs], domain)
    return {"keywords": [domain[i] for i in np.argsort(-counts, kind="stable")[:min(cfg.method.k, len(domain))]]}


def select(cfg, plan: JointEMPlan, rate: float, domain: list[str], teacher_outputs, rng, paid) -> dict:
    """k ranked keywords of `domain` by the joint EM on the teachers' keyword histogram (pay, then draw)."""
    counts = joint_em.histogram_on_domain([keywords(t) for t in teacher_outputs], domain)
    paid(plan.event(rate))
    return {"keywords": joint_em.select_keywords(domain, counts, cfg.method.k, plan.epsilon_em, rng)}


@register
class KSAJointEM(KeywordMethod):
    name = "ksa-jem"
    summary = "Keyword Space Aggregation, joint EM: k ranked words of the public prompt, Δ = 2"
    paper = "001: Wu, Panda, Wang, Mittal — Privacy-Preserving In-Context Learning for LLMs (§3.2.2)"
    Settings = KSAJointEMSettings
    Plan = JointEMPlan
    inputs = ("teacher_outputs", "zero_shot")
    plan_details = ("epsilon_em", "sampling_rate")

    def calibrate(self, sampling_rate, queries, epsilon, delta):
        return JointEMPlan(**joint_em.plan(sampling_rate, queries, epsilon, delta))

    def aggregate(self, cfg, plan, rate, inputs, rng, paid):
        domain = keywords(inputs["zero_shot"])  # public: words of the query's zero-shot prompt
        return select(cfg, plan, rate, domain, inputs["teacher_outputs"], rng, paid)

    def nonprivate(self, cfg, inputs, rng):
        return top_keywords(cfg, keywords(inputs["zero_shot"]), inputs["teacher_outputs"])
