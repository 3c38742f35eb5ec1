"""The PostgreSQL backend against a real throw-away server: the same schema as DuckDB, parameter translation,
budgets and claims that hold under concurrent writers (threads with a connection each: the locks are the
server's)."""

from __future__ import annotations

import threading
import time

import pytest

from dpicl.privacy.accounting import ledger_epsilon
from dpicl.privacy.mechanisms import esa
from dpicl.storage.db import connect, describe_target, transaction
from dpicl.storage.ledger import (
    ledger_events,
    open_budget,
    reserve_batch,
    verify_budget,
)
from dpicl.storage.postgres import to_pyformat
from dpicl.storage.queries import (
    claim_pending,
    claimable_count,
    release_claims,
    renew_claims,
)

# DuckDB's type names as PostgreSQL's information_schema spells them
_SAME_TYPE = {"BLOB": "bytea", "DOUBLE": "double precision", "VARCHAR": "character varying", "BIGINT": "bigint",
              "INTEGER": "integer", "BOOLEAN": "boolean", "JSON": "json", "TIMESTAMP": "timestamp without time zone"}


def _columns(con) -> dict[tuple[str, str], tuple[str, str]]:
    rows = con.execute("SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
                       "WHERE table_schema = current_schema()").fetchall()
    return {(t, c): (_SAME_TYPE.get(d, d.lower()), n) for t, c, d, n in rows}


def test_both_engines_have_the_same_tables_columns_types_and_versions(tmp_path, postgres_url):
    duck, pg = connect(tmp_path / "d.duckdb"), connect(postgres_url)
    try:
        assert _columns(duck) == _columns(pg)
        versions = "SELECT version, name FROM schema_migrations ORDER BY version"
        assert duck.execute(versions).fetchall() == pg.execute(versions).fetchall()
    finally:
        duck.close()
        pg.close()


def test_parameters_are_translated_outside_literals_only():
    assert to_pyformat("SELECT '?', \"a?\" FROM t WHERE a = ? AND b = $name") == \
        "SELECT '?', \"a?\" FROM t WHERE a = %s AND b = %(name)s"
    assert to_pyformat("SELECT 'it''s 5%' WHERE x LIKE ?") == "SELECT 'it''s 5%%' WHERE x LIKE %s"


def test_a_password_never_shows(postgres_server):
    url = postgres_server.url().replace("postgres@", "postgres:s3cret@")
    assert "s3cret" not in describe_target(url) and "***" in describe_target(url)


def test_an_unreachable_server_is_one_clear_error():
    from dpicl.storage.db import DatabaseUnavailableError

    with pytest.raises(DatabaseUnavailableError, match="cannot connect to the PostgreSQL database") as caught:
        connect("postgresql://u:pw@127.0.0.1:1/nothing")
    assert "pw" not in str(caught.value)


def test_a_failed_statement_never_quotes_the_row(postgres_url):
    """PostgreSQL's DETAIL repeats a failing row ("Failing row contains (…)"): the error keeps the primary message."""
    from dpicl.storage.db import DB_ERRORS

    con = connect(postgres_url)
    with pytest.raises(DB_ERRORS) as caught:
        con.execute("INSERT INTO queries (backlog, query_id, row_no, input, source_path) VALUES (?, ?, 1, ?, NULL)",
                    ["b", "q", "SECRET patient 7731"])
    assert "not-null" in str(caught.value) and "SECRET" not in str(caught.value)
    con.close()


def _backlog(con, queries: int) -> None:
    con.execute("INSERT INTO datasets VALUES ('d', 'private', 'text', 'x', 'x', '{}', 10, ?, current_timestamp)",
                [b"k" * 32])
    con.execute("INSERT INTO queries (backlog, query_id, row_no, input, source_path) "
                "SELECT 'b', 'q' || i, i, 'text', 'x' FROM generate_series(1, ?) t(i)", [queries])


