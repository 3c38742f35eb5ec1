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
    for free in (PublicDataEvent(), ComposedEvent(PublicDataEvent(), 2)):  # free releases, however the ledger keeps them
        for paid in (mozo, ComposedEvent(mozo, 3)):
            assert math.isfinite(total_epsilon([paid, free], 1 / 14732))
            assert math.isfinite(RDPAccountant().epsilon([paid, free], 1 / 14732))
    for other in (GAUSS, ComposedEvent(GAUSS, 3), FixedOrderRDPEvent(8, 0.1)):
        for paid in (mozo, ComposedEvent(mozo, 3)):
            with pytest.raises(UnsupportedEventError, match="neighbouring relations"):
                total_epsilon([paid, other], 1e-5)
            with pytest.raises(UnsupportedEventError, match="neighbouring relations"):
                RDPAccountant().epsilon([paid, other], 1e-5)


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


def test_dps_mozo_events_say_what_their_guarantee_rests_on():
    proven = DPSMozoEvent(0.3, 5, 1 / 100, 10, guarantee="proven")
    claim = DPSMozoEvent(0.3, 5, 1 / 100, 10, guarantee="paper-claim")
    assert DPSMozoEvent(0.3, 5, 1 / 100, 10).guarantee == "paper-claim"  # never more than was declared
    for event in (proven, claim):
        assert event_from_json(event.to_json()) == event
    # the label documents the guarantee; what is charged is 4βα per token either way
    assert RDPAccountant().epsilon([proven], 1e-5) == RDPAccountant().epsilon([claim], 1e-5)
    with pytest.raises(ValueError, match="guarantee"):
        DPSMozoEvent(0.3, 5, 1 / 100, 10, guarantee="")


def test_budget_show_counts_the_entries_resting_on_an_unproven_claim(tmp_path):
    import json

    from typer.testing import CliRunner

    from dpicl.cli import app
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset
    from dpicl.storage.ledger import budget_summary, open_budget, reserve

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"input": f"t{i}", "output": f"s{i}"}) + "\n" for i in range(100)))
    db = tmp_path / "l.duckdb"
    con = connect(db)
    ingest_dataset(con, data, "d", "private", "summarization", FieldMap())
    con.execute("INSERT INTO queries (backlog, query_id, row_no, input, source_path) "
                "SELECT 'b', 'q' || i, i, 'query', 'x' FROM range(5) t(i)")
    open_budget(con, "d", 50.0, 1e-3)

    def charge(query_id, event_json):
        assert reserve(con, dataset="d", run_id="run", backlog="b", query_id=query_id, mechanism="dps_mozo",
                       event_json=event_json) is not None

    charge("q0", DPSMozoEvent(0.01, 5, 1 / 100, 2, guarantee="proven").to_json())
    charge("q1", DPSMozoEvent(0.01, 5, 1 / 100, 2, guarantee="proven").to_json())
    assert budget_summary(con, "d")["unproven_entries"] == 0
    con.close()
    runner = CliRunner()
    shown = runner.invoke(app, ["budget", "show", "d", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert "unproven" not in shown.output  # only said when there is something to say

    con = connect(db)
    charge("q2", ComposedEvent(DPSMozoEvent(0.01, 5, 4 / 100, 2, guarantee="paper-claim"), 3).to_json())
    # an entry written before the label existed (ball at order α): the paper's claim
    charge("q3", '{"alpha": 5, "beta": 0.01, "kind": "dps_mozo", "mechanism": "dps_mozo", "sampling_rate": 0.04, '
                 '"tokens": 2}')
    summary = budget_summary(con, "d")
    con.close()
    assert summary["ledger_entries"] == 4 and summary["unproven_entries"] == 2
    shown = runner.invoke(app, ["budget", "show", "d", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert "2 of the 4 ledger entries rest on an unproven guarantee" in " ".join(shown.output.split())
    as_json = json.loads(runner.invoke(app, ["budget", "show", "d", "--db", str(db), "--json"]).stdout)
    assert as_json["unproven_entries"] == 2
