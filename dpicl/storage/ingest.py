"""Ingesting datasets (private or public demonstrations) and query backlogs into DuckDB.

Files are read by DuckDB's own readers: `read_json_objects` for JSON arrays and JSON Lines (every record kept as
exact JSON, so a string stays a string: `read_json`'s inference would turn "2024-01-01" into a DATE), `read_csv`
with the header's columns as VARCHAR (or, with `header=False`, columns named column1, column2, ...),
`read_parquet` with the file's own types, and `read_text` for the "lines" format: one record per line, split by
`pattern`, a regular expression whose named groups become the columns (it must match the whole line; DuckDB
applies it with RE2, so lookarounds and backreferences are refused). In a "lines" file, blank lines at the end
are skipped and a blank line anywhere else is an error (a blank line in the middle is more likely a damaged
file than a record). The format comes from the file extension (.json .jsonl .ndjson .csv .tsv .parquet) unless
given; "lines" is always given explicitly. A JSON file is one document, an array of records or one record: a file
cut short (an array without its final ']', which DuckDB's reader would take as the records before the cut) or
holding several values one after another (JSON Lines belongs in the "jsonl" format) is refused.

`labels` maps raw label values in the file to label names (classification benchmarks store 0/1 or ABBR/DESC):
it is applied to the output and reference fields after reading, and a raw value it does not list is an error.
With `labels`, those fields may also hold JSON/Parquet integers (mapped by their decimal text).

`subset` keeps a deterministic part of the file, after `skip_empty` and after the whole file is validated: the
rows whose `int.from_bytes(sha256(salt + "\\x00" + id).digest()[:8], "big") % buckets` is in `keep`, where `id` is
the record's id as ingested (the id field's text, or without an id field the 1-based row number, the id such a
record gets). Sources over the same file with the same buckets and salt and disjoint `keep` are disjoint, e.g. a
2:1 private/public split: keep [0, 1] and keep [2] of 3 buckets. The hash is computed by DuckDB (`subset_bucket`
is the same in Python).

The content of a private dataset backs one privacy budget only. A dataset (private or public) is refused when it
repeats a registered private dataset, and a private one also when it repeats a public dataset: the same file
(`source_sha256`; two `subset`s of one file with the same ids, buckets and salt and no bucket in common do not
count), or any record with the same content (`record_hashes`: SHA-256 of the input and output, never the id, so a
reordered, re-keyed or partly changed copy is caught). `distinct_from_existing` declares that the file is about a
different population; it is recorded in the dataset's `field_map` with the datasets it overlapped. A replace may
not turn a dataset with a budget into public data, nor replace one with ledger entries at all. Backlogs (queries)
are not compared.

On PostgreSQL the file is read and validated by an in-memory DuckDB (the same readers and checks), and the staged
records are copied into a TEMP table of the PostgreSQL transaction, with their content hashes computed by DuckDB
(`dpicl_record_sha256`), before the steps that compare them with what is registered and write them.

Everything is validated before anything is written, and each ingest is one transaction: a file is ingested
whole or not at all. Records and queries are private text: an `IngestError` says what is wrong, where (file,
row, field) and how to fix it, and never contains a value from the file. Column names read from the file (JSON
keys, a CSV header, Parquet columns) are data too; only the names the user mapped or the pattern's groups are
quoted.

The code is split by what it does: `ingest_options` (formats, field map, read options, subset hash, `IngestError`),
`ingest_read` (the file's hash and one reader per format into DuckDB), `ingest_validate` (the records' fields,
types, labels, `skip_empty` and `subset`), `ingest_registered` (replace rules and repeats of registered data); this
module writes the result, in one transaction, and its names are the API (`FieldMap`, `IngestError`, ... are
imported from here).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Literal

import duckdb

from dpicl.names import name_problem
from dpicl.storage.budget_limits import delta_problem
from dpicl.storage.db import connect, dialect, transaction
from dpicl.storage.ingest_options import (
    FORMAT_NAMES,
    FORMATS,
    FieldMap,
    Format,
    IngestError,
    IngestReport,
    ReadOptions,
    SubsetSpec,
    subset_bucket,
)
from dpicl.storage.ingest_read import SourceFile, scan_file
from dpicl.storage.ingest_registered import (
    check_replaceable,
    registered_repeats,
    repeats_message,
)
from dpicl.storage.ingest_validate import keep_subset, stage_records

__all__ = [
    "FORMATS", "FORMAT_NAMES", "FieldMap", "Format", "IngestError", "IngestReport", "SubsetSpec", "ingest_dataset",
    "ingest_queries", "ingest_source", "subset_bucket",
]


def ingest_dataset(con: duckdb.DuckDBPyConnection, path: str | Path, name: str,
                   kind: Literal["private", "public"], task: str, fields: FieldMap, *,
                   replace: bool = False, format: Format | None = None, pattern: str | None = None,
                   header: bool = True, labels: dict[str, str] | None = None,
                   skip_empty: bool = False, subset=None, distinct_from_existing: bool = False) -> IngestReport:
    """Ingest a demonstration dataset into `datasets` and `records`, with a fresh teacher key.

    `skip_empty`: rows whose input or output is missing or empty are left out (and counted in the report)
    instead of failing the ingest. `subset` (a `dpicl.config.Subset`, `SubsetSpec` or mapping): only the rows
    in its buckets are ingested (module docstring), the others counted in the report.

    `format`, `pattern`, `header`, `labels` and `subset` say how to read the file (module docstring); the ones
    given are recorded in the dataset's `field_map` beside the field mapping.

    A file that repeats registered data is refused unless `distinct_from_existing` (module docstring).
    """
    if kind not in ("private", "public"):
        raise ValueError(f"kind must be 'private' or 'public', not {kind!r}")
    path = Path(path)
    _check_name(path, name, "dataset name")
    roles = {"id": (fields.id, True), "input": (fields.input, True), "output": (fields.output, True)}
    options = ReadOptions.check(path, format, pattern, header, labels, fields, ("output",), subset)
    with _staging(con) as staging, transaction(con):
        existing = con.execute("SELECT kind FROM datasets WHERE name = ?", [name]).fetchone()
        if existing and not replace:
            if _ingested_already(con, path, name, kind, task, asdict(fields) | options.recorded()):
                return IngestReport(name, path, 0, 0, unchanged=True)
            raise IngestError(path, f"a dataset named '{name}' already exists with other content or options; "
                                    "ingest under another name, or replace it (--replace)")
        if existing:
            check_replaceable(con, path, name, existing[0], kind)
        source = SourceFile.read(staging, path, options)
        stage_records(source, roles, skip_empty=skip_empty)
        keep_subset(source, options.subset, f"dataset '{name}'")
        stage = _staged(con, source, ("id", "input", "output"))
        n = con.execute(f"SELECT count(*) FROM {stage}").fetchone()[0]
        if existing:  # the budget kept through a replace must still have δ < 1/n for the new records
            budget = con.execute("SELECT delta FROM budgets WHERE dataset = ?", [name]).fetchone()
            problem = None if budget is None else delta_problem(budget[0], n)
            if problem is not None:
                raise IngestError(path, f"dataset '{name}' keeps its budget through the replace, and its {problem}: "
                                        f"replace the budget first (`dpicl budget open {name} --replace ...`: "
                                        "nothing was spent from it), or ingest the new data under another name")
        recorded = asdict(fields) | options.recorded()
        repeated, in_common = registered_repeats(con, name, kind, source.sha256, recorded, stage)
        if repeated and not distinct_from_existing:
            raise IngestError(path, repeats_message(name, kind, repeated, in_common, n))
        if distinct_from_existing:  # the user's declaration, kept with what it overrode
            recorded["distinct_from_existing"] = sorted(repeated)
        field_map = json.dumps(recorded)
        row = [kind, task, str(path.resolve()), source.sha256, field_map, n, secrets.token_bytes(32)]
        if existing:
            con.execute("DELETE FROM records WHERE dataset = ?", [name])
            con.execute("DELETE FROM record_hashes WHERE dataset = ?", [name])
            con.execute("UPDATE datasets SET kind = ?, task = ?, source_path = ?, source_sha256 = ?, "
                        "field_map = ?, n_records = ?, teacher_key = ?, created_at = current_timestamp "
                        "WHERE name = ?", [*row, name])
        else:
            con.execute("INSERT INTO datasets (kind, task, source_path, source_sha256, field_map, n_records, "
                        "teacher_key, name) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [*row, name])
        _insert_records(con, name, stage)
        source.drop()
        return IngestReport(name, path, n, source.skipped, source.left_out)


def _ingested_already(con, path: Path, name: str, kind: str, task: str, recorded: dict) -> bool:
    """Whether dataset `name` holds this file's content read with these options (`dpicl ingest CONFIG` again)."""
    row = con.execute("SELECT kind, task, source_sha256, field_map FROM datasets WHERE name = ?", [name]).fetchone()
    if row is None or (row[0], row[1]) != (kind, task) or not path.is_file():
        return False
    stored = {k: v for k, v in json.loads(row[3]).items() if k != "distinct_from_existing"}
    return stored == json.loads(json.dumps(recorded)) and row[2] == scan_file(path, check_utf8=False)


