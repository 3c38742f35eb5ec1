"""`dpicl serve`: a local Prefect server and the dpicl deployments, served until Ctrl-C (``dpicl.serve``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dpicl.cli.common import DbOption
from dpicl.cli.console import console, err_console
from dpicl.cli.errors import fail


def serve(
    config: Annotated[str, typer.Argument(help="config file, or the name of a bundled config")] = "demo",
    db: DbOption = None,
    interval: Annotated[Optional[float], typer.Option(
        help="answer the backlog every this many seconds (default: prefect.yaml's schedule, hourly)")] = None,
    cron: Annotated[Optional[str], typer.Option(
        help="answer the backlog on this cron schedule instead, e.g. '0 * * * *' (UTC)")] = None,
    port: Annotated[int, typer.Option(help="port of the Prefect server and UI")] = 4200,
    host: Annotated[str, typer.Option(help="address the Prefect server binds to (loopback only, unless "
                                           "--allow-remote)")] = "127.0.0.1",
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="allow a --host reachable from other machines (a warning is printed)")] = False,
    max_queries: Annotated[Optional[int], typer.Option(
        help="most queries one run answers; a call through the API may ask for fewer, never more "
             "(default: the whole backlog)")] = None,
    out: Annotated[Path, typer.Option(help="folder of served evaluations' plots and reports")] = Path("evaluation"),
) -> None:
    """Start a local Prefect server (UI), serve the answer-backlog deployment on a schedule and the evaluate and
    rerun deployments on demand, until Ctrl-C. Flow runs write the database one at a time. The API needs the
    token printed on the first start on a terminal (kept in <db>.serve-token); calls cannot choose the config or
    the database."""
    from dpicl.serve import ServeError
    from dpicl.serve import serve as run_serve

    if interval is not None and cron is not None:
        fail("give --interval or --cron, not both")
    try:
        run_serve(config, str(db) if db else None, interval=interval, cron=cron, host=host, port=port,
                  echo=lambda line: (err_console if line.startswith("warning:") else console).print(
                      line, soft_wrap=True, highlight=False, markup=False),
                  allow_remote=allow_remote, max_queries=max_queries, out_dir=str(out))
    except ServeError as err:
        message, _, log_tail = str(err).partition("\n")  # a server that failed to start: its log's tail follows
        fail(message, details=log_tail or None)
