"""Reading a file into DuckDB: its SHA-256 (and, for text formats, a check that it is UTF-8), then one reader
per format (`read_json_objects`, `read_csv`, `read_parquet`, `read_text` split by a pattern) into a TEMP table,
refusing a malformed file with the line or row where it goes wrong and never a value from it (the module
docstring of `dpicl.storage.ingest` describes each format). What is read is validated by
`dpicl.storage.ingest_validate`.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import uuid
from pathlib import Path

import duckdb

from dpicl.data_paths import unset_variables
from dpicl.storage.ingest_options import FORMAT_NAMES, FORMATS, IngestError, ReadOptions


class SourceFile:
    """A file read into a TEMP table `src` (`_dpicl_row`: the 1-based row in the file, from WITH ORDINALITY) and
    validated into a TEMP `stage` table of text values (`dpicl.storage.ingest_validate`); `drop()` or the
    transaction's rollback removes both."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, fmt: str, options: ReadOptions | None = None):
        self.con, self.path, self.fmt = con, path, fmt
        self.options = options or ReadOptions(fmt, None, True, None)
        tag = uuid.uuid4().hex[:12]
        self.src, self.stage_table, self.rejects = f"_ingest_src_{tag}", f"_ingest_stage_{tag}", f"_ingest_rej_{tag}"
        self.lines = f"_ingest_lines_{tag}"
        self.sha256 = ""
        self.skipped = 0  # rows left out by `stage_records(skip_empty=True)`
        self.extra_tables: list[str] = []  # more TEMP tables made from the stage, dropped with it
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
    def read(cls, con: duckdb.DuckDBPyConnection, path: Path, options: ReadOptions | str | None) -> SourceFile:
        if not isinstance(options, ReadOptions):  # a bare format, as before the read options
            options = ReadOptions(options, None, True, None)
        if not path.is_file():
            unset = unset_variables(str(path))
            if unset:
                raise IngestError(path, f"the path names ${unset[0]}, which is not set; set it to the folder that "
                                        "holds the data (README, 'Benchmark data')")
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
        source.sha256 = scan_file(path, check_utf8=fmt != "parquet")
        {"json": source._read_json, "jsonl": source._read_json, "csv": source._read_csv,
         "tsv": source._read_csv, "parquet": source._read_parquet, "lines": source._read_lines}[fmt]()
        if con.execute(f"SELECT count(*) FROM {source.src}").fetchone()[0] == 0:
            raise source.error("file has no data rows; nothing to ingest")
        return source

    def _read_json(self) -> None:
        if self.fmt == "jsonl":
            mode, ends = "newline_delimited", None
        else:  # the reader for the value the document starts with (DuckDB's "auto" may read an array as one value)
            ends = _json_ends(self.path)
            mode = {b"[": "array", b"{": "unstructured"}.get(ends[0], "auto")
        try:
            self.con.execute(f"CREATE TEMP TABLE {self.src} AS SELECT ordinality AS _dpicl_row, json AS obj "
                             "FROM read_json_objects(?, format = ?) WITH ORDINALITY", [str(self.path), mode])
        except duckdb.Error:
            line, reason = _locate_json_error(self.path, self.fmt)
            raise self.error(f"not valid JSON ({reason}); fix or remove the row", line=line) from None
        if ends is not None:
            self._check_json_document(*ends)
        bad = self.con.execute(f"SELECT _dpicl_row FROM {self.src} WHERE json_type(obj) <> 'OBJECT' "
                               "ORDER BY _dpicl_row LIMIT 1").fetchone()
        if bad:
            raise self.error("is not a JSON object; every record must be an object of fields, "
                             "fix or remove the row", row=bad[0])
        keys = self.con.execute(f"SELECT DISTINCT unnest(json_keys(obj)) AS k FROM {self.src} ORDER BY k")
        self.columns = {key: "JSON" for (key,) in keys.fetchall()}

    def _check_json_document(self, first: bytes, last: bytes, last_at: int) -> None:
        """A "json" file is one JSON document, an array of records or one record, and DuckDB's readers are lenient
        about both: "array" reads an array cut short after a record (`[{...}, {...},` gives those records), and
        "unstructured" reads values one after another (`{...} {...}`, JSON Lines). So, once DuckDB has parsed the
        file, it must end with the byte that closes the value it starts with (`first`, `last`: its first and last
        bytes that are not whitespace), and a file that starts with '{' must hold one value. Only the line of a
        refused end is counted over the whole file."""
        if first == b"[" and last != b"]":
            raise self.error("not valid JSON (the array is never closed: the file ends without its final ']', "
                             "as a file cut short does); restore the end of the file or export it again",
                             line=_line_at(self.path, last_at))
        if first == b"{":
            if last != b"}":
                raise self.error("not valid JSON (the object is never closed: the file ends without its final "
                                 "'}', as a file cut short does); restore the end of the file or export it again",
                                 line=_line_at(self.path, last_at))
            values = self.con.execute(f"SELECT count(*) FROM {self.src}").fetchone()[0]
            if values > 1:
                raise self.error(f"not one JSON document: it holds {values:,} JSON values one after another; a "
                                 "JSON file is one array of records (or one record): put the records in an array, "
                                 "or, for one record per line, use JSON Lines (a .jsonl file, or --format jsonl)")

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
                 self.rejects + "scan_file"])
        except duckdb.Error:
            raise self.error(f"could not be read as {self.fmt.upper()}; check the delimiter, quoting and "
                             "encoding, or give the format (--format)") from None
        reject = self.con.execute(f"SELECT line, error_type FROM {self.rejects} ORDER BY line LIMIT 1").fetchone()
        if reject:
            raise self.error(f"is not a valid {self.fmt.upper()} row ({str(reject[1]).lower()}); "
                             "fix or remove the row", line=reject[0])
        self.con.execute(f"DROP TABLE {self.rejects}")
        self.con.execute(f"DROP TABLE {self.rejects}scan_file")
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
        pattern = sql_string(self.options.pattern)
        anchored = sql_string(f"^(?:{self.options.pattern})$")
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
        name_list = "[" + ", ".join(sql_string(name) for name in names) + "]"
        self.con.execute(
            f"CREATE TEMP TABLE {self.src} AS SELECT line_no AS _dpicl_row, {wanted} FROM (SELECT line_no, "
            f"regexp_extract(line, {anchored}, {name_list}) AS m FROM {self.lines} WHERE line_no <= ?) "
            "ORDER BY line_no", [last])
        self.con.execute(f"DROP TABLE {self.lines}")
        self.columns = {name: "VARCHAR" for name in groups if name is not None}

    def drop(self) -> None:
        for table in self.extra_tables:
            self.con.execute(f"DROP TABLE IF EXISTS {table}")
        self.con.execute(f"DROP TABLE IF EXISTS {self.stage_table}")
        self.con.execute(f"DROP TABLE IF EXISTS {self.src}")
        self.con.execute(f"DROP TABLE IF EXISTS {self.lines}")


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def scan_file(path: Path, check_utf8: bool) -> str:
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


