"""Flow `synthesize_demos`: DP synthetic demonstrations from a private dataset (paper 002's DP few-shot
generation, or DPS-MOZO+Off of paper 000), written as a public dataset for one ledger charge. In-context learning
with them (method `synthetic-icl`) then answers any number of queries at no further cost. The writing runs under
the database's single-writer concurrency limit (`dpicl.flows.locking`)."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from dpicl.config import resolve_config_path
from dpicl.flows.locking import database_writer
from dpicl.storage.db import default_db_path
from dpicl.tasks.synthesize import synthesize


@flow(name="synthesize_demos", persist_result=False)
def synthesize_demos(config: str, db: str | None = None) -> dict:
    """Write the config's `synthetic.name` dataset; returns its name, size and the ε charged."""
    config_path, db_path = str(resolve_config_path(config)), str(db or default_db_path())
    with database_writer(db_path):
        result = synthesize(config_path, db_path)  # checks what the run needs first (dpicl.preflight)
    create_markdown_artifact(
        "\n".join([
            f"### DP synthetic demonstrations `{result['dataset']}`",
            "",
            "| demonstrations | ε charged | ε spent in all |",
            "|---|---|---|",
            f"| {result['demonstrations']} | {result['epsilon_cost']:.4f} | {result['epsilon_spent']:.4f} |",
        ]),
        key="synthetic-demos", description="one ledger entry pays for every demonstration; texts stay in DuckDB",
    )
    return result
