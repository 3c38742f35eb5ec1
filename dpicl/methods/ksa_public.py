"""KSA with public data (paper 004's baseline): the joint EM over a keyword domain of public text only (the public
teachers' outputs and the query), answered with a public one-shot example."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpicl.keywords import keywords
from dpicl.methods import register
from dpicl.methods.base import PublicEnsembleSettings
from dpicl.methods.keyword_hints import KeywordMethod, KeywordSettings
from dpicl.methods.ksa_jem import JointEMPlan, select, top_keywords
from dpicl.privacy.mechanisms import joint_em

MECHANISM = "ksa_public"


class KSAPublicSettings(KeywordSettings, PublicEnsembleSettings):
    """KSA with public data (paper 004's baseline): the joint EM over a keyword domain taken from public text only
    (the public teachers' outputs and the query), answered with a public one-shot example ({example})."""

    name: Literal["ksa-public"] = "ksa-public"
    k: int = Field(10, ge=1)
    """Keywords released per query (at most; ranked, by the joint exponential mechanism) and shown as hints."""
    # None (`prompts.keyword_prompt`): paper 004's "Output with the following word suggestions …" prompt made
    # SmolLM2 echo the word list (docs/BENCHMARKS.md, "The demo's method")
    keyword_template: str | None = None
    """The query prompt with keyword hints ({example}: the public one-shot example, or with `public_fewshot` the
    few-shot prompt's public demonstrations; {input}: the query; {keywords}: the released keywords, ", "-joined);
    None: the public example, then the task's own query prompt with a "Keywords:" line before its answer cue."""


class KSAPublicPlan(JointEMPlan):
    mechanism: str = MECHANISM


def public_domain(public_outputs: list[str], zero_shot: str) -> list[str]:
    """KSA-public's keyword domain: the distinct words of the public outputs and of the query's public prompt."""
    return list(dict.fromkeys(w for text in [*public_outputs, zero_shot] for w in keywords(text)))


@register
class KSAPublic(KeywordMethod):
    name = "ksa-public"
    summary = "Keyword Space Aggregation with public data: joint EM over words of public outputs, Δ = 2"
    paper = "004: Public Data Assisted Differentially Private In-Context Learning (KSA baseline)"
    Settings = KSAPublicSettings
    Plan = KSAPublicPlan
    needs_public = True
    inputs = ("teacher_outputs", "public_outputs", "zero_shot")
    release_needs = ("zero_shot", "public_example", "public_demos")
    plan_details = ("epsilon_em", "sampling_rate")

    def calibrate(self, sampling_rate, queries, epsilon, delta):
        return KSAPublicPlan(**{**joint_em.plan(sampling_rate, queries, epsilon, delta), "method": self.name})

    def aggregate(self, cfg, plan, rate, inputs, rng, paid):
        domain = public_domain(inputs["public_outputs"], inputs["zero_shot"])
        return select(cfg, plan, rate, domain, inputs["teacher_outputs"], rng, paid)

    def nonprivate(self, cfg, inputs, rng):
        domain = public_domain(inputs["public_outputs"], inputs["zero_shot"])
        return top_keywords(cfg, domain, inputs["teacher_outputs"])