_JSON_SPACE = b" \t\n\r"


def _json_ends(path: Path, block: int = 1 << 16) -> tuple[bytes, bytes, int]:
    """The first and the last byte of `path` that is not JSON whitespace (after a UTF-8 BOM), and the offset of
    the last; (b"", b"", -1) for a file of whitespace. Reads blocks from each end, not the whole file."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        head = f.read(3)
        offset = 3 if head == codecs.BOM_UTF8 else 0
        f.seek(offset)
        first = b""
        while not first:
            chunk = f.read(block)
            if not chunk:
                return b"", b"", -1
            stripped = chunk.lstrip(_JSON_SPACE)
            first = stripped[:1]
        end = size
        while end > offset:
            start = max(offset, end - block)
            f.seek(start)
            chunk = f.read(end - start).rstrip(_JSON_SPACE)
            if chunk:
                return first, chunk[-1:], start + len(chunk) - 1
            end = start
    return first, b"", -1  # not reached: `first` is a byte before the end


def _line_at(path: Path, offset: int) -> int:
    """The 1-based line of the byte at `offset` (LF counted), reading the file in blocks."""
    line, done = 1, 0
    with open(path, "rb") as f:
        while done < offset:
            chunk = f.read(min(1 << 20, offset - done))
            if not chunk:
                break
            line += chunk.count(b"\n")
            done += len(chunk)
    return line


def _locate_json_error(path: Path, fmt: str) -> tuple[int | None, str]:
    """(line, reason) of the first JSON syntax error, for a file DuckDB could not read. No values in `reason`."""
    text = path.read_text(encoding="utf-8-sig")  # DuckDB skips a BOM, and so does this
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
