"""`dpicl plan`: per-query noise (or ε) for a target (ε, δ) and number of queries, and what an open budget can
still pay (`dpicl.planning`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError

from dpicl import methods, planning
from dpicl.cli.choices import Mechanism, MethodName
from dpicl.cli.common import DbOption, JsonOption
from dpicl.cli.common import check_names as _check_names
from dpicl.cli.common import connect as _connect
from dpicl.cli.console import console, err_console
from dpicl.cli.errors import fail as _fail
from dpicl.methods.base import Budget, Facts


def plan(
    config: Annotated[Optional[str], typer.Argument(
        help="a run config (file or bundled name): plan exactly what `dpicl answer CONFIG` would store, against "
             "its dataset's open budget; the method flags below are then not used")] = None,
    method: Annotated[Optional[MethodName], typer.Option(
        help=f"the method to plan (default {methods.DEFAULT}; `dpicl methods` describes them)")] = None,
    sampling_rate: Annotated[Optional[float], typer.Option(help="Poisson rate q per record and query")] = None,
    queries: Annotated[int, typer.Option(
        help="number of queries the budget must pay for (dp-fewshot: synthetic demonstrations)")] = 100,
    epsilon: Annotated[Optional[float], typer.Option(help="target ε (default: the dataset's budget)")] = None,
    delta: Annotated[Optional[float], typer.Option(help="target δ (default: the dataset's budget)")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="private dataset whose open budget to plan against")] = None,
    teachers: Annotated[Optional[int], typer.Option(
        help="teachers per query (sets q with --shots when q is not given; default 10)")] = None,
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
        help="private records, for the default sampling rate (default: the --dataset's)")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(
        help="dps-mozo, adapmixed, dp-fewshot: tokens per answer or demonstration (default 50)")] = None,
    alpha: Annotated[Optional[int], typer.Option(
        help="dps-mozo: Rényi order (default: the smallest with ε̃ ≥ ε/2, as paper 000); adapmixed: (18)")] = None,
    beta: Annotated[Optional[float], typer.Option(
        help="adapmixed, dps-mozo: Rényi ball radius (default: from the budget)")] = None,
    members: Annotated[Optional[int], typer.Option(help="adapmixed: ensemble members (default 20)")] = None,
    splits: Annotated[Optional[int], typer.Option(help="dp-fewshot: splits per token (default 10)")] = None,
    mechanism: Annotated[Optional[Mechanism], typer.Option(help="dp-fewshot: the noise")] = None,
    screen_lambda: Annotated[Optional[float], typer.Option(help="adapmixed: noisy-screen λ (default 1e-4)")] = None,
    screen_sigma: Annotated[Optional[float], typer.Option(help="adapmixed: noisy-screen σ (default 1e-2)")] = None,
    accept_unproven_guarantee: Annotated[bool, typer.Option(
        "--accept-unproven-guarantee",
        help="dps-mozo with --shots > 1: plan on paper 000's unproven per-token claim (docs/PRIVACY.md)")] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Per-query noise (or ε) for a target (ε, δ) and number of queries; and what an open budget can still pay."""
    settings_flags = {"teachers": teachers, "shots": shots, "delta0_fraction": delta0_fraction,
                      "em_epsilon": em_epsilon, "levels": levels, "count_epsilon": count_epsilon, "alpha": alpha,
                      "beta": beta, "members": members, "splits": splits,
                      "mechanism": mechanism.value if mechanism else None,
                      "screen_lambda": screen_lambda, "screen_sigma": screen_sigma,
                      "accept_unproven_guarantee": accept_unproven_guarantee or None}
    given = {k: v for k, v in settings_flags.items() if v is not None}
    if config is not None:
        flags = [f"--{k.replace('_', '-')}" for k, v in {**given, "method": method, "sampling_rate": sampling_rate,
                                                         "dataset": dataset, "dataset_size": dataset_size,
                                                         "max_new_tokens": max_new_tokens, "epsilon": epsilon,
                                                         "delta": delta}.items() if v is not None]
        if flags:
            _fail(f"{', '.join(flags)}: a config sets the method, its settings and the dataset; edit the config "
                  "or plan without it")
        result, budget_state, settings = _plan_config(config, db)
    else:
        result, budget_state, settings = _plan_flags(method.value if method else methods.DEFAULT, given, sampling_rate,
                                                     queries, epsilon, delta, dataset, dataset_size, max_new_tokens,
                                                     db, as_json)
    for warning in methods.get(result.method).warnings(settings, result):
        err_console.print(f"warning: {warning}", markup=False)
    budget = None
    if budget_state is not None:
        try:
            budget = planning.payable(budget_state, result)
        except ValueError as err:  # e.g. an accountant that cannot compose this method with the ledger's events
            _fail(f"cannot plan {result.method} against the budget of {budget_state['dataset']!r}: {err}")
    if as_json:
        print(json.dumps({**result.numbers(), **({"budget": budget} if budget is not None else {})}))
        return
    console.print(planning.describe(result, budget))


