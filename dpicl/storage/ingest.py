"""Ingesting datasets (private or public demonstrations) and query backlogs into DuckDB.

Files are read by DuckDB's own readers: `read_json_objects` for JSON arrays and JSON Lines (every record kept as
exact JSON, so a string stays a string: `read_json`'s inference would turn "2024-01-01" into a DATE), `read_csv`
with the header's columns as VARCHAR (or, with `header=False`, columns named column1, column2, ...),
`read_parquet` with the file's own types, and `read_text` for the "lines" format: one record per line, split by
`pattern`, a regular expression whose named groups become the columns (it must match the whole line; DuckDB
applies it with RE2, so lookarounds and backreferences are refused). In a "lines" file, blank lines at the end
are skipped and a blank line anywhere else is an error (a blank line in the middle is more likely a damaged
file than a record). The format comes from the file extension (.json .jsonl .ndjson .csv .tsv .parquet) unless
given; "lines" is always given explicitly.

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

Everything is validated before anything is written, and each ingest is one transaction: a file is ingested
whole or not at all. Records and queries are private text: an `IngestError` says what is wrong, where (file,
row, field) and how to fix it, and never contains a value from the file. Column names read from the file (JSON
keys, a CSV header, Parquet columns) are data too; only the names the user mapped or the pattern's groups are
quoted.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import re
import secrets
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import duckdb

from dpicl.names import name_problem
from dpicl.storage.db import transaction

FORMATS = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
}
Format = Literal["json", "jsonl", "csv", "tsv", "parquet", "lines"]
FORMAT_NAMES = ("json", "jsonl", "csv", "tsv", "parquet", "lines")

# JSON types (as `json_type` names them) accepted per role; everything else is the wrong type.
_TEXT_JSON_TYPES = ("VARCHAR",)
_ID_JSON_TYPES = ("VARCHAR", "BIGINT", "UBIGINT", "DOUBLE")
_NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE")
_LABEL_ROLES = ("output", "reference")  # the fields `labels` maps
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
    rows_left_out_by_subset: int = 0  # rows of the file outside `subset` (after `skip_empty`)


@dataclass(frozen=True)
class SubsetSpec:
    """Which part of a file to ingest (module docstring); `dpicl.config.Subset` or a mapping converts with `of`."""

    buckets: int
    keep: tuple[int, ...]
    salt: str = "dpicl-subset"

    @classmethod
    def of(cls, path: Path, subset) -> SubsetSpec:
        """A checked spec from a `SubsetSpec`, a `dpicl.config.Subset`-like object or a mapping; IngestError if
        it is malformed (the config validates the same, so this guards the lower-level API)."""
        if isinstance(subset, dict):
            unknown = sorted(set(subset) - {"buckets", "keep", "salt"})
            if unknown:
                raise IngestError(path, f"subset has unknown key(s) {', '.join(unknown)}; give buckets, keep and "
                                        "optionally salt")
            buckets, keep, salt = subset.get("buckets"), subset.get("keep"), subset.get("salt", cls.salt)
        else:
            buckets, keep, salt = (getattr(subset, "buckets", None), getattr(subset, "keep", None),
                                   getattr(subset, "salt", cls.salt))
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 2:
            raise IngestError(path, "subset.buckets must be an integer of at least 2, e.g. 3 for a 2:1 split")
        if (not isinstance(keep, (list, tuple)) or not keep
                or any(not isinstance(b, int) or isinstance(b, bool) or not 0 <= b < buckets for b in keep)
                or len(set(keep)) != len(keep)):
            raise IngestError(path, f"subset.keep must list distinct buckets in 0..{buckets - 1}, e.g. [0, 1]")
        if not isinstance(salt, str):
            raise IngestError(path, "subset.salt must be a string")
        return cls(buckets, tuple(sorted(keep)), salt)

    def recorded(self) -> dict:
        return {"buckets": self.buckets, "keep": list(self.keep), "salt": self.salt}


def subset_bucket(key: str, buckets: int, salt: str = "dpicl-subset") -> int:
    """The bucket of a record id (reference implementation of the SQL in `_Source.keep_subset`)."""
    digest = hashlib.sha256((salt + "\x00" + key).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % buckets


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
        if row is not None and not (row_label == "line" and row == line):
            where.append(f"{row_label} {row}")
        if field is not None:
            where.append(f"field '{field}'" + (f" ({role})" if role not in (None, field) else ""))
        super().__init__(f"{', '.join(where)}: {message}")


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
    options = _Options.check(path, format, pattern, header, labels, fields, ("output",), subset)
    with transaction(con):
        existing = con.execute("SELECT kind FROM datasets WHERE name = ?", [name]).fetchone()
        if existing and not replace:
            raise IngestError(path, f"a dataset named '{name}' already exists; ingest under another name, "
                                    "or replace it (--replace)")
        if existing:
            _check_replaceable(con, path, name, existing[0], kind)
        source = _Source.read(con, path, options)
        stage = source.stage(roles, skip_empty=skip_empty)
        source.keep_subset(options.subset, f"dataset '{name}'")
        n = con.execute(f"SELECT count(*) FROM {stage}").fetchone()[0]
        recorded = asdict(fields) | options.recorded()
        repeated, in_common = _registered_repeats(con, name, kind, source.sha256, recorded, stage)
        if repeated and not distinct_from_existing:
            raise IngestError(path, _repeats_message(name, kind, repeated, in_common, n))
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
    options = _Options.check(path, format, pattern, header, labels, fields, ("reference",), subset)
    with transaction(con):
        source = _Source.read(con, path, options)
        stage = source.stage(roles, skip_empty=skip_empty)
        source.keep_subset(options.subset, f"backlog '{backlog}'")
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


@dataclass(frozen=True)
class _Options:
    """How to read a file, checked before it is opened. Everything here is public configuration, so errors may
    quote it (the pattern, the raw label values), unlike values from the file."""

    format: str | None
    pattern: str | None
    header: bool
    labels: dict[str, str] | None
    groups: tuple[str | None, ...] = ()  # "lines": the name of each capture group in order (None: unnamed)
    subset: SubsetSpec | None = None

    @classmethod
    def check(cls, path: Path, format: str | None, pattern: str | None, header: bool,
              labels: dict[str, str] | None, fields: FieldMap, label_roles: tuple[str, ...],
              subset=None) -> _Options:
        if format is not None and format not in FORMAT_NAMES:
            raise IngestError(path, f"unknown format '{format}'; use one of {', '.join(FORMAT_NAMES)}")
        groups: tuple[str | None, ...] = ()
        if format == "lines":
            if pattern is None:
                raise IngestError(path, "the 'lines' format needs a pattern: a regular expression whose named "
                                        "groups are the columns, e.g. ^(?P<label>[01]) (?P<text>.+)$")
            groups = _pattern_groups(path, pattern)
        elif pattern is not None:
            raise IngestError(path, "a pattern is only used by the 'lines' format; set format: lines "
                                    "(--format lines) or remove the pattern")
        if not header and format not in (None, "csv", "tsv"):
            raise IngestError(path, f"header: false only applies to CSV and TSV files, not '{format}'; "
                                    "remove it")
        if labels is not None:
            if not isinstance(labels, dict) or not labels:
                raise IngestError(path, "labels must map at least one raw label value to a label name, "
                                        "e.g. {'0': 'negative', '1': 'positive'}")
            for raw, label in labels.items():
                if not isinstance(raw, str) or not isinstance(label, str):
                    raise IngestError(path, "labels must map strings to strings; quote numeric raw values "
                                            "(e.g. '0': negative)")
                if not label.strip():
                    raise IngestError(path, f"the label name for raw value '{raw}' is empty; give it a name")
            mapped = [role for role in label_roles if getattr(fields, role) is not None]
            if not mapped:
                raise IngestError(path, f"labels are given but no {' or '.join(label_roles)} field is mapped; "
                                        f"map it with --field {label_roles[0]}=<column>, or remove the labels")
        spec = SubsetSpec.of(path, subset) if subset is not None else None
        return cls(format, pattern, header, dict(labels) if labels is not None else None, groups, spec)

    def recorded(self) -> dict:
        """The options worth keeping with a dataset's field map: only those given, so defaults stay as before."""
        kept = {"format": self.format, "pattern": self.pattern, "labels": self.labels}
        out = {key: value for key, value in kept.items() if value is not None}
        if not self.header:
            out["header"] = False
        if self.subset is not None:
            out["subset"] = self.subset.recorded()
        return out


