"""The `dpicl` command line (Typer): ingest data, open budgets, plan, answer backlogs, serve releases, demo."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

# Prefect reads its home at import: keep it project-local unless the user chose one.
os.environ.setdefault("PREFECT_HOME", str(Path.cwd() / ".prefect"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# no network here: the server would log a failed telemetry call on every start
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the temporary server can take longer than 20 s to start on 2 busy cores
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from dpicl import planning  # noqa: E402
from dpicl.audit_cli import audit  # noqa: E402
from dpicl.cli_errors import OneLineErrors, fail  # noqa: E402
from dpicl.rerun_cli import rerun  # noqa: E402
from dpicl.serve_cli import serve  # noqa: E402

app = typer.Typer(help=__doc__, no_args_is_help=True, pretty_exceptions_show_locals=False, cls=OneLineErrors)
budget_app = typer.Typer(help="Open and inspect privacy budgets.", no_args_is_help=True)
app.add_typer(budget_app, name="budget")
console = Console()

DbOption = Annotated[Optional[Path], typer.Option("--db", help="DuckDB file (default: $DPICL_DB or ./dpicl.duckdb)")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _fail(message: str) -> None:
    fail(message)


def _connect(db: Path | None, read_only: bool = False):
    """The database, or one `error:` line if it cannot be opened (locked, newer schema, missing, not DuckDB)."""
    import duckdb

    from dpicl.storage import db as storage

    path = db or storage.default_db_path()
    try:
        return storage.connect(path, read_only=read_only)
    except (storage.DatabaseLockedError, storage.SchemaVersionError, FileNotFoundError) as err:
        _fail(str(err))
    except (duckdb.Error, OSError, ValueError) as err:  # e.g. not a DuckDB file, a directory, a NUL in the path
        _fail(f"cannot open the database {str(path)!r} ({type(err).__name__}); check --db")


@contextmanager
def _writing(db: Path | None) -> Iterator:
    """A read-write connection; if the command fails and it created the database file, the file is removed
    (a refused first ingest leaves no empty database behind)."""
    from dpicl.storage.db import default_db_path

    path = Path(db or default_db_path())
    new = not path.exists()
    con = _connect(path)
    try:
        yield con
    except BaseException:
        con.close()
        if new:
            for leftover in (path, Path(f"{path}.wal")):
                leftover.unlink(missing_ok=True)
        raise
    con.close()


def _check_config(config: str) -> None:
    """One `error:` line for a config that cannot be read, before a flow (and Prefect) starts."""
    from dpicl.config import ConfigError, load_config

    try:
        load_config(config)
    except ConfigError as err:
        _fail(str(err))


def _check_names(*names: tuple[str | None, str]) -> None:
    """One `error:` line for the first unusable dataset or backlog name (dpicl.names), before anything opens."""
    from dpicl.names import name_problem

    for name, what in names:
        problem = None if name is None else name_problem(name, what)
        if problem is not None:
            _fail(problem)


def _parse_fields(pairs: list[str]) -> dict[str, str]:
    fields = {}
    for pair in pairs:
        name, sep, column = pair.partition("=")
        if not sep or name not in {"id", "input", "output", "reference"}:
            _fail(f"--field takes ROLE=COLUMN with ROLE one of id, input, output, reference (got {pair!r})")
        fields[name] = column
    return fields


@app.command()
def ingest(
    path: Annotated[Optional[Path], typer.Argument(help="JSON, JSONL, CSV or Parquet file")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="dataset or backlog name")] = None,
    kind: Annotated[str, typer.Option("--as", help="private | public | queries")] = "private",
    task: Annotated[str, typer.Option(help="task type of a dataset")] = "summarization",
    field: Annotated[list[str], typer.Option("--field", help="ROLE=COLUMN, e.g. input=dialogue")] = [],  # noqa: B006
    config: Annotated[Optional[str], typer.Option(help="ingest every file listed under `data:` of this config")] = None,
    replace: Annotated[bool, typer.Option(help="replace a dataset of the same name (never one with spend)")] = False,
    format: Annotated[Optional[str], typer.Option(
        "--format", help="json | jsonl | csv | tsv | parquet | lines (default: from the file extension)")] = None,
    pattern: Annotated[Optional[str], typer.Option(
        help="with --format lines: a regular expression whose named groups are the columns")] = None,
    header: Annotated[bool, typer.Option(help="CSV/TSV: the first row names the columns")] = True,
    label: Annotated[list[str], typer.Option(
        "--label", help="RAW=NAME: label value in the file -> label name, e.g. 0=negative")] = [],  # noqa: B006
    skip_empty: Annotated[bool, typer.Option(help="leave out rows with an empty input/output")] = False,
    subset: Annotated[str | None, typer.Option(
        "--subset", help="BUCKETS:KEEP[,KEEP...]: only the rows hashed into these buckets, e.g. 3:0,1 "
                         "(and 3:2 for the disjoint rest)")] = None,
    subset_salt: Annotated[str | None, typer.Option(help="salt of the --subset hash")] = None,
    distinct_from_existing: Annotated[bool, typer.Option(
        "--distinct-from-existing", help="the file repeats registered data but is about a different population "
                                         "(recorded with the dataset)")] = False,
    db: DbOption = None,
) -> None:
    """Ingest a private or public dataset, or a backlog of queries; all rows or none. Data that repeats a
    registered private dataset (or, ingested as private, a public one) is refused unless --distinct-from-existing."""
    from dpicl.config import ConfigError, DataSource, load_config
    from dpicl.storage.ingest import IngestError, ingest_source

    if config is not None:
        try:
            sources = load_config(config).data
        except ConfigError as err:
            _fail(str(err))
        if not sources:
            _fail(f"config {config!r} lists no files under `data:`")
        if distinct_from_existing:
            _fail("--distinct-from-existing applies to one file; with --config, set distinct_from_existing: true "
                  "on that file's entry under `data:`")
    else:
        if path is None or name is None:
            _fail("give a file and --name (or --config with a `data:` section)")
        _check_names((name, "dataset name" if kind != "queries" else "backlog name"))
        if kind not in {"private", "public", "queries"}:
            _fail(f"--as must be private, public or queries (got {kind!r})")
        if distinct_from_existing and kind == "queries":
            _fail("--distinct-from-existing applies to datasets; backlogs (--as queries) are not compared")
        fields = _parse_fields(field)
        if kind == "queries":
            fields.setdefault("output", None)
        labels = dict(pair.split("=", 1) for pair in label if "=" in pair)
        if len(labels) != len(label):
            _fail("--label takes RAW=NAME, e.g. --label 0=negative --label 1=positive")
        part = None
        if subset is not None:
            buckets, sep, keep = subset.partition(":")
            try:
                part = {"buckets": int(buckets), "keep": [int(b) for b in keep.split(",")]}
            except ValueError:
                sep = ""
            if not sep:
                _fail(f"--subset takes BUCKETS:KEEP[,KEEP...], e.g. --subset 3:0,1 (got {subset!r})")
            if subset_salt is not None:
                part["salt"] = subset_salt
        elif subset_salt is not None:
            _fail("--subset-salt needs --subset")
        try:
            sources = [DataSource(name=name, path=str(path), kind=kind, task=task, fields=fields, format=format,
                                  pattern=pattern, header=header, labels=labels or None, skip_empty=skip_empty,
                                  subset=part, distinct_from_existing=distinct_from_existing)]
        except ValueError as err:  # pydantic's ValidationError, e.g. an unknown --format
            _fail(f"invalid ingest options: {err}")
    try:
        with _writing(db) as con:
            for source in sources:
                report = ingest_source(con, source, replace=replace)
                skipped = "already present or empty" if source.kind == "queries" else "empty"
                console.print(f"ingested {report.rows_added} rows into {source.name!r}"
                              + (f" ({report.rows_skipped} skipped: {skipped})" if report.rows_skipped else "")
                              + (f" ({report.rows_left_out_by_subset} outside the subset)"
                                 if report.rows_left_out_by_subset else ""))
    except IngestError as err:
        _fail(str(err))


@budget_app.command("open")
def budget_open(
    dataset: str,
    epsilon: Annotated[float, typer.Option(help="total ε the dataset may ever spend")],
    delta: Annotated[float, typer.Option(help="δ of the budget (well below 1/|dataset|)")],
    db: DbOption = None,
) -> None:
    """Open the privacy budget of a private dataset (once; spend is permanent)."""
    from dpicl.storage.budget_limits import budget_problem
    from dpicl.storage.ledger import BudgetError, open_budget

    _check_names((dataset, "dataset name"))
    problem = budget_problem(epsilon, delta)
    if problem is not None:  # before the database is opened (or created)
        _fail(problem)
    try:
        with _writing(db) as con:
            open_budget(con, dataset, epsilon, delta)
    except BudgetError as err:
        _fail(str(err))
    console.print(f"opened budget ε={epsilon:g}, δ={delta:g} on {dataset!r}")
    # docs/PRIVACY.md, "What is treated as public": said where the budget is opened, so nobody learns it later
    console.print("note: the dataset's record count (and, for classification, each label's record count) is treated "
                  "as public — it sets sampling rates that are stored with every release. If these counts are "
                  "themselves sensitive, do not use this dataset as is.")


@budget_app.command("show")
def budget_show(dataset: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Limit, spent and remaining ε of a dataset's budget (a sound bound over every ledger entry)."""
    from dpicl.storage.ledger import BudgetError, budget_summary

    _check_names((dataset, "dataset name"))
    con = _connect(db, read_only=True)
    try:
        summary = budget_summary(con, dataset)
    except BudgetError as err:
        _fail(str(err))
    finally:
        con.close()
    if as_json:
        print(json.dumps(summary))
        return
    _print_budget(summary)


