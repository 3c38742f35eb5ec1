"""`dpicl plan` covers every method: per-query parameters for a target (ε, δ, queries), and what an open budget can
still pay for — including the settings a config can give (dps-mozo's hand-chosen β, AdaPMixED's screening), free
methods (no count) and dp-fewshot (whole syntheses), and budgets whose ledger the method cannot compose with."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from dpicl import methods
from dpicl.cli import app

runner = CliRunner()
TARGET = ["--epsilon", "3", "--delta", "1e-5", "--queries", "10", "--sampling-rate", "0.05", "--dataset-size", "1000"]
# what each method's plan must give a user
PARAMETERS = {"esa": "noise_multiplier", "rnm": "noise_multiplier", "ksa-jem": "epsilon_em", "ksa-ptr": "delta0",
              "sga": "em_epsilons", "ksa-public": "epsilon_em", "dps-mozo": "beta", "adapmixed": "beta",
              "synthetic-icl": "queries", "dp-fewshot": "noise_multiplier"}


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_every_registered_method_is_listed_and_planned():
    listed = _json_list(runner.invoke(app, ["methods", "--json"]))
    assert [m["name"] for m in listed] == methods.names()
    assert set(methods.names()) == set(PARAMETERS)
    by_name = {m["name"]: m for m in listed}
    # the defaults a config gets (docs/configuration), and a required setting shown without one
    assert (by_name["esa"]["settings"]["teachers"], by_name["esa"]["settings"]["shots"]) == (10, 4)
    assert by_name["dps-mozo"]["settings"]["shots"] == 1 and by_name["adapmixed"]["settings"]["members"] == 20
    assert by_name["synthetic-icl"]["settings"]["demos_dataset"] is None
    assert by_name["sga"]["needs_public_data"] and not by_name["esa"]["needs_public_data"]
    assert by_name["rnm"]["task_types"] == ["classification"] and by_name["dp-fewshot"]["kind"] == "synthesis"
    assert all(m["paper"] and m["summary"] for m in listed)


def _json_list(result) -> list:
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


# the PRV calibrations (esa, rnm, dp-fewshot) take up to a minute on a busy CPU
PRV = {"esa", "rnm", "dp-fewshot"}


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in PRV else m
                                    for m in sorted(PARAMETERS)])
def test_plan_gives_per_query_parameters_for_every_method(method):
    out = _json(runner.invoke(app, ["plan", "--method", method, *TARGET, "--json"]))
    assert out["method"] == method and out["epsilon"] == 3 and out["delta"] == 1e-5
    assert PARAMETERS[method] in out
    if "epsilon_certified" in out:
        assert out["epsilon_certified"] <= 3 + 1e-9
    readable = runner.invoke(app, ["plan", "--method", method, *TARGET, "--db", "/nonexistent/x.duckdb"])
    assert readable.exit_code == 0 and method in readable.output


@pytest.fixture
def budget_db(tmp_path):
    """A private dataset of 200 records with an open budget ε = 4, δ = 1e-5 (returns the db path)."""
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset
    from dpicl.storage.ledger import open_budget

    data = tmp_path / "private.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "x": f"input {i}", "y": f"output {i}"}) + "\n"
                            for i in range(200)))
    db = tmp_path / "plan.duckdb"
    con = connect(db)
    ingest_dataset(con, data, "priv", "private", "summarization", FieldMap(id="id", input="x", output="y"))
    open_budget(con, "priv", 4.0, 1e-5)
    con.close()
    return str(db)


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(PARAMETERS))
def test_plan_against_an_open_budget_says_what_it_can_still_pay_for_every_method(budget_db, method):
    out = _json(runner.invoke(app, ["plan", "--method", method, "--dataset", "priv", "--queries", "10", "--db",
                                    budget_db, "--json"]))
    budget = out["budget"]
    assert budget["dataset"] == "priv" and budget["epsilon_limit"] == 4 and budget["ledger_entries"] == 0
    if method == "synthetic-icl":
        assert budget["free"] and budget["queries_payable"] is None  # never limited by the budget
    else:
        # planned for 10 queries at the budget's own (ε, δ); dp-fewshot: one synthesis of 10 demonstrations
        assert not budget["free"] and budget["queries_payable"] >= (1 if method == "dp-fewshot" else 10)
    text = " ".join(runner.invoke(app, ["plan", "--method", method, "--dataset", "priv", "--queries", "10",
                                        "--db", budget_db]).output.split())
    expected = {"synthetic-icl": "costs nothing", "dp-fewshot": "more syntheses of 10 demonstrations"}
    assert expected.get(method, "more queries at these settings") in text


def test_dps_mozo_plans_a_hand_chosen_beta_and_certifies_what_it_costs():
    base = ["plan", "--method", "dps-mozo", *TARGET, "--json"]
    calibrated = _json(runner.invoke(app, base))
    same = _json(runner.invoke(app, [*base, "--beta", str(calibrated["beta"])]))
    assert same["beta"] == calibrated["beta"] and same["beta_given"]
    assert same["epsilon_certified"] == pytest.approx(calibrated["epsilon_certified"], rel=1e-9)
    larger = _json(runner.invoke(app, [*base, "--beta", str(2 * calibrated["beta"])]))
    assert larger["epsilon_certified"] > 3  # over the target: shown, and the ledger would refuse it
    assert larger["radius"] == pytest.approx(2 * calibrated["radius"])  # the ball grows with β at a fixed α
    bad = runner.invoke(app, [*base, "--beta", "-1"])
    assert bad.exit_code == 2 and "--beta" in bad.output


def test_adapmixed_plans_the_screening_a_config_sets():
    base = ["plan", "--method", "adapmixed", *TARGET, "--json"]
    default = _json(runner.invoke(app, base))
    custom = _json(runner.invoke(app, [*base, "--screen-lambda", "0.001", "--screen-sigma", "0.05"]))
    assert custom["beta"] != default["beta"] or custom["rdp_per_query"] != default["rdp_per_query"]
    other = runner.invoke(app, ["plan", "--method", "esa", *TARGET, "--screen-sigma", "0.05", "--json"])
    assert other.exit_code == 2 and "screen_sigma" in other.output


def test_planning_against_a_ledger_no_accountant_can_compose_with_fails_cleanly(budget_db):
    """DPS-MOZO's replacement neighbours do not compose with add/remove events: a clear error, not a traceback."""
    from dpicl.privacy.mechanisms import esa
    from dpicl.storage.db import connect
    from dpicl.storage.ledger import reserve

    con = connect(budget_db)
    assert reserve(con, dataset="priv", run_id="r", backlog="b", query_id="q", mechanism="esa",
                   event_json=esa.cost(2.0, 0.04).to_json()) is not None
    con.close()
    result = runner.invoke(app, ["plan", "--method", "dps-mozo", "--dataset", "priv", "--db", budget_db])
    assert result.exit_code == 2, result.output
    assert "cannot plan dps-mozo against the budget of 'priv'" in " ".join(result.output.split())
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_planning_against_a_dataset_without_budget_or_an_old_database_fails_cleanly(budget_db, tmp_path):
    result = runner.invoke(app, ["plan", "--method", "ksa-jem", "--dataset", "nope", "--db", budget_db])
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "no dataset named 'nope'" in flat and "dpicl ingest" in flat  # a typo
    result = runner.invoke(app, ["plan", "--method", "ksa-jem", "--dataset", "priv", "--db",
                                 str(tmp_path / "missing.duckdb")])
    assert result.exit_code == 2 and "no dpicl database" in " ".join(result.output.split())


