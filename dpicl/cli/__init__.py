"""The `dpicl` command line (Typer): ingest data, open budgets, plan, answer backlogs, serve releases, demo."""

from __future__ import annotations

import os
from pathlib import Path

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

from dpicl.cli import answer, audit, budget, demo, errors, evaluate, ingest, methods, plan, rerun, serve  # noqa: E402
from dpicl.cli.errors import OneLineErrors  # noqa: E402

# OneLineErrors runs every command inside the one error handler (dpicl.cli.errors.reported_errors); -h as --help
# in every command (subcommands inherit the context settings)
app = typer.Typer(help=__doc__, no_args_is_help=True, pretty_exceptions_show_locals=False, cls=OneLineErrors,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"dpicl {version('dpicl')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print dpicl's version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an error, not one line."),
) -> None:
    errors.show_tracebacks = debug

app.add_typer(budget.budget_app, name="budget")
for command in (ingest.ingest, methods.methods, plan.plan, answer.answer, answer.synthesize, evaluate.evaluate,
                answer.releases, demo.demo, audit.audit, rerun.rerun, serve.serve):
    app.command()(command)

__all__ = ["app"]
