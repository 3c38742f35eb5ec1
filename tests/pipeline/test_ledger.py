"""Ledger semantics (docs/PRIVACY.md invariants 3, 4, 7): pay first, refuse what cannot be paid, never refund."""

from __future__ import annotations

import pytest

from dpicl.privacy.accounting import ledger_epsilon
from dpicl.privacy.mechanisms import esa
from dpicl.storage.db import connect
from dpicl.storage.ingest import FieldMap, ingest_dataset
from dpicl.storage.ledger import (
    BudgetError, budget_summary, ledger_events, open_budget, record_release, reserve, stored_release,
)
from tests.pipeline.conftest import write_jsonl


@pytest.fixture
def con(tmp_path, database):
    """A ledger with a dataset and 50 queries, on each backend."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"input": f"t{i}", "output": f"s{i}"} for i in range(20)])
    con = connect(database)
    ingest_dataset(con, data, "d", "private", "summarization", FieldMap())
    con.execute("INSERT INTO queries (backlog, query_id, row_no, input, source_path) "
                "SELECT 'b', 'q' || i, i, 'query', 'x' FROM generate_series(0, 49) t(i)")
    yield con
    con.close()


def _reserve(con, query_id, event):
    return reserve(con, dataset="d", run_id="run", backlog="b", query_id=query_id, mechanism="esa",
                   event_json=event.to_json())


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
    total = ledger_epsilon(ledger_events(con, "d"), 1e-5)
    assert total <= 1.0
    # the refused reservation would really have exceeded the limit
    assert ledger_epsilon([*ledger_events(con, "d"), event.to_json()], 1e-5) > 1.0
    assert len(ledger_events(con, "d")) == len(paid)


def test_unreleased_reservation_stays_charged_and_release_is_atomic(con):
    open_budget(con, "d", 5.0, 1e-5)
    event = esa.cost(noise_multiplier=1.0, sampling_rate=0.1)
    first = _reserve(con, "q0", event)
    spent = budget_summary(con, "d")
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


def test_a_budget_nothing_was_spent_from_can_be_replaced_one_with_spend_never(con):
    """A newcomer opened δ = 0.05 by mistake and could only start a new database: nothing was spent yet."""
    from dpicl.storage.ledger import get_budget

    open_budget(con, "d", 3.0, 1e-3)
    with pytest.raises(BudgetError, match="can be replaced: --replace"):
        open_budget(con, "d", 1.0, 1e-5)
    assert open_budget(con, "d", 1.0, 1e-5, replace=True) == get_budget(con, "d")
    assert (get_budget(con, "d").epsilon, get_budget(con, "d").delta) == (1.0, 1e-5)
    assert _reserve(con, "q0", esa.cost(noise_multiplier=2.0, sampling_rate=0.2)) is not None
    with pytest.raises(BudgetError, match="has 1 ledger entries: its spend is permanent"):
        open_budget(con, "d", 8.0, 1e-5, replace=True)
    assert get_budget(con, "d").epsilon == 1.0


def test_a_replaced_budget_never_reuses_bounds_computed_at_the_old_delta(con):
    """The cached PRV bounds are keyed without δ: a budget replaced with a smaller δ was charged with the bounds of
    the larger one (0.24 where 1.74 was owed), after a refused run had computed them."""
    from dpicl.storage.ledger import payable_count, reserve_batch, verify_budget

    event = esa.cost(noise_multiplier=1.0, sampling_rate=0.01).to_json()
    open_budget(con, "d", 0.01, 1e-3)
    assert payable_count(con, "d", event, 50) == 0  # refused: but its bounds at δ = 1e-3 are stored
    open_budget(con, "d", 50.0, 1e-9, replace=True)
    paid = reserve_batch(con, dataset="d", run_id="run", backlog="b", query_ids=[f"q{i}" for i in range(50)],
                         mechanism="esa", event_json=event)
    assert len(paid) == 50
    check = verify_budget(con, "d")
    assert check["ok"] and check["epsilon_incremental"] >= check["epsilon_full"] > 1.0, check


def test_a_delta_of_one_over_n_or_more_is_refused(con):
    """δ = 1/n permits publishing one of the n records outright; the fixture's dataset has 20 records."""
    from dpicl.storage.ledger import get_budget

    for delta in (0.05, 0.3):
        with pytest.raises(BudgetError, match=r"δ = .* is not below 1/n = 1/20 .*--delta 0.001"):
            open_budget(con, "d", 1.0, delta)
    assert get_budget(con, "d") is None  # nothing written
    assert open_budget(con, "d", 1.0, 0.049).delta == 0.049


