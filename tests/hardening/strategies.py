"""Hypothesis strategies of malformed input: names, budget values, files for every reader, configs.

Every value drawn here must be refused; each is a well-formed base with one corruption, so a refusal is due to
the corruption (tests/hardening/test_bad_input.py checks that the uncorrupted bases are accepted)."""

from __future__ import annotations

import json

import yaml
from hypothesis import strategies as st

BASE = [{"id": f"n{i}", "input": f"new ticket {i}", "output": f"new summary {i}"} for i in range(5)]
PATTERN = r"(?P<id>\w+)\t(?P<input>[^\t]+)\t(?P<output>[^\t]+)"

# --- names -------------------------------------------------------------------------------------------------------
_REFUSED_CHARS = st.characters(categories=["Cc", "Cf", "Zl", "Zp"])
BAD_NAMES = st.one_of(
    st.sampled_from(["", " ", "\n", "\r\n", "\t", "\x00", "a\x00b", "data\nset", " padded", "padded ", "\x1b[31mred",
                     "\u202eevil", "zero\u200bwidth", "\udcff\udcfe", "x" * 201, "line\u2028sep", "..\x00/etc"]),
    st.tuples(st.text(max_size=8), _REFUSED_CHARS, st.text(max_size=8)).map("".join),
    st.text(alphabet=" \t\n\r\x0b\x0c\x85\u00a0\u3000", max_size=6),
).filter(lambda name: not name.startswith("-"))  # a leading dash would be parsed as an option

# --- budget values -------------------------------------------------------------------------------------------------
BAD_EPSILONS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "-0.0", "1e309", "1e300", "100.0001"]),
    st.floats(max_value=0).map(repr),
    st.floats(min_value=100, exclude_min=True).map(repr),
)
BAD_DELTAS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "0", "1", "2", "-1e-5", "1e-320", "5e-324", "1e-10", "1e-11", "-0.0"]),
    st.floats(max_value=1e-10).map(repr),
    st.floats(min_value=1).map(repr),
)

# --- files -------------------------------------------------------------------------------------------------------
_WRONG = {"id": [True, None, [], {}, ["x"], {"a": 1}, ""],
          "input": [42, 1.5, True, None, [], {}, ["x"], ""],
          "output": [42, 1.5, False, None, [], {"a": "b"}]}
_BAD_UTF8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\x80"]


def _insert(draw, data: bytes, piece: bytes) -> bytes:
    at = draw(st.integers(0, len(data)))
    return data[:at] + piece + data[at:]


@st.composite
def bad_records(draw) -> list:
    """The base records with one corruption in their values (wrong type, missing, empty, duplicate id, not an
    object)."""
    rows = [dict(r) for r in BASE]
    i = draw(st.integers(0, len(rows) - 1))
    kind = draw(st.sampled_from(["missing", "wrong", "duplicate", "not_object"]))
    if kind == "missing":
        del rows[i][draw(st.sampled_from(["id", "input", "output"]))]
    elif kind == "wrong":
        field = draw(st.sampled_from(sorted(_WRONG)))
        rows[i][field] = draw(st.sampled_from(_WRONG[field]))
    elif kind == "duplicate":
        j = draw(st.integers(0, len(rows) - 1).filter(lambda j: j != i))
        rows[j]["id"] = rows[i]["id"]
    else:
        rows[i] = draw(st.sampled_from([[1, 2], "text", 3, None, True, []]))
    return rows


@st.composite
def bad_json_file(draw, lines: bool) -> bytes:
    """A JSON array (`lines=False`) or JSON Lines file with one corruption: in the values, the syntax or the
    encoding, or no records at all."""
    kind = draw(st.sampled_from(["values", "syntax", "encoding", "empty"]))
    if kind == "empty":
        return draw(st.sampled_from([b"\n\n", b"   ", b"\xef\xbb\xbf", b"\x00", b"[]" if not lines else b"\n"]))
    rows = draw(bad_records()) if kind == "values" else BASE
    text = ("".join(json.dumps(r) + "\n" for r in rows) if lines else json.dumps(rows, indent=1)).encode()
    if kind == "encoding":
        return _insert(draw, text, draw(st.sampled_from(_BAD_UTF8)))
    if kind == "syntax":  # outside strings, where any of these breaks the syntax
        if not lines:  # the array cut short: never closed
            return text[:draw(st.integers(1, len(text.rstrip()) - 1))]
        rows_text = text.split(b"\n")
        i = draw(st.integers(0, len(BASE) - 1))
        if draw(st.booleans()):  # the line cut short: the object is never closed
            rows_text[i] = rows_text[i][:draw(st.integers(1, len(rows_text[i]) - 1))]
        else:
            rows_text[i] = draw(st.sampled_from([b"{", b"}", b'"', b",", b"[", b"\\", b"nul"])) + rows_text[i]
        return b"\n".join(rows_text)
    return text


def _csv(rows: list[list[str]], delim: str) -> bytes:
    return "".join(delim.join(f'"{v}"' if '"' not in v else v for v in row) + "\n" for row in rows).encode()


