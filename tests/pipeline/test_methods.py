"""The answer_backlog flow with every method of paper 001 (fake models): what each releases, what it charges."""

from __future__ import annotations

import json

import pytest
import yaml

from dpicl.flows.answer_backlog import answer_backlog
from dpicl.keywords import keywords
from dpicl.privacy.accounting.events import event_from_json
from dpicl.storage.db import connect
from dpicl.storage.ledger import budget_summary, ledger_events, stored_releases
from tests.pipeline.conftest import N_QUERIES, PLANNED, write_jsonl

pytestmark = pytest.mark.slow  # each flow run starts Prefect

LABELS = ["alpha", "beta", "gamma"]


def _with_method(config: str, method: dict, task: dict | None = None) -> str:
    raw = yaml.safe_load(open(config))
    raw["method"] = {"teachers": 4, "shots": 2, "planned_queries": PLANNED, **method}
    if task:
        raw["task"] = task
    open(config, "w").write(yaml.safe_dump(raw))
    return config


def _run(config: str, db: str):
    result = answer_backlog(config=config, db=db)
    con = connect(db, read_only=True)
    try:
        releases = stored_releases(con, "tiny-backlog")
        events = [event_from_json(e) for e in ledger_events(con, "tiny")]
        details = [json.loads(d) for (d,) in con.execute("SELECT details FROM releases ORDER BY query_id").fetchall()]
        return result, releases, events, details, budget_summary(con, "tiny")
    finally:
        con.close()


@pytest.fixture
def classification_env(tmp_path, fake_models):
    from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
    from dpicl.storage.ledger import open_budget

    private = write_jsonl(tmp_path / "labelled.jsonl", [
        {"id": f"r{i}", "text": f"private text {i}", "label": LABELS[i % 3]} for i in range(60)
    ])
    backlog = write_jsonl(tmp_path / "backlog.jsonl", [{"id": f"q{i}", "text": f"query {i}"} for i in range(N_QUERIES)])
    db = tmp_path / "cls.duckdb"
    con = connect(db)
    ingest_dataset(con, private, "tiny", "private", "classification", FieldMap(id="id", input="text", output="label"))
    ingest_queries(con, backlog, "tiny-backlog", FieldMap(id="id", input="text", output=None))
    open_budget(con, "tiny", 2.0, 1e-5)
    con.close()
    config = tmp_path / "cls.yaml"
    config.write_text(yaml.safe_dump({"name": "cls", "private_dataset": "tiny", "backlog": "tiny-backlog",
                                      "batch_queries": 3}))
    task = {"type": "classification", "demo_template": "Text: {input}\nLabel: {output}",
            "query_template": "Text: {input}\nLabel:", "labels": LABELS}
    return _with_method(str(config), {"name": "rnm"}, task), str(db)


def test_rnm_releases_a_label_per_paid_query_charged_as_a_sqrt2_gaussian(classification_env, fake_models):
    config, db = classification_env
    result, releases, events, details, summary = _run(config, db)
    assert result["answered"] == PLANNED and result["refused_budget"] == N_QUERIES - PLANNED
    assert {r["answer"] for r in releases} <= set(LABELS)
    assert all(e.kind == "subsampled_gaussian" and e.sensitivity == pytest.approx(2 ** 0.5) for e in events)
    assert all(LABELS[d["label_index"]] == r["answer"] for d, r in zip(details, releases))
    assert summary["epsilon_spent"] <= summary["epsilon_limit"]
    backend, _ = fake_models
    assert all(t == -1.0 for _, t in backend.calls), "teachers must vote by label scores, not generate"


def test_calibrated_rnm_scores_each_teacher_prompt_with_its_content_free_inputs(classification_env, fake_models):
    """With task.calibrate the flow scores, for every teacher prompt, the same demonstrations with each content-free
    input in place of the query, and releases labels as before."""
    config, db = classification_env
    raw = yaml.safe_load(open(config))
    raw["task"]["calibrate"] = True
    open(config, "w").write(yaml.safe_dump(raw))
    backend, _ = fake_models
    scored: list[str] = []
    plain = backend.label_logprobs

    def recording(prompts, continuations, *, progress=False, variants=1):
        scored.extend(prompts)
        return plain(prompts, continuations, progress=progress, variants=variants)

    backend.label_logprobs = recording
    result, releases, *_ = _run(config, db)
    assert result["answered"] == PLANNED and {r["answer"] for r in releases} <= set(LABELS)
    with_demos = [p for p in scored if "\n\n" in p]  # teacher prompts, not zero-shot ones
    free = [p for p in with_demos if p.endswith("Text: N/A\nLabel:")]
    teacher = [p for p in with_demos if not p.endswith(("Text: N/A\nLabel:", "Text: \nLabel:",
                                                        "Text: [MASK]\nLabel:"))]
    assert teacher and len(free) == len(teacher)  # one "N/A" prompt per teacher prompt, with its demonstrations
    assert {p.rsplit("\n\n", 1)[0] for p in free} == {p.rsplit("\n\n", 1)[0] for p in teacher}


def test_ksa_joint_em_releases_ranked_keywords_from_the_public_prompt_only(pipeline_env):
    config, db = pipeline_env
    _with_method(config, {"name": "ksa-jem", "k": 3})
    result, releases, events, details, summary = _run(config, db)
    assert result["answered"] == PLANNED
    assert all(e.kind == "subsampled_exponential" and e.sensitivity == 2 for e in events)
    public_words = set(keywords("Input:\nincoming ticket 0\nOutput:")) | {str(i) for i in range(N_QUERIES)}
    for d in details:
        assert len(d["keywords"]) == 3 and set(d["keywords"]) <= public_words, "keywords outside the public domain"
    assert summary["epsilon_spent"] <= summary["epsilon_limit"]


