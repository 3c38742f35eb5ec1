"""Ingest of datasets and backlogs: formats, field mapping, validation errors that never leak values,
all-or-nothing transactions, replace and append semantics."""

import hashlib
import json
import os
from pathlib import Path

import duckdb
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
    duckdb.execute(f"COPY (SELECT * FROM (VALUES (10, 'in a', 'out a'), (7, 'in b', 'out b')) t(n, q, a)) "
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


SECRET_ROWS = good_rows(2) + [{"uid": "r3", "text": SECRET, "label": "x"}]

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
             words=("3 column(s), not listed", "`head -1 FILE`", "--field input=<column>")),
    bad_case("missing_column.csv", f"uid,prompt,label\nr1,{SECRET},x\n", field="text",
             words=("3 column(s), not listed", "--field input=<column>")),
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
    # an array cut short after a record: DuckDB's reader took the records before the cut as the whole file
    bad_case("cut_after_a_record.json", "[\n" + "".join(json.dumps(r) + ",\n" for r in SECRET_ROWS), line=4,
             words=("not valid JSON", "never closed", "final ']'", "cut short")),
    bad_case("cut_before_the_bracket.json", json.dumps(SECRET_ROWS)[:-1], line=1, words=("not valid JSON",)),
    bad_case("garbage_after_the_array.json", json.dumps(SECRET_ROWS) + "x", line=1, words=("not valid JSON",)),
    bad_case("cut_object.json", json.dumps(SECRET_ROWS[2], indent=1)[:-2], line=4, words=("not valid JSON",)),
    bad_case("objects_one_after_another.json", jsonl(SECRET_ROWS),
             words=("3 JSON values one after another", "--format jsonl")),
    bad_case("cut_last_line.jsonl", jsonl(SECRET_ROWS)[:-6], line=3, words=("not valid JSON",)),
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


def _cuts(text: str, lines: bool):
    """Every proper prefix of `text` that is not itself a complete file: for JSON Lines, those that end inside a
    line (a file cut at a line's end is a shorter valid file); for JSON, those that leave more than whitespace."""
    for cut in range(1, len(text)):
        if lines and "\n" in (text[cut - 1], text[cut]):
            continue
        if not lines and not text[cut:].strip():
            continue
        yield text[:cut]


@pytest.mark.parametrize("name, text", [
    ("array.json", json.dumps(SECRET_ROWS)),
    ("indented.json", json.dumps(SECRET_ROWS, indent=1)),
    ("object.json", json.dumps({**SECRET_ROWS[2], "more": [1, {"k": "v"}]}, indent=2)),
    ("lines.jsonl", jsonl(SECRET_ROWS)),
], ids=["array", "indented-array", "object", "jsonl"])
def test_every_cut_short_json_file_is_refused(con, tmp_path, name, text):
    before = snapshot(con)
    refused = 0
    for prefix in _cuts(text, lines=name.endswith(".jsonl")):
        with pytest.raises(IngestError) as caught:
            ingest_dataset(con, write(tmp_path, name, prefix), "d", "private", "qa", MAP)
        assert SECRET not in str(caught.value)
        refused += 1
    assert refused > 50 and snapshot(con) == before and temp_tables(con) == []


def test_json_document_with_bom_surrounding_whitespace_or_one_object_is_accepted(con, tmp_path):
    path = write(tmp_path, "d.json", b"\xef\xbb\xbf\n " + json.dumps(good_rows(), indent=1).encode() + b"\n\n\t ")
    assert ingest_dataset(con, path, "a", "private", "qa", MAP).rows_added == 3
    assert [tuple(r) for r in load_records(con, "a")] == expected_records()
    path = write(tmp_path, "o.json", json.dumps(good_rows(4)[3], indent=2) + "\n")
    assert ingest_dataset(con, path, "o", "public", "qa", MAP).rows_added == 1


def test_missing_file(con, tmp_path):
    with pytest.raises(IngestError, match="not found") as caught:
        ingest_dataset(con, tmp_path / "nope.jsonl", "d", "private", "qa", MAP)
    assert caught.value.path == tmp_path / "nope.jsonl" and caught.value.row is None


