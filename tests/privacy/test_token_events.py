"""Accounting of the token-level methods' events: composed charges, amplified pure DP (002), fixed-order RDP
bounds (003), public-data releases, and the refusal to compose different neighbouring relations (000)."""

import math

import pytest

from dpicl.privacy.accounting import PRVAccountant, RDPAccountant, total_epsilon
from dpicl.privacy.accounting.events import (
    ComposedEvent,
    DPSMozoEvent,
    FixedOrderRDPEvent,
    PublicDataEvent,
    SubsampledExponentialEvent,
    SubsampledGaussianEvent,
    SubsampledPureDPEvent,
    UnsupportedEventError,
    event_from_json,
)
from dpicl.privacy.accounting.rdp import bbghs_epsilon

GAUSS = SubsampledGaussianEvent(0.8, 0.01, 2.0, "esa")


@pytest.mark.parametrize("event", [
    ComposedEvent(GAUSS, 7),
    SubsampledPureDPEvent(2.5, 0.002, 0.1, "dp_fewshot"),
    DPSMozoEvent(0.18, 8, 4 / 14732, 50),
    FixedOrderRDPEvent(18, 0.01, "adapmixed"),
    PublicDataEvent("synthetic-icl"),
])
def test_round_trip(event):
    back = event_from_json(event.to_json())
    assert back == event and hash(back) == hash(event)


@pytest.mark.parametrize("accountant", [PRVAccountant(), RDPAccountant()])
def test_composed_event_costs_its_copies(accountant):
    assert accountant.epsilon([ComposedEvent(GAUSS, 40), GAUSS], 1e-5) == accountant.epsilon([GAUSS] * 41, 1e-5)
    assert accountant.epsilon([ComposedEvent(GAUSS, 40)], 1e-5) > accountant.epsilon([GAUSS] * 20, 1e-5)


def test_pure_dp_reproduces_002_rnm_exp():
    """002 RNM-Exp on DBPedia (MECHANISMS §11.1): amplified per-step ε̄ and the PRV composition over 100 steps."""
    q, delta = 80 / 40000, 1 / 40000
    for eps0, amplified, total in [(2.73, 0.02826, 0.981), (3.34, 0.05301, 1.983), (3.95, 0.09701, 3.951),
                                   (4.57, 0.17487, 7.946)]:
        event = SubsampledPureDPEvent(eps0, q, 1 / 40)
        assert event.amplified_epsilon == pytest.approx(amplified, abs=5e-5)
        ours = PRVAccountant().epsilon([ComposedEvent(event, 100)], delta)  # upper bound, a little above eps_est
        assert total - 0.01 <= ours <= total + 0.02


def test_pure_dp_is_not_cheaper_than_the_em_bound_under_rdp():
    pure, em = SubsampledPureDPEvent(1.0, 0.01, 1.0), SubsampledExponentialEvent(1.0, 0.01, 1.0)
    assert RDPAccountant().epsilon([pure] * 50, 1e-5) == RDPAccountant().epsilon([em] * 50, 1e-5)


def test_fixed_order_event_is_converted_at_orders_up_to_alpha_only():
    delta, alpha, rdp = 1e-5, 18, 0.05
    ours = RDPAccountant().epsilon([FixedOrderRDPEvent(alpha, rdp)] * 10, delta)
    assert ours == pytest.approx(bbghs_epsilon([10 * rdp] * (alpha - 1), range(2, alpha + 1), delta))
    # at α itself: 0.5 + conversion term 0.45005 (003 Table 2b's term); lower orders can only help
    assert ours <= 10 * rdp + 0.45006
    # a larger α would have allowed a smaller ε; the accountant must not use orders it was not given
    assert ours > bbghs_epsilon([10 * rdp] * 198, range(2, 200), delta)


