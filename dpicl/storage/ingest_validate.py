"""Validating a read file's records (`dpicl.storage.ingest_read.SourceFile`) into a TEMP stage table
(row_no, <role>...) of text values: the mapped fields exist and have the right type, required ones are filled in,
ids are unique; raw labels become label names; `skip_empty` and `subset` leave rows out. A refusal names the row
and field (`SourceFile.error`), never a value from the file: records are private text.
"""

from __future__ import annotations

import re

from dpicl.storage.ingest_options import SubsetSpec
from dpicl.storage.ingest_read import SourceFile, sql_string

# JSON types (as `json_type` names them) accepted per role; everything else is the wrong type.
_TEXT_JSON_TYPES = ("VARCHAR",)
_ID_JSON_TYPES = ("VARCHAR", "BIGINT", "UBIGINT", "DOUBLE")
_NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE")
_LABEL_ROLES = ("output", "reference")  # the fields `labels` maps
_TYPE_WORDS = {"BIGINT": "a number", "UBIGINT": "a number", "DOUBLE": "a number", "BOOLEAN": "true/false",
               "ARRAY": "a list", "OBJECT": "an object"}


def stage_records(source: SourceFile, roles: dict[str, tuple[str | None, bool]], skip_empty: bool = False
                  ) -> str:
    """Validate the mapped fields and build the source's TEMP stage table (row_no, <role>...) of text values, whose
    name it returns; with labels, map the output and reference fields' raw values to label names."""
    labels = source.options.labels
    selects = ["_dpicl_row AS row_no"]
    for role, (column, _) in roles.items():
        if column is not None and column not in source.columns:
            raise source.error(f"not found in the file; {_column_names(source)}; map the field with "
                               f"--field {role}=<column> (the name must match exactly, case included)",
                               field=column, role=role)
        selects += _select(source, role, column, numbers_ok=labels is not None and role in _LABEL_ROLES)
    source.con.execute(f"CREATE TEMP TABLE {source.stage_table} AS SELECT {', '.join(selects)} "
                       f"FROM {source.src} ORDER BY _dpicl_row")
    if skip_empty:
        text_roles = [r for r in ("input", "output") if r in roles and roles[r][0] is not None]
        empty = " OR ".join(f"(({r} IS NULL OR {r} = '') AND {r}_ok)" for r in text_roles)
        source.skipped = source.con.execute(f"DELETE FROM {source.stage_table} WHERE {empty}").fetchone()[0]
    for role, (column, required) in roles.items():
        if column is None:
            continue
        _check(source, role, column, required)
    if labels is not None:
        for role, (column, _) in roles.items():
            if column is not None and role in _LABEL_ROLES:
                _map_labels(source, role, column, labels)
    dup = source.con.execute(
        f"SELECT row_no, first FROM (SELECT row_no, min(row_no) OVER (PARTITION BY id) AS first "
        f"FROM {source.stage_table}) WHERE row_no > first ORDER BY row_no LIMIT 1").fetchone()
    if dup:
        label = {"csv": "data row", "tsv": "data row", "lines": "line"}.get(source.fmt, "row")
        raise source.error(f"repeats the id of {label} {dup[1]}; ids must be unique, fix or remove one of "
                           "the rows", row=dup[0], field=roles["id"][0], role="id")
    return source.stage_table


def _column_names(source: SourceFile) -> str:
    """The file's columns for an error: named only when the user chose the names (a pattern's groups, or
    column1.. of a CSV without header); names read from the file (JSON keys, header, Parquet) are data."""
    if source.fmt == "lines" or not source.options.header:
        return f"its columns are {', '.join(source.columns) or '(none)'}"
    see = {"jsonl": "`head -1 FILE`", "json": "`head -c 300 FILE`", "csv": "`head -1 FILE`",
           "tsv": "`head -1 FILE`"}.get(source.fmt, "the file's schema")
    return (f"it has {len(source.columns)} column(s), not listed here because their names come from the file "
            f"(see them with {see})")


def keep_subset(source: SourceFile, subset: SubsetSpec | None, what: str) -> None:
    """Delete the staged rows outside `subset` (`dpicl.storage.ingest`'s docstring; the key is the staged id, so a
    record's id and its bucket agree); IngestError if none is left. `what` names the dataset or backlog."""
    if subset is None:
        return
    bucket = "CAST('0x' || left(sha256(? || chr(0) || id), 16) AS UBIGINT) % ?"
    source.left_out = source.con.execute(
        f"DELETE FROM {source.stage_table} WHERE NOT list_contains(CAST(? AS UBIGINT[]), {bucket})",
        [list(subset.keep), subset.salt, subset.buckets]).fetchone()[0]
    if source.con.execute(f"SELECT count(*) FROM {source.stage_table}").fetchone()[0] == 0:
        raise source.error(f"the subset (keep {list(subset.keep)} of {subset.buckets} buckets) leaves no rows "
                           f"of {what}; check subset.buckets and subset.keep (and subset.salt)")