def test_parquet_wrong_types_are_named(con, tmp_path):
    path = tmp_path / "d.parquet"
    duckdb.execute(f"COPY (SELECT * FROM (VALUES ('r1', NULL, 'x'), ('r2', 42, 'y')) t(uid, text, label)) "
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
    kept = [{"uid": "k1", "text": "kept input", "label": "kept output"}]
    ingest_dataset(con, write(tmp_path, "keep.jsonl", jsonl(kept)), "keep", "private", "qa", MAP)
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

    monkeypatch.setattr(ingest.SourceFile, "drop", crash)
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


def test_a_replace_that_would_leave_the_budgets_delta_at_or_above_one_over_n_is_refused(con, tmp_path):
    """δ < 1/n is checked when a budget opens; a replace by more records kept the budget's δ whatever n became."""
    ingest_dataset(con, write(tmp_path, "a.jsonl", jsonl(good_rows(3))), "d", "private", "qa", MAP)
    con.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES ('d', 1.0, 0.2)")  # 0.2 < 1/3
    more = write(tmp_path, "b.jsonl", jsonl([{"uid": f"z{i}", "text": f"new {i}", "label": "n"} for i in range(5)]))
    with pytest.raises(IngestError, match=r"keeps its budget through the replace.*1/n = 1/5"):
        ingest_dataset(con, more, "d", "private", "qa", MAP, replace=True)
    assert len(load_records(con, "d")) == 3
    fewer = write(tmp_path, "c.jsonl", jsonl([{"uid": "y", "text": "one", "label": "n"}]))
    assert ingest_dataset(con, fewer, "d", "private", "qa", MAP, replace=True).rows_added == 1


def test_the_same_content_with_the_same_options_again_changes_nothing(con, tmp_path):
    """`dpicl ingest CONFIG` a second time stopped at the first dataset ingested already."""
    path = write(tmp_path, "a.jsonl", jsonl(good_rows(3)))
    ingest_dataset(con, path, "d", "private", "qa", MAP)
    before = get_dataset(con, "d")
    again = ingest_dataset(con, path, "d", "private", "qa", MAP)
    assert again.unchanged and again.rows_added == 0
    assert get_dataset(con, "d") == before  # same teacher key, same records
    other_map = FieldMap(id="uid", input="label", output="text")
    for differs in ({"kind": "public"}, {"fields": other_map}, {"subset": {"buckets": 2, "keep": [0, 1]}}):
        args = {"kind": "private", "fields": MAP} | differs
        with pytest.raises(IngestError, match="already exists with other content or options"):
            ingest_dataset(con, path, "d", args["kind"], "qa", args["fields"],
                           **{k: v for k, v in differs.items() if k not in ("kind", "fields")})
    path.write_text(jsonl(good_rows(4)))  # edited since
    with pytest.raises(IngestError, match="already exists with other content or options"):
        ingest_dataset(con, path, "d", "private", "qa", MAP)
    assert get_dataset(con, "d") == before


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


# ---------------------------------------------------------------- read options: lines, header, labels

SST2_PATTERN = r"^(?P<label>[01]) (?P<text>.+)$"
SST2_LABELS = {"0": "negative", "1": "positive"}
TEXT_LABEL = FieldMap(input="text", output="label")


def records(con, name):
    return [tuple(r) for r in load_records(con, name)]


def test_lines_with_pattern_and_labels(con, tmp_path):
    path = write(tmp_path, "sst.train", "1 a stirring , funny film\n0 dull and flat .\n1 ok: 1 0 fine\n\n\n")
    report = ingest_dataset(con, path, "sst", "private", "classification", TEXT_LABEL, format="lines",
                            pattern=SST2_PATTERN, labels=SST2_LABELS)
    assert report.rows_added == 3  # the blank lines at the end are skipped
    assert records(con, "sst") == [("1", "a stirring , funny film", "positive"), ("2", "dull and flat .", "negative"),
                                   ("3", "ok: 1 0 fine", "positive")]
    assert get_dataset(con, "sst")["field_map"] == {
        "id": None, "input": "text", "output": "label", "reference": None, "format": "lines",
        "pattern": SST2_PATTERN, "labels": SST2_LABELS}


def test_lines_crlf_bom_no_final_newline_and_unicode(con, tmp_path):
    path = write(tmp_path, "d.txt", "\ufeff1 caf\u00e9 \u2014 ok\r\n0 na\u00efve\r\n1 last")
    ingest_dataset(con, path, "d", "private", "qa", TEXT_LABEL, format="lines", pattern=SST2_PATTERN)
    assert records(con, "d") == [("1", "caf\u00e9 \u2014 ok", "1"), ("2", "na\u00efve", "0"), ("3", "last", "1")]


def test_lines_unnamed_groups_do_not_shift_the_named_ones(con, tmp_path):
    # DuckDB's regexp_extract names groups by position: unnamed groups must keep their place
    path = write(tmp_path, "trec.txt", "7\tDESC:manner How did it go ?\n9\tHUM:ind Who was he ?\n")
    pattern = r"(\d+)\t(?P<label>[A-Z]+):(\S+) (?P<text>.+)"
    ingest_dataset(con, path, "t", "private", "qa", TEXT_LABEL, format="lines", pattern=pattern,
                   labels={"DESC": "Description", "HUM": "Person"})
    assert records(con, "t") == [("1", "How did it go ?", "Description"), ("2", "Who was he ?", "Person")]


def test_lines_pattern_must_match_the_whole_line(con, tmp_path):
    # a lazy group still spans the whole line: the pattern is anchored at both ends
    path = write(tmp_path, "d.txt", "1 several words here\n")
    ingest_dataset(con, path, "d", "private", "qa", TEXT_LABEL, format="lines",
                   pattern=r"(?P<label>[01]) (?P<text>.+?)")
    assert records(con, "d") == [("1", "several words here", "1")]


def test_lines_id_group(con, tmp_path):
    path = write(tmp_path, "d.txt", "a7|x|positive\nb2|y|negative\n")
    ingest_dataset(con, path, "d", "public", "qa", FieldMap(id="key", input="q", output="a"), format="lines",
                   pattern=r"(?P<key>\w+)\|(?P<q>[^|]+)\|(?P<a>.+)")
    assert records(con, "d") == [("a7", "x", "positive"), ("b2", "y", "negative")]


def test_headerless_csv_columns_are_numbered(con, tmp_path):
    path = write(tmp_path, "train.csv", '"World news, today",0\n"Match report",1\n"Chips ""fast""\nagain",3\n')
    fields = FieldMap(input="column1", output="column2")
    labels = {"0": "World", "1": "Sports", "2": "Business", "3": "Technology"}
    ingest_dataset(con, path, "ag", "private", "classification", fields, header=False, labels=labels)
    assert records(con, "ag") == [("1", "World news, today", "World"), ("2", "Match report", "Sports"),
                                  ("3", 'Chips "fast"\nagain', "Technology")]
    assert get_dataset(con, "ag")["field_map"]["header"] is False

    tsv = write(tmp_path, "d.tsv", "q one\tyes\nq two\tno\n")
    ingest_dataset(con, tsv, "t", "private", "qa", fields, header=False)
    assert records(con, "t") == [("1", "q one", "yes"), ("2", "q two", "no")]


def test_headerless_csv_unknown_column_lists_numbered_columns(con, tmp_path):
    path = write(tmp_path, "d.csv", f"{SECRET},0\n")
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, path, "d", "private", "qa", FieldMap(input="text", output="column2"), header=False)
    assert caught.value.field == "text" and "column1, column2" in str(caught.value)
    assert SECRET not in full_text(caught.value)


