"""`dpicl methods`: every registered method, what it does, where it comes from, and its settings (dpicl/methods/)."""

from __future__ import annotations

import json

from pydantic_core import PydanticUndefined
from rich.table import Table

from dpicl import methods as registry
from dpicl.cli.common import JsonOption
from dpicl.cli.console import console
from dpicl.methods.recommend import RECOMMENDATIONS, recommended_for


def _settings(method) -> dict:
    """Each setting of the method's config section and its default (None: required, or chosen from the budget)."""
    out = {}
    for name, field in method.Settings.model_fields.items():
        if name == "name":
            continue
        out[name] = None if field.default is PydanticUndefined else field.default
    return out


def describe(method) -> dict:
    return {"name": method.name, "kind": method.kind, "task_types": list(method.task_types),
            "needs_public_data": method.needs_public, "summary": method.summary, "paper": method.paper,
            "settings": _settings(method), "recommended_for": recommended_for(method.name)}


def methods(as_json: JsonOption = False) -> None:
    """The methods a config can name: their kind (ensemble, token, synthesis, public), task types, whether they need
    a public dataset, their settings with defaults, and the paper each comes from."""
    rows = [describe(m) for m in registry.all_methods()]
    if as_json:
        print(json.dumps(rows, default=str))
        return
    table = Table(title="dpicl methods")
    for column in ("method", "kind", "tasks", "public data", "settings (defaults)", "paper"):
        table.add_column(column, overflow="fold")
    for row in rows:
        settings = ", ".join(f"{k}={v}" for k, v in row["settings"].items())
        table.add_row(f"[bold]{row['name']}[/]\n{row['summary']}", row["kind"], ", ".join(row["task_types"]),
                      "needed" if row["needs_public_data"] else "-", settings, row["paper"])
    console.print(table)
    advice = Table(title="where to start (measured with SmolLM2-135M, docs/BENCHMARKS.md; check on your data with "
                         "`dpicl evaluate`)")
    for column in ("task", "method", "measured"):
        advice.add_column(column, overflow="fold")
    for r in RECOMMENDATIONS:
        settings = ", ".join(f"{k}: {str(v).lower()}" for k, v in r.settings.items())
        advice.add_row(r.situation, f"[bold]{r.method}[/]" + (f"\n{settings}" if settings else ""), r.measured)
    console.print(advice)
