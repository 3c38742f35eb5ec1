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
    assert result.exit_code == 2 and "'nope' is not one of 'esa'" in result.output, result.output
    result = runner.invoke(app, ["plan", "--method", "esa", "--json"])
    assert result.exit_code == 2 and "--sampling-rate" in result.output


PAPER_ARGS = ["--sampling-rate", "0.027152", "--queries", "100", "--delta", "5e-5", "--json"]


@pytest.mark.parametrize("epsilon", [1, 3, 8])
def test_plan_ksa_jem_gives_a_certified_per_query_epsilon(epsilon):
    out = _json(runner.invoke(app, ["plan", "--method", "ksa-jem", "--epsilon", str(epsilon), *PAPER_ARGS]))
    assert out["method"] == "ksa-jem" and out["sensitivity"] == 2
    assert out["epsilon_certified"] <= epsilon
    # the §11.1 per-query values 0.77 / 1.65 / 2.67 spend slightly less than 1 / 3 / 8
    assert out["epsilon_em"] == pytest.approx({1: 0.77, 3: 1.65, 8: 2.67}[epsilon], rel=0.01)


def test_plan_ksa_ptr_gives_certified_parameters():
    from scipy.stats import norm

    out = _json(runner.invoke(app, ["plan", "--method", "ksa-ptr", "--epsilon", "3", *PAPER_ARGS]))
    assert out["method"] == "ksa-ptr" and out["sensitivity"] == 2
    assert out["epsilon_certified"] <= 3
    assert out["delta0"] == pytest.approx(0.5 * 5e-5 / (0.027152 * 100))
    assert out["sigma"] == pytest.approx(2 * out["noise_multiplier"])
    assert out["offset"] == pytest.approx(norm.isf(out["delta0"]) * out["sigma"])
    assert out["epsilon_em"] > 0 and out["noise_multiplier"] > 0
    # the paper's ε = 3 setting with the corrected δ0 (§11.1): ε_EM 0.9, frac 0.99 → σ ≈ 1.869, offset ≈ 15.43
    out = _json(runner.invoke(app, ["plan", "--method", "ksa-ptr", "--epsilon", "3.004565", "--delta0-fraction",
                                    "0.99", "--em-epsilon", "0.9", *PAPER_ARGS]))
    assert out["epsilon_em"] == 0.9 and out["noise_multiplier"] == pytest.approx(1.869, rel=1e-3)
    assert out["offset"] == pytest.approx(15.43, abs=0.02) and out["epsilon_certified"] <= 3.004565


def test_plan_ksa_options_are_checked_and_summaries_name_their_parameters():
    result = runner.invoke(app, ["plan", "--method", "esa", "--epsilon", "3", "--delta0-fraction", "0.5",
                                 *PAPER_ARGS])
    assert result.exit_code == 2 and "delta0_fraction" in result.output
    result = runner.invoke(app, ["plan", "--method", "ksa-ptr", "--epsilon", "3", "--delta0-fraction", "1.5",
                                 *PAPER_ARGS])
    assert result.exit_code == 2 and "--delta0-fraction" in result.output  # the flag as the user typed it
    readable = [a for a in PAPER_ARGS if a != "--json"]
    for method, words in [("ksa-ptr", ["ε_EM", "δ0", "offset"]), ("ksa-jem", ["ε_EM"])]:
        result = runner.invoke(app, ["plan", "--method", method, "--epsilon", "3", *readable,
                                     "--db", "/nonexistent/x.duckdb"])
        assert result.exit_code == 0, result.output
        flat = " ".join(result.output.split())
        assert all(w in flat for w in words) and "noise std" not in flat