def test_public_data_releases_cost_nothing():
    free = PublicDataEvent("synthetic-icl")
    assert total_epsilon([free] * 5, 1e-5) == 0.0
    assert total_epsilon([free, GAUSS], 1e-5) == total_epsilon([GAUSS], 1e-5)
    assert RDPAccountant().epsilon([free, FixedOrderRDPEvent(18, 0.1)], 1e-5) == \
        RDPAccountant().epsilon([FixedOrderRDPEvent(18, 0.1)], 1e-5)


def test_relations_are_never_composed():
    mozo = DPSMozoEvent(0.18, 8, 4 / 14732, 50)
    assert math.isfinite(total_epsilon([mozo, PublicDataEvent()], 1 / 14732))
    for other in (GAUSS, ComposedEvent(GAUSS, 3), FixedOrderRDPEvent(8, 0.1)):
        with pytest.raises(UnsupportedEventError, match="neighbouring relations"):
            total_epsilon([mozo, other], 1e-5)


def test_dps_mozo_tokens_multiply_the_per_token_cost():
    one = DPSMozoEvent(0.1, 8, 0.001, 1)
    assert RDPAccountant().epsilon([DPSMozoEvent(0.1, 8, 0.001, 30)], 1e-5) == \
        RDPAccountant().epsilon([one] * 30, 1e-5)


@pytest.mark.parametrize("bad", [
    lambda: ComposedEvent(GAUSS, 0),
    lambda: ComposedEvent(ComposedEvent(GAUSS, 2), 2),
    lambda: DPSMozoEvent(0.1, 1, 0.01, 5),
    lambda: DPSMozoEvent(0.1, 8, 0.01, 0),
    lambda: FixedOrderRDPEvent(18.5, 0.1),
    lambda: SubsampledPureDPEvent(1.0, 1.5, 1.0),
])
def test_invalid_events(bad):
    with pytest.raises(ValueError):
        bad()


def test_a_prv_failure_falls_back_to_the_rdp_bound():
    """prv-accountant 0.2.0 raises "Discrete mean differs…" for pure-DP steps with ε̄ just above 0.1; the ledger
    must still answer with a sound bound, not crash."""
    events = [ComposedEvent(SubsampledPureDPEvent(4.1, 0.002, 0.1), 100)]
    with pytest.raises(RuntimeError):
        PRVAccountant().epsilon(events, 1 / 40000)
    assert total_epsilon(events, 1 / 40000) == RDPAccountant().epsilon(events, 1 / 40000)


def test_the_ledger_takes_the_smaller_sound_bound():
    """Pure-DP steps: RDP amplification of the ε0-DP curve beats composing ε̄-randomized response (002's PRV
    accounting, about twice as large here); Gaussians: PRV is the tighter."""
    pure = [ComposedEvent(SubsampledPureDPEvent(3.95, 0.002, 0.1), 100)]
    assert total_epsilon(pure, 1 / 40000) == RDPAccountant().epsilon(pure, 1 / 40000)
    assert total_epsilon(pure, 1 / 40000) < 0.6 * PRVAccountant().epsilon(pure, 1 / 40000)
    gauss = [ComposedEvent(GAUSS, 100)]
    assert total_epsilon(gauss, 1e-5) == PRVAccountant().epsilon(gauss, 1e-5) < RDPAccountant().epsilon(gauss, 1e-5)


@pytest.mark.parametrize("call", [
    lambda secret: __import__("dpicl.privacy.mechanisms.adapmixed", fromlist=["x"]).plan(
        10, 5, 1.0, 1e-5, members=[secret]),
    lambda secret: __import__("dpicl.privacy.mechanisms.dps_mozo", fromlist=["x"]).plan(secret, 4, 10, 5, 1.0, 1e-5),
    lambda secret: __import__("dpicl.privacy.mechanisms.dp_fewshot", fromlist=["x"]).plan(
        0.01, secret, 1.0, 1e-5, splits=4),
])
def test_misplaced_text_never_reaches_an_error_message(call):
    secret = "Patient Jane Roe, MRN 12345, was admitted with chest pain"
    with pytest.raises((ValueError, TypeError)) as err:
        call(secret)
    assert "Jane" not in str(err.value)
