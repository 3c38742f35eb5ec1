"""Adding a method is one module (docs/ARCHITECTURE.md, "Adding a method"): a toy method registered from this test
module, and nowhere else, is planned, charged, drawn and released by the real answer_backlog flow and the real
ledger — and the guard refuses it when what it draws differs from what its plan charged."""

from __future__ import annotations

import json
from typing import Literal

import pytest
import yaml
from pydantic import Field

from dpicl import methods
from dpicl.flows.answer_backlog import answer_backlog
from dpicl.methods.base import EnsembleMethod, EnsembleSettings, GaussianPlan
from dpicl.privacy.accounting.calibration import plan_gaussian
from dpicl.privacy.accounting.events import SubsampledGaussianEvent, event_from_json
from dpicl.privacy.accounting.guard import PrivacyGuardError
from dpicl.storage.db import connect
from dpicl.storage.ledger import budget_summary, ledger_events, stored_releases
from tests.pipeline.conftest import N_QUERIES, PLANNED

pytestmark = pytest.mark.slow  # the flow starts Prefect

NAME = "toy-length"


class ToySettings(EnsembleSettings):
    name: Literal["toy-length"] = NAME
    # decimals of the released share (release-side only)
    decimals: int = Field(2, ge=0, le=6)


class ToyPlan(GaussianPlan):
    def event(self, sampling_rate=None):
        return SubsampledGaussianEvent(self.noise_multiplier, self.sampling_rate if sampling_rate is None
                                       else sampling_rate, sensitivity=1.0, mechanism="toy")


class ToyLength(EnsembleMethod):
    """Releases the noisy share of teachers that answered at all: each teacher adds 0 or 1 to the count and one
    record changes one teacher, so Δ = 1; Gaussian noise calibrated by the accountant like ESA's."""

    name = NAME
    summary = "toy: a noisy share of teachers whose answer is non-empty"
    paper = "none (test)"
    Settings = ToySettings
    Plan = ToyPlan
    inputs = ("teacher_outputs",)
    release_needs = ("zero_shot",)
    plan_details = ("noise_multiplier",)
    draw_scale = 1.0  # the test breaks this to draw less noise than charged

    def calibrate(self, sampling_rate, queries, epsilon, delta):
        return ToyPlan(**plan_gaussian(NAME, 1.0, sampling_rate, queries, epsilon, delta))

    def aggregate(self, cfg, plan, rate, inputs, rng, paid):
        nonempty = sum(1.0 for t in inputs["teacher_outputs"] if t.strip())  # each teacher adds 0 or 1: Δ = 1
        used = plan.model_copy(update={"noise_multiplier": plan.noise_multiplier * self.draw_scale})
        paid(used.event(rate))
        return {"share": (nonempty + rng.normal(0.0, used.noise_multiplier)) / cfg.method.teachers}

    def release(self, cfg, aggregates, public, queries, backend):
        for query_id, result in aggregates.items():
            share = round(result["share"], cfg.method.decimals)
            yield query_id, f"{share} of the teachers answered", {"share": share}


@pytest.fixture
def toy():
    methods.register(ToyLength)
    yield methods.get(NAME)
    methods.unregister(NAME)
    ToyLength.draw_scale = 1.0


def _configure(config: str) -> None:
    raw = yaml.safe_load(open(config))
    raw["method"] = {"name": NAME, "teachers": 4, "shots": 2, "planned_queries": PLANNED, "decimals": 1}
    open(config, "w").write(yaml.safe_dump(raw))


def test_a_method_registered_from_outside_runs_through_the_real_flow(pipeline_env, toy):
    config, db = pipeline_env
    _configure(config)
    result = answer_backlog(config=config, db=db)
    answered = result["answered"]
    # the plan pays for PLANNED queries; the ledger refuses the rest of the backlog
    assert PLANNED <= answered < N_QUERIES and answered + result["refused_budget"] == N_QUERIES
    con = connect(db, read_only=True)
    try:
        releases = stored_releases(con, "tiny-backlog")
        events = [event_from_json(e) for e in ledger_events(con, "tiny")]
        details = [json.loads(d) for (d,) in con.execute("SELECT details FROM releases").fetchall()]
        spent = budget_summary(con, "tiny")["epsilon_spent"]
    finally:
        con.close()
    assert len(releases) == answered and all("of the teachers answered" in r["answer"] for r in releases)
    # one ledger entry per release, priced by the toy plan: Δ = 1 at the run's sampling rate
    assert len(events) == answered and {(e.mechanism, e.sensitivity) for e in events} == {("toy", 1.0)}
    assert all(d["teachers"] == 4 and d["noise_multiplier"] == events[0].noise_multiplier for d in details)
    assert 0 < spent <= 2.0
    assert NAME in methods.names()


def test_the_guard_refuses_a_registered_method_that_draws_less_noise_than_it_paid_for(pipeline_env, toy):
    config, db = pipeline_env
    _configure(config)
    ToyLength.draw_scale = 0.5
    with pytest.raises(PrivacyGuardError):
        answer_backlog(config=config, db=db)
    con = connect(db, read_only=True)
    try:
        assert stored_releases(con, "tiny-backlog") == []  # nothing released
    finally:
        con.close()


def test_an_unregistered_name_is_refused_with_the_known_methods(pipeline_env):
    from dpicl.config import ConfigError, load_config

    config, _ = pipeline_env
    _configure(config)
    with pytest.raises(ConfigError, match="unknown method 'toy-length'; known: esa"):
        load_config(config)
