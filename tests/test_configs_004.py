"""The paper 004 (public-data DP-ICL) configs: they load, and their `subset` splits of one file are disjoint
(the data is read from $DPICL_DATA when present, as in tests/test_config.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpicl import methods
from dpicl.config import load_config

CONFIGS = ("samsum-sga", "samsum-ksa-public", "chatdoctor-sga", "chatdoctor-ksa-public")


@pytest.mark.parametrize("name", CONFIGS)
def test_config_loads(name):
    cfg = load_config(name)
    assert methods.get(cfg.method.name).needs_public and cfg.public_dataset
    kinds = {s.name: s.kind for s in cfg.data}
    assert kinds[cfg.private_dataset] == "private" and kinds[cfg.public_dataset] == "public"
    assert kinds[cfg.backlog] == "queries"


@pytest.mark.parametrize("dataset", ["samsum", "chatdoctor"])
def test_teacher_settings_are_shared_by_the_pair(dataset):
    sga, ksa = load_config(f"{dataset}-sga"), load_config(f"{dataset}-ksa-public")
    keys = ("teachers", "shots", "sampling_rate", "planned_queries")
    assert [getattr(sga.method, k) for k in keys] == [getattr(ksa.method, k) for k in keys]
    assert (sga.task, sga.model, sga.generation, sga.data) == (ksa.task, ksa.model, ksa.generation, ksa.data)


def _ingest_all(name: str, tmp_path: Path):
    """Ingest every source of a bundled config into a fresh database; skip when its data is not present."""
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import ingest_source

    cfg = load_config(name)
    if not all(Path(s.path).is_file() for s in cfg.data):
        pytest.skip(f"benchmark data for {name} is not present ($DPICL_DATA)")
    con = connect(tmp_path / "c.duckdb")
    reports = {s.name: ingest_source(con, s) for s in cfg.data}
    return cfg, con, reports


def _column(con, sql: str, name: str) -> list[str]:
    return [v for (v,) in con.execute(sql, [name]).fetchall()]


def test_samsum_private_and_public_split_train_two_to_one(tmp_path):
    cfg, con, reports = _ingest_all("samsum-sga", tmp_path)
    private = set(_column(con, "SELECT record_id FROM records WHERE dataset = ?", cfg.private_dataset))
    public = set(_column(con, "SELECT record_id FROM records WHERE dataset = ?", cfg.public_dataset))
    train = next(s.path for s in cfg.data if s.name == cfg.private_dataset)
    rows = json.loads(Path(train).read_text(encoding="utf-8"))
    non_empty = {str(r["id"]) for r in rows if r["dialogue"] and r["summary"]}
    assert len(rows) - len(non_empty) == 1  # the one empty dialogue, left out by skip_empty
    assert not private & public
    assert private | public == non_empty
    assert 1.8 < len(private) / len(public) < 2.2
    assert reports[cfg.private_dataset].rows_left_out_by_subset == len(public)
    assert reports[cfg.backlog].rows_added == 819
    con.close()


def test_chatdoctor_queries_private_and_public_are_disjoint(tmp_path):
    cfg, con, reports = _ingest_all("chatdoctor-sga", tmp_path)
    private = _column(con, "SELECT record_id FROM records WHERE dataset = ?", cfg.private_dataset)
    public = _column(con, "SELECT record_id FROM records WHERE dataset = ?", cfg.public_dataset)
    queries = _column(con, "SELECT query_id FROM queries WHERE backlog = ?", cfg.backlog)
    # ids are the row numbers of the one file: the three parts are disjoint and together the whole file
    assert not set(private) & set(public) and not set(queries) & (set(private) | set(public))
    assert set(private) | set(public) | set(queries) == {str(i) for i in range(1, 5453)}
    assert 1.8 < len(private) / len(public) < 2.2 and 100 < len(queries) < 300
    # the records hold the file's rows: question -> input, answer -> output, reference -> output
    rows = json.loads(Path(cfg.data[0].path).read_text(encoding="utf-8"))
    record = con.execute("SELECT record_id, input, output FROM records WHERE dataset = ? ORDER BY row_no LIMIT 1",
                         [cfg.private_dataset]).fetchone()
    assert record[1:] == (rows[int(record[0]) - 1]["input"], rows[int(record[0]) - 1]["output"])
    query = con.execute("SELECT query_id, input, reference FROM queries WHERE backlog = ? ORDER BY row_no LIMIT 1",
                        [cfg.backlog]).fetchone()
    assert query[1:] == (rows[int(query[0]) - 1]["input"], rows[int(query[0]) - 1]["output"])
    assert sum(r.rows_added for r in reports.values()) == len(rows)
    con.close()
