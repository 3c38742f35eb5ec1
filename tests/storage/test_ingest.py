"""Ingest of datasets and backlogs: formats, field mapping, validation errors that never leak values,
all-or-nothing transactions, replace and append semantics."""

import hashlib
import json

import pytest

from dpicl.storage import ingest
from dpicl.storage.ingest import FieldMap, IngestError, ingest_dataset, ingest_queries
from dpicl.storage.queries import get_dataset, get_queries, load_records, pending_queries

from .conftest import full_text, snapshot, temp_tables, write

MAP = FieldMap(id="uid", input="text", output="label")
SECRET = "SECRET-patient-7731"


def jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def good_rows(n=3):
    return [{"uid": f"r{i}", "text": f"input {i}", "label": f"output {i}", "other": i} for i in range(1, n + 1)]


def expected_records(n=3):
    return [(f"r{i}", f"input {i}", f"output {i}") for i in range(1, n + 1)]


# ---------------------------------------------------------------- formats


def test_jsonl_with_field_mapping(con, tmp_path):
    path = write(tmp_path, "d.jsonl", jsonl(good_rows()))
    report = ingest_dataset(con, path, "demo", "private", "summarization", MAP)
    assert (report.name, report.path, report.rows_added, report.rows_skipped) == ("demo", path, 3, 0)
    assert [tuple(r) for r in load_records(con, "demo")] == expected_records()
    dataset = get_dataset(con, "demo")
    assert dataset["kind"] == "private" and dataset["task"] == "summarization" and dataset["n_records"] == 3
    assert dataset["field_map"] == {"id": "uid", "input": "text", "output": "label", "reference": None}
    assert len(dataset["teacher_key"]) == 32
    assert dataset["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_json_array(con, tmp_path):
    path = write(tmp_path, "d.json", json.dumps(good_rows()))
    assert ingest_dataset(con, path, "demo", "public", "qa", MAP).rows_added == 3
    assert [tuple(r) for r in load_records(con, "demo")] == expected_records()


def test_csv_and_tsv_with_quotes_newlines_and_crlf(con, tmp_path):
    csv_path = write(tmp_path, "d.csv", 'uid,text,label\r\nr1,"a, ""quoted""\r\nline",x\r\nr2,plain,y\r\n')
    ingest_dataset(con, csv_path, "c", "private", "qa", MAP)
    assert [tuple(r) for r in load_records(con, "c")] == [("r1", 'a, "quoted"\r\nline', "x"), ("r2", "plain", "y")]
    tsv_path = write(tmp_path, "d.tsv", "uid\ttext\tlabel\nr1\tcomma, inside\tx\n")
    ingest_dataset(con, tsv_path, "t", "private", "qa", MAP)
    assert [tuple(r) for r in load_records(con, "t")] == [("r1", "comma, inside", "x")]


def test_parquet_with_numeric_ids(con, tmp_path):
    path = tmp_path / "d.parquet"
    con.execute(f"COPY (SELECT * FROM (VALUES (10, 'in a', 'out a'), (7, 'in b', 'out b')) t(n, q, a)) "
                f"TO '{path}' (FORMAT parquet)")
    ingest_dataset(con, path, "p", "public", "qa", FieldMap(id="n", input="q", output="a"))
    assert [tuple(r) for r in load_records(con, "p")] == [("10", "in a", "out a"), ("7", "in b", "out b")]


def test_without_id_field_ids_are_row_numbers_and_strings_stay_strings(con, tmp_path):
    # read_json's inference would make these a DATE and a UUID; they must come back as the same text
    rows = [{"text": "2024-01-01", "label": "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}, {"text": "b", "label": "c"}]
    ingest_dataset(con, write(tmp_path, "d.jsonl", jsonl(rows)), "d", "private", "qa",
                   FieldMap(input="text", output="label"))
    assert [tuple(r) for r in load_records(con, "d")] == [
        ("1", "2024-01-01", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"), ("2", "b", "c")]


def test_output_may_be_unmapped(con, tmp_path):
    path = write(tmp_path, "d.jsonl", jsonl([{"text": "a"}, {"text": "b"}]))
    ingest_dataset(con, path, "d", "public", "qa", FieldMap(input="text", output=None))
    assert [tuple(r) for r in load_records(con, "d")] == [("1", "a", None), ("2", "b", None)]


def test_format_can_be_given_explicitly(con, tmp_path):
    path = write(tmp_path, "d.txt", jsonl(good_rows()))
    with pytest.raises(IngestError, match="--format"):
        ingest_dataset(con, path, "d", "private", "qa", MAP)
    assert ingest_dataset(con, path, "d", "private", "qa", MAP, format="jsonl").rows_added == 3


# ---------------------------------------------------------------- bad inputs


def bad_case(name, content, *, row=None, field=None, line=None, fields=MAP, words=()):
    return pytest.param(name, content, row, field, line, fields, words, id=name)


BAD = [
    bad_case("empty.jsonl", b"", words=("empty",)),
    bad_case("blank.jsonl", "\n\n", words=("no data rows",)),
    bad_case("empty.json", "[]", words=("no data rows",)),
    bad_case("header_only.csv", "uid,text,label\n", words=("no data rows",)),
    bad_case("latin1.jsonl", jsonl(good_rows(1)).encode() + f'{{"uid": "r2", "text": "{SECRET} caf'.encode()
             + b'\xe9"}\n', line=2, words=("UTF-8",)),
    bad_case("latin1.csv", f"uid,text,label\nr1,a,b\nr2,{SECRET} caf".encode() + b"\xe9,c\n",
             line=3, words=("UTF-8",)),
    bad_case("missing_column.jsonl", jsonl([{"uid": "r1", "prompt": SECRET, "label": "x"}]), field="text",
             words=("label, prompt, uid", "--field input=<column>")),
    bad_case("missing_column.csv", f"uid,prompt,label\nr1,{SECRET},x\n", field="text",
             words=("uid, prompt, label", "--field input=<column>")),
    bad_case("null_input.jsonl", jsonl(good_rows(1) + [{"uid": "r2", "text": None, "label": SECRET}]),
             row=2, field="text", words=("no value",)),
    bad_case("absent_input.jsonl", jsonl(good_rows(2) + [{"uid": "r3", "label": SECRET}]),
             row=3, field="text", words=("no value",)),
    bad_case("empty_input.jsonl", jsonl([{"uid": SECRET, "text": "", "label": "x"}]),
             row=1, field="text", words=("empty",)),
    bad_case("empty_input.csv", f"uid,text,label\nr1,a,b\n{SECRET},,c\n", row=2, field="text",
             words=("data row 2", "no value")),
    bad_case("null_output.jsonl", jsonl(good_rows(1) + [{"uid": "r2", "text": SECRET, "label": None}]),
             row=2, field="label", words=("no value",)),
    bad_case("null_id.jsonl", jsonl(good_rows(1) + [{"uid": None, "text": SECRET, "label": "x"}]),
             row=2, field="uid", words=("no value",)),
    bad_case("number_input.jsonl", jsonl(good_rows(2) + [{"uid": "r3", "text": 987654321, "label": SECRET}]),
             row=3, field="text", words=("a number", "must be text")),
    bad_case("list_input.jsonl", jsonl(good_rows(1) + [{"uid": "r2", "text": [SECRET], "label": "x"}]),
             row=2, field="text", words=("a list",)),
    bad_case("object_input.jsonl", jsonl(good_rows(1) + [{"uid": "r2", "text": {"k": SECRET}, "label": "x"}]),
             row=2, field="text", words=("an object",)),
    bad_case("bool_output.jsonl", jsonl(good_rows(1) + [{"uid": "r2", "text": SECRET, "label": True}]),
             row=2, field="label", words=("true/false",)),
    bad_case("list_id.jsonl", jsonl([{"uid": [SECRET], "text": "a", "label": "x"}]),
             row=1, field="uid", words=("a list", "text or a number")),
    bad_case("duplicate_ids.jsonl", jsonl(good_rows(1) + [{"uid": SECRET, "text": "a", "label": "b"},
                                                            {"uid": SECRET, "text": "c", "label": "d"}]),
             row=3, field="uid", words=("row 2", "unique")),
    bad_case("duplicate_ids.csv", f"uid,text,label\n{SECRET},a,b\nr2,c,d\n{SECRET},e,f\n",
             row=3, field="uid", words=("data row 1", "unique")),
    bad_case("malformed.jsonl", jsonl(good_rows(1)) + f'{{"uid": "r2", "text": "{SECRET}" "label": "x"}}\n',
             line=2, words=("not valid JSON", "fix or remove")),
    bad_case("malformed.json", f'[{{"uid": "r1", "text": "a", "label": "b"}},\n{{"uid": "{SECRET}" "x"}}]',
             line=2, words=("not valid JSON",)),
    bad_case("not_object.jsonl", jsonl(good_rows(1)) + f'["{SECRET}"]\n', row=2, words=("not a JSON object",)),
    bad_case("unterminated.csv", f'uid,text,label\nr1,a,b\nr2,"{SECRET},c\nr3,d,e\n', line=3,
             words=("unquoted value",)),
    bad_case("ragged.csv", f"uid,text,label\nr1,a,b\nr2,{SECRET},c,extra\n", line=3,
             words=("too many columns",)),
]


@pytest.mark.parametrize("name, content, row, field, line, fields, words", BAD)
def test_bad_input_is_named_precisely_without_its_value(con, tmp_path, name, content, row, field, line, fields,
                                                        words):
    path = write(tmp_path, name, content)
    before = snapshot(con)
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, path, "d", "private", "qa", fields)
    error = caught.value
    assert (error.path, error.row, error.field, error.line) == (path, row, field, line)
    message = str(error)
    assert str(path) in message
    for word in words:
        assert word in message
    assert SECRET not in full_text(error) and "987654321" not in full_text(error)
    assert snapshot(con) == before
    assert temp_tables(con) == []


def test_missing_file(con, tmp_path):
    with pytest.raises(IngestError, match="not found") as caught:
        ingest_dataset(con, tmp_path / "nope.jsonl", "d", "private", "qa", MAP)
    assert caught.value.path == tmp_path / "nope.jsonl" and caught.value.row is None


def test_parquet_wrong_types_are_named(con, tmp_path):
    path = tmp_path / "d.parquet"
    con.execute(f"COPY (SELECT * FROM (VALUES ('r1', NULL, 'x'), ('r2', 42, 'y')) t(uid, text, label)) "
                f"TO '{path}' (FORMAT parquet)")
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, path, "d", "private", "qa", MAP)
    assert (caught.value.row, caught.value.field) == (2, "text")
    assert "INTEGER" in str(caught.value) and "42" not in str(caught.value).replace(str(path), "")


def test_queries_without_id_field_and_mixed_types_in_json_column(con, tmp_path):
    # the first rows are strings, a later one a number: DuckDB would infer a JSON column
    rows = [{"q": f"question {i}"} for i in range(5)] + [{"q": 31337}]
    with pytest.raises(IngestError) as caught:
        ingest_queries(con, write(tmp_path, "b.jsonl", jsonl(rows)), "b", FieldMap(input="q", output=None))
    assert (caught.value.row, caught.value.field) == (6, "q")
    assert "31337" not in str(caught.value)


# ---------------------------------------------------------------- all or nothing


def test_failure_after_inserts_leaves_nothing(con, tmp_path, monkeypatch):
    ingest_dataset(con, write(tmp_path, "keep.jsonl", jsonl(good_rows(2))), "keep", "private", "qa", MAP)
    before = snapshot(con)
    real = ingest._insert_records

    def insert_then_crash(*args):
        real(*args)
        assert con.execute("SELECT count(*) FROM records WHERE dataset = 'new'").fetchone()[0] == 5
        raise RuntimeError("crash mid-ingest")

    monkeypatch.setattr(ingest, "_insert_records", insert_then_crash)
    with pytest.raises(RuntimeError, match="crash mid-ingest"):
        ingest_dataset(con, write(tmp_path, "new.jsonl", jsonl(good_rows(5))), "new", "private", "qa", MAP)
    assert snapshot(con) == before
    assert temp_tables(con) == []


def test_failure_after_query_inserts_leaves_nothing(con, tmp_path, monkeypatch):
    path = write(tmp_path, "b.jsonl", jsonl([{"id": "a", "q": "x"}, {"id": "b", "q": "y"}]))
    before = snapshot(con)

    def crash(self):
        raise RuntimeError("crash after insert")

    monkeypatch.setattr(ingest._Source, "drop", crash)
    with pytest.raises(RuntimeError, match="crash after insert"):
        ingest_queries(con, path, "b", FieldMap(id="id", input="q"))
    assert snapshot(con) == before


# ---------------------------------------------------------------- replace


def test_existing_name_is_refused_unless_replace(con, tmp_path):
    first = write(tmp_path, "a.jsonl", jsonl(good_rows(3)))
    ingest_dataset(con, first, "d", "private", "qa", MAP)
    key = get_dataset(con, "d")["teacher_key"]
    second = write(tmp_path, "b.jsonl", jsonl([{"uid": "z", "text": "new", "label": "n"}]))
    with pytest.raises(IngestError, match="already exists"):
        ingest_dataset(con, second, "d", "private", "qa", MAP)
    assert len(load_records(con, "d")) == 3

    con.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES ('d', 1.0, 1e-5)")  # no spend yet
    assert ingest_dataset(con, second, "d", "private", "qa", MAP, replace=True).rows_added == 1
    assert [tuple(r) for r in load_records(con, "d")] == [("z", "new", "n")]
    dataset = get_dataset(con, "d")
    assert dataset["n_records"] == 1 and dataset["source_path"] == str(second.resolve()) and dataset["teacher_key"] != key


def test_replacing_a_dataset_with_ledger_entries_is_refused(con, tmp_path):
    ingest_dataset(con, write(tmp_path, "a.jsonl", jsonl(good_rows(3))), "d", "private", "qa", MAP)
    con.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES ('d', 1.0, 1e-5)")
    con.execute("INSERT INTO ledger (dataset, run_id, backlog, query_id, mechanism, event, epsilon_before, "
                "epsilon_after) VALUES ('d', 'run', 'b', 'q1', 'esa', '{}', 0.0, 0.1)")
    before = snapshot(con)
    with pytest.raises(IngestError, match="ledger"):
        ingest_dataset(con, write(tmp_path, "b.jsonl", jsonl(good_rows(1))), "d", "private", "qa", MAP,
                       replace=True)
    assert snapshot(con) == before


# ---------------------------------------------------------------- backlogs


def test_backlog_append_skips_same_text_and_refuses_changed_text(con, tmp_path):
    fields = FieldMap(id="qid", input="q", output=None, reference="ref")
    first = write(tmp_path, "1.jsonl", jsonl([{"qid": "a", "q": "qa", "ref": "ra"}, {"qid": "b", "q": "qb"}]))
    report = ingest_queries(con, first, "bl", fields)
    assert (report.name, report.rows_added, report.rows_skipped) == ("bl", 2, 0)

    second = write(tmp_path, "2.csv", "qid,q,ref\nc,qc,\nb,qb,\n")
    report = ingest_queries(con, second, "bl", fields)
    assert (report.rows_added, report.rows_skipped) == (1, 1)
    assert pending_queries(con, "bl") == ["a", "b", "c"]
    assert pending_queries(con, "bl", limit=2) == ["a", "b"]
    queries = get_queries(con, "bl", ["a", "c", "zz"])
    assert set(queries) == {"a", "c"}
    assert tuple(queries["a"]) == ("a", "qa", "ra", "pending")

    before = snapshot(con)
    third = write(tmp_path, "3.jsonl", jsonl([{"qid": "d", "q": "qd", "ref": None}, {"qid": "a", "q": SECRET}]))
    with pytest.raises(IngestError) as caught:
        ingest_queries(con, third, "bl", fields)
    assert (caught.value.row, caught.value.field) == (2, "qid")
    assert SECRET not in full_text(caught.value) and "different" in str(caught.value)
    assert snapshot(con) == before

    # another backlog may reuse the same ids
    assert ingest_queries(con, third, "other", fields).rows_added == 2


def test_backlog_without_id_field_hints_at_mapping_one(con, tmp_path):
    fields = FieldMap(input="q", output=None)
    ingest_queries(con, write(tmp_path, "1.jsonl", jsonl([{"q": "first"}])), "bl", fields)
    with pytest.raises(IngestError, match="--field id=<column>") as caught:
        ingest_queries(con, write(tmp_path, "2.jsonl", jsonl([{"q": "second"}])), "bl", fields)
    assert caught.value.row == 1 and caught.value.field is None


def test_duplicate_query_ids_in_one_file(con, tmp_path):
    path = write(tmp_path, "b.jsonl", jsonl([{"id": 5, "q": "x"}, {"id": "5", "q": "y"}]))
    with pytest.raises(IngestError, match="row 1") as caught:
        ingest_queries(con, path, "bl", FieldMap(id="id", input="q"))
    assert (caught.value.row, caught.value.field) == (2, "id")
