"""`dpicl evaluate`: a privacy–utility sweep through the `evaluate` flow (releases nothing, charges no budget)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from dpicl.cli.common import DbOption, JsonOption
from dpicl.cli.console import console


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
    from dpicl.config import load_config
    from dpicl.evaluation.sweep import check_configs, unavailable_metrics

    # the flow checks these too; here they fail (ConfigError, SweepError: one `error:` line) before Prefect starts
    unavailable_metrics(check_configs([load_config(c) for c in configs]), metric)
    from dpicl.flows.evaluate import evaluate as evaluate_flow

    result = evaluate_flow(configs=configs, epsilons=epsilon, queries=queries, repetitions=repetitions,
                           seed=seed, delta=delta, metrics=metric, out_dir=str(out), db=str(db) if db else None)
    if as_json:
        print(json.dumps({k: result[k] for k in ("sweep_id", "queries", "delta", "repetitions", "summary", "plot",
                                                 "report", "free_ahead")}))
        return
    console.print(result["table"])
    if result["free_ahead"]:
        console.print("[yellow]a free answer scores higher than:[/] " + "; ".join(result["free_ahead"]))
    console.print(f"sweep {result['sweep_id']}: plot {result['plot']}, report {result['report']}")
