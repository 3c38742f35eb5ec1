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


def ingest_tiny(db, folder: Path, *, queries: int = N_QUERIES, epsilon: float = 2.0, public: int = 0,
                query_rows: list[dict] | None = None) -> None:
    """Into database `db` (a file path or URL): the private dataset "tiny" (N_RECORDS tickets), the backlog
    "tiny-backlog" (`queries` incoming tickets, or `query_rows`), a budget of `epsilon` (δ 1e-5) and, with
    `public` > 0, that many public tickets as "tiny-public". The files are written into `folder`."""
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
    from dpicl.storage.ledger import open_budget

    private = write_jsonl(folder / "private.jsonl", [
        {"id": f"r{i}", "text": f"private ticket number {i} about topic {i % 4}", "summary": f"private summary {i}"}
        for i in range(N_RECORDS)])
    rows = query_rows if query_rows is not None else [{"id": f"q{i}", "text": f"incoming ticket {i}"}
                                                      for i in range(queries)]
    backlog = write_jsonl(folder / "backlog.jsonl", rows)
    fields = FieldMap(id="id", input="text", output="summary")
    con = connect(db)
    try:
        ingest_dataset(con, private, "tiny", "private", "summarization", fields)
        if public:
            rows = [{"id": f"p{i}", "text": f"public ticket {i}", "summary": f"public summary {i}"}
                    for i in range(public)]
            ingest_dataset(con, write_jsonl(folder / "public.jsonl", rows), "tiny-public", "public", "summarization",
                           fields)
        ingest_queries(con, backlog, "tiny-backlog", FieldMap(id="id", input="text", output=None))
        open_budget(con, "tiny", epsilon, 1e-5)
    finally:
        con.close()


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
    db = tmp_path / "test.duckdb"
    ingest_tiny(db, tmp_path)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tiny",
        "private_dataset": "tiny",
        "backlog": "tiny-backlog",
        "method": {"name": "esa", "teachers": 4, "shots": 2, "candidates": 3, "planned_queries": PLANNED},
        "batch_queries": 3,
    }))
    return str(config), str(db)
