"""The answer_backlog flow end to end with fake models: budget refusals, re-runs, crash safety."""

from __future__ import annotations

import pytest

from dpicl.flows.answer_backlog import answer_backlog
from dpicl.storage.db import connect
from dpicl.storage.ledger import budget_summary, stored_releases
from tests.pipeline.conftest import N_QUERIES, PLANNED

pytestmark = pytest.mark.slow  # each flow run starts Prefect


def _state(db):
    con = connect(db, read_only=True)
    try:
        summary = budget_summary(con, "tiny")
        statuses = dict(con.execute("SELECT status, count(*) FROM queries GROUP BY status").fetchall())
        entries = con.execute("SELECT query_id FROM ledger ORDER BY entry_id").fetchall()
        return summary, statuses, [e[0] for e in entries], stored_releases(con, "tiny-backlog")
    finally:
        con.close()


def _is_public_candidate(config, query_id, answer) -> bool:
    """Whether `answer` is one of the fake backend's candidates for the query: its greedy zero-shot answer, or a
    sampled one (teachers' answers are greedy answers to other prompts)."""
    from dpicl.config import load_config
    from dpicl.inference.base import GenerationParams
    from dpicl.prompts import zero_shot_prompt
    from tests.pipeline.fakes import FakeBackend

    query = f"incoming ticket {query_id.removeprefix('q')}"  # as conftest's ingest_tiny writes them
    greedy = FakeBackend().generate([zero_shot_prompt(load_config(config).task, query)], GenerationParams())[0]
    return answer == greedy or answer.startswith("candidate ")


def test_answers_what_the_budget_pays_for_refuses_the_rest_and_reruns_for_free(pipeline_env):
    config, db = pipeline_env
    result = answer_backlog(config=config, db=db)
    summary, statuses, entries, releases = _state(db)
    assert result["answered"] == PLANNED and result["refused_budget"] == N_QUERIES - PLANNED
    assert statuses == {"answered": PLANNED, "refused_budget": N_QUERIES - PLANNED}
    assert summary["epsilon_spent"] <= summary["epsilon_limit"]
    assert len(entries) == len(releases) == PLANNED
    assert all(_is_public_candidate(config, r["query_id"], r["answer"]) for r in releases), \
        "a release must be a public candidate"
    assert sum(r["epsilon_cost"] for r in releases) == pytest.approx(summary["epsilon_spent"], rel=1e-9)

    again = answer_backlog(config=config, db=db)
    summary2, _, entries2, releases2 = _state(db)
    assert again["answered"] == 0 and entries2 == entries and releases2 == releases
    assert summary2["epsilon_spent"] == summary["epsilon_spent"]


def test_crash_between_reservation_and_release_keeps_the_spend_and_releases_nothing(pipeline_env, monkeypatch):
    from dpicl.tasks import release as release_task

    config, db = pipeline_env

    def crash(*args, **kwargs):
        raise RuntimeError("injected crash after the reservation")

    monkeypatch.setattr(release_task, "record_release", crash)
    with pytest.raises(RuntimeError, match="injected crash"):
        answer_backlog(config=config, db=db)
    summary, statuses, entries, releases = _state(db)
    assert releases == [] and summary["releases"] == 0
    assert len(entries) == 3  # the first batch was reserved (paid) before the crash
    assert summary["epsilon_spent"] > 0 and summary["unreleased_entries"] == 3
    assert statuses.get("answered", 0) == 0

    monkeypatch.undo()
    from tests.pipeline.fakes import FakeBackend, FakeEncoder
    from dpicl.tasks import context
    monkeypatch.setattr(context, "backend", lambda cfg: FakeBackend())
    monkeypatch.setattr(context, "encoder", lambda cfg: FakeEncoder())
    result = answer_backlog(config=config, db=db)
    summary2, _, entries2, releases2 = _state(db)
    # the lost reservations stay charged: the retry pays again, so fewer queries fit the budget
    assert entries2[:3] == entries and len(entries2) == PLANNED
    assert result["answered"] == PLANNED - 3 and len(releases2) == PLANNED - 3
    assert summary2["epsilon_spent"] <= summary2["epsilon_limit"]
    assert summary2["unreleased_entries"] == 3


