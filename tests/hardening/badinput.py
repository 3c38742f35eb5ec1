"""Helpers of the bad-input suite: a seeded database, running the CLI in-process, the refusal check, counting."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import duckdb
from typer.testing import CliRunner

ROWS = [{"id": f"r{i}", "input": f"private ticket {i}", "output": f"private summary {i}"} for i in range(6)]
FIELDS = ["--field", "id=id", "--field", "input=input", "--field", "output=output"]
TRIED: Counter = Counter()  # refusals checked, per category (printed at the end of the module, see RELIABILITY.md)


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seed_database(path: Path, tmp: Path) -> Path:
    """A database with a private dataset `priv` (budget open), a public dataset `pub` and a backlog `bl`."""
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
    from dpicl.storage.ledger import open_budget

    rows = tmp / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    public = tmp / "public.jsonl"
    public.write_text("".join(json.dumps({"id": f"p{i}", "input": f"public {i}", "output": f"ok {i}"}) + "\n"
                              for i in range(4)), encoding="utf-8")
    con = connect(path)
    try:
        ingest_dataset(con, rows, "priv", "private", "summarization", FieldMap(id="id"))
        ingest_dataset(con, public, "pub", "public", "summarization", FieldMap(id="id"))
        ingest_queries(con, rows, "bl", FieldMap(id="id", output=None))
        open_budget(con, "priv", 2.0, 1e-5)
    finally:
        con.close()
    return path


def write_parquet(path: Path, select: str) -> Path:
    """A Parquet file of the rows of a DuckDB `select` (written by DuckDB, as a user's tool would)."""
    con = duckdb.connect()
    try:
        con.execute(f"COPY ({select}) TO '{path}' (FORMAT parquet)")
    finally:
        con.close()
    return path


def assert_refused(args: list[str], db: Path, category: str) -> str:
    """Run `dpicl ARGS` in-process: exactly one `error:` line on stderr and nothing else there, nothing on stdout,
    exit code 2, no exception escaped, and the database file byte-for-byte as before (no WAL left behind)."""
    from dpicl.cli import app

    before = file_hash(db)
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    context = f"{args!r}\nstdout: {result.stdout!r}\nstderr: {result.stderr!r}\nexception: {result.exception!r}"
    assert result.exit_code == 2, context
    assert result.exception is None or isinstance(result.exception, SystemExit), context
    assert len(lines) == 1 and lines[0].startswith("error: "), context
    assert "Traceback" not in result.output and result.stdout == "", context
    assert file_hash(db) == before, context
    assert not Path(f"{db}.wal").exists(), context
    TRIED[category] += 1
    return lines[0]
