"""Token-level methods through the flows (fake models): DPS-MOZO and AdaPMixED answering a backlog, DP synthetic
demonstrations (002, and DPS-MOZO+Off) written as a public dataset for one charge, and free ICL with them."""

from __future__ import annotations

import json

import pytest
import yaml

from dpicl.flows.answer_backlog import answer_backlog
from dpicl.flows.synthesize_demos import synthesize_demos
from dpicl.privacy.accounting.events import (
    ComposedEvent,
    DPSMozoEvent,
    FixedOrderRDPEvent,
    PublicDataEvent,
    UnsupportedEventError,
    event_from_json,
)
from dpicl.storage import get_dataset, load_records
from dpicl.storage.db import connect
from dpicl.storage.ingest import FieldMap, ingest_dataset
from dpicl.storage.ledger import budget_summary, ledger_events, stored_releases
from tests.pipeline.conftest import N_QUERIES, PLANNED, write_jsonl
from tests.pipeline.test_methods import LABELS, classification_env  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # each flow run starts Prefect

MAX_TOKENS = 8


def _configure(config: str, method: dict, **top) -> str:
    raw = yaml.safe_load(open(config))
    raw["method"] = method
    raw["generation"] = {"max_new_tokens": MAX_TOKENS, "stop": ["\n"]}
    raw.update(top)
    open(config, "w").write(yaml.safe_dump(raw))
    return config


def _state(db: str):
    con = connect(db, read_only=True)
    try:
        return ([event_from_json(e) for e in ledger_events(con, "tiny")], stored_releases(con, "tiny-backlog"),
                budget_summary(con, "tiny"))
    finally:
        con.close()


def test_dps_mozo_answers_what_the_budget_pays_for_each_charged_for_all_its_tokens(pipeline_env, fake_models):
    config, db = pipeline_env
    _configure(config, {"name": "dps-mozo", "shots": 3, "top_k": 10, "planned_queries": PLANNED,
                        "accept_unproven_guarantee": True})
    result = answer_backlog(config=config, db=db)
    events, releases, summary = _state(db)
    assert result["answered"] == PLANNED and result["refused_budget"] == N_QUERIES - PLANNED
    assert all(isinstance(e, DPSMozoEvent) and e.tokens == MAX_TOKENS and e.sampling_rate == 3 / 60 for e in events)
    assert all(r["answer"] and r["details"]["steps"] <= MAX_TOKENS for r in releases)
    assert summary["epsilon_spent"] <= summary["epsilon_limit"]
    backend, _ = fake_models
    # every token: 3 one-shot prompts (fresh) and the zero-shot prompt
    assert {n for n, kind in backend.calls if kind == -2.0} == {3, 1}


def test_adapmixed_reserves_the_data_independent_bound_and_reports_the_data_dependent_one(pipeline_env, fake_models):
    config, db = pipeline_env
    _configure(config, {"name": "adapmixed", "members": 5, "top_k": 10, "planned_queries": PLANNED})
    result = answer_backlog(config=config, db=db)
    events, releases, summary = _state(db)
    assert result["answered"] == PLANNED and result["refused_budget"] == N_QUERIES - PLANNED
    assert all(isinstance(e, FixedOrderRDPEvent) and e.alpha == 18 for e in events)
    con = connect(db, read_only=True)
    try:
        settled = [json.loads(p) for (p,) in con.execute(
            "SELECT payload FROM artifacts WHERE stage = 'settlement' AND private").fetchall()]
    finally:
        con.close()
    assert len(settled) == PLANNED
    for r, s in zip(releases, settled):
        d = r["details"]
        assert 0 <= d["screens_passed"] <= d["steps"] <= MAX_TOKENS
        assert "data_dependent_rdp" not in d  # computed from private data: never released
        assert 0 <= s["data_dependent_rdp"] <= d["rdp_per_query"] + 1e-12  # never more than what was reserved
    assert summary["epsilon_spent"] <= summary["epsilon_limit"]
    backend, _ = fake_models
    # a token: one call for the 5 members, one for the public prompt (never batched with private prompts)
    assert {n for n, kind in backend.calls if kind == -2.0} == {5, 1}


def test_dps_mozo_refuses_a_budget_spent_under_the_other_neighbouring_relation(pipeline_env):
    config, db = pipeline_env
    answer_backlog(config=config, db=db, max_queries=1)  # esa: add/remove
    _configure(config, {"name": "dps-mozo", "planned_queries": PLANNED})
    with pytest.raises(UnsupportedEventError, match="neighbouring relations"):
        answer_backlog(config=config, db=db)
    events, _, _ = _state(db)
    assert not any(isinstance(e, DPSMozoEvent) for e in events)  # nothing charged


@pytest.fixture
def public_env(pipeline_env, tmp_path):
    config, db = pipeline_env
    public = write_jsonl(tmp_path / "public.jsonl", [
        {"id": f"p{i}", "text": f"public ticket {i}", "summary": f"public summary {i}"} for i in range(10)])
    con = connect(db)
    ingest_dataset(con, public, "tiny-public", "public", "summarization",
                   FieldMap(id="id", input="text", output="summary"))
    con.close()
    return config, db


