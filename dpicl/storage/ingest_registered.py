"""An ingest against what the database already holds: a replace that would detach privacy accounting from its
data, and data that repeats a registered dataset (the same file, or records with the same content). The rules are
in `dpicl.storage.ingest`'s docstring; messages name datasets and counts only, never a value."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from dpicl.storage.ingest_options import IngestError


def check_replaceable(con: duckdb.DuckDBPyConnection, path: Path, name: str, old_kind: str, kind: str) -> None:
    """Refuse a replace that would detach privacy accounting from the data it was opened for, or leave runs' cached
    public prompts and answers standing for public records that are gone."""
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
    if old_kind == "public":
        runs = con.execute("SELECT count(*) FROM runs WHERE config ->> 'public_dataset' = ?", [name]).fetchone()[0]
        if runs:  # their public prompts and answers are cached under the dataset's name, not its content
            raise IngestError(path, f"public dataset '{name}' was used by {runs} run(s), whose public prompts and "
                                    "answers are cached under its name: later runs would be served those again "
                                    "instead of the new records'; ingest the new data under another name and set "
                                    "public_dataset to it")


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


def registered_repeats(con: duckdb.DuckDBPyConnection, name: str, kind: str, sha256: str, recorded: dict,
                        stage: str) -> tuple[dict[str, tuple[str, bool, int]], int]:
    """The other datasets whose content the staged one repeats, as {name: (kind, same file, records in common)},
    and how many staged records repeat any of them. A private dataset is compared with the private and public
    ones, a public dataset with the private ones (public data may repeat public data)."""
    kinds = ["private", "public"] if kind == "private" else ["private"]
    repeated: dict[str, tuple[str, bool, int]] = {}
    same_file = con.execute("SELECT name, kind, field_map FROM datasets WHERE source_sha256 = ? AND name <> ? "
                            "AND kind = ANY(?) ORDER BY name", [sha256, name, kinds]).fetchall()
    for other, other_kind, field_map in same_file:
        if not _disjoint_parts(recorded, json.loads(field_map)):
            repeated[other] = (other_kind, True, 0)
    # the other datasets' records whose content any staged record has (ids play no part)
    common = (f"SELECT s.row_no, d.name, d.kind FROM {stage} s JOIN record_hashes h "
              "ON h.content_sha256 = s.content_sha256 JOIN datasets d ON d.name = h.dataset "
              "WHERE d.name <> ? AND d.kind = ANY(?)")
    per_dataset = con.execute(f"SELECT name, kind, count(DISTINCT row_no) FROM ({common}) c GROUP BY name, kind",
                              [name, kinds]).fetchall()
    for other, other_kind, count in per_dataset:
        repeated[other] = (other_kind, other in repeated, count)
    in_common = con.execute(f"SELECT count(DISTINCT row_no) FROM ({common}) c", [name, kinds]).fetchone()[0]
    return repeated, in_common


def repeats_message(name: str, kind: str, repeated: dict[str, tuple[str, bool, int]], in_common: int,
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
