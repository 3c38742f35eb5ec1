"""What an ingest is asked to do, checked before its file is opened (`dpicl.storage.ingest` has the rules).

The file formats; the field mapping (`FieldMap`) and the read options (`ReadOptions`: format, pattern, header,
labels, subset); the subset's keyed hash (`SubsetSpec`, `subset_bucket`); the report of a finished ingest; and
`IngestError`, how every refusal is said: where (file, line, row, field) and what to do, never a value from the
file. Everything here is public configuration, so errors may quote it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
    unchanged: bool = False  # the dataset was already ingested from this content with these options: nothing done


@dataclass(frozen=True)
class SubsetSpec:
    """Which part of a file to ingest (`dpicl.storage.ingest`'s docstring); `dpicl.config.Subset` or a mapping
    converts with `of`."""

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
    """The bucket of a record id (reference implementation of the SQL in
    `dpicl.storage.ingest_validate.keep_subset`)."""
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


@dataclass(frozen=True)
class ReadOptions:
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
              subset=None) -> ReadOptions:
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