def test_planned_ksa_events_and_what_a_budget_pays():
    from dpicl import planning
    from dpicl.privacy.accounting import SubsampledExponentialEvent, SubsampledPTREvent

    q, T, eps, delta = 0.027152, 100, 3.0, 5e-5
    ptr = planning.plan("ksa-ptr", sampling_rate=q, queries=T, epsilon=eps, delta=delta, delta0_fraction=0.5,
                        em_epsilon=None)
    event = ptr.event()
    assert event == SubsampledPTREvent(ptr.epsilon_em, ptr.noise_multiplier, ptr.delta0, q)
    state = {"dataset": "d", "epsilon_limit": eps, "delta": delta, "counts": {}, "epsilon_spent": 0.0}
    paid = planning.payable(state, ptr)["queries_payable"]
    assert T <= paid < T / 0.5  # ε pays for T; the δ share of the failures caps it below T/frac
    jem = planning.plan("ksa-jem", sampling_rate=q, queries=T, epsilon=eps, delta=delta)
    assert jem.event() == SubsampledExponentialEvent(jem.epsilon_em, q, 2.0, "ksa_jem")
    assert planning.payable(state, jem)["queries_payable"] >= T


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
    result = runner.invoke(app, ["ingest", str(config), "--db", str(db)])
    assert result.exit_code == 0, result.output
    from dpicl.storage.db import connect

    con = connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM records WHERE dataset = 'p'").fetchone()[0] == 5
    assert con.execute("SELECT count(*) FROM queries WHERE backlog = 'q'").fetchone()[0] == 1
    con.close()
    # the same config again: the dataset unchanged, the backlog's total said (new queries are appended)
    _write(tmp_path / "q.jsonl", [{"n": "q1", "t": "a query"}, {"n": "q2", "t": "another"}])
    again = " ".join(runner.invoke(app, ["ingest", str(config), "--db", str(db)]).output.split())
    assert "'p' is already ingested from this content with these options: unchanged" in again
    assert ("ingested 1 rows into 'q' (1 skipped: already present or empty); the backlog now holds 2 (2 pending)"
            in again)


def test_ingest_refuses_registered_private_data_again_unless_declared_distinct(tmp_path):
    import yaml

    db = tmp_path / "twice.duckdb"
    data = _write(tmp_path / "d.jsonl", [{"id": f"r{i}", "input": f"secret-note-{i}", "output": f"s {i}"}
                                         for i in range(6)])
    base = ["ingest", str(data), "--db", str(db)]
    assert runner.invoke(app, [*base, "--name", "notes"]).exit_code == 0
    assert runner.invoke(app, ["budget", "open", "notes", "--epsilon", "1", "--delta", "1e-5",
                               "--db", str(db)]).exit_code == 0
    for extra in (["--name", "notes-2"], ["--name", "notes-pub", "--as", "public"]):
        result = runner.invoke(app, [*base, *extra])
        flat = " ".join(result.output.split())
        assert result.exit_code == 2 and "private dataset 'notes'" in flat and "6 of its 6 records" in flat
        assert "--distinct-from-existing" in flat and "secret-note" not in result.output
    # a replace as public would leave the budget on public data
    result = runner.invoke(app, [*base, "--name", "notes", "--as", "public", "--replace"])
    assert result.exit_code == 2 and "has a privacy budget" in " ".join(result.output.split())
    shown = _json(runner.invoke(app, ["budget", "show", "notes", "--db", str(db), "--json"]))
    assert shown["epsilon_limit"] == 1 and shown["ledger_entries"] == 0
    # declared a different population: accepted and recorded
    assert runner.invoke(app, [*base, "--name", "cohort-b", "--distinct-from-existing"]).exit_code == 0
    # in a config, per data source (the flag with --config is refused: it would apply to every file)
    config = tmp_path / "c.yaml"
    source = {"name": "cohort-c", "kind": "private", "path": "d.jsonl", "distinct_from_existing": True}
    config.write_text(yaml.safe_dump({"name": "c", "private_dataset": "cohort-c", "backlog": "q", "data": [source]}))
    result = runner.invoke(app, ["ingest", "--config", str(config), "--db", str(db), "--distinct-from-existing"])
    assert result.exit_code == 2 and "distinct_from_existing: true" in result.output
    assert runner.invoke(app, ["ingest", str(config), "--db", str(db)]).exit_code == 0
    from dpicl.storage.db import connect

    con = connect(db, read_only=True)
    maps = dict(con.execute("SELECT name, field_map->>'distinct_from_existing' FROM datasets").fetchall())
    con.close()
    assert maps == {"notes": None, "cohort-b": '["notes"]', "cohort-c": '["cohort-b","notes"]'}