def _pattern_groups(path: Path, pattern: str) -> tuple[str | None, ...]:
    """The name of each capture group of `pattern`, in order (None for an unnamed group); IngestError if the
    pattern does not compile or names no group."""
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise IngestError(path, f"the pattern is not a valid regular expression ({error.msg} at position "
                                f"{error.pos}); fix the pattern") from None
    if not compiled.groupindex:
        raise IngestError(path, "the pattern has no named groups, so it gives no columns; name each column "
                                "with (?P<name>...), e.g. ^(?P<label>[01]) (?P<text>.+)$")
    names: list[str | None] = [None] * compiled.groups
    for name, index in compiled.groupindex.items():
        names[index - 1] = name
    return tuple(names)


def _insert_records(con: duckdb.DuckDBPyConnection, name: str, stage: str) -> None:
    con.execute(f"INSERT INTO records SELECT ?, id, row_no, input, output FROM {stage} ORDER BY row_no", [name])
    con.execute(f"INSERT INTO record_hashes SELECT ?, id, dpicl_record_sha256(input, output) FROM {stage}", [name])


def _check_replaceable(con: duckdb.DuckDBPyConnection, path: Path, name: str, old_kind: str, kind: str) -> None:
    """Refuse a replace that would detach privacy accounting from the data it was opened for."""
    spent = con.execute("SELECT count(*) FROM ledger WHERE dataset = ?", [name]).fetchone()[0]
    if spent:
        raise IngestError(path, f"dataset '{name}' has {spent} privacy ledger entries and cannot be "
                                "replaced (its spent budget stays tied to the records it was spent on); "
                                "ingest the new data under another name")
    budget = con.execute("SELECT count(*) FROM budgets WHERE dataset = ?", [name]).fetchone()[0]
    if budget and kind != old_kind:
        raise IngestError(path, f"dataset '{name}' has a privacy budget and cannot be replaced by a {kind} "
                                f"dataset (the budget would be left without its {old_kind} data); ingest the "
                                f"{kind} data under another name")