def test_labels_accept_integer_json_and_parquet_values(con, tmp_path):
    rows = [{"text": "a", "label": 1}, {"text": "b", "label": "0"}]
    ingest_dataset(con, write(tmp_path, "d.jsonl", jsonl(rows)), "j", "private", "qa", TEXT_LABEL,
                   labels=SST2_LABELS)
    assert records(con, "j") == [("1", "a", "positive"), ("2", "b", "negative")]
    path = tmp_path / "d.parquet"
    duckdb.execute(f"COPY (SELECT * FROM (VALUES ('a', 1), ('b', 0)) t(text, label)) TO '{path}' (FORMAT parquet)")
    ingest_dataset(con, path, "p", "private", "qa", TEXT_LABEL, labels=SST2_LABELS, distinct_from_existing=True)
    assert records(con, "p") == [("1", "a", "positive"), ("2", "b", "negative")]
    # without labels a number is still not an output
    with pytest.raises(IngestError, match="must be text"):
        ingest_dataset(con, write(tmp_path, "n.jsonl", jsonl(rows)), "n", "private", "qa", TEXT_LABEL)


def test_labels_apply_to_the_reference_of_a_queries_backlog(con, tmp_path):
    path = write(tmp_path, "test.txt", "DESC:manner How ?\nNUM:date When ?\nDESC:def What ?")
    fields = FieldMap(input="text", output=None, reference="label")
    report = ingest_queries(con, path, "trec", fields, format="lines", pattern=r"(?P<label>[A-Z]+):\S+ (?P<text>.+)",
                            labels={"DESC": "Description", "NUM": "Number"})
    assert report.rows_added == 3
    queries = get_queries(con, "trec", ["1", "2", "3"])
    assert [tuple(queries[i])[1:3] for i in ("1", "2", "3")] == [
        ("How ?", "Description"), ("When ?", "Number"), ("What ?", "Description")]
    # a missing reference stays missing
    ingest_queries(con, write(tmp_path, "b.jsonl", jsonl([{"text": "q", "label": None}, {"text": "r", "label": 0}])),
                   "bl", fields, labels=SST2_LABELS)
    queries = get_queries(con, "bl", ["1", "2"])
    assert tuple(queries["1"])[2] is None and tuple(queries["2"])[2] == "negative"


