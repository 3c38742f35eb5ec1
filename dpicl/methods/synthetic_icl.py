"""In-context learning with public demonstrations — typically DP synthetic demonstrations written by
`synthesize_demos`. Post-processing of earlier DP releases: every answer costs nothing (its ledger entry holds a
public-data event)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpicl.methods import register
from dpicl.methods.base import Method, MethodSettings, Plan
from dpicl.privacy.accounting.events import PublicDataEvent


class SyntheticICLSettings(MethodSettings):
    """Plain in-context learning with `shots` demonstrations from a public dataset — typically DP synthetic
    demonstrations written by `synthesize_demos`, or any dataset ingested as public. Post-processing of earlier DP
    releases: answers cost nothing."""

    name: Literal["synthetic-icl"] = "synthetic-icl"
    demos_dataset: str
    """Name of the public dataset whose records are the demonstrations (e.g. one written by `synthesize_demos`);
    required."""
    shots: int = Field(4, ge=1)
    """Demonstrations per prompt."""
    demonstrations: Literal["random", "nearest"] = "random"
    """Which demonstrations a prompt shows: `random`, a draw fixed per query, or `nearest`, the query's most similar
    ones by embedding (`embedding.model`), the nearest last (the free "public 4-shot" answer of `dpicl evaluate`)."""
    # the free "public consensus" of `dpicl evaluate` (docs/BENCHMARKS.md)
    consensus: int | None = Field(None, ge=2)
    """Text tasks: beside the `shots`-shot prompt, this many one-shot prompts (with `nearest`: one of the query's
    `consensus` most similar records each), and the released answer is the one nearest all the others by embedding;
    None: the `shots`-shot answer."""


class PublicPlan(Plan):
    def event(self, sampling_rate=None):
        return PublicDataEvent(self.method)

    def describe(self) -> str:
        return "  every answer uses public data and earlier DP releases only: it costs nothing"


@register
class SyntheticICL(Method):
    name = "synthetic-icl"
    kind = "public"
    summary = "In-context learning with DP synthetic demonstrations (synthesize_demos): post-processing, free"
    paper = "002 and 000 (DPS-MOZO+Off): answering with DP synthetic demonstrations"
    subsamples = False
    Settings = SyntheticICLSettings
    Plan = PublicPlan
    task_types = ("summarization", "generation", "classification")

    def check_config(self, cfg):
        super().check_config(cfg)
        if cfg.method.consensus is not None and cfg.task.type == "classification":
            raise ValueError("method.consensus picks among free-text answers; for a classification task leave it "
                             "out (the answer is the label the few-shot prompt scores highest)")

    def calibrate(self, sampling_rate, queries, epsilon, delta):
        return PublicPlan(method=self.name, queries=queries, epsilon=epsilon, delta=delta)

    def planned_queries(self, settings):
        return 1