def test_a_batch_is_reserved_in_one_transaction_for_as_many_as_the_budget_pays(con):
    from dpicl.storage.ledger import reserve_batch, verify_budget

    open_budget(con, "d", 1.0, 1e-5)
    event = esa.cost(noise_multiplier=2.0, sampling_rate=0.2)
    paid = reserve_batch(con, dataset="d", run_id="run", backlog="b", query_ids=[f"q{i}" for i in range(50)],
                         mechanism="esa", event_json=event.to_json())
    assert 0 < len(paid) < 50 and [r.query_id for r in paid] == [f"q{i}" for i in range(len(paid))]
    assert all(a.epsilon_after == b.epsilon_before for a, b in zip(paid, paid[1:]))
    # the last paid one fits, one more would not (the exact accountant over every entry agrees)
    assert ledger_epsilon(ledger_events(con, "d"), 1e-5) <= paid[-1].epsilon_after <= 1.0
    assert ledger_epsilon([*ledger_events(con, "d"), event.to_json()], 1e-5) > 1.0
    assert verify_budget(con, "d")["ok"]
    assert budget_summary(con, "d")["epsilon_spent"] == paid[-1].epsilon_after


class _FailingAt:
    """A connection that fails the first statement starting with `prefix` (a crash inside the transaction)."""

    def __init__(self, con, prefix):
        self.con, self.prefix = con, prefix

    def execute(self, sql, *args):
        if sql.lstrip().startswith(self.prefix):
            raise RuntimeError("injected crash")
        return self.con.execute(sql, *args)


@pytest.mark.parametrize("prefix", ["INSERT INTO budget_events", "INSERT INTO budget_spent"])
def test_a_crash_between_the_entries_and_the_state_update_leaves_both_unchanged(con, prefix):
    from dpicl.storage.ledger import budget_state, reserve_batch, verify_budget

    open_budget(con, "d", 5.0, 1e-5)
    event = esa.cost(noise_multiplier=2.0, sampling_rate=0.2).to_json()
    reserve_batch(con, dataset="d", run_id="run", backlog="b", query_ids=["q0", "q1"], mechanism="esa",
                  event_json=event)
    before = (ledger_events(con, "d"), budget_state(con, "d"), budget_summary(con, "d")["epsilon_spent"])
    with pytest.raises(RuntimeError, match="injected"):
        reserve_batch(_FailingAt(con, prefix), dataset="d", run_id="run", backlog="b", query_ids=["q2", "q3"],
                      mechanism="esa", event_json=event)
    assert (ledger_events(con, "d"), budget_state(con, "d"), budget_summary(con, "d")["epsilon_spent"]) == before
    assert verify_budget(con, "d")["ok"]


def test_verify_reports_a_state_that_disagrees_with_the_entries(con, database):
    from typer.testing import CliRunner

    from dpicl.cli import app
    from dpicl.storage.ledger import reserve_batch, verify_budget

    open_budget(con, "d", 5.0, 1e-5)
    event = esa.cost(noise_multiplier=2.0, sampling_rate=0.2).to_json()
    reserve_batch(con, dataset="d", run_id="run", backlog="b", query_ids=["q0", "q1", "q2"], mechanism="esa",
                  event_json=event)
    assert verify_budget(con, "d")["ok"]
    con.execute("UPDATE budget_spent SET epsilon = epsilon / 2")  # a state that under-reports the spend
    result = verify_budget(con, "d")
    assert not result["ok"] and result["epsilon_incremental"] < result["epsilon_full"]
    con.execute("UPDATE budget_spent SET epsilon = epsilon * 2")
    con.execute("UPDATE budget_events SET count = count - 1")  # counts that forget an entry
    assert not verify_budget(con, "d")["state_counts_agree"]
    con.close()
    cli = CliRunner().invoke(app, ["budget", "verify", "d", "--db", database])
    assert cli.exit_code == 1 and "DISAGREE" in cli.output


def test_the_migration_carries_an_older_ledger_into_the_state(tmp_path):
    """A database written before the composed state existed: its entries become the state's counts, and the
    first summary is the full recomputation."""
    import duckdb

    from dpicl.storage.db import MIGRATIONS_DIR

    path = tmp_path / "old.duckdb"
    raw = duckdb.connect(str(path))
    raw.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                "applied_at TIMESTAMP NOT NULL)")
    for version, name in ((1, "initial"), (2, "evaluations"), (3, "run_sources"), (4, "record_hashes")):
        raw.execute((MIGRATIONS_DIR / f"{version:04d}_{name}.sql").read_text())
        raw.execute("INSERT INTO schema_migrations VALUES (?, ?, current_timestamp)", [version, name])
    raw.execute("INSERT INTO datasets VALUES ('d', 'private', 'text', 'x', 'x', '{}', 20, 'k'::BLOB, "
                "current_timestamp)")
    raw.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES ('d', 5.0, 1e-5)")
    event = esa.cost(noise_multiplier=2.0, sampling_rate=0.2).to_json()
    raw.execute("""INSERT INTO ledger (dataset, run_id, backlog, query_id, mechanism, event, epsilon_before,
                   epsilon_after) SELECT 'd', 'r', 'b', 'q' || i, 'esa', ?, 0, 0 FROM range(7) t(i)""", [event])
    raw.close()
    con = connect(path)
    from dpicl.storage.ledger import budget_state, verify_budget

    assert budget_state(con, "d") == {event: 7}
    assert budget_summary(con, "d")["epsilon_spent"] == pytest.approx(ledger_epsilon([event] * 7, 1e-5))
    assert verify_budget(con, "d")["ok"]
    con.close()