def test_ingest_source_passes_the_read_options(con, tmp_path):
    from dpicl.config import DataSource
    from dpicl.storage.ingest import ingest_source

    path = write(tmp_path, "stsa.binary.dev", "1 good\n0 bad\n")
    source = DataSource(name="sst", path=str(path), kind="private", task="classification",
                        fields={"input": "text", "output": "label"}, format="lines", pattern=SST2_PATTERN,
                        labels=SST2_LABELS)
    assert ingest_source(con, source).rows_added == 2
    assert records(con, "sst") == [("1", "good", "positive"), ("2", "bad", "negative")]
    csv_path = write(tmp_path, "test.csv", "q1,1\nq2,0\n")
    queries = DataSource(name="bl", path=str(csv_path), kind="queries",
                         fields={"input": "column1", "output": None, "reference": "column2"}, header=False,
                         labels=SST2_LABELS)
    assert ingest_source(con, queries).rows_added == 2
    assert tuple(get_queries(con, "bl", ["2"])["2"])[1:3] == ("q2", "negative")


def option_case(name, content, *, options, row=None, field=None, line=None, fields=TEXT_LABEL, words=(),
                queries=False):
    return pytest.param(name, content, options, row, field, line, fields, words, queries, id=name)


LINES = {"format": "lines", "pattern": SST2_PATTERN}
OPTION_ERRORS = [
    option_case("bad_pattern.txt", f"1 {SECRET}\n",
                options={"format": "lines", "pattern": r"(?P<label>[01] (?P<text>.+)"},
                words=("not a valid regular expression", "missing )", "fix the pattern")),
    option_case("bad_group_name.txt", f"1 {SECRET}\n", options={"format": "lines", "pattern": r"(?P<1x>.+)"},
                words=("not a valid regular expression",)),
    option_case("no_named_groups.txt", f"1 {SECRET}\n", options={"format": "lines", "pattern": r"^([01]) (.+)$"},
                words=("no named groups", "(?P<name>...)")),
    option_case("lookahead.txt", f"1 {SECRET}\n",
                options={"format": "lines", "pattern": r"(?P<label>[01]) (?=\w)(?P<text>.+)"},
                words=("RE2", "lookarounds")),
    option_case("no_pattern.txt", f"1 {SECRET}\n", options={"format": "lines"}, words=("needs a pattern",)),
    option_case("pattern_without_lines.jsonl", jsonl([{"text": SECRET, "label": "1"}]),
                options={"pattern": SST2_PATTERN}, words=("format: lines",)),
    option_case("header_on_json.jsonl", jsonl([{"text": SECRET, "label": "1"}]), options={"header": False},
                words=("header: false", "CSV and TSV")),
    option_case("header_on_lines.txt", f"1 {SECRET}\n", options={**LINES, "header": False},
                words=("header: false",)),
    option_case("unknown_format.txt", f"1 {SECRET}\n", options={"format": "xml"}, words=("unknown format", "lines")),
    option_case("empty_labels.txt", f"1 {SECRET}\n", options={**LINES, "labels": {}}, words=("at least one",)),
    option_case("blank_label_name.txt", f"1 {SECRET}\n", options={**LINES, "labels": {"0": "neg", "1": " "}},
                words=("raw value '1' is empty",)),
    option_case("labels_without_output.txt", f"1 {SECRET}\n", options={**LINES, "labels": SST2_LABELS},
                fields=FieldMap(input="text", output=None), words=("no output field", "--field output=<column>")),
    option_case("labels_without_reference.txt", f"1 {SECRET}\n", options={**LINES, "labels": SST2_LABELS},
                fields=FieldMap(input="text", output=None), queries=True, words=("no reference field",)),
    # the file itself
    option_case("not_matching.txt", f"1 good\n0 bad\n2 {SECRET}\n1 fine\n", options=LINES, row=3, line=3,
                words=("line 3:", "does not match the pattern")),
    option_case("not_matching_tab.txt", f"1 good\n1\t{SECRET}\n", options=LINES, row=2, line=2,
                words=("does not match",)),
    option_case("blank_in_middle.txt", f"1 good\n\n0 {SECRET}\n", options=LINES, row=2, line=2,
                words=("line 2", "is blank", "remove it")),
    option_case("whitespace_in_middle.txt", f"1 good\n  \t\n0 {SECRET}\n", options=LINES, row=2, line=2,
                words=("is blank",)),
    option_case("only_blank.txt", "\n \n\n", options=LINES, words=("no data rows",)),
    option_case("unknown_label.txt", f"1 good\n0 bad\n{SECRET} oops\n",
                options={"format": "lines", "pattern": r"(?P<label>\S+) (?P<text>.+)", "labels": SST2_LABELS},
                row=3, line=3, field="label", words=("line 3, field 'label' (output)", "'0', '1'", "`labels`")),
    option_case("unknown_label.jsonl", jsonl([{"text": "a", "label": "1"}, {"text": "b", "label": SECRET}]),
                options={"labels": SST2_LABELS}, row=2, field="label", words=("row 2", "'0', '1'")),
    option_case("unknown_number_label.jsonl", jsonl([{"text": SECRET, "label": 987654321}]),
                options={"labels": SST2_LABELS}, row=1, field="label", words=("'0', '1'",)),
    option_case("bool_label.jsonl", jsonl([{"text": SECRET, "label": True}]), options={"labels": SST2_LABELS},
                row=1, field="label", words=("true/false", "text or a number")),
    option_case("unknown_label.csv", f"a,1\n{SECRET},2\n", options={"header": False, "labels": SST2_LABELS},
                fields=FieldMap(input="column1", output="column2"), row=2, field="column2",
                words=("data row 2", "field 'column2' (output)")),
    option_case("unknown_reference.csv", f"a,1\n{SECRET},{SECRET}\n", options={"header": False, "labels": SST2_LABELS},
                fields=FieldMap(input="column1", output=None, reference="column2"), row=2, field="column2",
                queries=True, words=("field 'column2' (reference)",)),
    option_case("missing_group.txt", f"1 {SECRET}\n", options=LINES, fields=FieldMap(input="sentence", output="label"),
                field="sentence", words=("its columns are label, text", "--field input=<column>")),
    option_case("empty_group.txt", f"1 good\n0 \n1 {SECRET}\n",
                options={"format": "lines", "pattern": r"(?P<label>[01]) (?P<text>.*)"}, row=2, line=2,
                field="text", words=("line 2, field 'text' (input)", "empty")),
    option_case("duplicate_id.txt", f"k1 a\nk2 b\nk1 {SECRET}\n",
                options={"format": "lines", "pattern": r"(?P<key>\S+) (?P<text>.+)"}, row=3, line=3, field="key",
                fields=FieldMap(id="key", input="text", output=None), words=("repeats the id of line 1",)),
    option_case("ragged_headerless.csv", f"a,1\nb,0,{SECRET}\n", options={"header": False},
                fields=FieldMap(input="column1", output="column2"), line=2, words=("too many columns",)),
]


