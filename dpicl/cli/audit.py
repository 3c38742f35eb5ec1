"""`dpicl audit`: empirical privacy audits of the mechanisms (``dpicl.privacy.audit``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dpicl.cli.console import console, err_console
from dpicl.cli.errors import fail
from dpicl.privacy.audit import AUDITS, DEFAULT_CONFIDENCE, DEFAULT_DELTA, run_audit

_NAMES = ", ".join(AUDITS)


def audit(
    mechanism: Annotated[Optional[str], typer.Argument(
        help=f"mechanism to audit (default: all): {_NAMES}")] = None,
    trials: Annotated[Optional[int], typer.Option(
        help="runs per neighbouring dataset (default: each mechanism's own, 4,000–1,000,000)")] = None,
    seed: Annotated[Optional[int], typer.Option(
        help="fixed seed, for reproducible audits (synthetic inputs only; default: a cryptographic seed)")] = None,
    confidence: Annotated[float, typer.Option(
        help="confidence of the Clopper–Pearson lower bound on ε")] = DEFAULT_CONFIDENCE,
    delta: Annotated[float, typer.Option(help="δ at which ε is claimed and bounded")] = DEFAULT_DELTA,
    broken: Annotated[Optional[str], typer.Option(
        hidden=True, help="run a deliberately broken variant (demonstration/test only)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object {mechanism: result}.")] = False,
) -> None:
    """Run mechanisms on worst-case neighbouring inputs, bound ε from below, and compare with the claimed ε.

    Pass: the lower bound (Clopper–Pearson on held-out trials) is at most the ε claimed for one invocation.

    Exit code 1 if any audit fails, 2 on bad arguments.
    """
    if mechanism is not None and mechanism not in AUDITS:
        fail(f"unknown mechanism {mechanism!r}; valid names: {_NAMES}")
    names = list(AUDITS) if mechanism is None else [mechanism]
    if broken is not None:
        if mechanism is None:
            fail("--broken needs a mechanism")
        if broken not in AUDITS[mechanism].broken_variants:
            fail(f"unknown broken variant {broken!r} of {mechanism}; valid: "
                 f"{', '.join(AUDITS[mechanism].broken_variants)}")
    if not 0 < confidence < 1:
        fail(f"--confidence must be in (0, 1), got {confidence}")
    if not 0 < delta < 1:
        fail(f"--delta must be in (0, 1), got {delta}")
    if trials is not None and trials < 100:
        fail(f"--trials must be at least 100, got {trials}")

    results = {}
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), console=err_console, transient=True,
                  disable=not err_console.is_terminal) as progress:
        task = progress.add_task("auditing", total=len(names))
        for name in names:
            progress.update(task, description=f"auditing {name}")
            r = run_audit(name, trials=trials, seed=seed, confidence=confidence, delta=delta, broken=broken)
            results[name] = r
            progress.advance(task)
            if not err_console.is_terminal:  # no live bar: one line per mechanism
                err_console.print(f"audited {name}: ε lower bound {r.epsilon_lower_bound:.3f}, claimed "
                                  f"{r.claimed_epsilon:.3f} ({r.seconds:.1f} s)")

    if as_json:
        sys.stdout.write(json.dumps({name: r.to_dict() for name, r in results.items()}, indent=2) + "\n")
    else:
        table = Table(title=f"Privacy audit (δ = {delta:g}, confidence {confidence:g})")
        for column, justify in [("mechanism", "left"), ("claimed ε", "right"), ("ε lower bound", "right"),
                                ("passed", "center"), ("trials", "right"), ("event", "left")]:
            table.add_column(column, justify=justify)
        for name, r in results.items():
            table.add_row(name + (f" [dim](broken: {r.broken})[/]" if r.broken else ""),
                          f"{r.claimed_epsilon:.3f}", f"{r.epsilon_lower_bound:.3f}",
                          "[green]yes[/]" if r.passed else "[bold red]NO[/]", f"{r.trials:,}", r.event)
        console.print(table)
        for name, r in results.items():
            if r.note:
                console.print(f"[dim]{name}: {r.note}[/]")
    if not all(r.passed for r in results.values()):
        raise typer.Exit(1)