def test_ingest_a_line_format_with_labels_from_the_command_line(tmp_path):
    db = tmp_path / "lines.duckdb"
    data = tmp_path / "sst.txt"
    data.write_text("1 a fine film\n0 a dull film\n1 a bright film\n", encoding="utf-8")
    args = ["ingest", str(data), "--name", "sst", "--as", "private", "--task", "classification",
            "--format", "lines", "--pattern", r"^(?P<label>[01]) (?P<text>.+)$",
            "--field", "input=text", "--field", "output=label", "--label", "0=negative", "--label", "1=positive",
            "--db", str(db)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    from dpicl.storage.db import connect

    con = connect(db, read_only=True)
    labels = [r for (r,) in con.execute("SELECT output FROM records WHERE dataset = 'sst' ORDER BY row_no").fetchall()]
    con.close()
    assert labels == ["positive", "negative", "positive"]
    bad = runner.invoke(app, [*args[:-2], "--label", "zero", "--db", str(tmp_path / "other.duckdb")])
    assert bad.exit_code == 2 and "RAW=NAME" in bad.output


def test_plan_dps_mozo_gives_the_papers_beta():
    """MECHANISMS §11.1 (000 Table 5, SAMSum ε = 2): N = 14,732, 4 shots, 100 queries × 50 tokens, α = 8."""
    args = ["plan", "--method", "dps-mozo", "--dataset-size", "14732", "--shots", "4", "--accept-unproven-guarantee",
            "--queries", "100",
            "--max-new-tokens", "50", "--epsilon", "2", "--delta", str(1 / 14732), "--json"]
    out = _json(runner.invoke(app, [*args, "--alpha", "8"]))
    assert out["method"] == "dps-mozo" and out["alpha"] == 8
    assert out["beta"] == pytest.approx(0.1786, abs=5e-5)
    assert out["epsilon_certified"] <= 2
    assert _json(runner.invoke(app, args))["alpha"] == 8  # α chosen as 000 does (smallest with ε̃ ≥ ε/2)
    result = runner.invoke(app, ["plan", "--method", "dps-mozo", "--epsilon", "2", "--delta", "1e-5", "--json"])
    assert result.exit_code == 2 and "--dataset-size" in result.output


def test_plan_adapmixed_and_dp_fewshot_are_certified():
    out = _json(runner.invoke(app, ["plan", "--method", "adapmixed", "--queries", "100", "--max-new-tokens", "25",
                                    "--members", "20", "--epsilon", "4", "--delta", "1e-5", "--json"]))
    assert out["method"] == "adapmixed" and out["epsilon_certified"] <= 4 and out["beta"] > 0
    assert out["rdp_per_query"] * 100 <= out["rdp_budget"]
    out = _json(runner.invoke(app, ["plan", "--method", "dp-fewshot", "--mechanism", "exponential", "--queries", "4",
                                    "--max-new-tokens", "25", "--splits", "10", "--shots", "2", "--dataset-size",
                                    "4672", "--epsilon", "2", "--delta", "2e-4", "--json"]))
    assert out["tokens"] == 100 and out["sampling_rate"] == pytest.approx(20 / 4672)
    assert out["epsilon0"] > 0 and out["epsilon_certified"] <= 2
    result = runner.invoke(app, ["plan", "--method", "dp-fewshot", "--mechanism", "exponential", "--queries", "4",
                                 "--max-new-tokens", "25", "--splits", "10", "--sampling-rate", "0.01", "--epsilon",
                                 "2", "--delta", "2e-4"])
    assert result.exit_code == 0 and "report-noisy-max" in result.output


def test_evaluate_refuses_bad_sweeps_before_starting_prefect():
    token = runner.invoke(app, ["evaluate", "e2e-dps-mozo"])
    assert token.exit_code == 2 and "token_level" in token.output
    mixed = runner.invoke(app, ["evaluate", "samsum-esa", "samsum-sga"])
    assert mixed.exit_code == 2 and "one ensemble" in " ".join(mixed.output.split())
    metric = runner.invoke(app, ["evaluate", "samsum-esa", "--metric", "rouge-l"])
    assert metric.exit_code == 2 and "rougeL" in metric.output


@pytest.mark.parametrize("args", [["-h"], ["budget", "-h"], ["budget", "open", "-h"], ["plan", "-h"]])
def test_dash_h_is_help_in_every_command(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output and result.output == runner.invoke(app, [*args[:-1], "--help"]).output


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"dpicl {version('dpicl')}"


def test_the_cli_starts_without_the_accountants_heavy_libraries():
    """prv-accountant and scipy.stats/optimize took about a second of every `dpicl` start; they load when used."""
    import subprocess
    import sys

    heavy = ("prv_accountant", "scipy.stats", "scipy.optimize", "scipy.signal")
    code = f"import sys, dpicl.cli; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
