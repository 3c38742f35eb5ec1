"""Privacy budgets and the ε ledger (DESIGN.md, privacy invariants 3, 4, 7, 8).

A budget belongs to a private dataset; its total (ε, δ) is computed by an accountant over *every* ledger
entry of that dataset. The life of one release:

1. `reserve` — in one transaction: lock the budget row, compute the accountant's ε of all entries so far
   plus the new event, refuse if it exceeds the limit, otherwise write the ledger entry. Committed *before*
   the mechanism draws its noise, so a crash afterwards leaves the spend charged.
2. the mechanism runs (outside this module);
3. `record_release` — in one transaction: write the release (referencing its ledger entry) and mark the
   query answered. A ledger entry without a release stays charged forever; a retry pays again.

Ledger entries are never updated or deleted. The accountant is injected (`EpsilonOf`) so that this module
stays a pure storage module; it receives the stored event JSON strings and the budget's δ.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from dpicl.storage.db import transaction

EpsilonOf = Callable[[Sequence[str], float], float]
"""accountant: (event JSON strings, δ) → sound upper bound on the composed ε."""


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


def open_budget(con: duckdb.DuckDBPyConnection, dataset: str, epsilon: float, delta: float) -> Budget:
    """Open the (only) budget of a private dataset. A budget is never replaced: that would forget spend."""
    from dpicl.names import name_problem
    from dpicl.storage.budget_limits import budget_problem

    problem = name_problem(dataset, "dataset name") or budget_problem(epsilon, delta)
    if problem is not None:
        raise BudgetError(problem)
    with transaction(con):
        row = con.execute("SELECT kind FROM datasets WHERE name = ?", [dataset]).fetchone()
        if row is None:
            raise BudgetError(f"no dataset named {dataset!r}: ingest it first with `dpicl ingest`")
        if row[0] != "private":
            raise BudgetError(f"dataset {dataset!r} is public: budgets are opened on private datasets only")
        if get_budget(con, dataset) is not None:
            raise BudgetError(
                f"dataset {dataset!r} already has a budget; its spend is permanent, so it cannot be reopened"
            )
        con.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES (?, ?, ?)", [dataset, epsilon, delta])
    return Budget(dataset, epsilon, delta)


def get_budget(con: duckdb.DuckDBPyConnection, dataset: str) -> Budget | None:
    row = con.execute("SELECT dataset, epsilon, delta FROM budgets WHERE dataset = ?", [dataset]).fetchone()
    return Budget(*row) if row else None


def require_budget(con: duckdb.DuckDBPyConnection, dataset: str) -> Budget:
    budget = get_budget(con, dataset)
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


def reserve(
    con: duckdb.DuckDBPyConnection,
    *,
    dataset: str,
    run_id: str,
    backlog: str,
    query_id: str,
    mechanism: str,
    event_json: str,
    epsilon_of: EpsilonOf,
) -> Reservation | None:
    """Charge one event to the budget, or return None when the budget cannot pay for it."""
    with transaction(con):
        # Touching the budget row serialises concurrent reservations: a second writer gets a conflict.
        touched = con.execute(
            "UPDATE budgets SET epsilon = epsilon WHERE dataset = ? RETURNING epsilon, delta", [dataset]
        ).fetchone()
        if touched is None:
            require_budget(con, dataset)
        limit, delta = touched
        events = ledger_events(con, dataset)
        before = epsilon_of(events, delta)
        after = epsilon_of([*events, event_json], delta)
        if after > limit:
            return None
        (entry_id,) = con.execute(
            """INSERT INTO ledger (dataset, run_id, backlog, query_id, mechanism, event, epsilon_before, epsilon_after)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING entry_id""",
            [dataset, run_id, backlog, query_id, mechanism, event_json, before, after],
        ).fetchone()
    return Reservation(entry_id, dataset, backlog, query_id, before, after)


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


_RELEASES = """SELECT r.query_id, r.answer, r.mechanism, r.details, l.epsilon_after - l.epsilon_before, r.entry_id
    FROM releases r JOIN ledger l ON l.entry_id = r.entry_id
    JOIN queries q ON q.backlog = r.backlog AND q.query_id = r.query_id
    WHERE r.backlog = ? {where} ORDER BY q.row_no"""


def _release_row(row: tuple) -> dict[str, Any]:
    query_id, answer, mechanism, details, cost, entry_id = row
    return {
        "query_id": query_id,
        "answer": answer,
        "mechanism": mechanism,
        "details": json.loads(details),
        "epsilon_cost": cost,
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


def budget_summary(con: duckdb.DuckDBPyConnection, dataset: str, epsilon_of: EpsilonOf) -> dict[str, Any]:
    """Limit, spent and remaining ε of a dataset's budget, from the accountant over all its entries; also how many
    entries rest on an unproven guarantee (``unproven_entries``: DPS-MOZO with several shots per token)."""
    budget = require_budget(con, dataset)
    events = ledger_events(con, dataset)
    spent = epsilon_of(events, budget.delta)
    (released,) = con.execute(
        "SELECT count(*) FROM releases r JOIN ledger l ON l.entry_id = r.entry_id WHERE l.dataset = ?", [dataset]
    ).fetchone()
    return {
        "dataset": dataset,
        "epsilon_limit": budget.epsilon,
        "delta": budget.delta,
        "epsilon_spent": spent,
        "epsilon_remaining": max(0.0, budget.epsilon - spent),
        "ledger_entries": len(events),
        "releases": released,
        # reserved but never released (a crash after the reservation): charged all the same
        "unreleased_entries": len(events) - released,
        # charged on a published but unproven bound (paper 000's claim for DPS-MOZO with shots > 1, opted into)
        "unproven_entries": sum(_rests_on_unproven_claim(e) for e in events),
    }
