"""How every `dpicl` command reports a problem: one `error:` line on stderr and exit code 2.

The line is printed as is (no wrapping, no rich markup read from it) with control characters and undecodable
bytes escaped, so a message naming a user's path or option (e.g. one with a newline or a NUL in it) stays one
line and cannot drive the terminal.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

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
