"""The answer_backlog flow with paper 004's public-data methods (fake models): sga and ksa-public show the LLM
public text only, and every query is charged."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml

from dpicl.keywords import keywords
from dpicl.storage.db import connect
from tests.pipeline.conftest import N_QUERIES, PLANNED, write_jsonl
from tests.pipeline.test_methods import _run, _with_method

pytestmark = pytest.mark.slow  # each flow run starts Prefect


@pytest.fixture
def public_env(pipeline_env, tmp_path):
    """The tiny pipeline with a public dataset and a backend that records every prompt it is given."""
    from dpicl.storage.ingest import FieldMap, ingest_dataset
    from dpicl.tasks import context

    config, db = pipeline_env
    public = write_jsonl(tmp_path / "public.jsonl", [
        {"id": f"p{i}", "text": f"public example {i}", "summary": f"public answer {i}"} for i in range(30)
    ])
    con = connect(db)
    ingest_dataset(con, public, "tiny-public", "public", "summarization", FieldMap(id="id", input="text",
                                                                                    output="summary"))
    con.close()
    raw = yaml.safe_load(open(config))
    raw["public_dataset"] = "tiny-public"
    open(config, "w").write(yaml.safe_dump(raw))
    backend = context.backend(None)
    prompts: list[str] = []
    generate = backend.generate

    def recording(batch, params, *, progress=False):
        prompts.extend(batch)
        return generate(batch, params, progress=progress)

    backend.generate = recording
    return config, db, prompts


def _public_outputs(db: str) -> set[str]:
    con = connect(db, read_only=True)
    try:
        from dpicl.storage.artifacts import _decode

        rows = con.execute("SELECT format, payload FROM artifacts WHERE stage = 'public_outputs'").fetchall()
        assert rows and all(not p for (p,) in con.execute(
            "SELECT private FROM artifacts WHERE stage IN ('public_outputs', 'public_prompts', 'public_example')"
        ).fetchall()), "public ensemble artifacts must exist and be marked public"
        return {text for fmt, payload in rows for text in _decode(fmt, payload)}
    finally:
        con.close()


def test_sga_shows_the_llm_only_public_candidates_and_charges_a_dpm_event(public_env):
    config, db, prompts = public_env
    _with_method(config, {"name": "sga", "levels": 2, "k": 3, "select": "llm",
                          "selection_template": "{example}\n\nInput:\n{input}\nPick one of: [{candidates}]\nOutput:"})
    result, releases, events, details, summary = _run(config, db)
    assert result["answered"] == PLANNED and result["refused_budget"] == N_QUERIES - PLANNED
    assert all(e.kind == "subsampled_dpm" and e.sensitivity == 2 and e.nodes_per_level == 2 for e in events)
    public = _public_outputs(db)
    selections = [p for p in prompts if "Pick one of:" in p]
    if not selections:
        # With 4 + 4 random fake embeddings DPM often keeps a query at one cluster (one candidate, released as is,
        # no selection prompt); in about one run of ten it did so for all five queries. Those releases must still
        # be public outputs.
        assert all(not d["llm_selection"] for d in details)
        assert all(r["answer"] in public for r in releases)
    for p in selections:
        candidates = re.search(r"Pick one of: \[(.*)\]\nOutput:", p, re.S).group(1).split(",\n")
        assert 1 <= len(candidates) <= 3 and set(candidates) <= public, "a candidate that is not a public output"
        assert "private" not in p, "private text reached the selection prompt"
        assert re.search(r"public example \d+\n.*public answer \d+", p), "the public one-shot example is missing"
    assert all(1 <= len(d["candidate_indices"]) <= 3 for d in details)
    assert summary["epsilon_spent"] <= summary["epsilon_limit"]


def test_sga_top1_releases_a_public_output_without_asking_the_llm(public_env):
    config, db, prompts = public_env
    _with_method(config, {"name": "sga", "levels": 2, "select": "top1"})
    result, releases, events, details, _ = _run(config, db)
    assert result["answered"] == PLANNED
    assert {r["answer"] for r in releases} <= _public_outputs(db)
    assert not any(d["llm_selection"] for d in details)


def test_ksa_public_keywords_come_from_public_text_only(public_env):
    config, db, prompts = public_env
    _with_method(config, {"name": "ksa-public", "k": 2})
    result, releases, events, details, summary = _run(config, db)
    assert result["answered"] == PLANNED
    assert all(e.kind == "subsampled_exponential" and e.mechanism == "ksa_public" for e in events)
    public_words = {w for t in _public_outputs(db) for w in keywords(t)}
    public_words |= {w for i in range(N_QUERIES) for w in keywords(f"Input:\nincoming ticket {i}\nOutput:")}
    for d in details:
        assert len(d["keywords"]) == 2 and set(d["keywords"]) <= public_words
    # the default prompt: a public example, then the query prompt with a line of the DP keywords
    hinted = [p for p in prompts if "\nKeywords: " in p]
    assert hinted and all(re.search(r"public example \d+", p) and "private" not in p for p in hinted)


def test_ksa_public_with_public_fewshot_shows_the_nearest_public_records_with_their_own_keywords(public_env):
    """With `public_fewshot: 3` the keyword prompt starts with the 3 public records the few-shot prompt shows, each
    with a Keywords line of its own output's words; what a rerun recomputes names the same demonstrations."""
    from dpicl.config import load_config
    from dpicl.storage.artifacts import get_artifact
    from dpicl.tasks.rerun import feature_keys

    config, db, prompts = public_env
    _with_method(config, {"name": "ksa-public", "k": 2, "public_demonstrations": "nearest", "public_fewshot": 3})
    result, *_ = _run(config, db)
    assert result["answered"] == PLANNED
    hinted = [p for p in prompts if "\nKeywords: " in p]
    assert len(hinted) == PLANNED
    cfg, con = load_config(config), connect(db, read_only=True)
    try:
        queries = dict(con.execute("SELECT query_id, input FROM queries WHERE backlog = 'tiny-backlog'").fetchall())
        answered = [q for (q,) in con.execute("SELECT query_id FROM releases").fetchall()]
        for query_id in answered:
            keys = feature_keys(cfg, queries[query_id], None)
            demos = get_artifact(con, keys["public_demos"])
            assert len(demos) == 3 and len(get_artifact(con, keys["public_outputs"])) == 4 + 1  # teachers + few-shot
            stored = con.execute("SELECT payload FROM artifacts WHERE stage = 'public_prompts' AND query_id = ?",
                                 [query_id]).fetchone()[0].decode()
            few_shot_prompt = json.loads(stored)[-1]
            # the very records of the free few-shot prompt, in its order
            assert re.findall(r"public example \d+", few_shot_prompt) == [inp for inp, _ in demos]
            prompt = next(p for p in hinted if f"Input:\n{queries[query_id]}\n" in p)
            for inp, out in demos:  # "public answer 7": keywords "public", "answer" (k = 2), in output order
                assert f"Input:\n{inp}\nKeywords: public, answer\nOutput: {out}" in prompt
            assert "private" not in prompt
    finally:
        con.close()


