"""`dpicl plan`: the one planning entry point. Each method (dpicl/methods/) calibrates its per-query parameters for a
target (ε, δ) and number of queries into a typed Plan, and the Plan says what one query then costs; a plan can be
costed before any private data is touched (OpenDP's measurement with its privacy map)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpicl import methods
from dpicl.methods.base import Facts, Plan
from dpicl.privacy.accounting import max_additional
from dpicl.privacy.accounting.calibration import PAYABLE_SEARCH_LIMIT
from dpicl.privacy.accounting.events import PublicDataEvent


def plan(method: str, *, sampling_rate: float, queries: int, epsilon: float, delta: float,
         **options: Any) -> Plan:
    """Per-query parameters of ``method``; ``options`` set to None are left at the method's default."""
    if not 0 < sampling_rate <= 1:
        raise ValueError(f"--sampling-rate must be in (0, 1] (got {sampling_rate})")
    if queries < 1 or epsilon <= 0 or not 0 < delta < 1:
        raise ValueError("need --queries ≥ 1, --epsilon > 0 and 0 < --delta < 1")
    m = methods.get(method)
    given = {name: value for name, value in options.items() if value is not None}
    unknown = sorted(set(given) - set(m.options))
    if unknown:
        raise ValueError(f"method {method!r} takes no option {', '.join(unknown)}")
    missing = [name for name in m.required if name not in given]
    if missing:
        raise ValueError(f"method {method!r} needs {', '.join('--' + n.replace('_', '-') for n in missing)}")
    return m.calibrate(sampling_rate, queries, epsilon, delta, **given)


def plan_with_settings(cfg, *, sampling_rate: float, queries: int, epsilon: float, delta: float,
                       dataset_size: int = 1) -> Plan:
    """The plan of `cfg`'s method with its settings, at a given sampling rate and number of queries (evaluation
    and benchmarks, which choose both)."""
    return methods.get(cfg.method.name).calibrate(sampling_rate, queries, epsilon, delta,
                                                  **options_of(cfg, dataset_size))


def options_of(cfg, dataset_size: int = 1) -> dict[str, Any]:
    """The options of `cfg`'s method settings that shape its plan beyond (q, T, ε, δ)."""
    facts = Facts(dataset_size=dataset_size, max_new_tokens=cfg.generation.max_new_tokens)
    return methods.get(cfg.method.name).plan_options(cfg.method, facts)


def budget_state(con, dataset: str) -> dict[str, Any]:
    """The open budget of a dataset, its composed state and spent ε (closes the connection)."""
    from dpicl.storage import get_dataset
    from dpicl.storage.ledger import budget_state as composed_state
    from dpicl.storage.ledger import budget_summary, require_budget

    try:
        budget = require_budget(con, dataset)
        info = get_dataset(con, dataset)
        # dp-fewshot generates each label from its own pool: the smallest pool sets the charged rate
        pools = [n for (n,) in con.execute("SELECT count(*) FROM records WHERE dataset = ? GROUP BY output",
                                           [dataset]).fetchall()] if info["task"] == "classification" else []
        return {
            "dataset": dataset,
            "epsilon_limit": budget.epsilon,
            "delta": budget.delta,
            "n_records": info["n_records"],
            "label_pool_sizes": pools,
            "counts": composed_state(con, dataset),
            "epsilon_spent": budget_summary(con, dataset)["epsilon_spent"],
        }
    finally:
        con.close()


def payable(state: dict[str, Any], result: Plan) -> dict[str, Any]:
    """How many more queries planned like `result` the open budget can pay for."""
    from dpicl.privacy.accounting.composed import composed_events

    spent = composed_events(state["counts"])
    event = result.event()
    free = isinstance(event, PublicDataEvent)
    return {
        "dataset": state["dataset"],
        "epsilon_limit": state["epsilon_limit"],
        "delta": state["delta"],
        "epsilon_spent": state["epsilon_spent"],
        "ledger_entries": sum(state["counts"].values()),
        # a free method (post-processing) is never limited by the budget: no count
        "queries_payable": None if free else max_additional(spent, event, state["epsilon_limit"], state["delta"]),
        "free": free,
    }


def describe(result: Plan, budget: dict[str, Any] | None = None) -> str:
    m = methods.get(result.method)
    rate = getattr(result, "sampling_rate", None)
    lines = [
        f"[bold]{m.name}[/] — {m.summary}",
        f"  target: ε = {result.epsilon:g}, δ = {result.delta:g} over {result.queries} queries"
        + (f", sampling rate q = {rate:.6g}" if rate is not None else ""),
        result.describe(),
    ]
    if budget is not None:
        b = budget
        if b.get("free"):
            pays = "costs nothing: any number of queries"
        elif m.unit == "syntheses":  # one ledger charge pays for a whole synthesis
            pays = (f"pays for {payable_words(b['queries_payable'])} more syntheses of {result.queries} "
                    "demonstrations at these settings")
        else:
            pays = f"pays for {payable_words(b['queries_payable'])} more queries at these settings"
        lines.append(f"  open budget of {b['dataset']!r}: ε {b['epsilon_spent']:.4f} of {b['epsilon_limit']:g} spent "
                     f"({b['ledger_entries']} entries) — {pays}")
    return "\n".join(lines)


def payable_words(count: int | None, free: bool = False) -> str:
    """A number of payable queries for people: a free plan is never limited, and the search for the count stops at
    PAYABLE_SEARCH_LIMIT (a count there means at least that many)."""
    if free:
        return "unlimited (free)"
    if count is None:
        return "no plan yet"
    return f"≥ {count:,}" if count >= PAYABLE_SEARCH_LIMIT else f"{count:,}"


def for_people(numbers: Mapping[str, Any]) -> str:
    """A plan's numbers as `name=value, ...` with floats at 4 significant digits (log lines, not the stored plan)."""
    def show(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(show(v) for v in value) + "]"
        return str(value)

    return ", ".join(f"{name}={show(value)}" for name, value in numbers.items())
