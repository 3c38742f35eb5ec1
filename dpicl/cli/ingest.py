"""`dpicl ingest`: a private or public dataset, or a backlog of queries, from a file or a config's `data:`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dpicl.cli.choices import Format, Kind, TaskType
from dpicl.cli.common import DbOption, check_names, writing
from dpicl.cli.console import console
from dpicl.cli.errors import fail


def _parse_fields(pairs: list[str]) -> dict[str, str]:
    fields = {}
    for pair in pairs:
        name, sep, column = pair.partition("=")
        if not sep or name not in {"id", "input", "output", "reference"}:
            fail(f"--field takes ROLE=COLUMN with ROLE one of id, input, output, reference (got {pair!r})")
        fields[name] = column
    return fields


def _is_config(path: Path) -> bool:
    """A YAML file, or the name of a bundled config that is not also a file here."""
    from dpicl.config import CONFIG_DIR

    return path.suffix.lower() in (".yaml", ".yml") or (
        not path.exists() and path.suffix == "" and (CONFIG_DIR / f"{path}.yaml").is_file())


def ingest(
    path: Annotated[Optional[Path], typer.Argument(
        help="a data file (JSON, JSONL, CSV, TSV, Parquet, lines) with --name, or a config (.yaml, or a bundled "
             "config's name): every file under its `data:`")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="dataset or backlog name")] = None,
    kind: Annotated[Kind, typer.Option("--as", help="what the file is")] = Kind.private,
    task: Annotated[TaskType, typer.Option(help="task type of a dataset")] = TaskType.summarization,
    field: Annotated[list[str], typer.Option("--field", help="ROLE=COLUMN, e.g. input=dialogue")] = [],  # noqa: B006
    config: Annotated[Optional[str], typer.Option(hidden=True, help="the config, as the argument")] = None,
    replace: Annotated[bool, typer.Option(
        "--replace",
        help="replace a dataset of the same name (never one with spend, nor a public one that runs used)")] = False,
    format: Annotated[Optional[Format], typer.Option(
        "--format", help="the file's format (default: from the file extension)")] = None,
    pattern: Annotated[Optional[str], typer.Option(
        help="with --format lines: a regular expression whose named groups are the columns")] = None,
    header: Annotated[bool, typer.Option(help="CSV/TSV: the first row names the columns")] = True,
    label: Annotated[list[str], typer.Option(
        "--label", help="RAW=NAME: label value in the file -> label name, e.g. 0=negative")] = [],  # noqa: B006
    skip_empty: Annotated[bool, typer.Option(
        "--skip-empty", help="leave out rows with an empty input/output")] = False,
    subset: Annotated[str | None, typer.Option(
        "--subset", help="BUCKETS:KEEP[,KEEP...]: only the rows hashed into these buckets, e.g. 3:0,1 "
                         "(and 3:2 for the disjoint rest)")] = None,
    subset_salt: Annotated[str | None, typer.Option(help="salt of the --subset hash")] = None,
    distinct_from_existing: Annotated[bool, typer.Option(
        "--distinct-from-existing", help="the file repeats registered data but is about a different population "
                                         "(recorded with the dataset)")] = False,
    db: DbOption = None,
) -> None:
    """Ingest a private or public dataset, or a backlog of queries; all rows or none. Data that repeats a
    registered private dataset (or, ingested as private, a public one) is refused unless --distinct-from-existing."""
    from dpicl.config import DataSource, load_config
    from dpicl.storage.ingest import ingest_source
    from dpicl.storage.queries import backlog_counts

    if config is None and name is None and path is not None and _is_config(path):
        config, path = str(path), None
    if config is not None:
        sources = load_config(config).data
        if not sources:
            fail(f"config {config!r} lists no files under `data:`")
        if distinct_from_existing:
            fail("--distinct-from-existing applies to one file; with a config, set distinct_from_existing: true "
                 "on that file's entry under `data:`")
    else:
        kind, task, format = kind.value, task.value, format.value if format else None
        if path is None or name is None:
            fail("give a data file and --name, or a config whose `data:` lists the files")
        check_names((name, "dataset name" if kind != "queries" else "backlog name"))
        if distinct_from_existing and kind == "queries":
            fail("--distinct-from-existing applies to datasets; backlogs (--as queries) are not compared")
        fields = _parse_fields(field)
        if kind == "queries":
            fields.setdefault("output", None)
        labels = dict(pair.split("=", 1) for pair in label if "=" in pair)
        if len(labels) != len(label):
            fail("--label takes RAW=NAME, e.g. --label 0=negative --label 1=positive")
        part = None
        if subset is not None:
            buckets, sep, keep = subset.partition(":")
            try:
                part = {"buckets": int(buckets), "keep": [int(b) for b in keep.split(",")]}
            except ValueError:
                sep = ""
            if not sep:
                fail(f"--subset takes BUCKETS:KEEP[,KEEP...], e.g. --subset 3:0,1 (got {subset!r})")
            if subset_salt is not None:
                part["salt"] = subset_salt
        elif subset_salt is not None:
            fail("--subset-salt needs --subset")
        try:
            sources = [DataSource(name=name, path=str(path), kind=kind, task=task, fields=fields, format=format,
                                  pattern=pattern, header=header, labels=labels or None, skip_empty=skip_empty,
                                  subset=part, distinct_from_existing=distinct_from_existing)]
        except ValueError as err:  # pydantic's ValidationError, e.g. an unknown --format
            fail(f"invalid ingest options: {err}")
    with writing(db) as con:
        for source in sources:
            report = ingest_source(con, source, replace=replace)
            if report.unchanged:
                console.print(f"{source.name!r} is already ingested from this content with these options: unchanged")
                continue
            skipped = "already present or empty" if source.kind == "queries" else "empty"
            backlog = ""
            if source.kind == "queries":  # appended to what the backlog already held
                counts = backlog_counts(con, source.name)
                backlog = f"; the backlog now holds {sum(counts.values())} ({counts.get('pending', 0)} pending)"
            console.print(f"ingested {report.rows_added} rows into {source.name!r}"
                          + (f" ({report.rows_skipped} skipped: {skipped})" if report.rows_skipped else "")
                          + (f" ({report.rows_left_out_by_subset} outside the subset)"
                             if report.rows_left_out_by_subset else "") + backlog)
