"""`dpicl rerun`: re-run a past run's stages from a stage on its stored artifacts (`dpicl.flows.rerun`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dpicl.cli.choices import MethodName, Stage
from dpicl.cli.common import DbOption
from dpicl.cli.console import console, err_console
from dpicl.cli.errors import fail


def _open_read_only(db: str | Path):
    """A read-only connection; a database from before migration 0003 (no run_sources) is read as it is, since a
    dry run must not migrate (it changes nothing)."""
    import duckdb

    from dpicl.storage.db import SchemaVersionError, connect, is_file_target

    try:
        return connect(db, read_only=True)
    except SchemaVersionError:
        if not is_file_target(db):
            raise
        return duckdb.connect(str(db), read_only=True)


def describe(report: dict[str, Any]) -> str:
    """The dry run's summary of `analyse`'s report (dpicl/tasks/rerun.py): counts and ε only, never text."""
    from dpicl.privacy.accounting.events import event_from_json

    c = report["counts"]
    charged = c["fresh"] + c["reused"]
    lines = [
        f"rerun of run {report['source_run']} ({report['source_method']}) from stage {report['from_stage']} with "
        f"method {report['method']}",
        f"  backlog {report['backlog']!r}: {len(report['queries'])} queries in the rerun"
        + (f"; {report['not_in_source']} without stored artifacts of that run are left out"
           if report["not_in_source"] else ""),
        f"  served from stored releases (free): {c['served']}",
        f"  post-processed from stored DP aggregates (free): {c['post-processed']}",
        f"  new releases (charged): {charged} — {c['fresh']} on subsamples no release has used "
        f"(planned event, amplified), {c['reused']} on subsamples already used (charged without amplification)"
        + (f", plus {report['top_up_entries']} top-up entries re-charging earlier uses of those subsamples "
           "without amplification" if report["top_up_entries"] else ""),
    ]
    def shown(event_json: str) -> str:
        event = event_from_json(event_json).to_dict()
        return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in event.items())

    if c["fresh"]:
        lines.append(f"  per-query event, unused subsamples: {shown(report['event_json'])}")
    if c["reused"]:
        lines.append(f"  per-query event, used subsamples: {shown(report['reused_event_json'])}")
    lines.append(
        f"  budget of {report['dataset']!r}: ε {report['epsilon_before']:.4f} of {report['epsilon_limit']:g} spent; "
        f"this rerun would charge ε {report['epsilon_charged']:.4f} in total (→ {report['epsilon_after']:.4f}): "
        + ("the budget can pay" if report["payable"] else
           (f"the budget CANNOT pay; it can pay for the first {report['affordable_queries']} "
            f"(--max-queries {report['affordable_queries']})" if report["affordable_queries"] else
            "the budget CANNOT pay for any of them"))
    )
    if report["free_from_release"]:
        lines.append(f"  {free_instead(report)}")
    return "\n".join(lines)


def free_instead(report: dict[str, Any]) -> str:
    return (f"no setting that shapes the DP aggregate differs from the run's: `--from release` answers "
            f"{report['free_from_release']} of these {len(report['queries'])} queries (those whose aggregates the "
            "run stored) with these settings for free; this rerun draws new aggregates, charged")


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The report without keys or per-query maps: what a dry run prints as JSON (ids and numbers only)."""
    keep = ("source_run", "root_run", "from_stage", "method", "source_method", "dataset", "backlog", "not_in_source",
            "counts", "top_up_entries", "event_json", "reused_event_json", "epsilon_limit", "delta",
            "epsilon_before", "epsilon_after", "epsilon_charged", "payable", "affordable_queries",
            "epsilon_top_ups", "free_from_release")
    return {**{k: report[k] for k in keep}, "queries": len(report["queries"]),
            "per_query": {q: report["category"][q] for q in report["queries"]}}


def rerun(
    run_id: Annotated[str, typer.Argument(help="id of the run to re-run (the runs table; the open-run task's log)")],
    from_stage: Annotated[Stage, typer.Option(
        "--from", help="aggregate: a new DP aggregate from the stored teacher outputs/embeddings (a new release, "
                       "charged); release: post-processing of the run's stored DP aggregates (free)")
    ] = Stage.aggregate,
    config: Annotated[Optional[str], typer.Option(
        help="config file or bundled config name (default: the run's own config)")] = None,
    method: Annotated[Optional[MethodName], typer.Option(
        help="switch the aggregation method (esa, rnm, ksa-jem, ksa-ptr, sga, ksa-public); keeps teachers, shots "
             "and sampling_rate")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", help="KEY=VALUE config override, dotted key (repeat), e.g. --set method.planned_queries=50")] = None,
    max_queries: Annotated[Optional[int], typer.Option(
        help="re-run at most the first N queries of the run (in backlog order)")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="print what would be served (free) and released (charged), and the ε; change nothing")]
    = False,
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (counts and ε; no text).")] = False,
) -> None:
    """Re-run a past run from a stage with another method or parameters, reusing its stored teacher outputs and
    embeddings (no LLM call before that stage). Serving stored releases and post-processing stored DP aggregates is
    free; every new draw from private artifacts is a new release, charged to the ledger like any run."""
    from dpicl.storage.db import default_db_path, is_file_target
    from dpicl.tasks.rerun import analyse, refusal

    from_stage, method = from_stage.value, method.value if method else None

    path = db or default_db_path()
    if is_file_target(path) and not Path(path).is_file():
        fail(f"no dpicl database at {path}; pass --db FILE (or set DPICL_DB)")
    con = _open_read_only(path)
    try:
        report = analyse(con, run_id, from_stage, config=config, method=method, overrides=set_,
                         max_queries=max_queries)
    finally:
        con.close()
    if dry_run:
        if as_json:
            print(json.dumps({"dry_run": True, **summary(report)}))
        else:
            console.print(describe(report), soft_wrap=True)
            console.print("dry run: nothing was changed")
        return
    if not report["payable"]:
        console.print(describe(report), soft_wrap=True)
        fail(refusal(report))
    if report["free_from_release"]:
        err_console.print(f"warning: {free_instead(report)}", markup=False)
    from dpicl.flows.rerun import rerun as rerun_flow

    result = rerun_flow(run_id=run_id, from_stage=from_stage, config=config, method=method, overrides=set_,
                        max_queries=max_queries, db=str(path))
    if as_json:
        print(json.dumps(result))
        return
    b = result["budget"]
    console.print(f"rerun {result['run_id']} of run {result['source_run']} ({result['method']}, from "
                  f"{result['from_stage']}): answered {result['answered']}, refused {result['refused_budget']} "
                  f"(budget) in backlog {result['backlog']!r}; ε spent {b['epsilon_spent']:.4f} of "
                  f"{b['epsilon_limit']:g}", soft_wrap=True)
    console.print(f"its releases: dpicl releases '{result['backlog']}'", soft_wrap=True)