def ingest_queries(con: duckdb.DuckDBPyConnection, path: str | Path, backlog: str, fields: FieldMap, *,
                   format: Format | None = None, pattern: str | None = None, header: bool = True,
                   labels: dict[str, str] | None = None, skip_empty: bool = False, subset=None) -> IngestReport:
    """Add a file's queries to a backlog as 'pending' (`skip_empty`: leave out rows with an empty input;
    `subset`: only the rows in its buckets, as for `ingest_dataset`).

    Appending to an existing backlog is allowed: an id already there with the same text is skipped, with a
    different text it is an error. `row_no` is the query's position in the backlog (appends continue it).
    `format`, `pattern`, `header` and `labels` say how to read the file (module docstring); `labels` maps the
    reference field.
    """
    path = Path(path)
    _check_name(path, backlog, "backlog name")
    roles = {"id": (fields.id, True), "input": (fields.input, True), "reference": (fields.reference, False)}
    options = ReadOptions.check(path, format, pattern, header, labels, fields, ("reference",), subset)
    with _staging(con) as staging, transaction(con):
        source = SourceFile.read(staging, path, options)
        stage_records(source, roles, skip_empty=skip_empty)
        keep_subset(source, options.subset, f"backlog '{backlog}'")
        stage = _staged(con, source, ("id", "input", "reference"))
        clash = con.execute(
            f"SELECT s.row_no FROM {stage} s JOIN queries q ON q.backlog = ? AND q.query_id = s.id "
            "WHERE q.input <> s.input ORDER BY s.row_no LIMIT 1", [backlog]).fetchone()
        if clash:
            ids = "map an id field with --field id=<column>" if fields.id is None else "give it a new id"
            raise source.error(f"this id is already in backlog '{backlog}' with a different query text; "
                               f"{ids}, or remove the row", row=clash[0], field=fields.id, role="id")
        total = con.execute(f"SELECT count(*) FROM {stage}").fetchone()[0]
        last = con.execute("SELECT coalesce(max(row_no), 0) FROM queries WHERE backlog = ?",
                           [backlog]).fetchone()[0]
        added = con.execute(
            "INSERT INTO queries (backlog, query_id, row_no, input, reference, status, source_path) "
            f"SELECT ?, id, ? + row_number() OVER (ORDER BY row_no), input, reference, 'pending', ? FROM {stage} s "
            "WHERE NOT EXISTS (SELECT 1 FROM queries q WHERE q.backlog = ? AND q.query_id = s.id)",
            [backlog, last, str(path.resolve()), backlog]).fetchone()[0]
        source.drop()
        return IngestReport(backlog, path, added, total - added + source.skipped, source.left_out)


