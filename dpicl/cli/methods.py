"""`dpicl methods`: every registered method, what it does, where it comes from, and its settings (dpicl/methods/);
`dpicl methods NAME`: one method, each setting with its meaning, and what it was measured to do."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from pydantic_core import PydanticUndefined
from rich.markup import escape
from rich.padding import Padding

from dpicl import methods as registry
from dpicl.cli.common import JsonOption
from dpicl.cli.console import console
from dpicl.cli.errors import fail
from dpicl.methods.recommend import RECOMMENDATIONS, recommended_for


def _settings(method) -> dict:
    """Each setting of the method's config section and its default (None: required, or chosen from the budget)."""
    return {name: None if field.default is PydanticUndefined else field.default
            for name, field in method.Settings.model_fields.items() if name != "name"}


def _setting_help(method) -> dict:
    """Each setting's meaning (its attribute docstring in dpicl/methods/)."""
    return {name: " ".join((field.description or "").split())
            for name, field in method.Settings.model_fields.items() if name != "name"}


def describe(method) -> dict:
    return {"name": method.name, "kind": method.kind, "task_types": list(method.task_types),
            "needs_public_data": method.needs_public, "summary": method.summary, "paper": method.paper,
            "settings": _settings(method), "required_settings": _required(method),
            "setting_help": _setting_help(method),
            "recommended_for": recommended_for(method.name)}


def _heading(row: dict) -> str:
    public = ("needs a public_dataset" if row["needs_public_data"] else
              "public demonstrations only" if row["kind"] == "public" else "private data only")
    return (f"[bold]{row['name']}[/] — {row['kind']} · {', '.join(row['task_types'])} · {public} · "
            f"paper {escape(row['paper'])}")


def _required(method) -> list[str]:
    return [name for name, field in method.Settings.model_fields.items() if name != "name" and field.is_required()]


def _setting_value(name: str, value, required: list[str]) -> str:
    """How a default reads in YAML terms: a required setting has none; None is what leaving it out gives."""
    if name in required:
        return "required"
    if isinstance(value, str) and (not value or any(c.isspace() for c in value)):  # a template: quoted, \n shown
        shown = json.dumps(value, ensure_ascii=False)
        return shown if len(shown) <= 60 else shown[:59] + "…"
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _indented(text: str, level: int = 2) -> Padding:
    return Padding(text, (0, 0, 0, level), expand=False)


def methods(
    name: Annotated[Optional[str], typer.Argument(help="one method: each setting with its meaning")] = None,
    as_json: JsonOption = False,
) -> None:
    """The methods a config can name: their kind (ensemble, token, synthesis, public), task types, whether they need
    a public dataset, their settings with defaults, and the paper each comes from; `dpicl methods NAME` explains
    one method's settings."""
    if name is not None and name not in registry.names():
        fail(f"no method named {name!r}; the methods are: {', '.join(registry.names())}")
    rows = [describe(m) for m in registry.all_methods() if name in (None, m.name)]
    if as_json:
        print(json.dumps(rows, default=str))
        return
    if name is not None:
        _one(rows[0])
        return
    # one block per method (readable at any width: a table folds setting names mid-word at 80 columns)
    for row in rows:
        console.print(_heading(row))
        console.print(_indented(escape(row["summary"])))
        console.print(_indented("settings: " + ", ".join(f"{k}={_setting_value(k, v, row['required_settings'])}"
                                                         for k, v in row["settings"].items())))
        console.print()
    console.print("[bold]where to start[/] (measured with SmolLM2-135M, docs/BENCHMARKS.md; what each measured: "
                  "`dpicl methods NAME`; check on data like yours, not on the private data, with `dpicl evaluate`)")
    for r in RECOMMENDATIONS:
        settings = ", ".join(f"{k}: {str(v).lower()}" for k, v in r.settings.items())
        console.print(_indented(f"{r.situation}: [bold]{r.method}[/]" + (f" ({settings})" if settings else "")))


def _one(row: dict) -> None:
    console.print(_heading(row))
    console.print(_indented(escape(row["summary"])))
    console.print("\n[bold]settings[/] (the config's `method:` section; default in brackets)")
    for key, value in row["settings"].items():
        default = escape(f"[{_setting_value(key, value, row['required_settings'])}]")
        console.print(_indented(f"[bold]{key}[/] {default}: {escape(row['setting_help'][key])}"))
    for r in RECOMMENDATIONS:
        if r.method == row["name"]:
            settings = ", ".join(f"{k}: {str(v).lower()}" for k, v in r.settings.items())
            console.print(f"\n[bold]recommended for[/] {r.situation}" + (f" ({settings})" if settings else ""))
            console.print(_indented(f"measured: {escape(r.measured)} (docs/BENCHMARKS.md, \"{r.section}\")"))