def test_a_private_dataset_named_as_public_is_refused(public_env):
    config, db, _ = public_env
    raw = yaml.safe_load(open(config))
    raw["public_dataset"] = "tiny"  # the private dataset
    open(config, "w").write(yaml.safe_dump(raw))
    _with_method(config, {"name": "sga"})
    with pytest.raises(ValueError, match="ingested as private, not public"):
        _run(config, db)


@pytest.mark.parametrize("fewshot", [None, 14])
def test_sga_with_nearest_public_demonstrations_shows_each_query_its_most_similar_public_records(public_env,
                                                                                               fewshot):
    """`public_shots: 3` while the private teachers show 2; with `public_fewshot: 14` one more public prompt shows
    the 14 nearest (more than the teachers' 12)."""
    from dpicl.config import load_config
    from dpicl.storage.artifacts import artifact_key, get_artifact
    from dpicl.tasks.prompt import public_ensemble_params
    from dpicl.tasks.rerun import feature_keys
    from tests.pipeline.fakes import FakeEncoder

    config, db, _ = public_env
    _with_method(config, {"name": "sga", "levels": 2, "select": "top1", "public_demonstrations": "nearest",
                          "public_shots": 3, "public_fewshot": fewshot})
    result, *_ = _run(config, db)
    assert result["answered"] == PLANNED
    public = [f"public example {i}" for i in range(30)]
    encoder, cfg = FakeEncoder(), load_config(config)
    con = connect(db, read_only=True)
    try:
        queries = dict(con.execute("SELECT query_id, input FROM queries WHERE backlog = 'tiny-backlog'").fetchall())
        answered = [q for (q,) in con.execute("SELECT query_id FROM releases").fetchall()]
        assert len(answered) == PLANNED
        for query_id in answered:
            query = queries[query_id]
            # ranked independently of the code under test: cosine of the fake embeddings, most similar first
            order = np.argsort(-(encoder.encode(public) @ encoder.encode([query])[0])).tolist()
            prompts = get_artifact(con, artifact_key("public_prompts", [], public_ensemble_params(cfg, query)))
            shown = [[int(i) for i in re.findall(r"public example (\d+)", p)] for p in prompts]
            if fewshot:
                assert shown.pop() == order[:fewshot][::-1], "the few-shot prompt: the nearest, nearest last"
            assert len(shown) == 4 and all(len(s) == 3 for s in shown)  # 4 teachers × 3 public shots
            assert sorted(i for s in shown for i in s) == sorted(order[:12])
            assert [s[-1] for s in shown] == order[:4], "each teacher shows one of the 4 nearest, last"
            keys = feature_keys(cfg, query, None)  # what a rerun recomputes must be what the run stored
            assert get_artifact(con, keys["public_example"]) == f"Input:\n{public[order[0]]}\nOutput: " \
                f"public answer {order[0]}", "the one-shot example is the nearest public record"
            assert len(get_artifact(con, keys["public_outputs"])) == 4 + bool(fewshot)
    finally:
        con.close()