@st.composite
def bad_csv_file(draw, delim: str = ",") -> bytes:
    """A CSV/TSV file with one corruption: a missing or twice-named column, an empty id or input, a duplicate id,
    a row with the wrong number of fields or an unclosed quote, bad UTF-8, a first-line field over Python's csv
    limit, or no data rows."""
    header = ["id", "input", "output"]
    rows = [[r["id"], r["input"], r["output"]] for r in BASE]
    kind = draw(st.sampled_from(["rename", "twice", "empty", "duplicate", "fields", "quote", "encoding", "huge",
                                 "no_rows"]))
    i = draw(st.integers(0, len(rows) - 1))
    if kind == "rename":
        header[draw(st.integers(0, 2))] = draw(st.sampled_from(["ID", "text", "", "in put", "outputs"]))
    elif kind == "twice":
        header[2] = header[draw(st.integers(0, 1))]
    elif kind == "empty":
        rows[i][draw(st.integers(0, 1))] = ""
    elif kind == "duplicate":
        rows[(i + 1) % len(rows)][0] = rows[i][0]
    elif kind == "fields":
        rows[i] = rows[i][:draw(st.integers(1, 2))] if draw(st.booleans()) else [*rows[i], "extra"]
    elif kind == "huge":
        header[draw(st.integers(0, 2))] = "h" * draw(st.integers(131_073, 140_000))
    elif kind == "no_rows":
        rows = []
    data = _csv([header, *rows], delim)
    if kind == "quote":  # the row gains a field whose quote is never closed
        line = data.split(b"\n")
        line[i + 1] += delim.encode() + b'"unclosed'
        data = b"\n".join(line)
    if kind == "encoding":
        data = _insert(draw, data, draw(st.sampled_from(_BAD_UTF8)))
    return data


@st.composite
def bad_parquet(draw) -> tuple[str, bytes | None]:
    """(select, None): a DuckDB query whose rows make a Parquet file with one corruption (wrong type, missing
    column, null or empty value, duplicate id, no rows); or (select, bytes): a damaged file (random bytes, or
    `truncate:N`: the select's valid file cut short at N modulo its size)."""
    cols = {"id": "'n' || i", "input": "'new ticket ' || i", "output": "'new summary ' || i"}
    kind = draw(st.sampled_from(["type", "missing", "null", "empty", "duplicate", "no_rows", "damaged"]))
    field = draw(st.sampled_from(sorted(cols)))
    if kind == "type":
        cols[field] = draw(st.sampled_from(
            ["[i]", "{'a': i}", "i = 2", "DATE '2024-01-01' + i::INT"] + (["i * 1.5", "i"] if field != "id" else [])))
    elif kind == "missing":
        del cols[field]
    elif kind == "null":
        cols[field] = f"CASE WHEN i = 2 THEN NULL ELSE {cols[field]} END"
    elif kind == "empty":
        field = draw(st.sampled_from(["id", "input"]))
        cols[field] = f"CASE WHEN i = 3 THEN '' ELSE {cols[field]} END"
    elif kind == "duplicate":
        cols["id"] = "'n' || (i % 3)"
    select = "SELECT " + ", ".join(f"{sql} AS {name}" for name, sql in cols.items()) + " FROM range(5) t(i)"
    if kind == "no_rows":
        select += " WHERE false"
    if kind != "damaged":
        return select, None
    if draw(st.booleans()):  # random bytes: no Parquet magic at both ends
        return select, draw(st.binary(min_size=1, max_size=400))
    return select, b"truncate:" + str(draw(st.integers(0, 10**6))).encode()  # a valid file cut short (no footer)


@st.composite
def bad_lines(draw) -> tuple[bytes, str]:
    """(file, pattern) for the 'lines' format with one corruption: a blank line in the middle, a line that does
    not match, a pattern that does not compile, names no group or uses what RE2 lacks."""
    text = "".join(f"{r['id']}\t{r['input']}\t{r['output']}\n" for r in BASE)
    kind = draw(st.sampled_from(["blank", "nomatch", "badpattern"]))
    if kind == "badpattern":
        return text.encode(), draw(st.sampled_from(
            ["(?P<id>", r"\w+\t.+", r"(?P<id>\w+)\t(?P<input>[^\t]+)\t(?P<output>[^\t]+)(?<=x)",
             r"(?P<id>\w+)\t(?P<input>[^\t]+)\t(?P<output>(?P=id))", "[", "(?P<1id>x)"]))
    lines = text.split("\n")
    i = draw(st.integers(0, len(BASE) - 2))
    lines.insert(i + 1, "" if kind == "blank" else draw(st.sampled_from(["no tabs here", "a\tb", "\t\t"])))
    return "\n".join(lines).encode(), PATTERN


# --- configs -------------------------------------------------------------------------------------------------------
_SCALARS = st.one_of(st.integers(), st.floats(), st.text(max_size=20), st.booleans())
BAD_CONFIGS = st.one_of(
    st.sampled_from([b"", b"   \n", b"~", b"null", b"42", b"just text", b"true", b"a: [1, 2", b"key: 'open",
                     b"\t- tab", b"a: b: c", b"{a: 1", b"- a\nb: 1", b"name: a\x00b", b"name: \xff\n",
                     b"[" * 3000 + b"]" * 3000, b"&a [*a]", b"!!python/object:os.system ls"]),
    st.lists(_SCALARS, max_size=4).map(lambda v: yaml.safe_dump(v).encode()),
    _SCALARS.map(lambda v: yaml.safe_dump(v).encode()),
    st.dictionaries(st.text(max_size=10), _SCALARS, max_size=4).map(lambda v: yaml.safe_dump(v).encode()),
    st.sampled_from([{"data": 5}, {"data": "text"}, {"data": [{"path": 5}]}, {"data": {"a": 1}},
                     {"name": "x", "method": {"name": "nonexistent"}}, {"unknown_key": 1},
                     {"data": [{"name": "bad\nname", "kind": "private", "path": "x.jsonl"}]},
                     {"data": [{"name": "x", "kind": "private", "path": "../../../../../../etc/passwd"}]},
                     {"data": [{"name": "x", "kind": "private", "path": "/dev/zero"}]},
                     {"data": [{"name": "", "kind": "queries", "path": "q.jsonl"}]}]).map(
        lambda v: yaml.safe_dump(v).encode()),
)
