"""How every `dpicl` command reports a problem: one `error:` line on stderr and exit code 2.

The line is printed as is (no wrapping, no rich markup read from it) with control characters and undecodable
bytes escaped, so a message naming a user's path or option (e.g. one with a newline or a NUL in it) stays one
line and cannot drive the terminal.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

# Click's exceptions as the Click that typer runs on raises them (recent typer vendors its own copy of Click)
_click_errors = sys.modules[typer.BadParameter.__module__]

err_console = Console(stderr=True, soft_wrap=True, highlight=False)


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


class OneLineErrors(TyperGroup):
    """The `dpicl` command group: Click's own usage errors in a subcommand (a value of the wrong type, a path with
    a NUL byte, an unknown option) are one `error:` line as well, instead of a usage box."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _click_errors.NoArgsIsHelpError:
            raise  # `dpicl budget` alone shows the help
        except _click_errors.UsageError as err:
            where = f" (see `{err.ctx.command_path} --help`)" if err.ctx is not None else ""
            fail(err.format_message() + where, code=err.exit_code)