def _select(source: SourceFile, role: str, column: str | None, numbers_ok: bool = False) -> list[str]:
    """SQL for the role's text value, whether its type is acceptable, and the type's name.

    Ids, and with `numbers_ok` (raw labels) other fields too, may be numbers: they become their text."""
    numbers_ok = numbers_ok or role == "id"
    if column is None:
        text = "CAST(_dpicl_row AS VARCHAR)" if role == "id" else "NULL::VARCHAR"
        return [f"{text} AS {role}", f"TRUE AS {role}_ok", f"NULL::VARCHAR AS {role}_type"]
    dtype = source.columns[column]
    if dtype == "JSON":
        path = sql_string('$."' + column.replace('"', '\\"') + '"')
        jtype = f"json_type(json_extract(obj, {path}))"
        allowed = ", ".join(sql_string(t) for t in (_ID_JSON_TYPES if numbers_ok else _TEXT_JSON_TYPES))
        return [f"json_extract_string(obj, {path}) AS {role}",
                f"({jtype} IS NULL OR {jtype} IN ('NULL', {allowed})) AS {role}_ok",
                f"{jtype} AS {role}_type"]
    ident = '"' + column.replace('"', '""') + '"'
    if dtype == "VARCHAR" or (numbers_ok and (dtype in _NUMERIC_TYPES or dtype.startswith("DECIMAL"))):
        text, ok = f"CAST({ident} AS VARCHAR)", "TRUE"
    else:  # the wrong type wherever it holds a value
        text, ok = "NULL::VARCHAR", f"{ident} IS NULL"
    return [f"{text} AS {role}", f"({ok}) AS {role}_ok", f"{sql_string(dtype)} AS {role}_type"]


def _check(source: SourceFile, role: str, column: str, required: bool) -> None:
    bad = source.con.execute(f"SELECT row_no, {role}_type FROM {source.stage_table} WHERE NOT {role}_ok "
                             "ORDER BY row_no LIMIT 1").fetchone()
    if bad:
        found = _type_words(bad[1])
        numbers_ok = role == "id" or (source.options.labels is not None and role in _LABEL_ROLES)
        allowed = "text or a number" if numbers_ok else "text"
        raise source.error(f"is {found}, but it must be {allowed}; write it as a string, "
                           "or fix or remove the row", row=bad[0], field=column, role=role)
    checks = [(f"{role} IS NULL", "has no value; fill it in or remove the row")] if required else []
    if role in ("id", "input"):
        checks.append((f"{role} = ''", "is empty; fill it in or remove the row"))
    for condition, problem in checks:
        bad = source.con.execute(f"SELECT row_no FROM {source.stage_table} WHERE {condition} "
                                 "ORDER BY row_no LIMIT 1").fetchone()
        if bad:
            raise source.error(problem, row=bad[0], field=column, role=role)


def _map_labels(source: SourceFile, role: str, column: str, labels: dict[str, str]) -> None:
    """Replace the raw label values of `role` by their names; a value `labels` does not list is an error
    that names the row, the field and the configured raw values (public), never the value itself."""
    pairs = ", ".join("(?, ?)" for _ in labels)
    params = [item for pair in labels.items() for item in pair]
    mapping = f"(VALUES {pairs}) AS m(raw, label)"
    bad = source.con.execute(
        f"SELECT s.row_no FROM {source.stage_table} s WHERE s.{role} IS NOT NULL AND NOT EXISTS "
        f"(SELECT 1 FROM {mapping} WHERE m.raw = s.{role}) ORDER BY s.row_no LIMIT 1", params).fetchone()
    if bad:
        known = ", ".join(f"'{raw}'" for raw in labels)
        raise source.error(f"is not one of the raw label values in `labels` ({known}); add its value to "
                           "`labels`, or fix or remove the row", row=bad[0], field=column, role=role)
    source.con.execute(f"UPDATE {source.stage_table} AS s SET {role} = m.label FROM {mapping} "
                       f"WHERE s.{role} = m.raw", params)


def _type_words(dtype: str) -> str:
    """A wrong type for an error: a JSON type in words, or only the leading name of a SQL type (the text of a
    STRUCT, MAP or ENUM type holds field names or values from the file)."""
    if dtype in _TYPE_WORDS:
        return _TYPE_WORDS[dtype]
    if dtype.endswith("]"):
        return "a list"
    base = re.match(r"[A-Z][A-Z0-9_ ]*", dtype)
    return f"of type {base.group().strip()}" if base else "of another type"