# The read options that decide a record's id, hence its subset bucket (`_disjoint_parts`).
_ID_OPTIONS = ("id", "format", "pattern", "header")


def _disjoint_parts(mine: dict, theirs: dict) -> bool:
    """Whether two ingests of one file (their recorded field maps) took disjoint subsets: the same ids, buckets
    and salt, and no bucket in common."""
    a, b = mine.get("subset"), theirs.get("subset")
    if not a or not b or (a["buckets"], a["salt"]) != (b["buckets"], b["salt"]):
        return False
    if any(mine.get(key) != theirs.get(key) for key in _ID_OPTIONS):
        return False
    return not set(a["keep"]) & set(b["keep"])


def _registered_repeats(con: duckdb.DuckDBPyConnection, name: str, kind: str, sha256: str, recorded: dict,
                        stage: str) -> tuple[dict[str, tuple[str, bool, int]], int]:
    """The other datasets whose content the staged one repeats, as {name: (kind, same file, records in common)},
    and how many staged records repeat any of them. A private dataset is compared with the private and public
    ones, a public dataset with the private ones (public data may repeat public data)."""
    kinds = ["private", "public"] if kind == "private" else ["private"]
    repeated: dict[str, tuple[str, bool, int]] = {}
    same_file = con.execute("SELECT name, kind, field_map FROM datasets WHERE source_sha256 = ? AND name <> ? "
                            "AND list_contains(?, kind) ORDER BY name", [sha256, name, kinds]).fetchall()
    for other, other_kind, field_map in same_file:
        if not _disjoint_parts(recorded, json.loads(field_map)):
            repeated[other] = (other_kind, True, 0)
    # the other datasets' records whose content any staged record has (ids play no part)
    common = (f"SELECT s.row_no, d.name, d.kind FROM {stage} s JOIN record_hashes h "
              "ON h.content_sha256 = dpicl_record_sha256(s.input, s.output) JOIN datasets d ON d.name = h.dataset "
              "WHERE d.name <> ? AND list_contains(?, d.kind)")
    per_dataset = con.execute(f"SELECT name, kind, count(DISTINCT row_no) FROM ({common}) GROUP BY name, kind",
                              [name, kinds]).fetchall()
    for other, other_kind, count in per_dataset:
        repeated[other] = (other_kind, other in repeated, count)
    in_common = con.execute(f"SELECT count(DISTINCT row_no) FROM ({common})", [name, kinds]).fetchone()[0]
    return repeated, in_common


