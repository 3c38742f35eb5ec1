"""The command line: plan (JSON vectors and readable summary), ingest errors, budgets, releases."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dpicl.cli import app

runner = CliRunner()


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("epsilon,expected", [(1, 1.27186), (3, 0.78704), (8, 0.54819)])
def test_plan_esa_reproduces_the_papers_noise_multipliers_with_sensitivity_two(epsilon, expected):
    out = _json(runner.invoke(app, [
        "plan", "--method", "esa", "--sampling-rate", "0.027152", "--queries", "100",
        "--epsilon", str(epsilon), "--delta", "5e-5", "--json",
    ]))
    assert out["noise_multiplier"] == pytest.approx(expected, rel=5e-3)
    assert out["sensitivity"] == 2
    assert out["sigma"] == pytest.approx(2 * out["noise_multiplier"])


def test_plan_rejects_unknown_method_and_missing_target():
    result = runner.invoke(app, ["plan", "--method", "nope", "--sampling-rate", "0.1", "--epsilon", "1",
                                 "--delta", "1e-5", "--json"])
    assert result.exit_code == 2 and "unknown method" in result.output
    result = runner.invoke(app, ["plan", "--method", "esa", "--json"])
    assert result.exit_code == 2 and "--sampling-rate" in result.output


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_ingest_budget_and_plan_summary_against_the_open_budget(tmp_path):
    db = tmp_path / "cli.duckdb"
    data = _write(tmp_path / "d.jsonl", [{"k": f"id{i}", "text": f"note {i}", "sum": f"s {i}"} for i in range(200)])
    result = runner.invoke(app, ["ingest", str(data), "--name", "notes", "--as", "private",
                                 "--field", "id=k", "--field", "input=text", "--field", "output=sum", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["budget", "open", "notes", "--epsilon", "2", "--delta", "1e-5",
                               "--db", str(db)]).exit_code == 0
    again = runner.invoke(app, ["budget", "open", "notes", "--epsilon", "9", "--delta", "1e-5", "--db", str(db)])
    assert again.exit_code == 2 and "already has a budget" in again.output
    shown = _json(runner.invoke(app, ["budget", "show", "notes", "--db", str(db), "--json"]))
    assert shown["epsilon_limit"] == 2 and shown["epsilon_spent"] == 0 and shown["ledger_entries"] == 0

    # without --dataset, the only open budget of the database is used for the readable summary
    result = runner.invoke(app, ["plan", "--method", "esa", "--queries", "10", "--teachers", "5",
                                 "--shots", "2", "--db", str(db)])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "'notes'" in flat and "pays for 10 more queries" in flat


def test_ingest_error_names_file_row_and_field_but_not_the_value(tmp_path):
    db = tmp_path / "cli.duckdb"
    rows = [{"id": "a", "input": "fine", "output": "x"}, {"id": "b", "input": None, "output": "secret-value-123"}]
    data = _write(tmp_path / "bad.jsonl", rows)
    result = runner.invoke(app, ["ingest", str(data), "--name", "bad", "--db", str(db)])
    assert result.exit_code == 2
    flat = " ".join(result.output.split())
    assert "bad.jsonl" in flat and "row 2" in flat and "input" in flat
    assert "secret-value-123" not in result.output


def test_ingest_from_the_data_section_of_a_config(tmp_path):
    import yaml

    _write(tmp_path / "p.jsonl", [{"n": f"x{i}", "t": f"text {i}", "s": f"sum {i}"} for i in range(5)])
    _write(tmp_path / "q.jsonl", [{"n": "q1", "t": "a query"}])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "c", "private_dataset": "p", "backlog": "q",
        "data": [
            {"name": "p", "kind": "private", "path": "p.jsonl", "fields": {"id": "n", "input": "t", "output": "s"}},
            {"name": "q", "kind": "queries", "path": "q.jsonl", "fields": {"id": "n", "input": "t", "output": None}},
        ],
    }))
    db = tmp_path / "c.duckdb"
    result = runner.invoke(app, ["ingest", "--config", str(config), "--db", str(db)])
    assert result.exit_code == 0, result.output
    from dpicl.storage.db import connect

    con = connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM records WHERE dataset = 'p'").fetchone()[0] == 5
    assert con.execute("SELECT count(*) FROM queries WHERE backlog = 'q'").fetchone()[0] == 1
    con.close()