def test_transactions_are_read_committed_whatever_the_servers_default(postgres_url):
    """The budget replace counts ledger entries after locking the budget row: under REPEATABLE READ that count
    would come from the transaction's first snapshot, missing a reservation committed while it waited."""
    admin = connect(postgres_url)
    database = admin.execute("SELECT current_database()").fetchone()[0]
    admin.execute(f"ALTER DATABASE {database} SET default_transaction_isolation = 'repeatable read'")
    admin.close()
    con = connect(postgres_url)
    try:
        assert con.execute("SHOW transaction_isolation").fetchone()[0] == "read committed"
    finally:
        con.execute(f"ALTER DATABASE {database} RESET default_transaction_isolation")
        con.close()


def test_concurrent_reservations_never_exceed_the_limit(postgres_url):
    """Eight writers reserve batches of one budget at once: each query paid at most once, the spend within the
    limit, the composed state equal to the entries, and the refused ones really beyond the limit."""
    con = connect(postgres_url)
    _backlog(con, 400)
    open_budget(con, "d", 1.0, 1e-5)
    event = esa.cost(noise_multiplier=2.0, sampling_rate=0.05).to_json()
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        mine = connect(postgres_url)
        try:
            for start in range(k * 50, k * 50 + 50, 5):
                reserve_batch(mine, dataset="d", run_id=f"r{k}", backlog="b",
                              query_ids=[f"q{i}" for i in range(start, start + 5)], mechanism="esa",
                              event_json=event)
        except BaseException as error:  # noqa: BLE001 (reported by the main thread)
            errors.append(error)
        finally:
            mine.close()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    paid = con.execute("SELECT query_id FROM ledger").fetchall()
    assert 0 < len(paid) < 400 and len(set(paid)) == len(paid)
    events = ledger_events(con, "d")
    assert ledger_epsilon(events, 1e-5) <= 1.0 < ledger_epsilon([*events, event], 1e-5)
    assert verify_budget(con, "d")["ok"]
    con.close()


def test_concurrent_claims_are_disjoint(postgres_url):
    con = connect(postgres_url)
    _backlog(con, 300)
    claimed: dict[int, list[str]] = {}

    def claimer(k: int) -> None:
        mine = connect(postgres_url)
        got: list[str] = []
        while batch := claim_pending(mine, "b", f"run{k}", 7):
            got += batch
        claimed[k] = got
        mine.close()

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [q for got in claimed.values() for q in got]
    assert sorted(every) == sorted(f"q{i}" for i in range(1, 301))  # each query claimed exactly once
    assert sum(1 for got in claimed.values() if got) >= 2  # more than one run got work
    con.close()


def test_claims_expire_renew_and_are_given_back(con):
    """On both engines: a live claim is never taken, an expired one is, renewing keeps it, releasing frees it."""
    _backlog(con, 10)
    first = claim_pending(con, "b", "run-a", 4, lease_seconds=0.2)
    assert first == ["q1", "q2", "q3", "q4"]
    assert claim_pending(con, "b", "run-b", 4) == ["q5", "q6", "q7", "q8"]  # q1–q4 are run-a's
    assert claimable_count(con, "b") == 2
    assert renew_claims(con, "run-a", lease_seconds=60) == 4
    time.sleep(0.3)
    assert claim_pending(con, "b", "run-c", 10) == ["q9", "q10"]  # renewed: still run-a's
    with transaction(con):
        con.execute("UPDATE queries SET status = 'answered' WHERE query_id = 'q1'")
    assert release_claims(con, "run-a") == 3  # the answered one is not given back: it is done
    assert claim_pending(con, "b", "run-c", 10) == ["q2", "q3", "q4"]
    renew_claims(con, "run-b", lease_seconds=-1)  # as if run-b died long ago
    assert claim_pending(con, "b", "run-d", 10) == ["q5", "q6", "q7", "q8"]
    assert claim_pending(con, "b", "run-d", 10) == []  # never its own claims again
    con.execute("INSERT INTO runs (run_id, method, dataset, backlog, config, config_hash, status) "
                "VALUES ('run-d', 'esa', 'd', 'b', '{}', 'h', 'crashed')")
    assert claim_pending(con, "b", "run-e", 10) == ["q5", "q6", "q7", "q8"]  # a crashed run's claims: at once
