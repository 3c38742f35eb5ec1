"""Public records for answers charged nothing (public ensembles, synthetic-icl, synthesis inputs) are read with their
dataset's kind in one statement: a replace by private data that commits between two statements of the read cannot
put private records into those answers (PostgreSQL gives each statement its own snapshot)."""

import json

import pytest

from dpicl.storage.ingest import FieldMap, ingest_dataset
from dpicl.storage.queries import load_public_records

from .conftest import write

F = FieldMap(id="id", input="input", output="output")


def jsonl(tag: str, n: int = 5) -> str:
    return "".join(json.dumps({"id": f"{tag}{i}", "input": f"{tag} input {i}", "output": f"{tag} output {i}"}) + "\n"
                   for i in range(n))


class CommitsAfterFirstStatement:
    """A connection on which `replace` commits right after the first statement it runs (the interleaving of another
    process's ingest), results read before it."""

    def __init__(self, con, replace):
        self.con, self.replace, self.statements = con, replace, 0

    def execute(self, sql, params=None):
        result = self.con.execute(sql, params)
        rows, description = result.fetchall(), result.description
        self.statements += 1
        if self.statements == 1:
            self.replace()
        return Rows(rows, description)


class Rows:
    def __init__(self, rows, description):
        self.rows, self.description = rows, description

    def fetchall(self):
        return self.rows

    def fetchone(self):
        return self.rows[0] if self.rows else None


def test_a_replace_by_private_data_between_statements_never_yields_private_records(con, tmp_path):
    public = write(tmp_path, "public.jsonl", jsonl("public"))
    private = write(tmp_path, "private.jsonl", jsonl("private"))
    ingest_dataset(con, public, "demos", "public", "summarization", F)

    def replace_by_private():
        ingest_dataset(con, private, "demos", "private", "summarization", F, replace=True)

    racing = CommitsAfterFirstStatement(con, replace_by_private)
    records = load_public_records(racing, "demos", "demos_dataset")
    assert racing.statements >= 1 and con.execute("SELECT kind FROM datasets WHERE name = 'demos'").fetchone() == (
        "private",)  # the replace did commit during the read
    assert [r.input for r in records] == [f"public input {i}" for i in range(5)]
    with pytest.raises(ValueError, match="demos_dataset 'demos' was ingested as private, not public"):
        load_public_records(con, "demos", "demos_dataset")


def test_an_unknown_dataset_says_how_to_ingest_it(con):
    with pytest.raises(LookupError, match="dpicl ingest <file> --name nowhere"):
        load_public_records(con, "nowhere", "public_dataset")
