"""`dpicl rerun` and the `rerun` flow with fake models: the dry run changes nothing and counts right; a new
aggregation is charged exactly what was planned (fresh subsamples amplified, reused ones without amplification and
with a top-up), post-processing and serving are free; the LLM and the encoder are not called before the chosen
stage; refusals name what, where and how to fix, and write nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dpicl.privacy.accounting import ledger_epsilon
from dpicl.privacy.accounting.events import event_from_json
from dpicl.storage.db import connect
from dpicl.tasks.rerun import RerunError, analyse, parse_overrides
from tests.pipeline.conftest import ingest_tiny
from tests.pipeline.fakes import FakeBackend, FakeEncoder

N_RECORDS, N_QUERIES = 60, 8
REFUSED_AT_AGGREGATE = {"q0", "q1"}  # sampled and inferred, but the (patched) ledger refused them: fresh subsamples
TABLES = ("runs", "run_sources", "queries", "artifacts", "ledger", "releases", "budgets", "datasets")


class NoModel:
    """A backend / encoder that fails the test when called: a rerun must reuse what is stored."""

    def __getattr__(self, name):
        def called(*args, **kwargs):
            raise AssertionError(f"the rerun called the model ({name}) before its chosen stage")
        return called


def _build(tmp: Path) -> tuple[str, str, str]:
    """A tiny backlog answered by ESA with fake models, q0 and q1 refused at aggregate; returns config, db, run id."""
    from dpicl.flows.answer_backlog import answer_backlog
    from dpicl.tasks import context

    db = tmp / "root.duckdb"
    ingest_tiny(db, tmp, epsilon=8.0, public=20)
    config = tmp / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tiny", "private_dataset": "tiny", "backlog": "tiny-backlog",
        "method": {"name": "esa", "teachers": 4, "shots": 2, "candidates": 3, "sampling_rate": 0.5,
                   "planned_queries": 40},
        "batch_queries": 3,
    }))
    backend, encoder = FakeBackend(), FakeEncoder()
    real_reserve = context.reserve_many

    def reserve_many(con, cfg, run_id, query_ids, *args, **kwargs):
        paying = [q for q in query_ids if q not in REFUSED_AT_AGGREGATE]
        return real_reserve(con, cfg, run_id, paying, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(context, "backend", lambda cfg: backend)
        mp.setattr(context, "encoder", lambda cfg: encoder)
        mp.setattr(context, "reserve_many", reserve_many)
        answer_backlog(config=str(config), db=str(db))
    con = connect(db, read_only=True)
    (run_id,) = con.execute("SELECT run_id FROM runs").fetchone()
    con.close()
    return str(config), str(db), run_id


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("rerun-root"))


@pytest.fixture
def env(root, tmp_path, monkeypatch):
    """A private copy of the root database; models that fail when called (tests swap in fakes where allowed)."""
    from dpicl.tasks import context

    config, db, run_id = root
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    monkeypatch.setattr(context, "backend", lambda cfg: NoModel())
    monkeypatch.setattr(context, "encoder", lambda cfg: NoModel())
    return config, str(copy), run_id


def _snapshot(db: str) -> tuple[str, dict]:
    digest = hashlib.sha256(Path(db).read_bytes()).hexdigest()
    con = connect(db, read_only=True)
    try:
        tables = {}
        for t in TABLES:
            rows = con.execute(f"SELECT * FROM {t}").fetchall()
            tables[t] = sorted(repr(r) for r in rows)
        return digest, tables
    finally:
        con.close()


def _report(db, run_id, stage="aggregate", **kw):
    con = connect(db, read_only=True)
    try:
        return analyse(con, run_id, stage, **kw)
    finally:
        con.close()


def _ledger(db, run_id=None):
    con = connect(db, read_only=True)
    try:
        where, args = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
        return con.execute(f"SELECT entry_id, query_id, mechanism, event, epsilon_before, epsilon_after FROM ledger "
                           f"{where} ORDER BY entry_id", args).fetchall()
    finally:
        con.close()


pytestmark = pytest.mark.slow  # the module's database is made by the answer_backlog flow (Prefect)


def test_root_run_has_fresh_and_used_subsamples(env):
    _, db, _ = env
    entries = _ledger(db)
    assert {e[1] for e in entries} == {f"q{i}" for i in range(2, N_QUERIES)}  # q0, q1 were refused at aggregate


def test_dry_run_changes_nothing_and_counts_free_and_charged(env):
    from dpicl.cli import app

    _, db, run_id = env
    before = _snapshot(db)
    runner = CliRunner()
    out = runner.invoke(app, ["rerun", run_id, "--from", "aggregate", "--method", "ksa-jem", "--set",
                              "method.planned_queries=50", "--dry-run", "--json", "--db", db])
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output.strip().splitlines()[-1])
    assert plan["counts"] == {"fresh": 2, "reused": 6, "served": 0, "post-processed": 0}
    assert plan["top_up_entries"] == 6 and plan["queries"] == N_QUERIES and plan["not_in_source"] == 0
    assert {q for q, c in plan["per_query"].items() if c == "fresh"} == REFUSED_AT_AGGREGATE
    # the ε it reports is the accountant's over the ledger plus exactly these events
    report = _report(db, run_id, method="ksa-jem", overrides=["method.planned_queries=50"])
    spent = [e[3] for e in _ledger(db)]
    adds = [report["event_json"]] * 2 + [report["reused_event_json"]] * 6 + [e for t in report["top_ups"].values()
                                                                            for _, e in t]
    assert event_from_json(report["reused_event_json"]).sampling_rate == 1.0
    assert event_from_json(report["event_json"]).sampling_rate < 1.0
    assert plan["epsilon_charged"] == pytest.approx(ledger_epsilon(spent + adds, 1e-5) - ledger_epsilon(spent, 1e-5))
    readable = runner.invoke(app, ["rerun", run_id, "--from", "release", "--dry-run", "--db", db])
    assert readable.exit_code == 0, readable.output
    assert "served from stored releases (free): 6" in readable.output and "nothing was changed" in readable.output
    # the same esa settings from aggregate: charged, while --from release would give them for free
    assert not plan["free_from_release"] and not _report(db, run_id, overrides=["method.planned_queries=50"])[
        "free_from_release"]
    again = runner.invoke(app, ["rerun", run_id, "--from", "aggregate", "--dry-run", "--db", db])
    assert again.exit_code == 0 and "`--from release` answers 6 of these 8 queries" in " ".join(again.output.split())
    assert _snapshot(db) == before


def test_rerun_with_new_noise_charges_the_plan_and_calls_no_model(env):
    """esa again with the same settings: new noise is a new release (charged), drawn from the stored teacher
    embeddings, released as the nearest stored public candidate — neither the LLM nor the encoder is called."""
    from dpicl.flows.rerun import rerun

    _, db, run_id = env
    originals = _ledger(db)
    report = _report(db, run_id, max_queries=3)
    assert report["counts"] == {"fresh": 2, "reused": 1, "served": 0, "post-processed": 0}
    assert report["payable"]
    result = rerun(run_id=run_id, max_queries=3, db=db)
    assert result["answered"] == 3 and result["refused_budget"] == 0
    new = _ledger(db, result["run_id"])
    assert _ledger(db)[:len(originals)] == originals  # the source's entries are untouched
    by_query = {}
    for _, query_id, mechanism, event, *_ in new:
        by_query.setdefault(query_id, []).append((mechanism, event))
    assert by_query["q0"] == [("esa", report["event_json"])] and by_query["q1"] == [("esa", report["event_json"])]
    top_up, charged = by_query["q2"]
    assert top_up == report["top_ups"]["q2"][0] and top_up[0] == "esa:reuse-top-up"
    assert charged == ("esa", report["reused_event_json"])
    assert sum(after - before for *_, before, after in new) == pytest.approx(report["epsilon_charged"], rel=1e-9)
    con = connect(db, read_only=True)
    try:
        link = con.execute("SELECT source_run_id, root_run_id, from_stage FROM run_sources WHERE run_id = ?",
                           [result["run_id"]]).fetchone()
        assert link == (run_id, run_id, "aggregate")
        run = con.execute("SELECT backlog, method, status FROM runs WHERE run_id = ?", [result["run_id"]]).fetchone()
        assert run == (result["backlog"], "esa", "completed") and result["backlog"].startswith("tiny-backlog@rerun-")
        releases = con.execute("SELECT count(*) FROM releases WHERE backlog = ?", [result["backlog"]]).fetchone()[0]
        original = con.execute("SELECT count(*) FROM releases WHERE backlog = 'tiny-backlog'").fetchone()[0]
        assert releases == 3 and original == N_QUERIES - 2
    finally:
        con.close()


def test_a_new_method_then_free_post_processing(env, monkeypatch):
    """ksa-jem on the stored teacher outputs (charged), then its release re-run with another keyword template
    (post-processing: free, the LLM answers with the stored DP keywords)."""
    from dpicl.flows.rerun import rerun
    from dpicl.tasks import context

    _, db, run_id = env
    backend = FakeBackend()
    monkeypatch.setattr(context, "backend", lambda cfg: backend)  # ksa's release asks the LLM (public inputs only)
    first = rerun(run_id=run_id, method="ksa-jem", overrides=["method.planned_queries=50"], max_queries=2,
                  db=db)  # q0, q1: fresh subsamples
    assert first["answered"] == 2
    assert backend.calls and all(n <= 2 for n, _ in backend.calls)  # only the reconstruction prompts
    spent = ledger_epsilon([e[3] for e in _ledger(db)], 1e-5)

    template = "Input:\n{input}\nUse these words: [{keywords}]\nOutput:"
    report = _report(db, first["run_id"], "release", overrides=[f"method.keyword_template={template}"])
    assert report["counts"] == {"fresh": 0, "reused": 0, "served": 0, "post-processed": 2}
    assert report["epsilon_charged"] == 0
    second = rerun(run_id=first["run_id"], from_stage="release", overrides=[f"method.keyword_template={template}"],
                   db=db)
    assert second["answered"] == 2
    free = _ledger(db, second["run_id"])
    assert len(free) == 2 and all(json.loads(e[3])["kind"] == "public_data" and e[5] == e[4] for e in free)

    assert ledger_epsilon([e[3] for e in _ledger(db)], 1e-5) == pytest.approx(spent, abs=1e-12)
    # the first rerun holds DP aggregates: a charged rerun of it from aggregate is told --from release is free; the
    # second holds none (it post-processed the first's), so that advice would fail there and is not given
    same = [f"method.keyword_template={template}"]
    assert _report(db, first["run_id"], overrides=same)["free_from_release"] == 2  # q0, q1
    assert _report(db, second["run_id"], overrides=same)["free_from_release"] == 0
    con = connect(db, read_only=True)
    try:
        link = con.execute("SELECT source_run_id, root_run_id, from_stage FROM run_sources WHERE run_id = ?",
                           [second["run_id"]]).fetchone()
        assert link == (first["run_id"], run_id, "release")
        kept = con.execute("SELECT count(*) FROM releases WHERE run_id = ?", [first["run_id"]]).fetchone()[0]
        assert kept == 2  # the source's releases stay as they were
    finally:
        con.close()


@pytest.mark.parametrize("kwargs,words", [
    ({"source": "nope"}, ["no run with id 'nope'", "recent runs"]),
    ({"overrides": ["private_dataset=tiny-public"]}, ["private dataset 'tiny-public'", "drew its teacher outputs"]),
    ({"overrides": ["method.teachers=5"]}, ["method.teachers", "answer the backlog again"]),
    ({"method": "sga", "overrides": ["public_dataset=tiny-public"]}, ["missing", "public_outputs", "dpicl answer"]),
    ({"method": "dps-mozo"}, ["cannot re-run from stored teacher outputs"]),
    ({"stage": "release", "method": "ksa-jem"}, ["--from release keeps the mechanism", "--from aggregate"]),
    ({"stage": "release", "overrides": ["method.planned_queries=3"]}, ["method.planned_queries", "shape"]),
    ({"stage": "prompt"}, ["'prompt' is not one of 'aggregate', 'release'"]),
])
def test_refusals_say_what_and_how_to_fix_and_write_nothing(env, kwargs, words):
    from dpicl.cli import app

    _, db, run_id = env
    before = _snapshot(db)
    args = ["rerun", kwargs.get("source", run_id), "--from", kwargs.get("stage", "aggregate"), "--db", db]
    if "method" in kwargs:
        args += ["--method", kwargs["method"]]
    for item in kwargs.get("overrides", []):
        args += ["--set", item]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stdout == "", result.output  # errors go to stderr
    flat = " ".join(result.output.split())
    for word in words:
        assert word in flat, flat
    assert "incoming ticket" not in flat and "private ticket" not in flat  # no text in errors
    assert _snapshot(db) == before


def test_a_rerun_the_budget_cannot_pay_is_refused_and_charges_nothing(env):
    from dpicl.cli import app

    _, db, run_id = env
    before = _snapshot(db)
    # little noise and, on used subsamples, no amplification: far beyond the budget
    result = CliRunner().invoke(app, ["rerun", run_id, "--set", "method.planned_queries=1", "--db", db])
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert "CANNOT pay" in flat and "nothing was charged" in flat and "cheaper setting" in flat
    # what it would cost on stdout, the refusal as one `error:` line on stderr
    assert "CANNOT pay" in result.stdout and "error:" not in result.stdout
    assert result.stderr.startswith("error: ") and "nothing was charged" in " ".join(result.stderr.split())
    assert _snapshot(db) == before


def test_a_refusal_whose_top_ups_alone_exceed_the_budget_does_not_advise_a_cheaper_setting():
    """It advised a larger method.planned_queries when only the top-ups it owed, which no setting lowers, did not
    fit: an operator tried 10⁷ and waited."""
    from dpicl.tasks.rerun import refusal

    report = {"dataset": "d", "epsilon_before": 3.0, "epsilon_limit": 4.0, "epsilon_after": 5.5,
              "epsilon_charged": 2.5, "affordable_queries": 0, "epsilon_top_ups": 1.5}
    stuck = refusal(report)
    assert "top-ups it owes" in stuck and "ε 1.5000" in stuck and "planned_queries" not in stuck
    assert "--from release (free)" in stuck and "--max-queries" not in stuck
    cheaper = refusal({**report, "epsilon_top_ups": 0.2, "affordable_queries": 3})
    assert "a larger method.planned_queries" in cheaper and "--max-queries 3" in cheaper and "top-ups" not in cheaper


def test_overrides_are_parsed_as_yaml_values():
    assert parse_overrides(["method.k=5", "method.select=top1", "seed=null", "x.y=0.5"]) == [
        ("method.k", 5), ("method.select", "top1"), ("seed", None), ("x.y", 0.5)]
    with pytest.raises(RerunError, match="KEY=VALUE"):
        parse_overrides(["method.k"])
