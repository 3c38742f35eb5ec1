"""ESA — Embedding Space Aggregation (paper 001 §3.2.1): Gaussian noise on the sum of the teachers' answer
embeddings (Δ = 2), then the public zero-shot candidate nearest the noisy mean is released."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field

from dpicl.embeddings.candidates import nearest_candidate
from dpicl.inference.base import GenerationParams
from dpicl.methods import register
from dpicl.methods.base import (
    EnsembleMethod,
    EnsembleSettings,
    GaussianPlan,
    PublicTexts,
)
from dpicl.privacy.mechanisms import esa


class ESASettings(EnsembleSettings):
    """ESA (paper 001 §3.2.1): teachers' output embeddings → noisy mean → nearest zero-shot candidate."""

    name: Literal["esa"] = "esa"
    candidates: int = Field(8, ge=1)
    """Zero-shot answers sampled per query as candidates (public prompt, no privacy cost); the released answer is
    the candidate nearest the teachers' noisy mean embedding."""
    candidate_temperature: float = Field(1.0, gt=0)
    """Sampling temperature of the zero-shot candidates."""
    candidate_top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus (top-p) sampling threshold of the zero-shot candidates."""
    greedy_candidate: bool = True
    """Add the greedy zero-shot answer as a candidate too, beside the `candidates` sampled ones, so that the noisy
    mean can pick the model's own best guess (sampled answers of a small model often drift off-topic)."""


class ESAPlan(GaussianPlan):
    def event(self, sampling_rate=None):
        return esa.cost(self.noise_multiplier, self.sampling_rate if sampling_rate is None else sampling_rate)


@register
class ESA(EnsembleMethod):
    name = "esa"
    summary = "Embedding Space Aggregation: Gaussian noise on the sum of teacher embeddings, Δ = 2"
    paper = "001: Wu, Panda, Wang, Mittal — Privacy-Preserving In-Context Learning for LLMs (§3.2.1)"
    Settings = ESASettings
    Plan = ESAPlan
    inputs = ("teachers",)
    release_needs = ("candidates", "candidate_texts")
    release_only = frozenset({"candidates", "candidate_temperature", "candidate_top_p", "greedy_candidate"})
    public_texts = PublicTexts("candidates", "candidates", "candidate_texts", "candidate_embeddings")
    samples_candidates = True
    plan_details = ("noise_multiplier", "sampling_rate")

    def calibrate(self, sampling_rate, queries, epsilon, delta):
        return ESAPlan(**esa.plan(sampling_rate, queries, epsilon, delta))

    def candidate_params(self, cfg) -> tuple[GenerationParams, int]:
        """How the public zero-shot candidates are sampled, and how many per query."""
        m = cfg.method
        params = GenerationParams(max_new_tokens=cfg.generation.max_new_tokens, temperature=m.candidate_temperature,
                                  top_p=m.candidate_top_p, stop=tuple(cfg.generation.stop), public_prompts=True,
                                  empty_answers=cfg.generation.empty_answers)
        return params, m.candidates

    def sample_candidates(self, cfg, backend, zero_shot: list[str], progress: bool = False) -> list[list[str]]:
        """Each zero-shot prompt's public candidates: its greedy answer first (`greedy_candidate`), then the
        sampled ones. No private data goes in."""
        params, n = self.candidate_params(cfg)
        sampled = backend.generate([z for z in zero_shot for _ in range(n)], params, progress=progress)
        groups = [sampled[i * n:(i + 1) * n] for i in range(len(zero_shot))]
        if not cfg.method.greedy_candidate:
            return groups
        greedy = backend.generate(zero_shot, replace(params, temperature=0.0, top_p=1.0, seed=None))
        return [[first, *rest] for first, rest in zip(greedy, groups, strict=True)]

    def aggregate(self, cfg, plan, rate, inputs, rng, paid):
        paid(plan.event(rate))
        return esa.noisy_mean(inputs["teachers"], plan.noise_multiplier, rng)

    def nonprivate(self, cfg, inputs, rng):
        return inputs["teachers"].mean(axis=0)

    def release(self, cfg, aggregates, public, queries, backend):
        for query_id, noisy_mean in aggregates.items():
            index = nearest_candidate(noisy_mean, public[query_id]["candidates"])
            yield query_id, public[query_id]["candidate_texts"][index], {
                "candidate_index": int(index), "candidates": len(public[query_id]["candidate_texts"])}
