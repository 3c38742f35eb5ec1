"""`dpicl answer`, `dpicl synthesize` and `dpicl releases`: answer a backlog (or synthesize demonstrations)
through its Prefect flow, each release paid from the budget, and show the stored releases."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table

from dpicl.cli.budget import print_budget
from dpicl.cli.common import DbOption, JsonOption, check_config, check_names, read
from dpicl.cli.console import console, err_console
from dpicl.cli.errors import fail


def answer(
    config: Annotated[str, typer.Argument(help="config file, or the name of a bundled config")],
    db: DbOption = None,
    max_queries: Annotated[Optional[int], typer.Option(help="answer at most this many pending queries")] = None,
) -> None:
    """Run the `answer_backlog` flow: answer the backlog's pending queries, each paid from the budget."""
    from dpicl.preflight import check_answer, nothing_pending

    cfg = check_config(config)
    if max_queries is not None and max_queries < 1:
        fail(f"--max-queries must be at least 1 (got {max_queries})")

    def warn(warning: str) -> None:
        err_console.print(f"warning: {warning}", markup=False)

    # one `error:` line for what the run would fail on, before Prefect starts; a `warning:` line for what it would
    # pay for in vain
    claimable, idle = read(db, lambda con: (check_answer(con, cfg, warn=warn), nothing_pending(con, cfg.backlog)))
    if not claimable:  # nothing to do: said in one line, no flow run
        console.print(idle, soft_wrap=True)
        return
    from dpicl.flows.answer_backlog import answer_backlog

    result = answer_backlog(config=config, db=str(db) if db else None, max_queries=max_queries)
    console.print(f"answered {result['answered']}, refused {result['refused_budget']} (budget)")
    print_budget(result["budget"])
    # a URL may hold a password: not echoed
    where = "" if not db else " --db <the same URL>" if "://" in db else f" --db {db}"
    console.print(f"the answers: `dpicl releases {cfg.backlog}{where}` (serving them again is free)", soft_wrap=True)


def synthesize(
    config: Annotated[str, typer.Argument(help="config (method dp-fewshot or dps-mozo, with a `synthetic` section)")],
    db: DbOption = None,
) -> None:
    """Run the `synthesize_demos` flow: DP synthetic demonstrations as a public dataset, for one ledger charge."""
    from dpicl.preflight import check_synthesis

    read(db, check_synthesis, check_config(config))
    from dpicl.flows.synthesize_demos import synthesize_demos

    result = synthesize_demos(config=config, db=str(db) if db else None)
    console.print(f"wrote {result['demonstrations']} DP synthetic demonstrations to {result['dataset']!r} for "
                  f"ε {result['epsilon_cost']:.4f} (ε {result['epsilon_spent']:.4f} spent in all); answer with them "
                  "for free with a config whose method is synthetic-icl")


def releases(backlog: str, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show a backlog's stored releases (serving them again is free: post-processing)."""
    from dpicl.storage.ledger import SHARE_EXPLAINED, stored_releases
    from dpicl.storage.queries import require_backlog

    def known_releases(con, name):
        require_backlog(con, name)  # an unknown backlog (a typo) is an error, not an empty table
        return stored_releases(con, name)

    check_names((backlog, "backlog name"))
    rows = read(db, known_releases, backlog)
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title=f"releases of {backlog!r}", caption=SHARE_EXPLAINED)
    for column in ("query", "share of budget", "answer"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["query_id"], f"{r['budget_share']:.2%}", r["answer"])
    console.print(table)