@pytest.mark.parametrize("method", [
    {"name": "dp-fewshot", "splits": 3, "shots": 2, "demos": 3, "top_k": 10},
    {"name": "dp-fewshot", "splits": 3, "shots": 2, "demos": 3, "top_k": 10, "mechanism": "exponential"},
    {"name": "dps-mozo", "shots": 2, "top_k": 10, "demos": 3, "accept_unproven_guarantee": True},
])
def test_synthetic_demonstrations_cost_one_charge_then_answer_every_query_for_free(public_env, method):
    config, db = public_env
    _configure(config, method, public_dataset="tiny-public", synthetic={"name": "tiny-synthetic", "epsilon": 1.0})
    result = synthesize_demos(config=config, db=db)
    events, _, summary = _state(db)
    assert len(events) == 1 and isinstance(events[0], ComposedEvent)
    assert result["epsilon_cost"] == pytest.approx(summary["epsilon_spent"])
    assert 0 < summary["epsilon_spent"] <= 1.0
    con = connect(db, read_only=True)
    try:
        assert get_dataset(con, "tiny-synthetic")["kind"] == "public"
        demos = load_records(con, "tiny-synthetic")
        public_inputs = [r.input for r in load_records(con, "tiny-public")]
    finally:
        con.close()
    assert [d.input for d in demos] == public_inputs[:3]  # outputs generated for public inputs

    with pytest.raises(ValueError, match="already exists"):  # never written over, and nothing charged for trying
        synthesize_demos(config=config, db=db)
    _configure(config, {"name": "synthetic-icl", "demos_dataset": "tiny-synthetic", "shots": 2})
    answered = answer_backlog(config=config, db=db)
    events, releases, after = _state(db)
    assert answered["answered"] == N_QUERIES and len(releases) == N_QUERIES
    assert sum(isinstance(e, PublicDataEvent) for e in events) == N_QUERIES
    assert after["epsilon_spent"] == pytest.approx(summary["epsilon_spent"])  # free


def test_classification_demonstrations_come_per_label_from_disjoint_pools(classification_env):  # noqa: F811
    config, db = classification_env
    raw = yaml.safe_load(open(config))
    raw["method"] = {"name": "dp-fewshot", "splits": 2, "shots": 2, "demos": 2, "top_k": 10}
    raw["synthetic"] = {"name": "cls-synthetic", "label_template": "Label: {output}\nText: {input}"}
    raw["generation"] = {"max_new_tokens": MAX_TOKENS, "stop": ["\n"]}
    open(config, "w").write(yaml.safe_dump(raw))
    synthesize_demos(config=config, db=db)
    con = connect(db, read_only=True)
    try:
        demos = load_records(con, "cls-synthetic")
        (event,) = [event_from_json(e) for e in ledger_events(con, "tiny")]
    finally:
        con.close()
    assert sorted(d.output for d in demos) == sorted(LABELS * 2)
    # one charge: the pool with the largest rate (all pools have 20 records: q = 2·2/20), every token of its demos
    assert event.count == 2 * MAX_TOKENS and event.event.sampling_rate == pytest.approx(4 / 20)


def test_dp_fewshot_config_is_sent_to_synthesize(pipeline_env):
    config, db = pipeline_env
    _configure(config, {"name": "dp-fewshot"}, public_dataset="tiny", synthetic={"name": "s"})
    with pytest.raises(ValueError, match="dpicl synthesize"):
        answer_backlog(config=config, db=db)


def test_free_icl_with_the_nearest_public_records_releases_the_consensus_of_its_prompts(public_env, fake_models):
    """synthetic-icl on a public dataset with `demonstrations: nearest` and `consensus`: per query, `consensus`
    one-shot prompts, each with one of the query's most similar public records, and the `shots`-shot prompt with the
    nearest ones (the nearest last); the release is the answer nearest all the others, free."""
    import numpy as np

    config, db = public_env
    backend, encoder = fake_models
    seen: dict[str, str] = {}  # prompt -> its greedy answer
    generate = backend.generate

    def recording(prompts, params, *, progress=False):
        answers = generate(prompts, params, progress=progress)
        seen.update(zip(prompts, answers))
        return answers

    backend.generate = recording
    _configure(config, {"name": "synthetic-icl", "demos_dataset": "tiny-public", "shots": 2,
                        "demonstrations": "nearest", "consensus": 3})
    answered = answer_backlog(config=config, db=db)
    events, releases, after = _state(db)
    assert answered["answered"] == N_QUERIES and after["epsilon_spent"] == 0
    assert all(isinstance(e, PublicDataEvent) for e in events)

    public = [f"public ticket {i}" for i in range(10)]
    unit = encoder.encode(public)
    for release in releases:
        query = f"incoming ticket {release['query_id'][1:]}"
        nearest = np.argsort(-(unit @ encoder.encode([query])[0]), kind="stable")
        shown = {p: [i for i in range(10) if f"{public[i]}\n" in p] for p in seen if f"{query}\n" in p}
        assert len(shown) == 4  # 3 one-shot prompts and the 2-shot one
        assert sorted(map(tuple, shown.values())) == sorted([(nearest[0],), (nearest[1],), (nearest[2],),
                                                             tuple(sorted(nearest[:2]))])
        fewshot = next(p for p, ids in shown.items() if len(ids) == 2)
        assert fewshot.index(public[nearest[0]]) > fewshot.index(public[nearest[1]])  # the nearest last
        answers = [seen[p] for p in shown]
        vectors = encoder.encode(answers)
        assert release["answer"] == answers[int(np.argmax(vectors @ vectors.sum(axis=0)))]
        assert release["details"]["consensus"] == 3 and release["details"]["demonstrations"] == "nearest"