def _budget_state(db, dataset: str) -> dict:
    from dpicl.storage.db import DatabaseLockedError, SchemaVersionError

    try:
        return planning.budget_state(_connect(db, read_only=True), dataset)
    except (SchemaVersionError, DatabaseLockedError, FileNotFoundError, ValueError, LookupError) as err:
        _fail(str(err))


def _plan_config(config: str, db):
    """The plan `dpicl answer CONFIG` (or `dpicl synthesize CONFIG`) would store now, the budget state and the
    method's settings."""
    from dpicl.config import ConfigError, load_config

    try:
        cfg = load_config(config)
    except ConfigError as err:
        _fail(str(err))
    state = _budget_state(db, cfg.private_dataset)
    m = methods.get(cfg.method.name)
    facts = Facts(dataset_size=state["n_records"], max_new_tokens=cfg.generation.max_new_tokens,
                  label_pool_sizes=tuple(state["label_pool_sizes"]))
    epsilon = state["epsilon_limit"]
    if m.kind == "synthesis" and cfg.synthetic is not None and cfg.synthetic.epsilon is not None:
        epsilon = cfg.synthetic.epsilon  # a synthesis is calibrated for its own ε
    try:
        return m.plan(cfg.method, facts, Budget(epsilon, state["delta"])), state, cfg.method
    except ValueError as err:
        _fail(str(err))


def _plan_flags(name, given, sampling_rate, queries, epsilon, delta, dataset, dataset_size, max_new_tokens, db,
                as_json):
    """The plan of method `name` with the settings given as flags (the others at the method's defaults), the budget
    state and the settings."""
    _check_names((dataset, "dataset name"))
    try:
        m = methods.get(name)
    except ValueError as err:
        _fail(str(err))
    unknown = sorted(set(given) - set(m.Settings.model_fields))
    if unknown:
        _fail(f"method {name!r} takes no option {', '.join(unknown)}")
    try:
        settings = m.Settings.model_validate({"name": name, **given})
    except ValidationError as err:
        problems = [e for e in err.errors() if e["type"] != "missing"]  # e.g. synthetic-icl's demos_dataset
        if problems:
            _fail("; ".join(f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" for e in problems))
        settings = m.Settings.model_construct(name=name, **given)
    state = None
    if dataset is None and not as_json:
        dataset = _only_budget(db)
    if dataset is not None:
        state = _budget_state(db, dataset)
        epsilon = epsilon if epsilon is not None else state["epsilon_limit"]
        delta = delta if delta is not None else state["delta"]
        dataset_size = dataset_size or state["n_records"]
    facts = Facts(dataset_size=dataset_size, max_new_tokens=max_new_tokens or 50,
                  label_pool_sizes=tuple((state or {}).get("label_pool_sizes") or ()))
    try:
        if sampling_rate is None and (dataset_size is not None or not m.subsamples):
            sampling_rate = m.sampling_rate(settings, facts)
        missing = [n for n, v in (("--sampling-rate", sampling_rate), ("--epsilon", epsilon), ("--delta", delta))
                   if v is None]
        if missing:
            _fail(f"{', '.join(missing)} needed (or --dataset NAME to plan against its open budget"
                  + (", or --dataset-size N for the default sampling rate)" if "--sampling-rate" in missing else ")"))
        return planning.plan(name, sampling_rate=sampling_rate, queries=queries, epsilon=epsilon, delta=delta,
                             **m.plan_options(settings, facts)), state, settings
    except ValueError as err:
        _fail(str(err))


def _only_budget(db: str | None) -> str | None:
    """The dataset of the only open budget in the database, if there is exactly one (for `plan`'s summary)."""
    from dpicl.storage.db import default_db_path, is_file_target

    path = db or default_db_path()
    if is_file_target(path) and not Path(path).is_file():
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

