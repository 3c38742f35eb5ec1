"""Privacy budgets and the ε ledger (docs/PRIVACY.md, privacy invariants 3, 4, 7, 8).

A budget belongs to a private dataset; what it has spent is a sound ε of *every* ledger entry of that dataset. The
life of one release:

1. `reserve_batch` — in one transaction: lock the budget row, charge the batch's event once per query for as many
   queries as the budget can pay (one ledger entry each), update the budget's composed state. Committed *before*
   the mechanism draws its noise, so a crash afterwards leaves the spend charged.
2. the mechanism runs (outside this module);
3. `record_release` — in one transaction: write the release (referencing its ledger entry) and mark the
   query answered. A ledger entry without a release stays charged forever.

Ledger entries are never updated or deleted. Next to them each budget keeps its composed state (`budget_events`:
the count of each distinct event; `budget_spent`: the ε the last reservation recorded), updated in the same
transaction as the entries, so a reservation's cost does not grow with the ledger
(dpicl/privacy/accounting/composed.py). `verify_budget` recomputes ε from the entries themselves.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from dpicl.privacy.accounting.composed import (
    composed_events,
    count_events,
    full_epsilon,
    incremental_epsilon,
)
from dpicl.storage.db import dialect, transaction


class BudgetError(ValueError):
    """A budget operation that cannot be done as asked (the message says how to fix it)."""


@dataclass(frozen=True)
class Budget:
    dataset: str
    epsilon: float
    delta: float


@dataclass(frozen=True)
class Reservation:
    entry_id: int
    dataset: str
    backlog: str
    query_id: str
    epsilon_before: float
    epsilon_after: float

    @property
    def epsilon_cost(self) -> float:
        return self.epsilon_after - self.epsilon_before


def open_budget(con: duckdb.DuckDBPyConnection, dataset: str, epsilon: float, delta: float, *,
                replace: bool = False) -> Budget:
    """Open the (only) budget of a private dataset. A budget something was spent from is never replaced: that
    would forget spend; with `replace`, one without a ledger entry is (a limit mistyped before any run paid)."""
    from dpicl.names import name_problem
    from dpicl.storage.budget_limits import budget_problem, delta_problem

    problem = name_problem(dataset, "dataset name") or budget_problem(epsilon, delta)
    if problem is not None:
        raise BudgetError(problem)
    with transaction(con):
        row = con.execute("SELECT kind, n_records FROM datasets WHERE name = ?", [dataset]).fetchone()
        if row is None:
            raise BudgetError(f"no dataset named {dataset!r}: ingest it first with `dpicl ingest`")
        if row[0] != "private":
            raise BudgetError(f"dataset {dataset!r} is public: budgets are opened on private datasets only")
        problem = delta_problem(delta, row[1])
        if problem is not None:
            raise BudgetError(problem)
        if get_budget(con, dataset) is None:
            con.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES (?, ?, ?)", [dataset, epsilon, delta])
            return Budget(dataset, epsilon, delta)
        if not replace:
            raise BudgetError(f"dataset {dataset!r} already has a budget; its spend is permanent, so it cannot be "
                              "reopened (one nothing was spent from yet can be replaced: --replace)")
        _lock_budget(con, dataset)  # no reservation can slip in between the count and the update
        entries = con.execute("SELECT count(*) FROM ledger WHERE dataset = ?", [dataset]).fetchone()[0]
        if entries:
            raise BudgetError(f"dataset {dataset!r} has {entries} ledger entries: its spend is permanent, so its "
                              "budget cannot be replaced")
        # what earlier (refused) reservations derived at the old δ: the cached PRV bounds are keyed without δ
        for derived in ("prv_bounds", "budget_events", "budget_spent"):
            con.execute(f"DELETE FROM {derived} WHERE dataset = ?", [dataset])
        con.execute("UPDATE budgets SET epsilon = ?, delta = ? WHERE dataset = ?", [epsilon, delta, dataset])
    return Budget(dataset, epsilon, delta)


def get_budget(con: duckdb.DuckDBPyConnection, dataset: str) -> Budget | None:
    row = con.execute("SELECT dataset, epsilon, delta FROM budgets WHERE dataset = ?", [dataset]).fetchone()
    return Budget(*row) if row else None


class UnknownDatasetError(BudgetError, LookupError):
    """A budget asked for by the name of a dataset that was never ingested (a typo, most likely)."""


def require_budget(con: duckdb.DuckDBPyConnection, dataset: str) -> Budget:
    budget = get_budget(con, dataset)
    if budget is None and con.execute("SELECT 1 FROM datasets WHERE name = ?", [dataset]).fetchone() is None:
        raise UnknownDatasetError(f"no dataset named {dataset!r}; ingest it first: "
                                  f"dpicl ingest <file> --name {dataset} --as private")
    if budget is None:
        raise BudgetError(
            f"dataset {dataset!r} has no privacy budget: open one with "
            f"`dpicl budget open {dataset} --epsilon E --delta D`"
        )
    return budget


def ledger_events(con: duckdb.DuckDBPyConnection, dataset: str) -> list[str]:
    """Every event ever charged to the dataset, as stored JSON, oldest first."""
    rows = con.execute("SELECT event FROM ledger WHERE dataset = ? ORDER BY entry_id", [dataset]).fetchall()
    return [r[0] for r in rows]


def reserve_batch(
    con: duckdb.DuckDBPyConnection,
    *,
    dataset: str,
    run_id: str,
    backlog: str,
    query_ids: Sequence[str],
    mechanism: str,
    event_json: str,
) -> list[Reservation]:
    """Charge ``event_json`` once per query, in order, for as many of ``query_ids`` as the budget can pay: one
    transaction, one ledger entry per query. Returns the reservations of the paid queries (a prefix)."""
    paid: list[Reservation] = []
    with transaction(con):
        limit, delta = _lock_budget(con, dataset)
        counts = budget_state(con, dataset)
        before = _spent(con, dataset, counts, delta)
        for query_id, after in zip(query_ids, _payable(con, dataset, counts, event_json, len(query_ids), limit,
                                                        delta, before), strict=False):
            (entry_id,) = con.execute(
                """INSERT INTO ledger (dataset, run_id, backlog, query_id, mechanism, event, epsilon_before,
                   epsilon_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING entry_id""",
                [dataset, run_id, backlog, query_id, mechanism, event_json, before, after],
            ).fetchone()
            paid.append(Reservation(entry_id, dataset, backlog, query_id, before, after))
            before = after
        if paid:
            con.execute(
                """INSERT INTO budget_events (dataset, event, count) VALUES (?, ?, ?)
                   ON CONFLICT (dataset, event) DO UPDATE SET count = excluded.count""",
                [dataset, event_json, counts.get(event_json, 0) + len(paid)],
            )
            con.execute(
                """INSERT INTO budget_spent (dataset, epsilon) VALUES (?, ?)
                   ON CONFLICT (dataset) DO UPDATE SET epsilon = excluded.epsilon""",
                [dataset, before],
            )
    return paid


def payable_count(con: duckdb.DuckDBPyConnection, dataset: str, event_json: str, n: int) -> int:
    """How many of ``n`` more charges of ``event_json`` the budget can pay for now (what `reserve_batch` would
    accept; nothing is charged)."""
    with transaction(con):
        limit, delta = _lock_budget(con, dataset)
        counts = budget_state(con, dataset)
        return len(_payable(con, dataset, counts, event_json, n, limit, delta, _spent(con, dataset, counts, delta)))


def _lock_budget(con, dataset: str) -> tuple[float, float]:
    """(limit, δ) of the budget, its row locked until the transaction ends: concurrent reservations of one budget
    run one after the other (PostgreSQL: `SELECT … FOR UPDATE` makes the next one wait; DuckDB: the row is touched,
    so a second writer's transaction conflicts)."""
    if dialect(con) == "postgres":
        sql = "SELECT epsilon, delta FROM budgets WHERE dataset = ? FOR UPDATE"
    else:
        sql = "UPDATE budgets SET epsilon = epsilon WHERE dataset = ? RETURNING epsilon, delta"
    touched = con.execute(sql, [dataset]).fetchone()
    if touched is None:
        require_budget(con, dataset)
    return touched


def _payable(con, dataset: str, counts: Mapping[str, int], event_json: str, n: int, limit: float, delta: float,
             before: float) -> list[float]:
    """ε after each of the first charges of ``event_json`` (up to ``n``) that stay within ``limit``."""
    state, store, afters = dict(counts), _BoundTable(con, dataset), []
    last = state.get(event_json, 0) + n
    for _ in range(n):
        state[event_json] = state.get(event_json, 0) + 1
        after = incremental_epsilon(state, event_json, delta, limit, store, reach_at_least=last)
        if after > limit:
            break
        before = max(after, before)  # a tighter bound later on never shows as a negative cost
        afters.append(before)
    return afters


def reserve(
    con: duckdb.DuckDBPyConnection,
    *,
    dataset: str,
    run_id: str,
    backlog: str,
    query_id: str,
    mechanism: str,
    event_json: str,
) -> Reservation | None:
    """Charge one event to the budget, or return None when the budget cannot pay for it."""
    paid = reserve_batch(con, dataset=dataset, run_id=run_id, backlog=backlog, query_ids=[query_id],
                         mechanism=mechanism, event_json=event_json)
    return paid[0] if paid else None


def budget_state(con: duckdb.DuckDBPyConnection, dataset: str) -> dict[str, int]:
    """The budget's composed state: {event JSON: how many ledger entries charged it}."""
    return dict(con.execute("SELECT event, count FROM budget_events WHERE dataset = ?", [dataset]).fetchall())


def _spent(con: duckdb.DuckDBPyConnection, dataset: str, counts: Mapping[str, int], delta: float) -> float:
    """ε the last reservation recorded; computed from the state where none was recorded yet (an older ledger)."""
    row = con.execute("SELECT epsilon FROM budget_spent WHERE dataset = ?", [dataset]).fetchone()
    if row is not None and row[0] is not None:
        return row[0]
    return full_epsilon(counts, delta)


class _BoundTable:
    """The `prv_bounds` table as the accountant's BoundStore (inside the reservation's transaction)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, dataset: str):
        self.con, self.dataset = con, dataset

    @staticmethod
    def _key(event_json: str) -> str:
        return hashlib.sha256(event_json.encode()).hexdigest()[:32]

    def covering(self, base: str, event_json: str, count: int) -> tuple[int, float] | None:
        row = self.con.execute(
            """SELECT count, epsilon FROM prv_bounds WHERE dataset = ? AND base_key = ? AND event_key = ?
               AND count >= ? ORDER BY count LIMIT 1""",
            [self.dataset, base, self._key(event_json), count],
        ).fetchone()
        return (row[0], row[1]) if row else None

    def add(self, base: str, event_json: str, count: int, epsilon: float) -> None:
        self.con.execute("INSERT INTO prv_bounds VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                         [self.dataset, base, self._key(event_json), count, epsilon])


def record_release(
    con: duckdb.DuckDBPyConnection,
    reservation: Reservation,
    *,
    run_id: str,
    mechanism: str,
    answer: str,
    details: Mapping[str, Any],
) -> None:
    """Store the release paid for by `reservation` and mark its query answered, atomically."""
    with transaction(con):
        con.execute(
            """INSERT INTO releases (backlog, query_id, entry_id, run_id, mechanism, answer, details)
               VALUES (?, ?, ?, ?, ?, ?, ?)""",
            [
                reservation.backlog,
                reservation.query_id,
                reservation.entry_id,
                run_id,
                mechanism,
                answer,
                json.dumps(dict(details), sort_keys=True),
            ],
        )
        con.execute(
            "UPDATE queries SET status = 'answered' WHERE backlog = ? AND query_id = ?",
            [reservation.backlog, reservation.query_id],
        )


# what a release's `budget_share` means, wherever it is shown (`dpicl releases`, the run's Prefect table)
SHARE_EXPLAINED = ("share of budget: how much each release raised the dataset's spent ε, as a share of its limit. "
                   "Composition makes the first releases cost most and later ones less (the bound grows roughly like "
                   "the square root of the count), so equal queries show different shares by their order; the shares "
                   "add up to the spent share.")

_RELEASES = """SELECT r.query_id, r.answer, r.mechanism, r.details, l.epsilon_after - l.epsilon_before, r.entry_id,
    b.epsilon FROM releases r JOIN ledger l ON l.entry_id = r.entry_id JOIN budgets b ON b.dataset = l.dataset
    JOIN queries q ON q.backlog = r.backlog AND q.query_id = r.query_id
    WHERE r.backlog = ? {where} ORDER BY q.row_no"""


def _release_row(row: tuple) -> dict[str, Any]:
    query_id, answer, mechanism, details, cost, entry_id, limit = row
    return {
        "query_id": query_id,
        "answer": answer,
        "mechanism": mechanism,
        "details": json.loads(details),
        # how much the release raised the dataset's composed ε bound (order-dependent: see `dpicl releases`)
        "epsilon_cost": cost,
        "budget_share": cost / limit,
        "entry_id": entry_id,
    }


def stored_release(con: duckdb.DuckDBPyConnection, backlog: str, query_id: str) -> dict[str, Any] | None:
    """A past release, served again for free (post-processing of something already paid for)."""
    row = con.execute(_RELEASES.format(where="AND r.query_id = ?"), [backlog, query_id]).fetchone()
    return _release_row(row) if row else None


def stored_releases(con: duckdb.DuckDBPyConnection, backlog: str) -> list[dict[str, Any]]:
    """Every release of a backlog, in backlog order (free to serve again)."""
    return [_release_row(r) for r in con.execute(_RELEASES.format(where=""), [backlog]).fetchall()]


def _rests_on_unproven_claim(event_json: str) -> bool:
    """Whether a stored event's guarantee is a published but unproven claim: a DPS-MOZO event (also inside a composed
    event) whose ``guarantee`` is not ``"proven"`` — entries written before the field existed included."""
    try:
        event = json.loads(event_json)
    except ValueError:
        return False
    if isinstance(event, dict) and event.get("kind") == "composed":
        event = event.get("event")
    if not isinstance(event, dict):
        return False
    default = "paper-claim" if event.get("kind") == "dps_mozo" else "proven"
    return event.get("guarantee", default) != "proven"


def spend_history(con: duckdb.DuckDBPyConnection, dataset: str) -> list[tuple[Any, float]]:
    """(time, spent ε after it) for every ledger entry of `dataset`, oldest first (the bound recorded by each
    reservation: public numbers)."""
    require_budget(con, dataset)
    return [(t, float(eps)) for t, eps in con.execute(
        "SELECT created_at, epsilon_after FROM ledger WHERE dataset = ? ORDER BY entry_id", [dataset]).fetchall()]


def budget_summary(con: duckdb.DuckDBPyConnection, dataset: str) -> dict[str, Any]:
    """Limit, spent and remaining ε of a dataset's budget (spent: what the last reservation recorded, a sound bound
    over every entry); also how many entries rest on an unproven guarantee (``unproven_entries``: DPS-MOZO with
    several shots per token). Reads the composed state, not the ledger: constant time in its length."""
    budget = require_budget(con, dataset)
    counts = budget_state(con, dataset)
    spent = _spent(con, dataset, counts, budget.delta)
    (released,) = con.execute(
        "SELECT count(*) FROM releases r JOIN ledger l ON l.entry_id = r.entry_id WHERE l.dataset = ?", [dataset]
    ).fetchone()
    entries = sum(counts.values())
    return {
        "dataset": dataset,
        "epsilon_limit": budget.epsilon,
        "delta": budget.delta,
        "epsilon_spent": spent,
        "epsilon_remaining": max(0.0, budget.epsilon - spent),
        "ledger_entries": entries,
        "releases": released,
        # reserved but never released (a crash after the reservation): charged all the same
        "unreleased_entries": entries - released,
        # charged on a published but unproven bound (paper 000's claim for DPS-MOZO with shots > 1, opted into)
        "unproven_entries": sum(n for e, n in counts.items() if _rests_on_unproven_claim(e)),
    }


def budget_report(con: duckdb.DuckDBPyConnection, dataset: str, event_json: str | None) -> dict:
    """`budget_summary`, with `queries_still_payable`: how many more queries of the plan whose per-query event is
    `event_json` the budget pays for (None without a plan or for a free one: `plan_is_free`)."""
    from dpicl.privacy.accounting import max_additional
    from dpicl.privacy.accounting.events import PublicDataEvent, event_from_json

    summary = budget_summary(con, dataset)
    event = None if event_json is None else event_from_json(event_json)
    # a free plan (public data only: post-processing) is never limited by the budget: no count
    summary["plan_is_free"] = isinstance(event, PublicDataEvent)
    summary["queries_still_payable"] = None if event is None or summary["plan_is_free"] else max_additional(
        composed_events(budget_state(con, dataset)), event, summary["epsilon_limit"], summary["delta"])
    return summary


def verify_budget(con: duckdb.DuckDBPyConnection, dataset: str) -> dict[str, Any]:
    """Recompute a budget's ε from every ledger entry (the reference) and compare it with the composed state the
    reservations keep: the counts must agree and the recorded ε must not be below the recomputed one."""
    budget = require_budget(con, dataset)
    recounted = count_events(ledger_events(con, dataset))
    stored = budget_state(con, dataset)
    full = full_epsilon(recounted, budget.delta)
    row = con.execute("SELECT epsilon FROM budget_spent WHERE dataset = ?", [dataset]).fetchone()
    recorded = row[0] if row is not None and row[0] is not None else None
    counts_agree = recounted == stored
    return {
        "dataset": dataset,
        "ledger_entries": sum(recounted.values()),
        "distinct_events": len(recounted),
        "state_counts_agree": counts_agree,
        "epsilon_full": full,
        "epsilon_incremental": recorded,
        "epsilon_limit": budget.epsilon,
        "ok": counts_agree and (recorded is None or recorded >= full) and full <= budget.epsilon * (1 + 1e-12),
    }
