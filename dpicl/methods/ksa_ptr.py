"""KSA-PTR (paper 001 App A.3.2): FindBestK + propose-test-release of the top keyword set (unranked); when the test
fails the zero-shot answer is released (still charged)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field
from scipy.special import ndtr

from dpicl.keywords import keywords
from dpicl.methods import register
from dpicl.methods.base import Plan
from dpicl.methods.keyword_hints import KeywordMethod, KeywordSettings
from dpicl.privacy.mechanisms import ksa_ptr


class KSAPTRSettings(KeywordSettings):
    """KSA-PTR (paper 001 App A.3.2): FindBestK + propose-test-release of the top keyword set (unranked); when
    the test fails the zero-shot answer is released (still charged)."""

    name: Literal["ksa-ptr"] = "ksa-ptr"
    k_max: int = Field(30, ge=1)
    """Largest keyword set FindBestK may choose: a released set holds at most this many keywords."""
    # δ0 = share·δ/(q·T) per query
    delta0_fraction: float = Field(0.5, gt=0, lt=1)
    """Share of the budget's δ reserved for failures of the propose-test-release test over all planned queries."""
    em_epsilon: float | None = Field(None, gt=0)
    """Per-query ε of FindBestK (the choice of the keyword set's size); None: calibrated so that FindBestK alone
    would use half the budget."""
    # None: the task's own query prompt with a "Keywords:" line (`prompts.keyword_prompt`)
    keyword_template: str | None = None
    """The query prompt with keyword hints ({input}: the query, {keywords}: the released keywords, ", "-joined);
    None: the task's own query prompt with a "Keywords:" line before its answer cue."""


class PTRPlan(Plan):
    sampling_rate: float
    epsilon_em: float
    noise_multiplier: float
    sensitivity: float
    sigma: float
    delta0: float
    delta0_fraction: float
    failure_delta: float
    offset: float
    epsilon_certified: float

    def event(self, sampling_rate=None):
        return ksa_ptr.cost(self.epsilon_em, self.noise_multiplier, self.delta0,
                            self.sampling_rate if sampling_rate is None else sampling_rate)

    def describe(self) -> str:
        return (f"  FindBestK ε_EM = {self.epsilon_em:.5f}; PTR noise multiplier {self.noise_multiplier:.5f} "
                f"(σ = {self.sigma:.5f}, sensitivity {self.sensitivity:g}); δ0 = {self.delta0:.4g} per query "
                f"(failures take {self.failure_delta:.3g} of δ), offset {self.offset:.3f}; the RDP accountant "
                f"certifies ε = {self.epsilon_certified:.5f}. The test passes at most half the time unless the "
                f"proposed set's count gap exceeds {self.passing_gap:.1f} teachers, so it needs more teachers than "
                "that (otherwise the zero-shot answer is released, still charged)")

    @property
    def passing_gap(self) -> float:
        """The count gap at which the PTR test passes with probability 1/2 (a gap is at most the teachers' number)."""
        return ksa_ptr.STABLE_GAP + self.offset

    def pass_probability(self, gap: float) -> float:
        """The probability that the PTR test passes for a set whose boundary gap is `gap` counts."""
        return float(ndtr((max(ksa_ptr.STABLE_GAP, gap) - self.passing_gap) / self.sigma))


@register
class KSAPTR(KeywordMethod):
    name = "ksa-ptr"
    summary = "Keyword Space Aggregation, FindBestK + propose-test-release: the certified top word set"
    paper = "001: Wu, Panda, Wang, Mittal — Privacy-Preserving In-Context Learning for LLMs (App. A.3.2)"
    Settings = KSAPTRSettings
    Plan = PTRPlan
    inputs = ("teacher_outputs",)
    options = ("delta0_fraction", "em_epsilon")
    plan_details = ("epsilon_em", "noise_multiplier", "delta0", "sampling_rate")

    def warnings(self, settings, plan):
        # a count gap is at most the teachers' number (every teacher names a word, no teacher names the next)
        if settings.teachers >= plan.passing_gap:  # the best case passes at least half the time
            return super().warnings(settings, plan)
        best = plan.pass_probability(settings.teachers)
        needed = math.ceil(plan.passing_gap + plan.sigma)  # more teachers raise q and the gap needed a little
        rate = f"at most {best:.1%}" if best >= 0.001 else "less than 0.1%"
        return super().warnings(settings, plan) + [
            f"with {settings.teachers} teachers KSA-PTR's test passes {rate} of the time at this budget: a keyword "
            "set's count gap is at most the number of teachers, and the test needs a gap of "
            f"{plan.passing_gap:.1f} to pass half the time; the other answers are the zero-shot ones, still "
            f"charged. Use at least {needed} teachers, or method ksa-jem"]

    def plan_options(self, settings, facts):
        return {"delta0_fraction": settings.delta0_fraction, "em_epsilon": settings.em_epsilon}

    def calibrate(self, sampling_rate, queries, epsilon, delta, delta0_fraction=0.5, em_epsilon=None):
        return PTRPlan(**ksa_ptr.plan(sampling_rate, queries, epsilon, delta, delta0_fraction=delta0_fraction,
                                      em_epsilon=em_epsilon))

    def aggregate(self, cfg, plan, rate, inputs, rng, paid):
        tokens, counts = ksa_ptr.histogram([keywords(t) for t in inputs["teacher_outputs"]])
        paid(plan.event(rate))
        return {"keywords": ksa_ptr.release_set(tokens, counts, plan.epsilon_em, plan.noise_multiplier, plan.delta0,
                                                rng, k_max=cfg.method.k_max)}

    def nonprivate(self, cfg, inputs, rng):
        tokens, counts = ksa_ptr.histogram([keywords(t) for t in inputs["teacher_outputs"]])
        if len(tokens) == 0:
            return {"keywords": None}
        return {"keywords": list(tokens[:int(np.argmax(ksa_ptr.gaps(counts, cfg.method.k_max))) + 1])}

    def pass_rate(self, aggregates):
        return sum(a["keywords"] is not None for a in aggregates) / len(aggregates) if aggregates else None