def test_public_candidates_are_reused_from_the_artifact_cache(pipeline_env, fake_models, tmp_path):
    import yaml

    from dpicl.storage.ingest import FieldMap, ingest_queries
    from tests.pipeline.conftest import write_jsonl

    config, db = pipeline_env
    backend, _ = fake_models
    answer_backlog(config=config, db=db, max_queries=2)
    assert any(t > 0 for _, t in backend.calls), "the first run sampled zero-shot candidates"

    # the same two queries arrive again in another backlog: their public candidates come from the cache
    con = connect(db)
    ingest_queries(con, write_jsonl(tmp_path / "again.jsonl", [{"id": f"again{i}", "text": f"incoming ticket {i}"}
                                                               for i in range(2)]), "again", FieldMap(id="id", input="text", output=None))
    con.close()
    second = tmp_path / "again.yaml"
    second.write_text(yaml.safe_dump({**yaml.safe_load(open(config)), "backlog": "again"}))
    backend.calls.clear()
    result = answer_backlog(config=str(second), db=db)
    assert result["answered"] == 2
    assert backend.calls and all(t == 0 for _, t in backend.calls), "candidates were generated again"



def test_esa_candidates_are_the_greedy_zero_shot_answer_then_the_sampled_ones(pipeline_env, tmp_path):
    import yaml

    from dpicl.config import load_config
    from dpicl.inference.teachers import greedy_params
    from dpicl.methods import get
    from tests.pipeline.fakes import FakeBackend

    config, _ = pipeline_env
    cfg, esa, backend = load_config(config), get("esa"), FakeBackend()
    prompts = ["zero-shot prompt A", "zero-shot prompt B"]
    groups = esa.sample_candidates(cfg, backend, prompts)
    assert [len(g) for g in groups] == [cfg.method.candidates + 1] * 2
    assert [g[0] for g in groups] == backend.generate(prompts, greedy_params(cfg))
    assert all(c.startswith("candidate ") for g in groups for c in g[1:])  # the fake's sampled answers

    edited = yaml.safe_load(open(config))
    edited["method"]["greedy_candidate"] = False
    (tmp_path / "sampled-only.yaml").write_text(yaml.safe_dump(edited))
    cfg = load_config(str(tmp_path / "sampled-only.yaml"))
    assert [len(g) for g in esa.sample_candidates(cfg, backend, prompts)] == [cfg.method.candidates] * 2


def test_the_answer_command_answers_an_ingested_backlog_and_refuses_one_never_ingested(pipeline_env, tmp_path):
    import yaml
    from typer.testing import CliRunner

    from dpicl.cli import app

    config, db = pipeline_env
    done = CliRunner().invoke(app, ["answer", config, "--db", db, "--max-queries", "2"])
    assert done.exit_code == 0 and "answered 2" in done.output, done.output
    typo = yaml.safe_load(open(config))
    typo["backlog"] = "tiny-backlogg"
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(typo))
    refused = CliRunner().invoke(app, ["answer", str(tmp_path / "typo.yaml"), "--db", db])
    assert refused.exit_code == 2 and "no backlog named 'tiny-backlogg'" in refused.output, refused.output
    assert "Traceback" not in refused.output and "answered" not in refused.output


def test_queries_still_payable_is_what_the_next_run_answers_and_shares_add_up(pipeline_env, tmp_path):
    import json

    from typer.testing import CliRunner

    from dpicl.cli import app

    config, db = pipeline_env
    assert CliRunner().invoke(app, ["answer", config, "--db", db, "--max-queries", "2"]).exit_code == 0
    plot = tmp_path / "spend.png"
    shown = CliRunner().invoke(app, ["budget", "show", "tiny", "--db", db, "--json", "--plot", str(plot)])
    payable = json.loads(shown.stdout.strip().splitlines()[-1])["queries_still_payable"]
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert 1 <= payable < N_QUERIES - 2  # the budget runs out inside this backlog
    rest = CliRunner().invoke(app, ["answer", config, "--db", db])
    assert f"answered {payable}, refused {N_QUERIES - 2 - payable}" in rest.output, rest.output
    assert f"dpicl releases tiny-backlog --db {db}`" in rest.output  # where the answers are
    summary, _, _, releases = _state(db)
    assert sum(r["budget_share"] for r in releases) == pytest.approx(
        summary["epsilon_spent"] / summary["epsilon_limit"], rel=1e-9)
    listed = CliRunner().invoke(app, ["releases", "tiny-backlog", "--db", db])
    assert "share of budget" in listed.output and "first releases cost most" in " ".join(listed.output.split())
