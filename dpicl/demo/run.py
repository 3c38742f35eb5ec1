"""`dpicl demo`: the whole product on bundled, fictional data.

Ingests ~300 private support tickets (10 carry planted canaries: unique fake identifiers), a public set and
a backlog of 24 queries; opens a budget planned for 20 queries; answers the backlog with ESA on SmolLM2 through
the `answer_backlog` Prefect flow; then compares against the non-private baseline a careless deployment would
use (each query answered 4-shot from its most similar private tickets) by counting canaries in both.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

DEMO_EPSILON = 4.0
DEMO_DELTA = 1e-4
NONPRIVATE_SHOTS = 4


def data_file(name: str) -> Path:
    return Path(str(resources.files("dpicl.demo") / "data" / name))


def canaries() -> list[str]:
    return json.loads(data_file("canaries.json").read_text(encoding="utf-8"))


def canary_hits(answers: list[str], planted: list[str]) -> int:
    """How many answers contain at least one planted canary (case-insensitive)."""
    lowered = [c.lower() for c in planted]
    return sum(any(c in a.lower() for c in lowered) for a in answers)


def nonprivate_answers(cfg, con, query_ids: list[str]) -> list[str]:
    """The leaky baseline: greedy 4-shot ICL with each query's most similar private demonstrations."""
    from dpicl.inference.base import GenerationParams
    from dpicl.prompts import render_prompt
    from dpicl.storage import get_queries, load_records
    from dpicl.tasks import context

    records = load_records(con, cfg.private_dataset)
    queries = get_queries(con, cfg.backlog, query_ids)
    encoder = context.encoder(cfg)
    demo_vectors = encoder.encode([r.input for r in records])
    query_vectors = encoder.encode([queries[q].input for q in query_ids])
    nearest = np.argsort(-(query_vectors @ demo_vectors.T), axis=1)[:, :NONPRIVATE_SHOTS]
    prompts = [
        render_prompt(cfg.task, [(records[i].input, records[i].output) for i in reversed(row)], queries[q].input)
        for q, row in zip(query_ids, nearest)
    ]
    gen = cfg.generation
    params = GenerationParams(max_new_tokens=gen.max_new_tokens, stop=tuple(gen.stop))
    return context.backend(cfg).generate(prompts, params, progress=True)


def run_demo(db: Path, *, console: Console, as_json: bool = False) -> dict:
    from dpicl.config import load_config
    from dpicl.flows.answer_backlog import answer_backlog
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import ingest_source
    from dpicl.storage.ledger import open_budget, stored_releases

    cfg = load_config("demo")
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    con = connect(db)
    try:
        for source in cfg.data:
            ingest_source(con, source)
        open_budget(con, cfg.private_dataset, DEMO_EPSILON, DEMO_DELTA)
    finally:
        con.close()
    console.print(f"[bold]dpicl demo[/]: budget ε={DEMO_EPSILON:g}, δ={DEMO_DELTA:g} on {cfg.private_dataset!r}; "
                  f"answering {cfg.backlog!r} with ESA ({cfg.method.teachers} teachers × {cfg.method.shots} shots)")

    result = answer_backlog(config="demo", db=str(db))

    con = connect(db)
    try:
        released = stored_releases(con, cfg.backlog)
        all_ids = [r[0] for r in con.execute(
            "SELECT query_id FROM queries WHERE backlog = ? ORDER BY row_no", [cfg.backlog]).fetchall()]
        console.print(f"non-private baseline: {NONPRIVATE_SHOTS}-shot answers from the most similar private tickets")
        baseline = nonprivate_answers(cfg, con, all_ids)
    finally:
        con.close()

    table = Table(title="released answers (differentially private)")
    for column in ("query", "ε cost", "answer"):
        table.add_column(column)
    for r in released:
        table.add_row(r["query_id"], f"{r['epsilon_cost']:.4f}", r["answer"])
    console.print(table)
    console.print("ε cost = how much the query raised the budget's recorded ε (the accountant's upper bound over "
                  "all releases). The ledger computes that bound ahead for a range of releases (docs/PRIVACY.md, "
                  "'The composed state'): the release that computes it shows the step, those it covers show 0.")

    budget = result["budget"]
    planted = canaries()
    summary = {
        "answered": result["answered"],
        "refused": result["refused_budget"],
        "epsilon_spent": budget["epsilon_spent"],
        "epsilon_limit": budget["epsilon_limit"],
        "delta": budget["delta"],
        "canary_hits_nonprivate": canary_hits(baseline, planted),
        "canary_hits_dp": canary_hits([r["answer"] for r in released], planted),
        "nonprivate_answers": len(baseline),
        "queries_still_payable": budget["queries_still_payable"],
    }
    console.print(
        f"budget: ε spent {summary['epsilon_spent']:.4f} of {summary['epsilon_limit']:g} (δ={summary['delta']:g}); "
        f"{summary['answered']} answered, {summary['refused']} refused because the budget could not pay"
    )
    console.print(
        f"canaries ({len(planted)} planted in the private tickets): found in "
        f"{summary['canary_hits_nonprivate']} of {len(baseline)} non-private answers, "
        f"in {summary['canary_hits_dp']} of {len(released)} DP answers"
    )
    if as_json:
        print(json.dumps(summary))
    return summary
