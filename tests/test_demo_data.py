"""The committed demo data set: shape, canary placement, and byte-exact reproducibility."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

import dpicl.demo

GENERATOR = Path(__file__).resolve().parent.parent / "scripts" / "make_demo_data.py"


def _load_generator():
    """scripts/make_demo_data.py, by its path (a script of the repository, not part of the installed package)."""
    spec = importlib.util.spec_from_file_location("make_demo_data", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


make_data = _load_generator()
DATA = Path(dpicl.demo.__file__).resolve().parent / "data"  # the files the package ships
FILES = ["private_tickets.jsonl", "public_tickets.jsonl", "backlog.jsonl", "canaries.json"]


def _jsonl(name: str) -> list[dict]:
    text = (DATA / name).read_text(encoding="utf-8")
    assert text.endswith("\n") and "\r" not in text
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def private() -> list[dict]:
    return _jsonl("private_tickets.jsonl")


@pytest.fixture(scope="module")
def public() -> list[dict]:
    return _jsonl("public_tickets.jsonl")


@pytest.fixture(scope="module")
def backlog() -> list[dict]:
    return _jsonl("backlog.jsonl")


@pytest.fixture(scope="module")
def canaries() -> list[str]:
    return json.loads((DATA / "canaries.json").read_text(encoding="utf-8"))


def test_counts_and_schema(private, public, backlog, canaries):
    assert len(private) == 300
    assert len(public) == 100
    assert len(backlog) == 24
    assert len(canaries) == 10
    assert all(isinstance(c, str) and len(c) >= 8 for c in canaries)
    assert len({c.lower() for c in canaries}) == 10
    for rec in private + public:
        assert set(rec) == {"ticket_id", "ticket", "summary"}
        assert all(isinstance(v, str) and v for v in rec.values())
    for rec in backlog:
        assert set(rec) == {"query_id", "ticket", "reference"}
        assert all(isinstance(v, str) and v for v in rec.values())


def test_ids_unique_and_well_formed(private, public, backlog):
    ids = [r["ticket_id"] for r in private + public] + [q["query_id"] for q in backlog]
    assert len(ids) == len(set(ids))
    assert [r["ticket_id"] for r in private] == [f"T-{i:05d}" for i in range(1, 301)]
    assert [r["ticket_id"] for r in public] == [f"P-{i:05d}" for i in range(1, 101)]
    assert [q["query_id"] for q in backlog] == [f"Q-{i:03d}" for i in range(1, 25)]


def test_texts_are_single_lines_of_reasonable_length(private, public, backlog):
    pairs = [(r["ticket"], r["summary"]) for r in private + public]
    pairs += [(q["ticket"], q["reference"]) for q in backlog]
    for ticket, summary in pairs:
        assert "\n" not in ticket and "\n" not in summary
        assert summary.startswith("Customer") and summary.endswith(".")
        assert 8 <= len(summary.split()) <= 20, summary
        assert 40 <= len(ticket.split()) <= 90, ticket
    # Tickets are varied, not one template repeated.
    assert len({t for t, _ in pairs}) == len(pairs)


def test_each_canary_in_exactly_one_private_record_and_nowhere_else(
    private, public, backlog, canaries
):
    for canary in canaries:
        c = canary.lower()
        holders = [r for r in private if c in r["ticket"].lower() or c in r["summary"].lower()]
        assert len(holders) == 1, canary
        assert c in holders[0]["ticket"].lower() and c in holders[0]["summary"].lower()
        assert not any(c in json.dumps(r, ensure_ascii=False).lower() for r in public)
        assert not any(c in json.dumps(q, ensure_ascii=False).lower() for q in backlog)
    # No private record holds two canaries.
    per_record = Counter(
        r["ticket_id"] for r in private for c in canaries if c.lower() in r["ticket"].lower()
    )
    assert set(per_record.values()) == {1}


def test_canaries_have_backlog_twins_in_their_category(private, backlog, canaries):
    """Each canary's situation recurs in a backlog query (same distinctive details)."""
    for canary, _cat, ticket_t, _s, twin_t, _r in make_data.CANARIES:
        assert canary in canaries
        # A distinctive phrase shared between the canary and its twin template.
        shared = [r for r in make_data.RESERVED if r in ticket_t and r in twin_t]
        assert shared, canary
        assert any(shared[0] in q["ticket"] for q in backlog), canary
        # ... and that phrase is in no private record other than the canary's.
        holders = [r for r in private if shared[0] in r["ticket"]]
        assert len(holders) == 1 and canary in holders[0]["ticket"], canary


def test_generator_reproduces_committed_files(tmp_path):
    assert make_data.DATA_DIR == DATA  # its default output is the package's data folder
    written = make_data.main(tmp_path)
    assert sorted(p.name for p in written) == sorted(FILES)
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_data_is_small():
    assert sum((DATA / name).stat().st_size for name in FILES) < 300_000


