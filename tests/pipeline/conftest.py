"""A tiny private dataset, backlog, budget and config in a temporary DuckDB file, with fake models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.pipeline.fakes import FakeBackend, FakeEncoder

N_RECORDS = 60
N_QUERIES = 8
PLANNED = 5


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def fake_models(monkeypatch):
    from dpicl.tasks import context

    backend, encoder = FakeBackend(), FakeEncoder()
    monkeypatch.setattr(context, "backend", lambda cfg: backend)
    monkeypatch.setattr(context, "encoder", lambda cfg: encoder)
    return backend, encoder


@pytest.fixture
def pipeline_env(tmp_path, fake_models):
    """Returns (config path, db path) of a ready-to-run backlog."""
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
    from dpicl.storage.ledger import open_budget

    private = write_jsonl(tmp_path / "private.jsonl", [
        {"id": f"r{i}", "text": f"private ticket number {i} about topic {i % 4}", "summary": f"private summary {i}"}
        for i in range(N_RECORDS)
    ])
    backlog = write_jsonl(tmp_path / "backlog.jsonl", [
        {"id": f"q{i}", "text": f"incoming ticket {i}"} for i in range(N_QUERIES)
    ])
    db = tmp_path / "test.duckdb"
    con = connect(db)
    ingest_dataset(con, private, "tiny", "private", "summarization", FieldMap(id="id", input="text", output="summary"))
    ingest_queries(con, backlog, "tiny-backlog", FieldMap(id="id", input="text", output=None))
    open_budget(con, "tiny", 2.0, 1e-5)
    con.close()
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tiny",
        "private_dataset": "tiny",
        "backlog": "tiny-backlog",
        "method": {"name": "esa", "teachers": 4, "shots": 2, "candidates": 3, "planned_queries": PLANNED},
        "batch_queries": 3,
    }))
    return str(config), str(db)