@budget_app.command("verify")
def budget_verify(dataset: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Recompute the budget's ε from every ledger entry and compare it with the value reservations keep (exit 1
    when the kept state disagrees with the entries or is below the recomputed ε)."""
    from dpicl.storage.ledger import BudgetError, verify_budget

    _check_names((dataset, "dataset name"))
    con = _connect(db, read_only=True)
    try:
        result = verify_budget(con, dataset)
    except BudgetError as err:
        _fail(str(err))
    finally:
        con.close()
    if as_json:
        print(json.dumps(result))
    else:
        kept = result["epsilon_incremental"]
        console.print(f"{result['ledger_entries']} ledger entries ({result['distinct_events']} distinct events) of "
                      f"{dataset!r}: ε recomputed from every entry {result['epsilon_full']:.6f}, ε kept by the "
                      f"reservations {'(none yet)' if kept is None else f'{kept:.6f}'}, limit "
                      f"{result['epsilon_limit']:g}; state counts "
                      f"{'agree' if result['state_counts_agree'] else 'DISAGREE'} with the entries")
        console.print("ok" if result["ok"] else "[red]NOT OK[/]: the kept state is not a sound record of the ledger")
    if not result["ok"]:
        raise typer.Exit(1)


def _print_budget(summary: dict) -> None:
    table = Table(title=f"privacy budget of {summary['dataset']!r}")
    for column in ("limit ε", "spent ε", "remaining ε", "δ", "ledger entries", "releases"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{summary['epsilon_limit']:g}", f"{summary['epsilon_spent']:.4f}", f"{summary['epsilon_remaining']:.4f}",
        f"{summary['delta']:g}", str(summary["ledger_entries"]), str(summary["releases"]),
    )
    console.print(table)
    unproven = summary.get("unproven_entries", 0)
    if unproven:
        console.print(f"{unproven} of the {summary['ledger_entries']} ledger entries rest on an unproven guarantee "
                      "(paper 000's claim for DPS-MOZO with several shots per token, accepted explicitly; "
                      "docs/PRIVACY.md): the spent ε is a valid bound only if that claim holds")


@app.command()
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


@app.command()
def answer(
    config: Annotated[str, typer.Argument(help="config file, or the name of a bundled config")],
    db: DbOption = None,
    max_queries: Annotated[Optional[int], typer.Option(help="answer at most this many pending queries")] = None,
) -> None:
    """Run the `answer_backlog` flow: answer the backlog's pending queries, each paid from the budget."""
    _check_config(config)
    if max_queries is not None and max_queries < 1:
        _fail(f"--max-queries must be at least 1 (got {max_queries})")
    from dpicl.flows.answer_backlog import answer_backlog

    result = answer_backlog(config=config, db=str(db) if db else None, max_queries=max_queries)
    console.print(f"answered {result['answered']}, refused {result['refused_budget']} (budget)")
    _print_budget(result["budget"])