@pytest.mark.model
def test_the_demos_few_shot_baselines_show_each_querys_nearest_tickets_nearest_last():
    """`dpicl demo`'s free and non-private baselines: 4-shot prompts with the query's most similar public (private)
    tickets by cosine similarity of their embeddings, the nearest closest to the query; zero-shot has none."""
    from types import SimpleNamespace

    import numpy as np

    from dpicl.config import load_config
    from dpicl.demo.run import NONPRIVATE_SHOTS, baseline_prompts
    from dpicl.embeddings.candidates import most_similar
    from dpicl.prompts import public_ensemble, render_prompt, zero_shot_prompt
    from dpicl.tasks import context

    cfg = load_config("demo")

    def records(name: str) -> list[SimpleNamespace]:
        rows = [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]
        return [SimpleNamespace(input=r["ticket"], output=r.get("summary")) for r in rows]

    private, public = records("private_tickets.jsonl")[:40], records("public_tickets.jsonl")[:40]
    queries = [r.input for r in records("backlog.jsonl")[:3]]
    prompts = baseline_prompts(cfg, private, public, queries)

    encoder = context.encoder(cfg)
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    q = unit(encoder.encode(queries))
    for name, pool in (("public few-shot", public), ("non-private", private)):
        similarity = q @ unit(encoder.encode([r.input for r in pool])).T
        for i, query in enumerate(queries):
            nearest = np.argsort(-similarity[i], kind="stable")[:NONPRIVATE_SHOTS]
            shots = [(pool[j].input, pool[j].output) for j in reversed(nearest)]
            assert prompts[name][i] == render_prompt(cfg.task, shots, query)
    assert prompts["zero-shot"] == [zero_shot_prompt(cfg.task, query) for query in queries]
    # the flow's last public prompt is the public few-shot one: `dpicl demo` reads its answer from the flow's outputs
    ranked = most_similar(encoder.encode(queries, batched=True),
                          encoder.encode([r.input for r in public], batched=True), cfg.method.public_ranked_count)
    assert cfg.method.public_fewshot == NONPRIVATE_SHOTS
    for i, query in enumerate(queries):
        flow_prompts, _ = public_ensemble(cfg.task, [(r.input, r.output) for r in public], query,
                                          cfg.method.teachers, cfg.method.public_shot_count, "key",
                                          ranked[i].tolist(), cfg.method.public_fewshot)
        assert flow_prompts[-1] == prompts["public few-shot"][i]
    # read from the flow instead: neither built nor their nearest tickets searched for
    without = baseline_prompts(cfg, private, public, queries, public_fewshot=False)
    assert set(without) == {"zero-shot", "non-private"}
    assert all(without[name] == prompts[name] for name in without)


def test_the_demos_thread_count_holds_within_and_is_restored_after_an_error():
    """`dpicl demo` finds the alternatives' nearest tickets on every core, then gives generation its one thread back."""
    import torch

    from dpicl.demo.run import torch_threads

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"), torch_threads(before + 1):
        assert torch.get_num_threads() == before + 1
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_the_demo_says_when_a_free_alternative_scored_as_high_as_the_dp_answers():
    from dpicl.demo.run import verdict

    worth = verdict({"dp": 47.0, "zero-shot": 20.6, "public few-shot": 45.0, "non-private": 63.2}, 10)
    assert worth.startswith("the DP answers scored 2.0 above the best free alternative (public 4-shot)")
    wasted = verdict({"dp": 41.3, "zero-shot": 20.6, "public few-shot": 45.0, "non-private": 63.2}, 10)
    assert "free public 4-shot answers scored 45.0, the DP answers 41.3" in wasted and "dpicl evaluate" in wasted
    tie = verdict({"dp": 30.0, "zero-shot": 30.0, "public few-shot": 12.0, "non-private": 63.2}, 10)
    assert "free zero-shot answers scored 30.0" in tie  # a tie buys nothing either
    beaten = verdict({"dp": 41.3, "zero-shot": 20.6, "public few-shot": 40.0, "public consensus": 47.9,
                      "non-private": 63.2}, 7)
    assert "free public consensus answers scored 47.9" in beaten  # where the method has one
    assert "consensus: 7}" in beaten and "consensus" not in tie  # how to release it for free, where the pipeline can


def test_the_demos_consensus_alternative_is_the_public_answer_nearest_the_others_read_from_the_flows_artifacts():
    """`dpicl demo`'s free consensus: among the public texts the flow stored for a query (with their embeddings),
    the one with the highest summed cosine similarity to the others; for each query its own texts."""
    import numpy as np

    from dpicl.config import load_config
    from dpicl.demo.run import stored_consensus
    from dpicl.storage.artifacts import put_artifact
    from dpicl.storage.db import connect
    from dpicl.tasks.rerun import feature_keys

    cfg = load_config("demo")
    rng = np.random.default_rng(0)
    con = connect(":memory:")
    expected = []
    for i, query in enumerate(["printer jams", "refund missing"]):
        keys = feature_keys(cfg, query, None)
        texts = [f"answer {i}.{j}" for j in range(5)]
        vectors = rng.normal(size=(5, 8)).astype(np.float32)
        vectors[3] = vectors[[0, 1, 2, 4]].mean(axis=0) * 3  # the centre of the others, and longer: not a unit vector
        put_artifact(con, keys["public_texts"], "public_outputs", "b", f"q{i}", texts, private=False)
        put_artifact(con, keys["public"], "public_embeddings", "b", f"q{i}", vectors, private=False)
        expected.append(texts[3])
    label, answers = stored_consensus(con, cfg, ["printer jams", "refund missing"])
    assert (label, answers) == ("public consensus", expected)
    assert stored_consensus(con, cfg.model_copy(update={"method": cfg.method.model_copy(
        update={"name": "ksa-jem"})}), ["printer jams"]) is None  # no public texts to vote on
