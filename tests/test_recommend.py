"""`dpicl methods`'s advice on where to start: every recommended method and setting exists and validates, and
every figure it quotes is one docs/BENCHMARKS.md records, in a section that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpicl import methods
from dpicl.cli import app
from dpicl.config import TaskConfig
from dpicl.methods.recommend import RECOMMENDATIONS

BENCHMARKS = (Path(__file__).parents[1] / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("advice", RECOMMENDATIONS, ids=lambda r: r.method)
def test_each_recommendation_names_valid_settings_and_figures_the_benchmarks_record(advice):
    method = methods.get(advice.method)
    own = {k: v for k, v in advice.settings.items() if not k.startswith("task.")}
    method.Settings(name=advice.method, **own)  # raises on a setting the method does not have
    task = {k.removeprefix("task."): v for k, v in advice.settings.items() if k.startswith("task.")}
    assert set(task) <= set(TaskConfig.model_fields)
    assert f"\n## {advice.section}\n" in BENCHMARKS, f"no section {advice.section!r} in docs/BENCHMARKS.md"
    for number in re.findall(r"\d+\.\d+", advice.measured):
        assert number in BENCHMARKS, f"{number} is not a figure of docs/BENCHMARKS.md"


def test_the_methods_command_shows_the_advice_and_lists_it_per_method(monkeypatch):
    from dpicl.cli.console import console

    monkeypatch.setattr(console, "_width", 250)  # wide enough that no cell wraps (set once the console exists)
    result = CliRunner().invoke(app, ["methods"])
    assert result.exit_code == 0, result.output
    assert "where to start" in result.output
    assert all(r.situation in " ".join(result.output.split()) for r in RECOMMENDATIONS)
    listed = json.loads(CliRunner().invoke(app, ["methods", "--json"]).output.strip().splitlines()[-1])
    by_name = {m["name"]: m["recommended_for"] for m in listed}
    assert by_name["sga"] == ["text answers, with a public dataset of the same kind"] and by_name["ksa-jem"] == []