def _reserve_in_turns(db: str, worker: int, event_json: str, rounds: int) -> int:
    """A process that reserves batches of 4 until the budget refuses, opening the file for each batch and waiting
    while another process holds it (as the stage tasks do)."""
    from dpicl.storage.ledger import reserve_batch
    from dpicl.tasks.context import database

    paid = 0
    for r in range(rounds):
        with database(db) as con:
            got = reserve_batch(con, dataset="d", run_id=f"w{worker}", backlog="b",
                                query_ids=[f"w{worker}-{r}-{i}" for i in range(4)], mechanism="esa",
                                event_json=event_json)
        paid += len(got)
        if len(got) < 4:
            break
    return paid


@pytest.mark.slow
def test_processes_reserving_at_once_never_exceed_the_limit(tmp_path):
    """Three processes race for one budget: together they pay for exactly what one process alone would, the state
    agrees with the entries, and the exact accountant over every entry stays within the limit."""
    import multiprocessing

    from dpicl.storage.ledger import reserve_batch, verify_budget

    data = write_jsonl(tmp_path / "d.jsonl", [{"input": f"t{i}", "output": f"s{i}"} for i in range(20)])
    db = str(tmp_path / "race.duckdb")
    con = connect(db)
    ingest_dataset(con, data, "d", "private", "summarization", FieldMap())
    open_budget(con, "d", 1.0, 1e-5)
    con.close()
    event = esa.cost(noise_multiplier=2.0, sampling_rate=0.2).to_json()
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        paid = pool.starmap(_reserve_in_turns, [(db, w, event, 50) for w in range(3)])
    con = connect(db)
    try:
        entries = ledger_events(con, "d")
        assert sum(paid) == len(entries) > 0
        assert ledger_epsilon(entries, 1e-5) <= 1.0
        assert verify_budget(con, "d")["ok"]
        # one more reservation is refused: the racing processes left nothing the budget could still pay for
        assert reserve_batch(con, dataset="d", run_id="late", backlog="b", query_ids=["late"], mechanism="esa",
                             event_json=event) == []
    finally:
        con.close()
    alone = connect(str(tmp_path / "alone.duckdb"))
    try:
        ingest_dataset(alone, data, "d", "private", "summarization", FieldMap())
        open_budget(alone, "d", 1.0, 1e-5)
        solo = reserve_batch(alone, dataset="d", run_id="solo", backlog="b", query_ids=[f"s{i}" for i in range(200)],
                             mechanism="esa", event_json=event)
    finally:
        alone.close()
    assert sum(paid) == len(solo)


def test_the_payable_count_says_unlimited_for_a_free_plan_and_at_least_where_its_search_stops(con):
    """A free plan was shown as 100000 payable queries, the search's limit, as if the budget ran out there."""
    from rich.console import Console

    import dpicl.cli.budget as budget_cli
    from dpicl.privacy.accounting.calibration import PAYABLE_SEARCH_LIMIT
    from dpicl.privacy.accounting.events import PublicDataEvent
    from dpicl.storage.ledger import budget_report

    open_budget(con, "d", 1.0, 1e-5)
    free = budget_report(con, "d", PublicDataEvent("synthetic-icl").to_json())
    cheap = budget_report(con, "d", esa.cost(noise_multiplier=50.0, sampling_rate=1e-4).to_json())
    dear = budget_report(con, "d", esa.cost(noise_multiplier=2.0, sampling_rate=0.2).to_json())
    assert free["plan_is_free"] and free["queries_still_payable"] is None
    assert not cheap["plan_is_free"] and cheap["queries_still_payable"] == PAYABLE_SEARCH_LIMIT
    assert 0 < dear["queries_still_payable"] < PAYABLE_SEARCH_LIMIT

    def shown(summary):
        console = Console(width=200, record=True)
        budget_cli.console, before = console, budget_cli.console
        try:
            budget_cli.print_budget(summary)
        finally:
            budget_cli.console = before
        return console.export_text()

    assert "unlimited (free)" in shown(free)
    assert f"≥ {PAYABLE_SEARCH_LIMIT:,}" in shown(cheap)
    assert f"{dear['queries_still_payable']:,}" in shown(dear) and "≥" not in shown(dear)