@pytest.mark.slow
def test_dp_fewshot_plan_on_classification_data_prices_the_smallest_label_pool(tmp_path):
    """Each label is generated from its own pool: the smallest pool (20 of 200 records) sets the charged rate."""
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset
    from dpicl.storage.ledger import open_budget

    labels = ["a"] * 20 + ["b"] * 180
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "x": f"text {i}", "y": y}) + "\n" for i, y in enumerate(labels)))
    db = tmp_path / "cls.duckdb"
    con = connect(db)
    ingest_dataset(con, data, "cls", "private", "classification", FieldMap(id="id", input="x", output="y"))
    open_budget(con, "cls", 4.0, 1e-5)
    con.close()
    out = _json(runner.invoke(app, ["plan", "--method", "dp-fewshot", "--dataset", "cls", "--splits", "2",
                                    "--shots", "2", "--queries", "2", "--max-new-tokens", "5", "--db", str(db),
                                    "--json"]))
    assert out["sampling_rate"] == pytest.approx(4 / 20)  # not 4/200, the whole dataset's rate


def test_plan_of_a_config_is_the_plan_its_run_stores(budget_db, tmp_path):
    """`dpicl plan CONFIG` prices exactly what `dpicl answer CONFIG` would store when its run opens."""
    from dpicl.config import load_config
    from dpicl.storage.db import connect
    from dpicl.tasks.run import per_query_plan

    config = tmp_path / "ksa.yaml"
    config.write_text(yaml.safe_dump({"name": "ksa", "private_dataset": "priv", "backlog": "q",
                                      "method": {"name": "ksa-ptr", "teachers": 5, "shots": 2,
                                                 "planned_queries": 40, "delta0_fraction": 0.25}}))
    out = _json(runner.invoke(app, ["plan", str(config), "--db", budget_db, "--json"]))
    con = connect(budget_db, read_only=True)
    try:
        stored, event_json = per_query_plan(con, load_config(config))
    finally:
        con.close()
    assert {k: v for k, v in out.items() if k != "budget"} == stored.numbers()
    assert out["sampling_rate"] == pytest.approx(5 * 2 / 200) and out["queries"] == 40
    assert out["delta0_fraction"] == 0.25 and out["budget"]["dataset"] == "priv"
    mixed = runner.invoke(app, ["plan", str(config), "--method", "esa", "--db", budget_db])
    assert mixed.exit_code == 2 and "--method" in mixed.output


def test_the_registry_lists_methods_in_one_order_whatever_was_imported_first():
    import subprocess
    import sys

    script = ("import dpicl.methods.sga, dpicl.methods.rnm; from dpicl import methods; "
              "print(','.join(methods.names()))")
    fresh = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert fresh.stdout.strip().split(",") == methods.names() and methods.names()[0] == methods.DEFAULT
