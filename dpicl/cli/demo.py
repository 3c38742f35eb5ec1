"""`dpicl demo`: the whole product on the bundled, fictional demo data (`dpicl.demo.run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpicl.cli.common import JsonOption
from dpicl.cli.console import console


def demo(
    db: Annotated[Path, typer.Option("--db", help="DuckDB file of the demo (recreated)")] = Path("dpicl-demo.duckdb"),
    as_json: JsonOption = False,
) -> None:
    """Ingest the demo data, open a budget, answer the backlog on SmolLM2, check the canaries and the quality."""
    from dpicl.demo.run import run_demo

    run_demo(db, console=console, as_json=as_json)
