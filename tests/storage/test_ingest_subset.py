"""`subset`: a deterministic keyed-hash part of a file, for disjoint private/public/query splits of one file."""

import json

import pytest
from pydantic import ValidationError

from dpicl.config import DataSource, Subset
from dpicl.storage.ingest import (
    FieldMap,
    IngestError,
    SubsetSpec,
    ingest_dataset,
    ingest_queries,
    ingest_source,
    subset_bucket,
)
from dpicl.storage.queries import get_dataset, pending_queries

from .conftest import full_text, snapshot, temp_tables, write

SECRET = "SECRET-patient-7731"
N = 600


def rows(n=N):
    return [{"uid": f"u{i}", "text": f"{SECRET} input {i}", "label": f"output {i}"} for i in range(n)]


def ids(con, dataset):
    return {r for (r,) in con.execute("SELECT record_id FROM records WHERE dataset = ?", [dataset]).fetchall()}


def source(path, name, keep, *, kind="private", buckets=3, **extra):
    fields = {"id": "uid", "input": "text", "output": "label"} | extra.pop("fields", {})
    return DataSource(name=name, path=str(path), kind=kind, fields=fields,
                      subset={"buckets": buckets, "keep": keep}, **extra)


@pytest.mark.parametrize("ext", ["jsonl", "json"])
def test_disjoint_parts_cover_the_file_about_two_to_one(con, tmp_path, ext):
    content = json.dumps(rows()) if ext == "json" else "".join(json.dumps(r) + "\n" for r in rows())
    path = write(tmp_path, f"d.{ext}", content)
    a = ingest_source(con, source(path, "a", [0, 1]))
    b = ingest_source(con, source(path, "b", [2], kind="public"))
    ids_a, ids_b = ids(con, "a"), ids(con, "b")
    assert not ids_a & ids_b
    assert ids_a | ids_b == {f"u{i}" for i in range(N)}
    assert 1.6 < len(ids_a) / len(ids_b) < 2.5
    # report counts: added + left out = the file
    assert (a.rows_added, a.rows_skipped, a.rows_left_out_by_subset) == (len(ids_a), 0, len(ids_b))
    assert (b.rows_added, b.rows_skipped, b.rows_left_out_by_subset) == (len(ids_b), 0, len(ids_a))
    assert get_dataset(con, "a")["n_records"] == len(ids_a)
    # the bucket is the documented hash of the id
    assert all(subset_bucket(i, 3) in (0, 1) for i in ids_a) and all(subset_bucket(i, 3) == 2 for i in ids_b)


def test_same_subset_twice_gives_the_same_rows_and_is_recorded(con, tmp_path):
    path = write(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in rows()))
    ingest_source(con, source(path, "a", [0, 1]))
    # the same part again repeats registered data: allowed only as declared distinct
    ingest_source(con, source(path, "a2", [1, 0], distinct_from_existing=True))
    assert ids(con, "a") == ids(con, "a2")
    recorded = get_dataset(con, "a")["field_map"]["subset"]
    assert recorded == {"buckets": 3, "keep": [0, 1], "salt": "dpicl-subset"}
    assert get_dataset(con, "a2")["field_map"]["subset"] == recorded
    # another salt: another (but equally deterministic) split, recorded as different
    salted = DataSource(name="s", path=str(path), kind="private", fields={"id": "uid", "input": "text",
                        "output": "label"}, subset={"buckets": 3, "keep": [0, 1], "salt": "other"},
                        distinct_from_existing=True)
    ingest_source(con, salted)
    assert ids(con, "s") != ids(con, "a")
    assert get_dataset(con, "s")["field_map"]["subset"]["salt"] == "other"
    # without a subset nothing is recorded (field maps stay as before)
    ingest_dataset(con, path, "all", "private", "summarization", FieldMap(id="uid", input="text", output="label"),
                   distinct_from_existing=True)
    assert "subset" not in get_dataset(con, "all")["field_map"]


def test_row_numbers_key_the_hash_without_an_id_field(con, tmp_path):
    path = write(tmp_path, "d.json", json.dumps(rows()))
    fields = {"id": None}
    ingest_source(con, source(path, "a", [0, 1], fields=fields))
    ingest_source(con, source(path, "b", [2], fields=fields))
    ids_a, ids_b = ids(con, "a"), ids(con, "b")
    # ids are the 1-based row numbers, and each record's bucket is that of its id
    assert not ids_a & ids_b and ids_a | ids_b == {str(i) for i in range(1, N + 1)}
    assert all(subset_bucket(i, 3) in (0, 1) for i in ids_a) and all(subset_bucket(i, 3) == 2 for i in ids_b)
    # the rows themselves: record id n holds row n
    row = con.execute("SELECT record_id, input FROM records WHERE dataset = 'a' ORDER BY row_no LIMIT 1").fetchone()
    assert row[1] == f"{SECRET} input {int(row[0]) - 1}"