@pytest.mark.parametrize("name, content, options, row, field, line, fields, words, queries", OPTION_ERRORS)
def test_read_option_errors_are_precise_and_never_quote_the_file(con, tmp_path, name, content, options, row,
                                                                 field, line, fields, words, queries):
    path = write(tmp_path, name, content)
    before = snapshot(con)
    with pytest.raises(IngestError) as caught:
        if queries:
            ingest_queries(con, path, "bl", fields, **options)
        else:
            ingest_dataset(con, path, "d", "private", "qa", fields, **options)
    error = caught.value
    assert (error.path, error.row, error.field, error.line) == (path, row, field, line)
    message = str(error)
    assert message.startswith(str(path))
    for word in words:
        assert word in message
    assert SECRET not in full_text(error) and "987654321" not in full_text(error)
    assert snapshot(con) == before
    assert temp_tables(con) == []


# ---------------------------------------------------------------- the real benchmark files (read-only)

DATA = Path(os.environ["DPICL_DATA"])  # tests/conftest.py
AGNEWS_LABELS = {"0": "World", "1": "Sports", "2": "Business", "3": "Technology"}
TREC_LABELS = {"ABBR": "Abbreviation", "DESC": "Description", "ENTY": "Entity", "HUM": "Person",
               "LOC": "Location", "NUM": "Number"}


