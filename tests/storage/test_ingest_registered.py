"""The content of a private dataset backs one privacy budget only: a copy of registered private data (the same
file, reordered, re-keyed, partly changed, or as public data) is refused unless declared distinct, and a replace
never detaches a budget. Also: errors never quote column names read from the file."""

import json
import shutil

import duckdb
import pytest

from dpicl.storage.db import connect
from dpicl.storage.ingest import FieldMap, IngestError, ingest_dataset, ingest_queries
from dpicl.storage.queries import get_dataset

from .conftest import full_text, snapshot, temp_tables, write

SECRET = "SECRET-patient-7731"
F = FieldMap(id="id", input="input", output="output")


def rows(n=8, tag=""):
    return [{"id": f"r{i}", "input": f"{SECRET} note {tag}{i}", "output": f"summary {tag}{i}"} for i in range(n)]


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.fixture
def private(con, tmp_path):
    """A private dataset 'notes' with an open budget; returns its file."""
    path = write(tmp_path, "notes.jsonl", jsonl(rows()))
    ingest_dataset(con, path, "notes", "private", "summarization", F)
    con.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES ('notes', 1.0, 1e-5)")
    return path


def refused(con, path, name, kind="private", **options) -> str:
    """Ingest that must be refused with nothing written; the message, checked to quote no value."""
    before = snapshot(con)
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, path, name, kind, "summarization", options.pop("fields", F), **options)
    message = str(caught.value)
    assert SECRET not in full_text(caught.value) and "summary" not in message
    assert snapshot(con) == before and temp_tables(con) == []
    return " ".join(message.split())


def test_the_same_file_under_a_new_name_is_refused(con, private):
    message = refused(con, private, "notes-again")
    assert "'notes-again'" in message and "same file as private dataset 'notes'" in message
    assert "8 of its 8 records" in message and "--distinct-from-existing" in message


def test_the_same_file_as_public_is_refused(con, private):
    message = refused(con, private, "notes-public", kind="public")
    assert "public dataset 'notes-public'" in message and "private dataset 'notes'" in message


def test_a_reordered_copy_is_refused(con, tmp_path, private):
    copy = write(tmp_path, "reordered.jsonl", jsonl(list(reversed(rows()))))
    message = refused(con, copy, "shuffled")
    assert "same file" not in message and "8 of its 8 records" in message and "'notes' (8)" in message


def test_a_copy_with_one_record_changed_and_new_ids_is_refused(con, tmp_path, private):
    changed = rows()
    changed[3]["output"] = "a different summary"
    for i, row in enumerate(changed):
        row["id"] = f"new-{i}"  # ids play no part in the content hash
    message = refused(con, write(tmp_path, "changed.jsonl", jsonl(changed)), "changed", kind="public")
    assert "7 of its 8 records" in message


def test_a_different_field_mapping_of_the_same_file_is_refused(con, private):
    # the record hashes differ (no output), but it is the same file
    message = refused(con, private, "inputs-only", fields=FieldMap(id="id", input="input", output=None))
    assert "same file as private dataset 'notes'" in message


def test_new_private_data_repeating_public_data_is_refused_but_public_may_repeat_public(con, tmp_path):
    public = write(tmp_path, "public.jsonl", jsonl(rows(tag="p")))
    ingest_dataset(con, public, "pub", "public", "summarization", F)
    ingest_dataset(con, public, "pub2", "public", "summarization", F)  # public data may repeat public data
    others = [row | {"id": f"x{i}"} for i, row in enumerate(rows(3, tag="x"))]
    one = write(tmp_path, "one.jsonl", jsonl(rows(tag="p")[:1] + others))
    message = refused(con, one, "mixed")
    assert "1 of its 4 records" in message and "public dataset 'pub' (1)" in message
    assert "public dataset 'pub2' (1)" in message


def test_distinct_from_existing_is_accepted_and_recorded(con, private):
    report = ingest_dataset(con, private, "cohort-b", "private", "summarization", F, distinct_from_existing=True)
    assert report.rows_added == 8
    assert get_dataset(con, "cohort-b")["field_map"]["distinct_from_existing"] == ["notes"]
    assert "distinct_from_existing" not in get_dataset(con, "notes")["field_map"]
    assert con.execute("SELECT count(*) FROM record_hashes WHERE dataset = 'cohort-b'").fetchone()[0] == 8


def test_backlogs_are_not_compared(con, private):
    assert ingest_queries(con, private, "inbox", FieldMap(id="id", input="input", output=None)).rows_added == 8


def test_replacing_a_budgeted_private_dataset_as_public_is_refused(con, private):
    message = refused(con, private, "notes", kind="public", replace=True)
    assert "'notes' has a privacy budget" in message and "another name" in message
    assert get_dataset(con, "notes")["kind"] == "private"
    assert con.execute("SELECT epsilon FROM budgets WHERE dataset = 'notes'").fetchone() == (1.0,)


def test_replacing_a_dataset_with_ledger_entries_as_public_is_refused(con, private):
    con.execute("INSERT INTO ledger (dataset, run_id, backlog, query_id, mechanism, event, epsilon_before, "
                "epsilon_after) VALUES ('notes', 'run', 'b', 'q1', 'esa', '{}', 0.0, 0.1)")
    assert "ledger entries" in refused(con, private, "notes", kind="public", replace=True)


