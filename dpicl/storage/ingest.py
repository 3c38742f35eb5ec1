"""Ingesting datasets (private or public demonstrations) and query backlogs into DuckDB.

Files are read by DuckDB's own readers: `read_json_objects` for JSON arrays and JSON Lines (every record kept as
exact JSON, so a string stays a string: `read_json`'s inference would turn "2024-01-01" into a DATE), `read_csv`
with the header's columns as VARCHAR, `read_parquet` with the file's own types. The format comes from the file
extension (.json .jsonl .ndjson .csv .tsv .parquet) unless given.

Everything is validated before anything is written, and each ingest is one transaction: a file is ingested
whole or not at all. Records and queries are private text: an `IngestError` says what is wrong, where (file,
row, field) and how to fix it, and never contains a value from the file.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import secrets
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import duckdb

from dpicl.storage.db import transaction

FORMATS = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
}
Format = Literal["json", "jsonl", "csv", "tsv", "parquet"]

# JSON types (as `json_type` names them) accepted per role; everything else is the wrong type.
_TEXT_JSON_TYPES = ("VARCHAR",)
_ID_JSON_TYPES = ("VARCHAR", "BIGINT", "UBIGINT", "DOUBLE")
_NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE")
_TYPE_WORDS = {"BIGINT": "a number", "UBIGINT": "a number", "DOUBLE": "a number", "BOOLEAN": "true/false",
               "ARRAY": "a list", "OBJECT": "an object"}


@dataclass(frozen=True)
class FieldMap:
    """Which column of the file holds each field. `id=None`: ids are the 1-based row numbers."""

    id: str | None = None
    input: str = "input"
    output: str | None = "output"
    reference: str | None = None  # queries only


@dataclass(frozen=True)
class IngestReport:
    name: str  # dataset or backlog
    path: Path
    rows_added: int
    rows_skipped: int


class IngestError(ValueError):
    """A file cannot be ingested. `row` is the 1-based data row, `line` the 1-based line of the file."""

    def __init__(self, path: str | Path, message: str, *, row: int | None = None, field: str | None = None,
                 line: int | None = None, role: str | None = None, row_label: str = "row"):
        self.path = Path(path)
        self.row = row
        self.field = field
        self.line = line
        where = [str(path)]
        if line is not None:
            where.append(f"line {line}")
        if row is not None:
            where.append(f"{row_label} {row}")
        if field is not None:
            where.append(f"field '{field}'" + (f" ({role})" if role not in (None, field) else ""))
        super().__init__(f"{', '.join(where)}: {message}")


def ingest_dataset(con: duckdb.DuckDBPyConnection, path: str | Path, name: str,
                   kind: Literal["private", "public"], task: str, fields: FieldMap, *,
                   replace: bool = False, format: Format | None = None) -> IngestReport:
    """Ingest a demonstration dataset into `datasets` and `records`, with a fresh teacher key."""
    if kind not in ("private", "public"):
        raise ValueError(f"kind must be 'private' or 'public', not {kind!r}")
    path = Path(path)
    roles = {"id": (fields.id, True), "input": (fields.input, True), "output": (fields.output, True)}
    with transaction(con):
        existing = con.execute("SELECT kind FROM datasets WHERE name = ?", [name]).fetchone()
        if existing and not replace:
            raise IngestError(path, f"a dataset named '{name}' already exists; ingest under another name, "
                                    "or replace it (--replace)")
        if existing:
            spent = con.execute("SELECT count(*) FROM ledger WHERE dataset = ?", [name]).fetchone()[0]
            if spent:
                raise IngestError(path, f"dataset '{name}' has {spent} privacy ledger entries and cannot be "
                                        "replaced (its spent budget stays tied to the records it was spent on); "
                                        "ingest the new data under another name")
        source = _Source.read(con, path, format)
        stage = source.stage(roles)
        n = con.execute(f"SELECT count(*) FROM {stage}").fetchone()[0]
        row = [kind, task, str(path.resolve()), source.sha256, json.dumps(asdict(fields)), n, secrets.token_bytes(32)]
        if existing:
            con.execute("DELETE FROM records WHERE dataset = ?", [name])
            con.execute("UPDATE datasets SET kind = ?, task = ?, source_path = ?, source_sha256 = ?, "
                        "field_map = ?, n_records = ?, teacher_key = ?, created_at = current_timestamp "
                        "WHERE name = ?", [*row, name])
        else:
            con.execute("INSERT INTO datasets (kind, task, source_path, source_sha256, field_map, n_records, "
                        "teacher_key, name) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [*row, name])
        _insert_records(con, name, stage)
        source.drop()
        return IngestReport(name, path, n, 0)


def ingest_queries(con: duckdb.DuckDBPyConnection, path: str | Path, backlog: str, fields: FieldMap, *,
                   format: Format | None = None) -> IngestReport:
    """Add a file's queries to a backlog as 'pending'.

    Appending to an existing backlog is allowed: an id already there with the same text is skipped, with a
    different text it is an error. `row_no` is the query's position in the backlog (appends continue it).
    """
    path = Path(path)
    roles = {"id": (fields.id, True), "input": (fields.input, True), "reference": (fields.reference, False)}
    with transaction(con):
        source = _Source.read(con, path, format)
        stage = source.stage(roles)
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
        return IngestReport(backlog, path, added, total - added)


def _insert_records(con: duckdb.DuckDBPyConnection, name: str, stage: str) -> None:
    con.execute(f"INSERT INTO records SELECT ?, id, row_no, input, output FROM {stage} ORDER BY row_no", [name])


class _Source:
    """A file read into a TEMP table `src` (`_dpicl_row`: the 1-based row in the file, from WITH ORDINALITY) and
    validated into a TEMP `stage` table of text values; `drop()` or the transaction's rollback removes both."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, fmt: str):
        self.con, self.path, self.fmt = con, path, fmt
        tag = uuid.uuid4().hex[:12]
        self.src, self.stage_table, self.rejects = f"_ingest_src_{tag}", f"_ingest_stage_{tag}", f"_ingest_rej_{tag}"
        self.sha256 = ""
        self.columns: dict[str, str] = {}  # column name -> DuckDB type ("JSON" for every field of a JSON file)

    def error(self, message: str, *, row: int | None = None, field: str | None = None,
              line: int | None = None, role: str | None = None) -> IngestError:
        label = "data row" if self.fmt in ("csv", "tsv") else "row"
        return IngestError(self.path, message, row=row, field=field, line=line, role=role, row_label=label)

    @classmethod
    def read(cls, con: duckdb.DuckDBPyConnection, path: Path, format: str | None) -> _Source:
        if not path.is_file():
            raise IngestError(path, "file not found; check the path")
        fmt = format or FORMATS.get(path.suffix.lower())
        if fmt not in FORMATS.values():
            raise IngestError(path, f"cannot tell the file format from '{path.suffix}'; use one of "
                                    f"{', '.join(FORMATS)} or give the format (--format)")
        if path.stat().st_size == 0:
            raise IngestError(path, "file is empty; nothing to ingest")
        source = cls(con, path, fmt)
        source.sha256 = _scan(path, check_utf8=fmt != "parquet")
        {"json": source._read_json, "jsonl": source._read_json, "csv": source._read_csv,
         "tsv": source._read_csv, "parquet": source._read_parquet}[fmt]()
        if con.execute(f"SELECT count(*) FROM {source.src}").fetchone()[0] == 0:
            raise source.error("file has no data rows; nothing to ingest")
        return source

    def _read_json(self) -> None:
        mode = "newline_delimited" if self.fmt == "jsonl" else "auto"
        try:
            self.con.execute(f"CREATE TEMP TABLE {self.src} AS SELECT ordinality AS _dpicl_row, json AS obj "
                             "FROM read_json_objects(?, format = ?) WITH ORDINALITY", [str(self.path), mode])
        except duckdb.Error:
            line, reason = _locate_json_error(self.path, self.fmt)
            raise self.error(f"not valid JSON ({reason}); fix or remove the row", line=line) from None
        bad = self.con.execute(f"SELECT _dpicl_row FROM {self.src} WHERE json_type(obj) <> 'OBJECT' "
                               "ORDER BY _dpicl_row LIMIT 1").fetchone()
        if bad:
            raise self.error("is not a JSON object; every record must be an object of fields, "
                             "fix or remove the row", row=bad[0])
        keys = self.con.execute(f"SELECT DISTINCT unnest(json_keys(obj)) AS k FROM {self.src} ORDER BY k")
        self.columns = {key: "JSON" for (key,) in keys.fetchall()}

    def _read_csv(self) -> None:
        delim = "\t" if self.fmt == "tsv" else ","
        with open(self.path, newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f, delimiter=delim), [])
        header = [name or f"column{i}" for i, name in enumerate(header, 1)]
        twice = sorted({name for name in header if header.count(name) > 1})
        if twice:
            raise self.error(f"the header names column(s) {', '.join(twice)} more than once; "
                             "rename them so every column has its own name", line=1)
        try:
            self.con.execute(
                f"CREATE TEMP TABLE {self.src} AS SELECT ordinality AS _dpicl_row, * FROM read_csv(?, "
                "auto_detect = false, header = true, delim = ?, quote = '\"', escape = '\"', columns = ?, "
                "store_rejects = true, rejects_table = ?, rejects_scan = ?) WITH ORDINALITY",
                [str(self.path), delim, {name: "VARCHAR" for name in header}, self.rejects, self.rejects + "_scan"])
        except duckdb.Error:
            raise self.error(f"could not be read as {self.fmt.upper()}; check the delimiter, quoting and "
                             "encoding, or give the format (--format)") from None
        reject = self.con.execute(f"SELECT line, error_type FROM {self.rejects} ORDER BY line LIMIT 1").fetchone()
        if reject:
            raise self.error(f"is not a valid {self.fmt.upper()} row ({str(reject[1]).lower()}); "
                             "fix or remove the row", line=reject[0])
        self.con.execute(f"DROP TABLE {self.rejects}")
        self.con.execute(f"DROP TABLE {self.rejects}_scan")
        self.columns = {name: "VARCHAR" for name in header}

    def _read_parquet(self) -> None:
        try:
            self.con.execute(f"CREATE TEMP TABLE {self.src} AS SELECT ordinality AS _dpicl_row, * "
                             "FROM read_parquet(?) WITH ORDINALITY", [str(self.path)])
        except duckdb.Error:
            raise self.error("could not be read as Parquet; check the file, or give the format (--format)"
                             ) from None
        described = self.con.execute(f"DESCRIBE {self.src}").fetchall()
        self.columns = {name: str(dtype) for name, dtype, *_ in described[1:]}

    def stage(self, roles: dict[str, tuple[str | None, bool]]) -> str:
        """Validate the mapped fields and build the TEMP table (row_no, <role>...) of text values."""
        selects = ["_dpicl_row AS row_no"]
        for role, (column, _) in roles.items():
            if column is not None and column not in self.columns:
                raise self.error(f"not found in the file; its columns are {', '.join(self.columns) or '(none)'}; "
                                 f"map the field with --field {role}=<column>", field=column, role=role)
            selects += self._select(role, column)
        self.con.execute(f"CREATE TEMP TABLE {self.stage_table} AS SELECT {', '.join(selects)} FROM {self.src} "
                         "ORDER BY _dpicl_row")
        for role, (column, required) in roles.items():
            if column is None:
                continue
            self._check(role, column, required)
        dup = self.con.execute(
            f"SELECT row_no, first FROM (SELECT row_no, min(row_no) OVER (PARTITION BY id) AS first "
            f"FROM {self.stage_table}) WHERE row_no > first ORDER BY row_no LIMIT 1").fetchone()
        if dup:
            label = "data row" if self.fmt in ("csv", "tsv") else "row"
            raise self.error(f"repeats the id of {label} {dup[1]}; ids must be unique, fix or remove one of "
                             "the rows", row=dup[0], field=roles["id"][0], role="id")
        return self.stage_table

    def _select(self, role: str, column: str | None) -> list[str]:
        """SQL for the role's text value, whether its type is acceptable, and the type's name."""
        if column is None:
            text = "CAST(_dpicl_row AS VARCHAR)" if role == "id" else "NULL::VARCHAR"
            return [f"{text} AS {role}", f"TRUE AS {role}_ok", f"NULL::VARCHAR AS {role}_type"]
        dtype = self.columns[column]
        if dtype == "JSON":
            path = _sql_string('$."' + column.replace('"', '\\"') + '"')
            jtype = f"json_type(json_extract(obj, {path}))"
            allowed = ", ".join(_sql_string(t) for t in (_ID_JSON_TYPES if role == "id" else _TEXT_JSON_TYPES))
            return [f"json_extract_string(obj, {path}) AS {role}",
                    f"({jtype} IS NULL OR {jtype} IN ('NULL', {allowed})) AS {role}_ok",
                    f"{jtype} AS {role}_type"]
        ident = '"' + column.replace('"', '""') + '"'
        if dtype == "VARCHAR" or (role == "id" and (dtype in _NUMERIC_TYPES or dtype.startswith("DECIMAL"))):
            text, ok = f"CAST({ident} AS VARCHAR)", "TRUE"
        else:  # the wrong type wherever it holds a value
            text, ok = "NULL::VARCHAR", f"{ident} IS NULL"
        return [f"{text} AS {role}", f"({ok}) AS {role}_ok", f"{_sql_string(dtype)} AS {role}_type"]

    def _check(self, role: str, column: str, required: bool) -> None:
        bad = self.con.execute(f"SELECT row_no, {role}_type FROM {self.stage_table} WHERE NOT {role}_ok "
                               "ORDER BY row_no LIMIT 1").fetchone()
        if bad:
            found = _TYPE_WORDS.get(bad[1], f"of type {bad[1]}")
            allowed = "text or a number" if role == "id" else "text"
            raise self.error(f"is {found}, but it must be {allowed}; write it as a string, "
                             "or fix or remove the row", row=bad[0], field=column, role=role)
        checks = [(f"{role} IS NULL", "has no value; fill it in or remove the row")] if required else []
        if role in ("id", "input"):
            checks.append((f"{role} = ''", "is empty; fill it in or remove the row"))
        for condition, problem in checks:
            bad = self.con.execute(f"SELECT row_no FROM {self.stage_table} WHERE {condition} "
                                   "ORDER BY row_no LIMIT 1").fetchone()
            if bad:
                raise self.error(problem, row=bad[0], field=column, role=role)

    def drop(self) -> None:
        self.con.execute(f"DROP TABLE IF EXISTS {self.stage_table}")
        self.con.execute(f"DROP TABLE IF EXISTS {self.src}")


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _scan(path: Path, check_utf8: bool) -> str:
    """The file's sha256; with `check_utf8`, an IngestError naming the line of the first byte that is not UTF-8."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            if not check_utf8:
                continue
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                at = max(error.start - pending, 0)
                raise IngestError(path, "is not UTF-8 text; save the file as UTF-8",
                                  line=line + chunk.count(b"\n", 0, at)) from None
            line += chunk.count(b"\n")
        if check_utf8:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                raise IngestError(path, "is not UTF-8 text (it ends inside a character); save the file as UTF-8",
                                  line=line) from None
    return digest.hexdigest()


def _locate_json_error(path: Path, fmt: str) -> tuple[int | None, str]:
    """(line, reason) of the first JSON syntax error, for a file DuckDB could not read. No values in `reason`."""
    text = path.read_text(encoding="utf-8")
    if fmt == "jsonl":
        for number, line in enumerate(text.split("\n"), 1):
            if line.strip():
                try:
                    json.loads(line)
                except json.JSONDecodeError as error:
                    return number, error.msg
    else:
        try:
            json.loads(text)
        except json.JSONDecodeError as error:
            return error.lineno, error.msg
    return None, "DuckDB could not parse it"


def ingest_source(con: duckdb.DuckDBPyConnection, source, *, replace: bool = False) -> IngestReport:
    """Ingest one `DataSource` of a config (a private/public dataset or a backlog)."""
    fields = FieldMap(**source.fields.model_dump())
    if source.kind == "queries":
        return ingest_queries(con, source.path, source.name, fields)
    return ingest_dataset(con, source.path, source.name, source.kind, source.task, fields, replace=replace)
