"""`dpicl plan`: per-query noise (or ε) for a target (ε, δ) and number of queries, and what an open budget can
still pay (`dpicl.planning`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from dpicl import planning
from dpicl.cli.common import DbOption, JsonOption
from dpicl.cli.common import check_names as _check_names
from dpicl.cli.common import connect as _connect
from dpicl.cli.console import console
from dpicl.cli.errors import fail as _fail


def plan(
    method: Annotated[str, typer.Option(help=f"one of: {', '.join(planning.METHODS)}")] = "esa",
    sampling_rate: Annotated[Optional[float], typer.Option(help="Poisson rate q per record and query")] = None,
    queries: Annotated[int, typer.Option(
        help="number of queries the budget must pay for (dp-fewshot: synthetic demonstrations)")] = 100,
    epsilon: Annotated[Optional[float], typer.Option(help="target ε (default: the dataset's budget)")] = None,
    delta: Annotated[Optional[float], typer.Option(help="target δ (default: the dataset's budget)")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="private dataset whose open budget to plan against")] = None,
    teachers: Annotated[int, typer.Option(help="teachers per query (sets q with --shots when q is not given)")] = 10,
    shots: Annotated[Optional[int], typer.Option(
        help="demonstrations per teacher (default 4); dps-mozo: one-shot prompts per token (1; more need "
             "--accept-unproven-guarantee); dp-fewshot: per split (2)")] = None,
    delta0_fraction: Annotated[Optional[float], typer.Option(
        help="ksa-ptr: share of δ for the PTR failures of all queries, δ0 = share·δ/(q·T) (default 0.5)")] = None,
    em_epsilon: Annotated[Optional[float], typer.Option(
        help="ksa-ptr: per-query FindBestK ε (default: T of them spend half of ε); sga: per-query ε of the split "
             "choices, summed over the levels (default: with the counts, 25:15, T of them spend 40 % of ε)")] = None,
    levels: Annotated[Optional[int], typer.Option(
        help="sga: levels of the DPM tree (default: as in the config, 3)")] = None,
    count_epsilon: Annotated[Optional[float], typer.Option(
        help="sga: per-query ε of the noisy counts, summed over the levels (default: see --em-epsilon)")]
    = None,
    dataset_size: Annotated[Optional[int], typer.Option(
        help="dps-mozo, dp-fewshot: private records (default: the --dataset's)")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(
        help="dps-mozo, adapmixed, dp-fewshot: tokens per answer or demonstration (default 50)")] = None,
    alpha: Annotated[Optional[int], typer.Option(
        help="dps-mozo: Rényi order (default: the smallest with ε̃ ≥ ε/2, as paper 000); adapmixed: (18)")] = None,
    beta: Annotated[Optional[float], typer.Option(
        help="adapmixed, dps-mozo: Rényi ball radius (default: from the budget)")] = None,
    members: Annotated[Optional[int], typer.Option(help="adapmixed: ensemble members (default 20)")] = None,
    splits: Annotated[Optional[int], typer.Option(help="dp-fewshot: splits per token (default 10)")] = None,
    mechanism: Annotated[Optional[str], typer.Option(help="dp-fewshot: gaussian | exponential")] = None,
    screen_lambda: Annotated[Optional[float], typer.Option(help="adapmixed: noisy-screen λ (default 1e-4)")] = None,
    screen_sigma: Annotated[Optional[float], typer.Option(help="adapmixed: noisy-screen σ (default 1e-2)")] = None,
    accept_unproven_guarantee: Annotated[bool, typer.Option(
        help="dps-mozo with --shots > 1: plan on paper 000's unproven per-token claim (docs/PRIVACY.md)")] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Per-query noise (or ε) for a target (ε, δ) and number of queries; and what an open budget can still pay."""
    budget_state = None
    _check_names((dataset, "dataset name"))
    if dataset is None and not as_json:
        dataset = _only_budget(db)
    if dataset is not None:
        from dpicl.storage.db import DatabaseLockedError, SchemaVersionError

        try:
            budget_state = planning.budget_state(_connect(db, read_only=True), dataset)
        except (SchemaVersionError, DatabaseLockedError, FileNotFoundError, ValueError, LookupError) as err:
            _fail(str(err))
        epsilon = epsilon if epsilon is not None else budget_state["epsilon_limit"]
        delta = delta if delta is not None else budget_state["delta"]
        dataset_size = dataset_size or budget_state["n_records"]
    token_level = method in ("dps-mozo", "adapmixed", "dp-fewshot")
    if token_level and max_new_tokens is None:
        max_new_tokens = 50
    if method == "dps-mozo":
        shots = shots or 1
        if dataset_size is None:
            _fail("--dataset-size N needed for dps-mozo (or --dataset NAME to plan against its open budget)")
        sampling_rate = sampling_rate or min(1.0, shots / dataset_size)
    elif method in ("adapmixed", "synthetic-icl"):
        sampling_rate = 1.0  # adapmixed: every member answers every token (no subsampling); synthetic-icl: free
    elif sampling_rate is None and dataset_size is not None:
        per_query = (splits or 10) * (shots or 2) if method == "dp-fewshot" else teachers * (shots or 4)
        pools = (budget_state or {}).get("label_pool_sizes") if method == "dp-fewshot" else None
        # a classification dataset's labels are generated from per-label pools: the smallest sets the rate
        sampling_rate = min(1.0, per_query / (min(pools) if pools else dataset_size))
    given = (("--sampling-rate", sampling_rate), ("--epsilon", epsilon), ("--delta", delta))
    missing = [n for n, v in given if v is None]
    if missing:
        _fail(f"{', '.join(missing)} needed (or --dataset NAME to plan against its open budget)")
    try:
        if method == "sga" and levels is None:
            from dpicl.config import SGAConfig

            levels = SGAConfig.model_fields["levels"].default
        options = dict(delta0_fraction=delta0_fraction, em_epsilon=em_epsilon, levels=levels,
                       count_epsilon=count_epsilon, alpha=alpha, beta=beta, members=members, splits=splits,
                       mechanism=mechanism, screen_lambda=screen_lambda, screen_sigma=screen_sigma)
        if token_level:
            options["max_new_tokens"] = max_new_tokens
        if method == "dps-mozo":
            options.update(dataset_size=dataset_size, shots=shots,
                           accept_unproven_guarantee=accept_unproven_guarantee or None)
        result = planning.plan(method, sampling_rate=sampling_rate, queries=queries, epsilon=epsilon, delta=delta,
                               **options)
    except ValueError as err:
        _fail(str(err))
    if budget_state is not None:
        try:
            result["budget"] = planning.payable(budget_state, method, result)
        except ValueError as err:  # e.g. an accountant that cannot compose this method with the ledger's events
            _fail(f"cannot plan {method} against the budget of {dataset!r}: {err}")
    if as_json:
        print(json.dumps(result))
        return
    console.print(planning.describe(result))


def _only_budget(db: Path | None) -> str | None:
    """The dataset of the only open budget in the database, if there is exactly one (for `plan`'s summary)."""
    from dpicl.storage.db import default_db_path

    path = db or default_db_path()
    if not Path(path).is_file():
        return None
    try:
        con = _connect(path, read_only=True)
    except Exception:  # locked by a running flow, or an older schema: plan without it
        return None
    try:
        names = [r[0] for r in con.execute("SELECT dataset FROM budgets").fetchall()]
    finally:
        con.close()
    return names[0] if len(names) == 1 else None

