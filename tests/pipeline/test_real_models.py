"""answer_backlog with the embedded SmolLM2 (no fakes): a classification backlog with rnm and a text backlog
with ksa-jem, two queries each — the backend calls the methods make really work."""

from __future__ import annotations

import pytest
import yaml

from dpicl.flows.answer_backlog import answer_backlog
from dpicl.storage.db import connect
from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
from dpicl.storage.ledger import open_budget, stored_releases
from tests.pipeline.conftest import write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.model]

REVIEWS = ["a wonderful, moving film", "dull and far too long", "a delight from start to finish",
           "a boring, stupid mess", "sharp, funny and warm", "clumsy and lifeless"]


def _env(tmp_path, task: str, method: dict, task_cfg: dict, rows: list[dict]) -> tuple[str, str]:
    db = tmp_path / f"{task}.duckdb"
    con = connect(db)
    ingest_dataset(con, write_jsonl(tmp_path / "p.jsonl", rows), "p", "private", task,
                   FieldMap(id="id", input="x", output="y"))
    ingest_queries(con, write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "x": "a joyful, touching story"},
                                                            {"id": "q2", "x": "a tedious, empty film"}]),
                   "q", FieldMap(id="id", input="x", output=None))
    open_budget(con, "p", 3.0, 1e-4)
    con.close()
    config = tmp_path / f"{task}.yaml"
    config.write_text(yaml.safe_dump({
        "name": task, "private_dataset": "p", "backlog": "q", "task": task_cfg,
        "generation": {"max_new_tokens": 8, "stop": ["\n"]},
        "method": {"teachers": 3, "shots": 1, "sampling_rate": 0.5, "planned_queries": 10, **method},
    }))
    return str(config), str(db)


def _releases(db: str) -> list[dict]:
    con = connect(db, read_only=True)
    try:
        return stored_releases(con, "q")
    finally:
        con.close()


def test_rnm_classifies_with_label_scores(tmp_path):
    rows = [{"id": str(i), "x": r, "y": "positive" if i % 2 == 0 else "negative"} for i, r in enumerate(REVIEWS)]
    task = {"type": "classification", "demo_template": "Review: {input}\nSentiment: {output}",
            "query_template": "Review: {input}\nSentiment:", "labels": ["negative", "positive"]}
    config, db = _env(tmp_path, "classification", {"name": "rnm"}, task, rows)
    assert answer_backlog(config=config, db=db)["answered"] == 2
    releases = _releases(db)
    assert {r["answer"] for r in releases} <= {"negative", "positive"}
    assert all(r["mechanism"] == "rnm" and r["epsilon_cost"] > 0 for r in releases)


def test_ksa_joint_em_answers_with_the_reconstruction_prompt(tmp_path):
    rows = [{"id": str(i), "x": r, "y": f"The review says the film is {r.split()[1]}"} for i, r in enumerate(REVIEWS)]
    task = {"demo_template": "Review: {input}\nSummary: {output}", "query_template": "Review: {input}\nSummary:"}
    method = {"name": "ksa-jem", "k": 2,
              "keyword_template": "Review: {input}\nSummary using the words [{keywords}]:"}
    config, db = _env(tmp_path, "summarization", method, task, rows)
    assert answer_backlog(config=config, db=db)["answered"] == 2
    query_words = {"q1": {"Review", "joyful", "touching", "story", "Summary"},
                   "q2": {"Review", "tedious", "empty", "film", "Summary"}}
    for r in _releases(db):
        assert len(r["details"]["keywords"]) == 2 and set(r["details"]["keywords"]) <= query_words[r["query_id"]]


def test_sga_picks_among_public_outputs_with_the_real_encoder_and_model(tmp_path):
    rows = [{"id": str(i), "x": r, "y": f"The review says the film is {r.split()[1]}"} for i, r in enumerate(REVIEWS)]
    task = {"demo_template": "Review: {input}\nSummary: {output}", "query_template": "Review: {input}\nSummary:"}
    method = {"name": "sga", "levels": 2, "k": 2,
              "selection_template": "{example}\nReview: {input}\nPick the best summary of [{candidates}]:"}
    config, db = _env(tmp_path, "summarization", method, task, rows)
    con = connect(db)
    public = [{"id": f"p{i}", "x": r, "y": f"A viewer finds it {r.split()[-1]}"} for i, r in
              enumerate(["a gripping thriller", "a flat comedy", "an uneven drama", "a tender romance"])]
    ingest_dataset(con, write_jsonl(tmp_path / "public.jsonl", public), "pub", "public", "summarization",
                   FieldMap(id="id", input="x", output="y"))
    con.close()
    raw = yaml.safe_load(open(config))
    open(config, "w").write(yaml.safe_dump({**raw, "public_dataset": "pub"}))
    assert answer_backlog(config=config, db=db)["answered"] == 2
    for r in _releases(db):
        assert r["mechanism"] == "sga" and r["epsilon_cost"] > 0
        assert 1 <= len(r["details"]["candidate_indices"]) <= 2


def _token_env(tmp_path, method: dict) -> tuple[str, str]:
    rows = [{"id": str(i), "x": r, "y": f"The review says the film is {r.split()[1]}"} for i, r in enumerate(REVIEWS)]
    task = {"demo_template": "Review: {input}\nSummary: {output}", "query_template": "Review: {input}\nSummary:"}
    config, db = _env(tmp_path, "summarization", {}, task, rows)
    raw = yaml.safe_load(open(config))
    raw["method"] = {"planned_queries": 10, "top_k": 20, **method}
    raw["generation"] = {"max_new_tokens": 6, "stop": ["\n"]}
    open(config, "w").write(yaml.safe_dump(raw))
    return config, db


@pytest.mark.parametrize("method", [{"name": "dps-mozo", "shots": 1}, {"name": "adapmixed", "members": 3}])
def test_token_level_methods_decode_with_the_real_model(tmp_path, method):
    config, db = _token_env(tmp_path, method)
    assert answer_backlog(config=config, db=db)["answered"] == 2
    for r in _releases(db):
        assert r["mechanism"] == method["name"] and r["epsilon_cost"] > 0
        assert 1 <= r["details"]["steps"] <= 6 and "\n" not in r["answer"]


def test_synthesize_then_answer_for_free_with_the_real_model(tmp_path):
    from dpicl.flows.synthesize_demos import synthesize_demos
    from dpicl.storage import load_records

    config, db = _token_env(tmp_path, {"name": "dp-fewshot", "splits": 2, "shots": 1, "demos": 2})
    con = connect(db)
    ingest_dataset(con, write_jsonl(tmp_path / "pub.jsonl", [{"id": "a", "x": "a gripping thriller", "y": "-"},
                                                              {"id": "b", "x": "a flat comedy", "y": "-"}]),
                   "pub", "public", "summarization", FieldMap(id="id", input="x", output="y"))
    con.close()
    raw = yaml.safe_load(open(config))
    raw.update(public_dataset="pub", synthetic={"name": "synthetic", "epsilon": 1.0})
    open(config, "w").write(yaml.safe_dump(raw))
    assert synthesize_demos(config=config, db=db)["demonstrations"] == 2
    con = connect(db, read_only=True)
    try:
        assert [r.input for r in load_records(con, "synthetic")] == ["a gripping thriller", "a flat comedy"]
    finally:
        con.close()
    raw["method"] = {"name": "synthetic-icl", "demos_dataset": "synthetic", "shots": 2}
    open(config, "w").write(yaml.safe_dump(raw))
    assert answer_backlog(config=config, db=db)["answered"] == 2
    assert all(r["epsilon_cost"] == 0 for r in _releases(db))