def test_real_benchmark_files(con):  # about 1 s
    if not DATA.is_dir():
        pytest.skip(f"benchmark data not found at {DATA} ($DPICL_DATA)")
    label_fields = FieldMap(input="text", output="label")
    cases = [
        ("sst2", DATA / "sst2" / "stsa.binary.train", label_fields,
         dict(format="lines", pattern=SST2_PATTERN, labels=SST2_LABELS), 6920, set(SST2_LABELS.values())),
        ("trec", DATA / "trec" / "train.txt", label_fields,
         dict(format="lines", pattern=r"^(?P<label>[A-Z]+):\S+ (?P<text>.+)$", labels=TREC_LABELS), 5452,
         set(TREC_LABELS.values())),
        ("agnews", DATA / "agnews" / "subset" / "train.csv", FieldMap(input="column1", output="column2"),
         dict(header=False, labels=AGNEWS_LABELS), 5000, set(AGNEWS_LABELS.values())),
        ("samsum", DATA / "samsum" / "val.json", FieldMap(id="id", input="dialogue", output="summary"),
         {}, 818, None),
    ]
    for name, path, fields, options, n, label_set in cases:
        report = ingest_dataset(con, path, name, "private", "classification", fields, **options)
        assert report.rows_added == n, name
        rows = load_records(con, name)
        assert len(rows) == n and all(row[1] for row in rows), name
        if label_set is not None:
            assert {row[2] for row in rows} == label_set, name
            assert [row[0] for row in rows[:3]] == ["1", "2", "3"]
    # SAMSum train.json has 14,732 records, but record 6055 (id 13828807) has an empty dialogue: refused whole,
    # with the row and field and no value
    samsum = DATA / "samsum" / "train.json"
    assert len(json.loads(samsum.read_text(encoding="utf-8"))) == 14732
    with pytest.raises(IngestError, match="is empty") as caught:
        ingest_dataset(con, samsum, "samsum-train", "private", "summarization",
                       FieldMap(id="id", input="dialogue", output="summary"))
    assert (caught.value.row, caught.value.field) == (6055, "dialogue")
    assert "13828807" not in str(caught.value)
    # spot checks against the files themselves
    first_sst = (DATA / "sst2" / "stsa.binary.train").read_text(encoding="utf-8").split("\n")[0]
    assert tuple(load_records(con, "sst2")[0])[1:] == (first_sst[2:], SST2_LABELS[first_sst[0]])
    last_trec = (DATA / "trec" / "train.txt").read_text(encoding="utf-8").split("\n")[-1]
    coarse, rest = last_trec.split(":", 1)
    assert tuple(load_records(con, "trec")[-1]) == ("5452", rest.split(" ", 1)[1], TREC_LABELS[coarse])
    label_map = json.loads((DATA / "agnews" / "subset" / "label_map.json").read_text())["hf_ag_news_label"]
    assert {raw: ("Technology" if name == "Sci/Tech" else name) for raw, name in label_map.items()} == AGNEWS_LABELS


def test_skip_empty_leaves_out_rows_with_an_empty_input_or_output_and_counts_them(tmp_path):
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, IngestError, ingest_dataset

    rows = [{"id": "a", "x": "one", "y": "1"}, {"id": "b", "x": "", "y": "2"}, {"id": "c", "x": "three", "y": ""},
            {"id": "d", "x": "four", "y": "4"}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    con = connect(tmp_path / "db.duckdb")
    fields = FieldMap(id="id", input="x", output="y")
    with pytest.raises(IngestError, match="row 2, field 'x'.*is empty"):
        ingest_dataset(con, path, "strict", "private", "summarization", fields)
    report = ingest_dataset(con, path, "lenient", "private", "summarization", fields, skip_empty=True)
    assert (report.rows_added, report.rows_skipped) == (2, 2)
    assert [r for (r,) in con.execute("SELECT record_id FROM records WHERE dataset = 'lenient' ORDER BY 1").fetchall()] == ["a", "d"]
