"""Paper 004's privacy numbers (MECHANISMS §5, §11.1) and the accounting of an SGA query (DPM event, planning)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate
from typer.testing import CliRunner

from dpicl.cli import app
from dpicl.privacy.accounting.events import (
    SubsampledDPMEvent,
    SubsampledExponentialEvent,
    SubsampledGaussianEvent,
    event_from_json,
)
from dpicl.privacy.accounting.prv import PRVAccountant
from dpicl.privacy.accounting.rdp import RDPAccountant, exponential_rdp, gaussian_rdp, laplace_rdp
from dpicl.privacy.mechanisms import sga

DELTA = 2.56e-4  # 004 Table 4 (= 1/3900)
Q_PAPER = 400 / 3900  # private + public pool: the paper's convention (§12.1 item 7)
Q_PRIVATE = 400 / 2600  # the private pool only: the corrected rate


def _em_epsilon(per_query: float, rate: float) -> float:
    return RDPAccountant().epsilon([SubsampledExponentialEvent(per_query, rate, 2.0)] * 100, DELTA)


@pytest.mark.parametrize("per_query,paper,private", [(0.23, 0.971, 1.542), (0.63, 2.997, 4.796),
                                                     (1.32, 7.970, 11.533)])
def test_ksa_public_reproduces_table_4b_and_the_corrected_rate_costs_more(per_query, paper, private):
    assert _em_epsilon(per_query, Q_PAPER) == pytest.approx(paper, abs=1e-3)
    assert _em_epsilon(per_query, Q_PRIVATE) == pytest.approx(private, abs=1e-3)


def test_sga_em_part_under_the_papers_convention_is_0466():
    assert _em_epsilon(0.12, Q_PAPER) == pytest.approx(0.4660, abs=5e-4)
    assert _em_epsilon(0.12, Q_PRIVATE) == pytest.approx(0.7359, abs=5e-4)


@pytest.mark.slow
@pytest.mark.parametrize("nm,rate,expected", [(5.5115, Q_PAPER, 0.518), (5.5115, Q_PRIVATE, 0.824),
                                              (1.3668, Q_PAPER, 3.269)])
def test_the_codes_per_query_gaussian_budget_composes_to_more_than_claimed(nm, rate, expected):
    """004's code spent ε_GM (0.5, 2.49) on every query: over 100 queries that is more (§5, §12.1 item 8)."""
    events = [SubsampledGaussianEvent(nm, rate, 1.0)] * 100
    assert PRVAccountant().epsilon(events, DELTA) == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize("alpha", [1.5, 2.0, 5.0, 20.0])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_laplace_rdp_matches_the_renyi_divergence_by_numerical_integration(alpha, epsilon):
    b = 1 / epsilon  # Lap(0, b) vs Lap(1, b)

    def integrand(x):  # p^α q^(1−α) in log space
        return np.exp(-(alpha * abs(x) + (1 - alpha) * abs(x - 1)) / b) / (2 * b)

    value = sum(integrate.quad(integrand, lo, hi, limit=200)[0] for lo, hi in [(-60 * b, 0), (0, 1), (1, 60 * b)])
    divergence = math.log(value) / (alpha - 1)
    assert laplace_rdp(epsilon, [alpha])[0] == pytest.approx(min(divergence, epsilon), rel=1e-6)


def test_a_dpm_event_round_trips_and_charges_every_level_twice():
    event = sga.cost(0.2, 0.1, 2.0, levels=3, sampling_rate=0.05)
    assert event_from_json(event.to_json()) == event
    assert sum(event.em_epsilons) == pytest.approx(0.2) and sum(event.count_epsilons) == pytest.approx(0.1)
    assert event.sigma == 4.0 and event.pure_epsilon == pytest.approx(0.6)
    from dpicl.privacy.accounting.rdp import dpm_rdp

    alphas = np.arange(2, 50)
    curve = dpm_rdp(event, alphas)
    # at least the Gaussian part and at least two exponential mechanisms of the largest level
    assert np.all(curve >= gaussian_rdp(2.0, alphas) + 2 * exponential_rdp(max(event.em_epsilons), alphas) - 1e-12)
    once = SubsampledDPMEvent(event.em_epsilons, event.count_epsilons, 2.0, 0.05, nodes_per_level=1)
    assert RDPAccountant().epsilon([event] * 50, 1e-5) > RDPAccountant().epsilon([once] * 50, 1e-5)
    with pytest.raises(ValueError, match="one entry per level"):
        SubsampledDPMEvent((0.1,), (0.1, 0.1), 1.0, 0.1)


