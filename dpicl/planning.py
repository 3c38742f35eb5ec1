"""`dpicl plan`: the one planning entry point. Every method registers how to calibrate its per-query
parameters for a target (ε, δ) and number of queries, and the privacy event one query then costs;
a plan can be costed before any private data is touched (STYLE.md, OpenDP)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpicl.privacy.accounting import max_additional
from dpicl.privacy.accounting.events import PrivacyEvent, event_from_json
from dpicl.privacy.mechanisms import esa, rnm


@dataclass(frozen=True)
class PlannedMethod:
    name: str
    summary: str
    plan: Callable[..., dict[str, Any]]  # (sampling_rate, queries, epsilon, delta) -> parameters
    event: Callable[[dict[str, Any]], PrivacyEvent]  # plan result -> per-query event


METHODS: dict[str, PlannedMethod] = {
    "esa": PlannedMethod(
        "esa",
        "Embedding Space Aggregation (paper 001): Gaussian noise on the sum of teacher embeddings, Δ = 2",
        lambda sampling_rate, queries, epsilon, delta: esa.plan(sampling_rate, queries, epsilon, delta),
        lambda result: esa.cost(result["noise_multiplier"], result["sampling_rate"]),
    ),
    "rnm": PlannedMethod(
        "rnm",
        "Report-Noisy-Max voting (paper 001): Gaussian noise on the teachers' label-vote histogram, Δ = √2",
        lambda sampling_rate, queries, epsilon, delta: rnm.plan(sampling_rate, queries, epsilon, delta),
        lambda result: rnm.cost(result["noise_multiplier"], result["sampling_rate"]),
    ),
}


def _method(name: str) -> PlannedMethod:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def plan(method: str, *, sampling_rate: float, queries: int, epsilon: float, delta: float) -> dict[str, Any]:
    if not 0 < sampling_rate <= 1:
        raise ValueError(f"--sampling-rate must be in (0, 1] (got {sampling_rate})")
    if queries < 1 or epsilon <= 0 or not 0 < delta < 1:
        raise ValueError("need --queries ≥ 1, --epsilon > 0 and 0 < --delta < 1")
    return _method(method).plan(sampling_rate, queries, epsilon, delta)


def budget_state(con, dataset: str) -> dict[str, Any]:
    """The open budget of a dataset and every event charged to it (closes the connection)."""
    from dpicl.storage import get_dataset
    from dpicl.storage.ledger import ledger_events, require_budget

    try:
        budget = require_budget(con, dataset)
        return {
            "dataset": dataset,
            "epsilon_limit": budget.epsilon,
            "delta": budget.delta,
            "n_records": get_dataset(con, dataset)["n_records"],
            "events": ledger_events(con, dataset),
        }
    finally:
        con.close()


def payable(state: dict[str, Any], method: str, result: dict[str, Any]) -> dict[str, Any]:
    """How many more queries planned like `result` the open budget can pay for."""
    from dpicl.privacy.accounting import total_epsilon

    spent = [event_from_json(e) for e in state["events"]]
    event = _method(method).event(result)
    return {
        "dataset": state["dataset"],
        "epsilon_limit": state["epsilon_limit"],
        "delta": state["delta"],
        "epsilon_spent": total_epsilon(spent, state["delta"]),
        "ledger_entries": len(spent),
        "queries_payable": max_additional(spent, event, state["epsilon_limit"], state["delta"]),
    }


def describe(result: dict[str, Any]) -> str:
    m = _method(result["method"])
    lines = [
        f"[bold]{m.name}[/] — {m.summary}",
        f"  target: ε = {result['epsilon']:g}, δ = {result['delta']:g} over {result['queries']} queries, "
        f"Poisson rate q = {result['sampling_rate']:.6g}",
        f"  noise multiplier {result['noise_multiplier']:.5f} per unit sensitivity; sensitivity {result['sensitivity']:g}; "
        f"noise std σ = {result['sigma']:.5f}",
    ]
    if "budget" in result:
        b = result["budget"]
        lines.append(
            f"  open budget of {b['dataset']!r}: ε {b['epsilon_spent']:.4f} of {b['epsilon_limit']:g} spent "
            f"({b['ledger_entries']} entries) — pays for {b['queries_payable']} more queries at these settings"
        )
    return "\n".join(lines)