def test_replacing_a_dataset_with_its_own_content_or_private_data_keeps_its_budget(con, tmp_path, private):
    # itself is not a repeat; the budget stays with the (private) data
    assert ingest_dataset(con, private, "notes", "private", "summarization", F, replace=True).rows_added == 8
    other = write(tmp_path, "other.jsonl", jsonl(rows(3, tag="o")))
    assert ingest_dataset(con, other, "notes", "private", "summarization", F, replace=True).rows_added == 3
    assert con.execute("SELECT count(*) FROM record_hashes WHERE dataset = 'notes'").fetchone()[0] == 3
    assert con.execute("SELECT count(*) FROM budgets WHERE dataset = 'notes'").fetchone()[0] == 1


def test_a_replace_may_not_take_another_datasets_content(con, tmp_path, private):
    path = write(tmp_path, "mine.jsonl", jsonl(rows(3, tag="m")))
    ingest_dataset(con, path, "mine", "public", "summarization", F)
    assert "private dataset 'notes' (8)" in refused(con, private, "mine", kind="public", replace=True,
                                                    format="jsonl")


def test_records_ingested_before_the_migration_are_hashed_alike(db_path, tmp_path, monkeypatch):
    from dpicl.storage import db

    older = tmp_path / "migrations"
    older.mkdir()
    for version, _, path in db.migrations():
        if version < 4:
            shutil.copy(path, older / path.name)
    monkeypatch.setattr(db, "MIGRATIONS_DIR", older)
    con = connect(db_path)  # a database of the schema before 0004, with a budgeted dataset
    con.execute("INSERT INTO datasets (name, kind, task, source_path, source_sha256, field_map, n_records, "
                "teacher_key) VALUES ('notes', 'private', 'qa', '/old', 'old', '{}', 8, '\\x00'::BLOB)")
    for i, row in enumerate(rows()):
        con.execute("INSERT INTO records VALUES ('notes', ?, ?, ?, ?)", [row["id"], i + 1, row["input"], row["output"]])
    con.execute("INSERT INTO budgets (dataset, epsilon, delta) VALUES ('notes', 1.0, 1e-5)")
    con.close()
    monkeypatch.undo()
    con = connect(db_path)  # migrates
    assert con.execute("SELECT count(*) FROM record_hashes WHERE dataset = 'notes'").fetchone()[0] == 8
    message = refused(con, write(tmp_path, "copy.jsonl", jsonl(rows())), "copy")
    assert "8 of its 8 records" in message and "'notes' (8)" in message
    con.close()


# ---------------------------------------------------------------- column names read from the file are data


def test_a_missing_field_error_does_not_list_json_keys(con, tmp_path):
    path = write(tmp_path, "d.jsonl", jsonl([{"id": "r1", SECRET: "x", "output": "y"}]))
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, path, "d", "private", "qa", F)
    message = str(caught.value)
    assert caught.value.field == "input" and "3 column(s)" in message and "--field input=<column>" in message
    assert SECRET not in full_text(caught.value)


def test_csv_header_names_and_parquet_types_are_not_quoted(con, tmp_path):
    header = write(tmp_path, "d.csv", f"id,{SECRET},{SECRET},output\nr1,a,b,c\n")
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, header, "d", "private", "qa", F)
    assert "columns 2, 3" in str(caught.value) and SECRET not in full_text(caught.value)
    missing = write(tmp_path, "e.csv", f"id,{SECRET},output\nr1,a,b\n")
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, missing, "e", "private", "qa", F)
    assert SECRET not in full_text(caught.value)
    # a STRUCT type's text names the struct's fields, which come from the file
    nested = tmp_path / "d.parquet"
    duckdb.execute(f"COPY (SELECT 'r1' AS id, {{'{SECRET}': 1}} AS input, 'o' AS output) TO '{nested}' (FORMAT parquet)")
    with pytest.raises(IngestError) as caught:
        ingest_dataset(con, nested, "p", "private", "qa", F)
    assert "of type STRUCT" in str(caught.value) and SECRET not in full_text(caught.value)


def test_a_public_dataset_that_runs_used_cannot_be_replaced(con, tmp_path):
    """Runs cache their public prompts and answers under the public dataset's name (not its content): after a
    replace, the next run was served the old records' prompts and answers (reproduced with SGA: none of its public
    prompts showed a new record). A public dataset no run used may still be replaced."""
    from dpicl.config import load_config
    from dpicl.storage.runs import create_run

    faq = write(tmp_path, "faq.jsonl", jsonl(rows(4, tag="f")))
    ingest_dataset(con, faq, "faq", "public", "summarization", F)
    config = load_config("demo").model_dump(mode="json")  # what a run stores
    create_run(con, "run-elsewhere", "sga", "notes", "inbox", {**config, "public_dataset": "other"}, None)
    newer = write(tmp_path, "faq-2.jsonl", jsonl(rows(5, tag="g")))
    assert ingest_dataset(con, newer, "faq", "public", "summarization", F, replace=True).rows_added == 5
    create_run(con, "run-faq", "sga", "notes", "inbox", {**config, "public_dataset": "faq"}, None)
    message = refused(con, faq, "faq", kind="public", replace=True)
    assert "'faq' was used by 1 run(s)" in message and "under another name" in message
    assert con.execute("SELECT count(*) FROM records WHERE dataset = 'faq'").fetchone()[0] == 5