@app.command()
def synthesize(
    config: Annotated[str, typer.Argument(help="config (method dp-fewshot or dps-mozo, with a `synthetic` section)")],
    db: DbOption = None,
) -> None:
    """Run the `synthesize_demos` flow: DP synthetic demonstrations as a public dataset, for one ledger charge."""
    _check_config(config)
    from dpicl.flows.synthesize_demos import synthesize_demos

    try:
        result = synthesize_demos(config=config, db=str(db) if db else None)
    except ValueError as err:
        _fail(str(err))
    console.print(f"wrote {result['demonstrations']} DP synthetic demonstrations to {result['dataset']!r} for "
                  f"ε {result['epsilon_cost']:.4f} (ε {result['epsilon_spent']:.4f} spent in all); answer with them "
                  "for free with a config whose method is synthetic-icl")


@app.command()
def evaluate(
    configs: Annotated[list[str], typer.Argument(
        help="configs of one ensemble setting (e.g. samsum-esa samsum-ksa-jem samsum-ksa-ptr): each method is swept")],
    epsilon: Annotated[list[float], typer.Option("--epsilon", "-e", help="ε to sweep (repeat the option)")] = [  # noqa: B006
        1.0, 3.0, 8.0],
    queries: Annotated[int, typer.Option(help="first queries of the backlog to answer")] = 100,
    repetitions: Annotated[int, typer.Option(help="repetitions (fresh subsamples and noise); std over them")] = 1,
    seed: Annotated[Optional[int], typer.Option(help="fixed seed: reproducible benchmark runs only")] = None,
    delta: Annotated[Optional[float], typer.Option(help="δ of each budget (default 1/n^1.1, n private records)")]
    = None,
    metric: Annotated[Optional[list[str]], typer.Option(
        "--metric", help="metric of dpicl.metrics (repeat; default: accuracy, or ROUGE-1/2/L)")] = None,
    out: Annotated[Path, typer.Option(help="folder for the plot (PNG) and the report (markdown)")] = Path("evaluation"),
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run the `evaluate` flow: a privacy–utility sweep (methods × ε, zero-shot and non-private baselines) on
    benchmark data; results to DuckDB (`evaluations`), a plot and a report. Releases nothing, charges no budget."""
    from dpicl.config import ConfigError, load_config
    from dpicl.evaluation.sweep import check_configs, unavailable_metrics

    try:  # the flow checks these too; here they fail before Prefect starts
        unavailable_metrics(check_configs([load_config(c) for c in configs]), metric)
    except (ConfigError, ValueError) as err:
        _fail(str(err))
    from dpicl.flows.evaluate import evaluate as evaluate_flow

    try:
        result = evaluate_flow(configs=configs, epsilons=epsilon, queries=queries, repetitions=repetitions,
                               seed=seed, delta=delta, metrics=metric, out_dir=str(out), db=str(db) if db else None)
    except (ConfigError, ValueError) as err:
        _fail(str(err))
    if as_json:
        print(json.dumps({k: result[k] for k in ("sweep_id", "queries", "delta", "repetitions", "summary", "plot",
                                                 "report")}))
        return
    console.print(result["table"])
    console.print(f"sweep {result['sweep_id']}: plot {result['plot']}, report {result['report']}")


@app.command()
def releases(backlog: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show a backlog's stored releases (serving them again is free: post-processing)."""
    from dpicl.storage.ledger import stored_releases

    _check_names((backlog, "backlog name"))
    con = _connect(db, read_only=True)
    try:
        rows = stored_releases(con, backlog)
    finally:
        con.close()
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title=f"releases of {backlog!r}")
    for column in ("query", "ε cost", "answer"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["query_id"], f"{r['epsilon_cost']:.4f}", r["answer"])
    console.print(table)


@app.command()
def demo(
    db: Annotated[Path, typer.Option("--db", help="DuckDB file of the demo (recreated)")] = Path("dpicl-demo.duckdb"),
    as_json: JsonOption = False,
) -> None:
    """Ingest the demo data, open a budget, answer the backlog with ESA on SmolLM2, check the canaries."""
    from dpicl.demo.run import run_demo

    run_demo(db, console=console, as_json=as_json)


app.command()(audit)
app.command()(rerun)
app.command()(serve)


if __name__ == "__main__":
    app()
