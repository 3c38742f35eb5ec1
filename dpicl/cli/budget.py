"""`dpicl budget open | show | verify`: a private dataset's privacy budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from dpicl.cli.common import DbOption, JsonOption, check_names, read, writing
from dpicl.cli.console import console, err_console
from dpicl.cli.errors import fail

budget_app = typer.Typer(help="Open and inspect privacy budgets.", no_args_is_help=True)


@budget_app.command("open")
def budget_open(
    dataset: str,
    epsilon: Annotated[float, typer.Option(help="total ε the dataset may ever spend")],
    delta: Annotated[float, typer.Option(
        help="δ of the budget: below 1/n for n records (refused otherwise), usually far below")],
    db: DbOption = None,
    replace: Annotated[bool, typer.Option(
        "--replace",
        help="replace the dataset's budget, only if nothing was spent from it yet (no ledger entry)")] = False,
) -> None:
    """Open the privacy budget of a private dataset (once; spend is permanent)."""
    from dpicl.storage.budget_limits import budget_problem
    from dpicl.storage.ledger import open_budget

    check_names((dataset, "dataset name"))
    problem = budget_problem(epsilon, delta)
    if problem is not None:  # before the database is opened (or created)
        fail(problem)
    with writing(db) as con:
        open_budget(con, dataset, epsilon, delta, replace=replace)
    console.print(f"{'replaced the budget by' if replace else 'opened budget'} ε={epsilon:g}, δ={delta:g} on "
                  f"{dataset!r}")
    # docs/PRIVACY.md, "What is treated as public": said where the budget is opened, so nobody learns it later
    console.print("note: the dataset's record count (and, for classification, each label's record count) is treated "
                  "as public — it sets sampling rates that are stored with every release. If these counts are "
                  "themselves sensitive, do not use this dataset as is.")


@budget_app.command("show")
def budget_show(
    dataset: str,
    db: DbOption = None,
    as_json: JsonOption = False,
    plot: Annotated[Optional[Path], typer.Option(help="also write a PNG of ε spent over time to this file")] = None,
) -> None:
    """Limit, spent and remaining ε of a dataset's budget (a sound bound over every ledger entry), and how many
    more queries it pays for at the latest run's plan."""
    from dpicl.storage.ledger import budget_report, spend_history
    from dpicl.storage.runs import latest_plan_event

    check_names((dataset, "dataset name"))
    if plot is not None and (plot.suffix.lower() != ".png" or not plot.parent.is_dir()):
        fail(f"--plot {str(plot)!r}: give a .png file in an existing folder")

    def report(con):
        return budget_report(con, dataset, latest_plan_event(con, dataset)), spend_history(con, dataset)

    summary, history = read(db, report)
    if plot is not None:
        from dpicl.spend_plot import write_spend_plot

        write_spend_plot(plot, dataset, history, summary["epsilon_limit"])
        err_console.print(f"wrote {plot}")
    if as_json:
        print(json.dumps(summary))
        return
    print_budget(summary)


@budget_app.command("verify")
def budget_verify(dataset: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Recompute the budget's ε from every ledger entry and compare it with the value reservations keep (exit 1
    when the kept state disagrees with the entries or is below the recomputed ε)."""
    from dpicl.storage.ledger import verify_budget

    check_names((dataset, "dataset name"))
    result = read(db, verify_budget, dataset)
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


def print_budget(summary: dict) -> None:
    """A budget's summary (`dpicl.storage.ledger.budget_summary`) as a table (also after `dpicl answer`)."""
    from dpicl.planning import payable_words

    table = Table(title=f"privacy budget of {summary['dataset']!r}")
    payable = summary.get("queries_still_payable")
    for column in ("spent ε / limit", "remaining ε", "δ", "entries", "releases", "payable queries"):
        table.add_column(column, justify="right")
    share = summary["epsilon_spent"] / summary["epsilon_limit"]
    table.add_row(
        f"{summary['epsilon_spent']:.3g} / {summary['epsilon_limit']:g} ({share:.0%})",
        f"{summary['epsilon_remaining']:.3g}", f"{summary['delta']:g}", str(summary["ledger_entries"]),
        str(summary["releases"]), payable_words(payable, summary.get("plan_is_free", False)),
    )
    console.print(table)
    if payable is not None:
        console.print("payable queries: how many more queries the budget pays for at the latest run's plan "
                      "(method, teachers, noise); entries: ledger entries, each paid before its draw")
    unproven = summary.get("unproven_entries", 0)
    if unproven:
        console.print(f"{unproven} of the {summary['ledger_entries']} ledger entries rest on an unproven guarantee "
                      "(paper 000's claim for DPS-MOZO with several shots per token, accepted explicitly; "
                      "docs/PRIVACY.md): the spent ε is a valid bound only if that claim holds")