def test_ksa_ptr_releases_a_certified_set_or_the_zero_shot_answer_and_always_charges(pipeline_env):
    config, db = pipeline_env
    _with_method(config, {"name": "ksa-ptr"})
    result, releases, events, details, summary = _run(config, db)
    assert result["answered"] == PLANNED and len(events) == PLANNED
    assert all(e.kind == "subsampled_ptr" for e in events)
    # 4 teachers can never clear the PTR offset: every query falls back to the zero-shot answer, still charged
    assert all(d["keywords"] is None for d in details)
    assert summary["epsilon_spent"] <= summary["epsilon_limit"]


def test_a_backend_without_label_scores_is_refused_with_a_clear_error():
    from dpicl.config import Config
    from dpicl.inference.base import UnsupportedCapabilityError
    from dpicl.inference.teachers import label_votes

    class TextOnly:
        name = "text-only"

        def generate(self, prompts, params, *, progress=False):
            return [""] * len(prompts)

    cfg = Config.model_validate({"name": "x", "private_dataset": "p", "backlog": "b", "method": {"name": "rnm"},
                                 "task": {"type": "classification", "demo_template": "{input}: {output}",
                                          "query_template": "{input}:", "labels": LABELS}})
    with pytest.raises(UnsupportedCapabilityError, match="text-only.*label_logprobs"):
        label_votes(TextOnly(), ["a prompt"], cfg)


def test_nearest_private_demonstrations_show_each_teacher_its_own_records_most_similar_to_the_query(
        pipeline_env, fake_models, monkeypatch):
    """`private_demonstrations: nearest`: every teacher shows records of its own hash bucket only (one record, one
    teacher), ordered by similarity to the query, nearest last, and far more similar than a random pick would be.
    The records are embedded once, each alone, and stored privately for later batches, runs and workers."""
    import numpy as np

    from dpicl.config import load_config
    from dpicl.privacy.sampling import teacher_of
    from dpicl.storage import get_dataset, load_records
    from dpicl.storage.artifacts import _decode
    from dpicl.tasks import sample as sample_task
    from tests.pipeline.fakes import FakeEncoder

    config, db = pipeline_env
    _with_method(config, {"name": "esa", "candidates": 3, "private_demonstrations": "nearest",
                          "sampling_rate": 0.5})
    monkeypatch.setattr(sample_task, "_held", {})  # a fresh process
    _, spy = fake_models
    embedded: list[str] = []
    encode = spy.encode
    monkeypatch.setattr(spy, "encode", lambda texts, progress=False, batched=False: (
        embedded.extend(texts), encode(texts, progress, batched))[1])
    result, *_ = _run(config, db)
    assert result["answered"] == PLANNED
    con = connect(db, read_only=True)
    try:
        key = get_dataset(con, "tiny")["teacher_key"]
        records = dict(con.execute("SELECT record_id, input FROM records WHERE dataset = 'tiny'").fetchall())
        queries = dict(con.execute("SELECT query_id, input FROM queries WHERE backlog = 'tiny-backlog'").fetchall())
        samples = [(query_id, _decode(fmt, payload)["teachers"]) for query_id, fmt, payload in con.execute(
            "SELECT query_id, format, payload FROM artifacts WHERE stage = 'sample'").fetchall()]
    finally:
        con.close()
    assert len(samples) == PLANNED
    encoder, ids = FakeEncoder(), list(records)
    percentiles = []
    for query_id, teachers in samples:
        # cosine of the fake embeddings, computed here independently of the code under test
        similarity = dict(zip(ids, encoder.encode([records[i] for i in ids]) @ encoder.encode([queries[query_id]])[0]))
        order = sorted(ids, key=similarity.get)
        for t, shown in enumerate(teachers):
            assert all(teacher_of([r], key, 4)[0] == t for r in shown), "a record shown by another teacher"
            assert [similarity[r] for r in shown] == sorted(similarity[r] for r in shown), "nearest last"
            percentiles += [order.index(r) / (len(ids) - 1) for r in shown]
    # each teacher keeps its 2 most similar of ~7.5 sampled records: about the 80th percentile of all 60; a random
    # pick averages the 50th (standard error about 0.05 over these ~40 records)
    assert len(percentiles) >= 30 and sum(percentiles) / len(percentiles) > 0.68

    # every batch of the run (3 queries each) ranked against one embedding of each record, stored as private
    assert sorted(t for t in embedded if t in records.values()) == sorted(records.values())
    con = connect(db, read_only=True)
    try:
        (private, payload_format), = con.execute("SELECT private, format FROM artifacts "
                                                 "WHERE stage = 'record_embeddings'").fetchall()
        cfg = load_config(config)
        stored = load_records(con, "tiny")
    finally:
        con.close()
    assert private and payload_format == "npy"
    # another worker process finds them stored and embeds no record again
    monkeypatch.setattr(sample_task, "_held", {})
    embedded.clear()
    vectors = sample_task._record_vectors(str(db), "another-run", cfg, stored)
    assert embedded == [] and np.allclose(vectors, FakeEncoder().encode([r.input for r in stored]))