@pytest.mark.parametrize("epsilon", [1.0, 3.0, 8.0])
def test_sga_plan_is_certified_tight_and_splits_the_budget_as_documented(epsilon):
    rate, queries, delta = 400 / 9821, 100, 1e-4
    out = sga.plan(rate, queries, epsilon, delta, levels=3)
    event = sga.cost(out["em_epsilon"], out["count_epsilon"], out["noise_multiplier"], 3, rate)
    accountant = RDPAccountant()
    assert out["epsilon_certified"] == pytest.approx(accountant.epsilon([event] * queries, delta))
    assert epsilon * 0.995 <= out["epsilon_certified"] <= epsilon
    # a little less noise no longer fits
    tighter = sga.cost(out["em_epsilon"], out["count_epsilon"], out["noise_multiplier"] * 0.99, 3, rate)
    assert accountant.epsilon([tighter] * queries, delta) > epsilon
    # split choices and counts, in the ratio EM_SHARE : COUNT_SHARE, alone spend their share of ε
    assert out["count_epsilon"] / out["em_epsilon"] == pytest.approx(sga.COUNT_SHARE / sga.EM_SHARE)
    pure_only = SubsampledDPMEvent(event.em_epsilons, event.count_epsilons, 1e9, rate)
    assert accountant.epsilon([pure_only] * queries, delta) == pytest.approx(
        (sga.EM_SHARE + sga.COUNT_SHARE) * epsilon, rel=2e-3)
    # a given em_epsilon is kept and the counts fill the share
    kept = sga.plan(rate, queries, epsilon, delta, levels=3, em_epsilon=out["em_epsilon"] / 2)
    assert kept["em_epsilon"] == out["em_epsilon"] / 2 and kept["count_epsilon"] > out["count_epsilon"]
    assert out["count_scales"] == pytest.approx([1 / e for e in event.count_epsilons])


def test_sga_plan_refuses_parts_that_exceed_the_budget():
    with pytest.raises(ValueError, match="em_epsilon"):
        sga.plan(0.05, 100, 1.0, 1e-5, levels=2, em_epsilon=5.0)
    with pytest.raises(ValueError, match="already exceed"):
        sga.plan(0.05, 100, 1.0, 1e-5, levels=2, em_epsilon=5.0, count_epsilon=0.1)


def test_dpicl_plan_gives_sga_and_ksa_public_parameters():
    runner = CliRunner()
    result = runner.invoke(app, ["plan", "--method", "sga", "--sampling-rate", str(Q_PRIVATE), "--queries", "100",
                                 "--epsilon", "3", "--delta", str(DELTA), "--levels", "4", "--em-epsilon", "0.12",
                                 "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["method"] == "sga" and out["levels"] == 4 and out["em_epsilon"] == 0.12
    assert len(out["em_epsilons"]) == 4 and len(out["count_scales"]) == 4 and out["epsilon_certified"] <= 3
    assert out["sigma"] == pytest.approx(2 * out["noise_multiplier"])
    # ksa-public inverts Table 4(b): the ε of 100 queries at ε_EM = 0.63 gives back 0.63 per query
    result = runner.invoke(app, ["plan", "--method", "ksa-public", "--sampling-rate", str(Q_PAPER), "--queries",
                                 "100", "--epsilon", "2.99747", "--delta", str(DELTA), "--json"])
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["method"] == "ksa-public" and out["epsilon_em"] == pytest.approx(0.63, abs=1e-3)


def test_plans_for_a_million_queries_compose_identical_events_by_count():
    """`dpicl plan --method sga --queries 1000000` hung: each step of the search composed a list of a million
    events. Composed by count (`times`) the bound is the same as the list's, and a million queries plan in seconds."""
    from dpicl.privacy.accounting.auto import total_epsilon
    from dpicl.privacy.accounting.calibration import times
    from dpicl.privacy.mechanisms import joint_em, ksa_ptr, sga

    event = sga.cost(0.05, 0.03, 3.0, 2, 0.03)
    assert total_epsilon(times(event, 40), 1e-4) == pytest.approx(total_epsilon([event] * 40, 1e-4), rel=1e-9)
    for planned in (sga.plan(0.0333, 10**6, 4.0, 1e-4, levels=2), joint_em.plan(0.02, 10**6, 3.0, 5e-5),
                    ksa_ptr.plan(0.02, 10**6, 3.0, 5e-5)):
        assert planned["epsilon_certified"] <= planned["epsilon"] * (1 + 1e-9)
