"""How every `dpicl` command reports a problem: one `error:` line on stderr and exit code 2.

`fail(message)` prints the line and exits; `reported_errors()` is the one place where the exceptions a command
expects (`EXPECTED`: a refused input, an unknown name, a locked or newer database, ...) become that line. The
`dpicl` group (`OneLineErrors`) runs every command inside it, and turns Click's own usage errors into the same
line, so a command raises or calls `fail` and never prints an error itself.

The line is printed as is (no wrapping, no rich markup read from it) with control characters and undecodable
bytes escaped, so a message naming a user's path or option (e.g. one with a newline or a NUL in it) stays one
line and cannot drive the terminal. Messages are the exceptions' own: the code that raises them never puts a
value of a private record or query in them (e.g. `dpicl.storage.ingest.IngestError`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.markup import escape
from typer.core import TyperGroup

from dpicl.cli.console import err_console

# Click's exceptions as the Click that typer runs on raises them (recent typer vendors its own copy of Click)
_click_errors = sys.modules[typer.BadParameter.__module__]


def printable(message: str) -> str:
    """`message` with every non-printable character (newline, NUL, escape, surrogate, ...) as its escape."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii")
                   for c in message)


def fail(message: str, code: int = 2, details: str | None = None) -> None:
    """Print the `error:` line (then `details`, e.g. a server log's tail, as is) and exit with `code`."""
    err_console.print(f"[bold red]error:[/] {escape(printable(message))}")
    if details:
        err_console.print(escape(details))
    raise typer.Exit(code)


def _expected() -> tuple[type[BaseException], ...]:
    """The exceptions that are a refusal, not a bug: ValueError (the project's IngestError, BudgetError,
    ConfigError, RerunError, ... and pydantic's ValidationError derive from it), LookupError (an unknown run,
    dataset or sweep), a missing file, and the database's and `dpicl serve`'s own errors."""
    from dpicl.serve import ServeError
    from dpicl.storage.db import DatabaseLockedError, SchemaVersionError

    return ValueError, LookupError, FileNotFoundError, DatabaseLockedError, SchemaVersionError, ServeError


# `dpicl --debug`: expected exceptions keep their traceback too (for a bug report)
show_tracebacks = False


@contextmanager
def reported_errors() -> Iterator[None]:
    """Run a command: an expected exception (`_expected`) becomes one `error:` line and exit code 2. KeyError and
    IndexError are LookupErrors too, but from a bug: they stay tracebacks, as does everything else."""
    try:
        yield
    except (KeyError, IndexError):
        raise
    except _expected() as err:
        if show_tracebacks:
            raise
        fail(str(err))


class OneLineErrors(TyperGroup):
    """The `dpicl` command group: every subcommand runs inside `reported_errors`, and Click's own usage errors in
    a subcommand (a value of the wrong type, a path with a NUL byte, an unknown option) are one `error:` line as
    well, instead of a usage box."""

    def invoke(self, ctx):
        try:
            with reported_errors():
                return super().invoke(ctx)
        except _click_errors.NoArgsIsHelpError:
            raise  # `dpicl budget` alone shows the help
        except _click_errors.UsageError as err:
            where = f" (see `{err.ctx.command_path} --help`)" if err.ctx is not None else ""
            fail(err.format_message().replace("Value error, ", "") + where, code=err.exit_code)
