"""The consoles every `dpicl` command prints through: `console` (stdout: results, tables, JSON-free text) and
`err_console` (stderr: `error:` lines, warnings, progress). Rich looks up sys.stdout/sys.stderr at each print, so
one instance each serves the whole process (and Typer's CliRunner in the tests)."""

from __future__ import annotations

from rich.console import Console

console = Console()
# as is: no wrapping (a long message stays one line), no highlighting of numbers or paths
err_console = Console(stderr=True, soft_wrap=True, highlight=False)