def test_all_buckets_keep_everything(con, tmp_path):
    path = write(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in rows(50)))
    report = ingest_source(con, source(path, "a", [0, 1, 2]))
    assert (report.rows_added, report.rows_left_out_by_subset) == (50, 0)


def test_queries_are_split_too_after_skip_empty(con, tmp_path):
    data = rows(300)
    data[5]["text"] = ""  # left out by skip_empty, counted there, not by the subset
    path = write(tmp_path, "q.jsonl", "".join(json.dumps(r) + "\n" for r in data))
    fields = {"id": "uid", "input": "text", "output": None, "reference": "label"}
    parts = [source(path, "bl", keep, kind="queries", fields=fields, skip_empty=True) for keep in ([0], [1, 2])]
    first = ingest_source(con, parts[0])
    assert first.rows_skipped == 1 and first.rows_added + first.rows_left_out_by_subset == 299
    queries = pending_queries(con, "bl")
    assert len(queries) == first.rows_added and all(subset_bucket(q, 3) == 0 for q in queries)
    second = ingest_source(con, parts[1])  # the rest appends to the same backlog
    assert second.rows_added == first.rows_left_out_by_subset
    assert set(pending_queries(con, "bl")) == {f"u{i}" for i in range(300)} - {"u5"}


def test_lower_level_api_takes_a_mapping_and_checks_it(con, tmp_path):
    path = write(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in rows(30)))
    fields = FieldMap(id="uid", input="text", output="label")
    report = ingest_dataset(con, path, "a", "private", "summarization", fields, subset={"buckets": 2, "keep": [1]})
    assert report.rows_added + report.rows_left_out_by_subset == 30
    assert ingest_queries(con, path, "bl", FieldMap(id="uid", input="text", output=None),
                          subset=SubsetSpec(2, (0,))).rows_added == report.rows_left_out_by_subset
    for bad in ({"buckets": 1, "keep": [0]}, {"buckets": 3, "keep": [3]}, {"buckets": 3, "keep": []},
                {"buckets": 3, "keep": [0, 0]}, {"buckets": 3, "keep": [0], "seed": 1}):
        with pytest.raises(IngestError, match="subset"):
            ingest_dataset(con, path, "bad", "private", "summarization", fields, subset=bad)


def test_invalid_keep_is_rejected_by_the_config():
    with pytest.raises(ValidationError, match=r"distinct buckets in 0\.\.2"):
        Subset(buckets=3, keep=[3])
    with pytest.raises(ValidationError, match="distinct buckets"):
        Subset(buckets=3, keep=[1, 1])
    with pytest.raises(ValidationError, match="buckets"):
        Subset(buckets=1, keep=[0])
    with pytest.raises(ValidationError, match="keep"):
        DataSource(name="x", path="x.json", kind="private", subset={"buckets": 3, "keep": []})


def test_a_subset_that_leaves_no_rows_is_an_error_without_values_and_writes_nothing(con, tmp_path):
    data = rows(1)
    bucket = subset_bucket(data[0]["uid"], 3)
    path = write(tmp_path, "d.jsonl", json.dumps(data[0]) + "\n")
    before = snapshot(con)
    with pytest.raises(IngestError) as caught:
        ingest_source(con, source(path, "empty", [(bucket + 1) % 3]))
    message = str(caught.value)
    assert "dataset 'empty'" in message and "leaves no rows" in message and "subset.keep" in message
    assert SECRET not in full_text(caught.value) and "u0" not in message
    assert snapshot(con) == before and temp_tables(con) == []
    with pytest.raises(IngestError, match="backlog 'bl'"):
        ingest_source(con, source(path, "bl", [(bucket + 1) % 3], kind="queries",
                                  fields={"output": None, "reference": "label"}))
    assert snapshot(con) == before and temp_tables(con) == []


def test_the_whole_file_is_validated_before_the_subset(con, tmp_path):
    data = rows(60)
    data[7]["text"] = 7  # a wrong type in either part fails both
    path = write(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in data))
    for keep in ([0, 1], [2]):
        with pytest.raises(IngestError, match="row 8, field 'text'"):
            ingest_source(con, source(path, "x", keep))
    assert temp_tables(con) == []