def _repeats_message(name: str, kind: str, repeated: dict[str, tuple[str, bool, int]], in_common: int,
                     n: int) -> str:
    """Why a dataset that repeats registered data is refused: dataset names and counts only, never a value."""
    same_file = [f"{k} dataset '{other}'" for other, (k, same, _) in sorted(repeated.items()) if same]
    shared = [f"{k} dataset '{other}' ({count})" for other, (k, _, count) in sorted(repeated.items()) if count]
    found = []
    if same_file:
        found.append(f"it is the same file as {', '.join(same_file)}")
    if shared:
        found.append(f"{in_common} of its {n} records have the same content (input and output) as records of "
                     f"{', '.join(shared)}")
    return (f"{kind} dataset '{name}' repeats data that is already registered: {'; '.join(found)}. The content of "
            "a private dataset backs one privacy budget only; registered again, under another name or as public "
            "data, it could be used without being paid for from that budget. Ingest only data that is not "
            "registered yet; or, if this file is about a different population whose records merely look the "
            "same, declare it with --distinct-from-existing (distinct_from_existing: true on the config's data "
            "source), which is recorded with the dataset")


class _Source:
    """A file read into a TEMP table `src` (`_dpicl_row`: the 1-based row in the file, from WITH ORDINALITY) and
    validated into a TEMP `stage` table of text values; `drop()` or the transaction's rollback removes both."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, fmt: str, options: _Options | None = None):
        self.con, self.path, self.fmt = con, path, fmt
        self.options = options or _Options(fmt, None, True, None)
        tag = uuid.uuid4().hex[:12]
        self.src, self.stage_table, self.rejects = f"_ingest_src_{tag}", f"_ingest_stage_{tag}", f"_ingest_rej_{tag}"
        self.lines = f"_ingest_lines_{tag}"
        self.sha256 = ""
        self.skipped = 0  # rows left out by `stage(skip_empty=True)`
        self.left_out = 0  # rows left out by `keep_subset`
        self.columns: dict[str, str] = {}  # column name -> DuckDB type ("JSON" for every field of a JSON file)

    def error(self, message: str, *, row: int | None = None, field: str | None = None,
              line: int | None = None, role: str | None = None) -> IngestError:
        if self.fmt == "lines":  # one record per line (blank lines only at the end): the row is the line
            row, line = (line, line) if row is None else (row, row if line is None else line)
            return IngestError(self.path, message, row=row, field=field, line=line, role=role, row_label="line")
        label = "data row" if self.fmt in ("csv", "tsv") else "row"
        return IngestError(self.path, message, row=row, field=field, line=line, role=role, row_label=label)

    @classmethod
    def read(cls, con: duckdb.DuckDBPyConnection, path: Path, options: _Options | str | None) -> _Source:
        if not isinstance(options, _Options):  # a bare format, as before the read options
            options = _Options(options, None, True, None)
        if not path.is_file():
            raise IngestError(path, "file not found; check the path")
        fmt = options.format or FORMATS.get(path.suffix.lower())
        if fmt not in FORMAT_NAMES:
            raise IngestError(path, f"cannot tell the file format from '{path.suffix}'; use one of "
                                    f"{', '.join(FORMATS)} or give the format (--format; "
                                    f"one of {', '.join(FORMAT_NAMES)})")
        if not options.header and fmt not in ("csv", "tsv"):
            raise IngestError(path, f"header: false only applies to CSV and TSV files, not '{fmt}'; "
                                    "remove it or give the format")
        if path.stat().st_size == 0:
            raise IngestError(path, "file is empty; nothing to ingest")
        source = cls(con, path, fmt, options)
        source.sha256 = _scan(path, check_utf8=fmt != "parquet")
        {"json": source._read_json, "jsonl": source._read_json, "csv": source._read_csv,
         "tsv": source._read_csv, "parquet": source._read_parquet, "lines": source._read_lines}[fmt]()
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
        has_header = self.options.header
        try:
            with open(self.path, newline="", encoding="utf-8-sig") as f:
                first = next(csv.reader(f, delimiter=delim), [])
        except csv.Error as error:  # the message is a fixed text or the limit, never a value from the file
            if "field limit" in str(error):
                raise self.error(f"the first line has a field over {csv.field_size_limit():,} characters; a "
                                 "header's column names (or, without a header, the first row's fields) must be "
                                 "shorter", line=1) from None
            raise self.error(f"the first line could not be read as {self.fmt.upper()}; check the delimiter and "
                             "quoting", line=1) from None
        if has_header:
            header = [name or f"column{i}" for i, name in enumerate(first, 1)]
        else:  # the first record only tells how many columns there are
            header = [f"column{i}" for i in range(1, len(first) + 1)]
        twice = [str(i) for i, name in enumerate(header, 1) if header.count(name) > 1]
        if twice:  # positions, not names: the header is part of the file
            raise self.error(f"the header gives columns {', '.join(twice)} the same name; rename them so every "
                             "column has its own name", line=1)
        if not header:
            raise self.error("the first line has no columns; remove the blank line", line=1)
        try:
            self.con.execute(
                f"CREATE TEMP TABLE {self.src} AS SELECT ordinality AS _dpicl_row, * FROM read_csv(?, "
                "auto_detect = false, header = ?, delim = ?, quote = '\"', escape = '\"', columns = ?, "
                "store_rejects = true, rejects_table = ?, rejects_scan = ?) WITH ORDINALITY",
                [str(self.path), has_header, delim, {name: "VARCHAR" for name in header}, self.rejects,
                 self.rejects + "_scan"])
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

    def _read_lines(self) -> None:
        """One record per line (LF or CRLF), split by the pattern's named groups into VARCHAR columns."""
        groups = self.options.groups
        pattern = _sql_string(self.options.pattern)
        anchored = _sql_string(f"^(?:{self.options.pattern})$")
        names = [name if name is not None else f"_dpicl_group{i}" for i, name in enumerate(groups, 1)]
        # string_split keeps every line, so the ordinality is the line number; a BOM and a CR at the end go
        self.con.execute(
            f"CREATE TEMP TABLE {self.lines} AS SELECT t.n AS line_no, "
            "regexp_replace(CASE WHEN t.n = 1 THEN ltrim(t.l, chr(65279)) ELSE t.l END, '\\r$', '') AS line "
            "FROM (SELECT string_split(content, chr(10)) AS ls FROM read_text(?)), "
            "unnest(ls) WITH ORDINALITY AS t(l, n)", [str(self.path)])
        blank = "regexp_full_match(line, '\\s*')"
        last = self.con.execute(f"SELECT max(line_no) FROM {self.lines} WHERE NOT {blank}").fetchone()[0]
        if last is None:
            raise self.error("file has no data rows (only blank lines); nothing to ingest")
        bad = self.con.execute(f"SELECT min(line_no) FROM {self.lines} WHERE line_no < ? AND {blank}",
                               [last]).fetchone()[0]
        if bad is not None:
            raise self.error("is blank; every line before the last record must be a record (blank lines are "
                             "only skipped at the end of the file), remove it", line=bad)
        try:
            bad = self.con.execute(f"SELECT min(line_no) FROM {self.lines} WHERE line_no <= ? AND "
                                   f"NOT regexp_full_match(line, {pattern})", [last]).fetchone()[0]
        except duckdb.Error:
            raise self.error("the pattern is not supported by DuckDB's regular expressions (RE2: no "
                             "lookarounds, backreferences or possessive quantifiers); rewrite the pattern "
                             "without them") from None
        if bad is not None:
            raise self.error("does not match the pattern (it must match the whole line); fix or remove the "
                             "line, or change the pattern", line=bad)
        wanted = ", ".join(f"m.{_sql_ident(name)} AS {_sql_ident(name)}" for name in groups if name is not None)
        name_list = "[" + ", ".join(_sql_string(name) for name in names) + "]"
        self.con.execute(
            f"CREATE TEMP TABLE {self.src} AS SELECT line_no AS _dpicl_row, {wanted} FROM (SELECT line_no, "
            f"regexp_extract(line, {anchored}, {name_list}) AS m FROM {self.lines} WHERE line_no <= ?) "
            "ORDER BY line_no", [last])
        self.con.execute(f"DROP TABLE {self.lines}")
        self.columns = {name: "VARCHAR" for name in groups if name is not None}

    def stage(self, roles: dict[str, tuple[str | None, bool]], skip_empty: bool = False) -> str:
        """Validate the mapped fields and build the TEMP table (row_no, <role>...) of text values; with labels,
        map the output and reference fields' raw values to label names."""
        labels = self.options.labels
        selects = ["_dpicl_row AS row_no"]
        for role, (column, _) in roles.items():
            if column is not None and column not in self.columns:
                raise self.error(f"not found in the file; {self._column_names()}; map the field with "
                                 f"--field {role}=<column> (the name must match exactly, case included)",
                                 field=column, role=role)
            selects += self._select(role, column, numbers_ok=labels is not None and role in _LABEL_ROLES)
        self.con.execute(f"CREATE TEMP TABLE {self.stage_table} AS SELECT {', '.join(selects)} FROM {self.src} "
                         "ORDER BY _dpicl_row")
        if skip_empty:
            text_roles = [r for r in ("input", "output") if r in roles and roles[r][0] is not None]
            empty = " OR ".join(f"(({r} IS NULL OR {r} = '') AND {r}_ok)" for r in text_roles)
            self.skipped = self.con.execute(f"DELETE FROM {self.stage_table} WHERE {empty}").fetchone()[0]
        for role, (column, required) in roles.items():
            if column is None:
                continue
            self._check(role, column, required)
        if labels is not None:
            for role, (column, _) in roles.items():
                if column is not None and role in _LABEL_ROLES:
                    self._map_labels(role, column, labels)
        dup = self.con.execute(
            f"SELECT row_no, first FROM (SELECT row_no, min(row_no) OVER (PARTITION BY id) AS first "
            f"FROM {self.stage_table}) WHERE row_no > first ORDER BY row_no LIMIT 1").fetchone()
        if dup:
            label = {"csv": "data row", "tsv": "data row", "lines": "line"}.get(self.fmt, "row")
            raise self.error(f"repeats the id of {label} {dup[1]}; ids must be unique, fix or remove one of "
                             "the rows", row=dup[0], field=roles["id"][0], role="id")
        return self.stage_table

    def _column_names(self) -> str:
        """The file's columns for an error: named only when the user chose the names (a pattern's groups, or
        column1.. of a CSV without header); names read from the file (JSON keys, header, Parquet) are data."""
        if self.fmt == "lines" or not self.options.header:
            return f"its columns are {', '.join(self.columns) or '(none)'}"
        return f"it has {len(self.columns)} column(s), not listed here because their names come from the file"

    def keep_subset(self, subset: SubsetSpec | None, what: str) -> None:
        """Delete the staged rows outside `subset` (module docstring; the key is the staged id, so a record's id
        and its bucket agree); IngestError if none is left. `what` names the dataset or backlog."""
        if subset is None:
            return
        bucket = "CAST('0x' || left(sha256(? || chr(0) || id), 16) AS UBIGINT) % ?"
        self.left_out = self.con.execute(
            f"DELETE FROM {self.stage_table} WHERE NOT list_contains(CAST(? AS UBIGINT[]), {bucket})",
            [list(subset.keep), subset.salt, subset.buckets]).fetchone()[0]
        if self.con.execute(f"SELECT count(*) FROM {self.stage_table}").fetchone()[0] == 0:
            raise self.error(f"the subset (keep {list(subset.keep)} of {subset.buckets} buckets) leaves no rows "
                             f"of {what}; check subset.buckets and subset.keep (and subset.salt)")

    def _select(self, role: str, column: str | None, numbers_ok: bool = False) -> list[str]:
        """SQL for the role's text value, whether its type is acceptable, and the type's name.

        Ids, and with `numbers_ok` (raw labels) other fields too, may be numbers: they become their text."""
        numbers_ok = numbers_ok or role == "id"
        if column is None:
            text = "CAST(_dpicl_row AS VARCHAR)" if role == "id" else "NULL::VARCHAR"
            return [f"{text} AS {role}", f"TRUE AS {role}_ok", f"NULL::VARCHAR AS {role}_type"]
        dtype = self.columns[column]
        if dtype == "JSON":
            path = _sql_string('$."' + column.replace('"', '\\"') + '"')
            jtype = f"json_type(json_extract(obj, {path}))"
            allowed = ", ".join(_sql_string(t) for t in (_ID_JSON_TYPES if numbers_ok else _TEXT_JSON_TYPES))
            return [f"json_extract_string(obj, {path}) AS {role}",
                    f"({jtype} IS NULL OR {jtype} IN ('NULL', {allowed})) AS {role}_ok",
                    f"{jtype} AS {role}_type"]
        ident = '"' + column.replace('"', '""') + '"'
        if dtype == "VARCHAR" or (numbers_ok and (dtype in _NUMERIC_TYPES or dtype.startswith("DECIMAL"))):
            text, ok = f"CAST({ident} AS VARCHAR)", "TRUE"
        else:  # the wrong type wherever it holds a value
            text, ok = "NULL::VARCHAR", f"{ident} IS NULL"
        return [f"{text} AS {role}", f"({ok}) AS {role}_ok", f"{_sql_string(dtype)} AS {role}_type"]

    def _check(self, role: str, column: str, required: bool) -> None:
        bad = self.con.execute(f"SELECT row_no, {role}_type FROM {self.stage_table} WHERE NOT {role}_ok "
                               "ORDER BY row_no LIMIT 1").fetchone()
        if bad:
            found = _type_words(bad[1])
            numbers_ok = role == "id" or (self.options.labels is not None and role in _LABEL_ROLES)
            allowed = "text or a number" if numbers_ok else "text"
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

    def _map_labels(self, role: str, column: str, labels: dict[str, str]) -> None:
        """Replace the raw label values of `role` by their names; a value `labels` does not list is an error
        that names the row, the field and the configured raw values (public), never the value itself."""
        pairs = ", ".join("(?, ?)" for _ in labels)
        params = [item for pair in labels.items() for item in pair]
        mapping = f"(VALUES {pairs}) AS m(raw, label)"
        bad = self.con.execute(
            f"SELECT s.row_no FROM {self.stage_table} s WHERE s.{role} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {mapping} WHERE m.raw = s.{role}) ORDER BY s.row_no LIMIT 1", params).fetchone()
        if bad:
            known = ", ".join(f"'{raw}'" for raw in labels)
            raise self.error(f"is not one of the raw label values in `labels` ({known}); add its value to "
                             "`labels`, or fix or remove the row", row=bad[0], field=column, role=role)
        self.con.execute(f"UPDATE {self.stage_table} AS s SET {role} = m.label FROM {mapping} "
                         f"WHERE s.{role} = m.raw", params)

    def drop(self) -> None:
        self.con.execute(f"DROP TABLE IF EXISTS {self.stage_table}")
        self.con.execute(f"DROP TABLE IF EXISTS {self.src}")
        self.con.execute(f"DROP TABLE IF EXISTS {self.lines}")


def _type_words(dtype: str) -> str:
    """A wrong type for an error: a JSON type in words, or only the leading name of a SQL type (the text of a
    STRUCT, MAP or ENUM type holds field names or values from the file)."""
    if dtype in _TYPE_WORDS:
        return _TYPE_WORDS[dtype]
    if dtype.endswith("]"):
        return "a list"
    base = re.match(r"[A-Z][A-Z0-9_ ]*", dtype)
    return f"of type {base.group().strip()}" if base else "of another type"


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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
