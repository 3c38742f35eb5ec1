"""SGA (paper 004): DPM private clustering of the private and public teachers' output embeddings; the public
outputs nearest the largest noisy cluster centres are the candidates, and the LLM picks one with a public one-shot
example (`select: llm`), or the first candidate is released as is (`select: top1`)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from dpicl.embeddings.candidates import public_candidates
from dpicl.inference.teachers import greedy_params
from dpicl.methods import register
from dpicl.methods.base import EnsembleMethod, Plan, PublicEnsembleSettings, PublicTexts
from dpicl.privacy.accounting.events import SubsampledDPMEvent
from dpicl.privacy.mechanisms import dpm, sga
from dpicl.prompts import selection_prompt


class SGASettings(PublicEnsembleSettings):
    """SGA (paper 004): DPM private clustering of the private and public teachers' output embeddings; the public
    outputs nearest the k largest (noisy) cluster centres are the candidates, and the LLM picks one with a public
    one-shot example (`select: llm`), or the first candidate is released as is (`select: top1`)."""

    name: Literal["sga"] = "sga"
    levels: int = Field(3, ge=1, le=12)
    """Depth of the DPM clustering tree: at most 2**levels clusters (paper 004 used 4–7 with 200 points)."""
    k: int = Field(3, ge=1)
    """Candidates per query (at most): the distinct public outputs nearest the k largest noisy cluster centres."""
    select: Literal["llm", "top1"] = "llm"
    """How the answer is chosen among the candidates: `llm`, the LLM picks one with a public one-shot example
    (`selection_template`), or `top1`, the candidate of the largest noisy cluster is released as is."""
    # the shares of the budget of em_epsilon and count_epsilon: dpicl.privacy.mechanisms.sga
    em_epsilon: float | None = Field(None, gt=0)
    """Per-query ε of the DPM split choices (summed over the levels); None: calibrated so that it alone would use
    a fixed share of the budget."""
    count_epsilon: float | None = Field(None, gt=0)
    """Per-query ε of the noisy cluster counts (summed over the levels); None: calibrated so that it alone would
    use a fixed share of the budget."""
    selection_template: str = ("{example}\n\nInput:\n{input}\nPick the most accurate output for the input with the "
                               "following suggestions: [{candidates}]\nOutput:")
    """The LLM's selection prompt (`select: llm`): {example} one public demonstration, {input} the query (required),
    {candidates} the public candidates, ",\\n"-joined (required)."""

    @field_validator("selection_template")
    @classmethod
    def _selection_fields(cls, v: str) -> str:
        if "{input}" not in v or "{candidates}" not in v:
            raise ValueError("selection_template must contain {input} and {candidates}")
        return v


class SGAPlan(Plan):
    sampling_rate: float
    levels: int
    em_epsilon: float
    count_epsilon: float
    em_epsilons: tuple[float, ...]
    count_scales: tuple[float, ...]
    noise_multiplier: float
    sensitivity: float
    sigma: float
    epsilon_certified: float

    def event(self, sampling_rate=None):
        return sga.cost(self.em_epsilon, self.count_epsilon, self.noise_multiplier, self.levels,
                        self.sampling_rate if sampling_rate is None else sampling_rate)

    def describe(self) -> str:
        counts = ", ".join(f"{b:.3g}" for b in self.count_scales)
        return (f"  DPM with {self.levels} levels: split choices ε_EM = {self.em_epsilon:.5f} per query "
                f"(per level {', '.join(f'{e:.4g}' for e in self.em_epsilons)}); child counts ε = "
                f"{self.count_epsilon:.5f} (Laplace scales {counts}); leaf sums: noise multiplier "
                f"{self.noise_multiplier:.5f} (σ = {self.sigma:.5f}, sensitivity {self.sensitivity:g}); the RDP "
                f"accountant certifies ε = {self.epsilon_certified:.5f}")


def selection(cfg, query: str, candidates: list[str], example: str) -> str | None:
    """The final selection prompt, or None when the first candidate is released as is."""
    if cfg.method.select == "top1" or len(candidates) == 1:
        return None
    return selection_prompt(cfg.task, cfg.method.selection_template, query, candidates, example)


@register
class SGA(EnsembleMethod):
    name = "sga"
    summary = ("Semantic groups with public candidates: DPM clustering of private + public outputs, the public "
               "outputs nearest the largest noisy clusters")
    paper = "004: Public Data Assisted Differentially Private In-Context Learning"
    Settings = SGASettings
    Plan = SGAPlan
    needs_public = True
    inputs = ("teachers", "public")
    release_needs = ("public", "public_texts", "public_example")
    release_only = frozenset({"k", "select", "selection_template"})
    public_texts = PublicTexts("public_outputs", "public", "public_texts", "public_embeddings")
    options = ("levels", "em_epsilon", "count_epsilon")
    plan_details = ("em_epsilon", "count_epsilon", "noise_multiplier", "levels", "sampling_rate")

    def plan_options(self, settings, facts):
        return {"levels": settings.levels, "em_epsilon": settings.em_epsilon, "count_epsilon": settings.count_epsilon}

    def calibrate(self, sampling_rate, queries, epsilon, delta, levels=SGASettings.model_fields["levels"].default,
                  em_epsilon=None, count_epsilon=None):
        return SGAPlan(**sga.plan(sampling_rate, queries, epsilon, delta, levels=levels, em_epsilon=em_epsilon,
                                  count_epsilon=count_epsilon))

    def aggregate(self, cfg, plan, rate, inputs, rng, paid):
        public = inputs["public"]
        # the event of exactly the per-level parameters handed to DPM
        paid(SubsampledDPMEvent(plan.em_epsilons, tuple(1 / b for b in plan.count_scales),
                                plan.sigma / sga.SENSITIVITY, rate, sensitivity=sga.SENSITIVITY,
                                mechanism=sga.MECHANISM))
        params = dpm.DPMParams(em_epsilons=plan.em_epsilons, count_scales=plan.count_scales, noise_std=plan.sigma,
                               interval=dpm.interval_size(public, rng))
        clusters = dpm.cluster(np.concatenate([inputs["teachers"], public]), params, rng)
        return {"centres": [c.centre.tolist() for c in clusters], "counts": [c.noisy_count for c in clusters]}

    def nonprivate(self, cfg, inputs, rng):
        levels = cfg.method.levels
        params = dpm.DPMParams(em_epsilons=(math.inf,) * levels, count_scales=(0.0,) * levels, noise_std=0.0,
                               interval=dpm.interval_size(inputs["public"], rng))
        clusters = dpm.cluster(np.concatenate([inputs["teachers"], inputs["public"]]), params, rng)
        return {"centres": [c.centre for c in clusters], "counts": [c.noisy_count for c in clusters]}

    def evaluation_variants(self, cfg):
        if cfg.method.select == "top1":  # its own release is the top-1 row: scored once
            return {" top-1": cfg}
        top1 = cfg.model_copy(update={"method": cfg.method.model_copy(update={"select": "top1"})})
        return {" top-1": top1, "": cfg}

    def release(self, cfg, aggregates, public, queries, backend):
        chosen, prompts = {}, {}
        for query_id, result in aggregates.items():
            texts = public[query_id]["public_texts"]
            chosen[query_id] = public_candidates(result["centres"], public[query_id]["public"], texts, cfg.method.k)
            prompt = selection(cfg, queries[query_id], [texts[i] for i in chosen[query_id]],
                               public[query_id]["public_example"])
            if prompt is not None:
                prompts[query_id] = prompt
        answers = backend.generate(list(prompts.values()), greedy_params(cfg), progress=True) if prompts else []
        picked = dict(zip(prompts, answers, strict=True))
        for query_id, result in aggregates.items():
            texts = public[query_id]["public_texts"]
            answer = picked.get(query_id, texts[chosen[query_id][0]])
            yield query_id, answer, {"candidate_indices": chosen[query_id], "clusters": len(result["counts"]),
                                     "llm_selection": query_id in picked}