def _check_name(path: Path, name: object, what: str) -> None:
    problem = name_problem(name, what)
    if problem is not None:
        raise IngestError(path, problem)


def _insert_records(con, name: str, stage: str) -> None:
    con.execute(f"INSERT INTO records SELECT ?, id, row_no, input, output FROM {stage} ORDER BY row_no", [name])
    con.execute(f"INSERT INTO record_hashes SELECT ?, id, content_sha256 FROM {stage}", [name])


@functools.cache
def _staging_database() -> duckdb.DuckDBPyConnection:
    """The process's in-memory DuckDB where files bound for PostgreSQL are read, its schema (the record hash macro)
    built once: a new database per ingest cost 75 ms, most of a refused file's time."""
    return connect(":memory:")


_staging_lock = threading.Lock()
os.register_at_fork(after_in_child=_staging_database.cache_clear)  # DuckDB is not fork-safe: a child makes its own


@contextmanager
def _staging(con) -> Iterator[duckdb.DuckDBPyConnection]:
    """Where the file is read and validated: the DuckDB database itself, or for PostgreSQL a connection of its own
    to the in-memory staging database (its TEMP tables are its own, and go when it closes)."""
    if dialect(con) == "duckdb":
        yield con
        return
    with _staging_lock:
        staging = _staging_database().cursor()
    try:
        yield staging
    finally:
        staging.close()


def _staged(con, source: SourceFile, roles: tuple[str, ...]) -> str:
    """The validated records as a TEMP table of ``con`` (row_no, the roles' text, and for demonstrations their
    content hash): made from the source's stage, copied over when ``con`` is not the DuckDB that staged them."""
    columns = ["row_no", *roles]
    if "output" in roles:
        columns.append("dpicl_record_sha256(input, output) AS content_sha256")
    table = f"{source.stage_table}_final"
    source.con.execute(f"CREATE TEMP TABLE {table} AS SELECT {', '.join(columns)} FROM {source.stage_table}")
    source.extra_tables.append(table)
    if source.con is con:
        return table
    names = [c.split(" AS ")[-1] for c in columns]
    con.execute(f"CREATE TEMP TABLE {table} (row_no BIGINT, {', '.join(f'{n} VARCHAR' for n in names[1:])}) "
                "ON COMMIT DROP")
    con.copy_rows(table, names, source.con.execute(f"SELECT {', '.join(names)} FROM {table} ORDER BY row_no")
                  .fetchall())
    return table


def ingest_source(con: duckdb.DuckDBPyConnection, source, *, replace: bool = False) -> IngestReport:
    """Ingest one `DataSource` of a config (a private/public dataset or a backlog), with its read options
    (`format`, `pattern`, `header`, `labels`, `skip_empty`, `subset`) and, for a dataset,
    `distinct_from_existing`."""
    fields = FieldMap(**source.fields.model_dump())
    options = {"format": source.format, "pattern": source.pattern, "header": source.header,
               "labels": source.labels, "skip_empty": source.skip_empty, "subset": getattr(source, "subset", None)}
    if source.kind == "queries":
        return ingest_queries(con, source.path, source.name, fields, **options)
    return ingest_dataset(con, source.path, source.name, source.kind, source.task, fields, replace=replace,
                          distinct_from_existing=getattr(source, "distinct_from_existing", False), **options)