def test_only_public_texts_share_the_encoders_batches(public_env, fake_models, monkeypatch):
    """The encoder batches a call only when it holds public texts (the queries, the public records, the public
    ensemble's outputs): a private teacher output or record is embedded alone (batch invariance, docs/PRIVACY.md)."""
    from dpicl.storage.artifacts import _decode

    config, db, _ = public_env
    # teachers that show their nearest private records: the private inputs are embedded too, and must be alone
    _with_method(config, {"name": "sga", "levels": 2, "select": "top1", "public_demonstrations": "nearest",
                          "private_demonstrations": "nearest", "sampling_rate": 0.5})
    _, encoder = fake_models
    calls: list[tuple[list[str], bool]] = []
    encode = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts, progress=False, batched=False: (
        calls.append((list(texts), batched)), encode(texts, progress, batched))[1])
    _run(config, db)
    con = connect(db, read_only=True)
    try:
        private = {text for fmt, payload in con.execute(
            "SELECT format, payload FROM artifacts WHERE stage = 'teacher_outputs'").fetchall()
            for text in _decode(fmt, payload)}
        private |= {text for row in con.execute("SELECT input, output FROM records r JOIN datasets d "
                                                "ON r.dataset = d.name WHERE d.kind = 'private'").fetchall()
                    for text in row}
        inputs = {text for (text,) in con.execute("SELECT input FROM records WHERE dataset = 'tiny'").fetchall()}
    finally:
        con.close()
    batched = [text for texts, batch in calls if batch for text in texts]
    alone = [text for texts, batch in calls if not batch for text in texts]
    assert batched and not private.intersection(batched)
    assert private.intersection(alone), "the teacher outputs were embedded, one call apart"
    assert inputs <= set(alone), "the private inputs were embedded (to rank them), each alone"
