"""Ledger semantics (DESIGN.md invariants 3, 4, 7): pay first, refuse what cannot be paid, never refund."""

from __future__ import annotations

import pytest

from dpicl.privacy.mechanisms import esa
from dpicl.storage.db import connect
from dpicl.storage.ingest import FieldMap, ingest_dataset
from dpicl.storage.ledger import (
    BudgetError, budget_summary, ledger_events, open_budget, record_release, reserve, stored_release,
)
from dpicl.tasks.context import epsilon_of
from tests.pipeline.conftest import write_jsonl


@pytest.fixture
def con(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"input": f"t{i}", "output": f"s{i}"} for i in range(20)])
    con = connect(tmp_path / "l.duckdb")
    ingest_dataset(con, data, "d", "private", "summarization", FieldMap())
    con.execute("INSERT INTO queries (backlog, query_id, row_no, input, source_path) "
                "SELECT 'b', 'q' || i, i, 'query', 'x' FROM range(50) t(i)")
    yield con
    con.close()


def _reserve(con, query_id, event):
    return reserve(con, dataset="d", run_id="run", backlog="b", query_id=query_id, mechanism="esa",
                   event_json=event.to_json(), epsilon_of=epsilon_of)


def test_budget_exhaustion_refuses_and_total_never_exceeds_limit(con):
    open_budget(con, "d", 1.0, 1e-5)
    event = esa.cost(noise_multiplier=2.0, sampling_rate=0.2)
    paid, refused = [], 0
    for i in range(50):
        r = _reserve(con, f"q{i}", event)
        if r is None:
            refused += 1
            continue
        assert refused == 0, "a reservation succeeded after a refusal with the same event"
        assert r.epsilon_before <= r.epsilon_after <= 1.0
        paid.append(r)
    assert 0 < len(paid) < 50 and refused == 50 - len(paid)
    total = epsilon_of(ledger_events(con, "d"), 1e-5)
    assert total <= 1.0
    # the refused reservation would really have exceeded the limit
    assert epsilon_of([*ledger_events(con, "d"), event.to_json()], 1e-5) > 1.0
    assert len(ledger_events(con, "d")) == len(paid)


def test_unreleased_reservation_stays_charged_and_release_is_atomic(con):
    open_budget(con, "d", 5.0, 1e-5)
    event = esa.cost(noise_multiplier=1.0, sampling_rate=0.1)
    first = _reserve(con, "q0", event)
    spent = budget_summary(con, "d", epsilon_of)
    assert spent["epsilon_spent"] > 0 and spent["unreleased_entries"] == 1
    assert stored_release(con, "b", "q0") is None

    record_release(con, first, run_id="run", mechanism="esa", answer="public candidate", details={"i": 1})
    served = stored_release(con, "b", "q0")
    assert served["answer"] == "public candidate" and served["entry_id"] == first.entry_id
    assert con.execute("SELECT status FROM queries WHERE query_id = 'q0'").fetchone()[0] == "answered"
    # a second release for the same query is rejected and leaves nothing half-written
    again = _reserve(con, "q0", event)
    with pytest.raises(Exception):
        record_release(con, again, run_id="run", mechanism="esa", answer="other", details={})
    assert stored_release(con, "b", "q0")["answer"] == "public candidate"
    # serving the stored release costs nothing: the ledger did not move
    entries = len(ledger_events(con, "d"))
    stored_release(con, "b", "q0")
    assert len(ledger_events(con, "d")) == entries


def test_budget_cannot_be_reopened_or_opened_on_public_or_missing(con, tmp_path):
    open_budget(con, "d", 1.0, 1e-5)
    with pytest.raises(BudgetError, match="already has a budget"):
        open_budget(con, "d", 10.0, 1e-5)
    with pytest.raises(BudgetError, match="no dataset"):
        open_budget(con, "nope", 1.0, 1e-5)
    pub = write_jsonl(tmp_path / "p.jsonl", [{"input": "a", "output": "b"}])
    ingest_dataset(con, pub, "p", "public", "summarization", FieldMap())
    with pytest.raises(BudgetError, match="public"):
        open_budget(con, "p", 1.0, 1e-5)
    with pytest.raises(BudgetError):
        open_budget(con, "d", -1.0, 1e-5)
