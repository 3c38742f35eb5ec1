"""What one reservation costs as the ledger grows: Gaussian-only, exponential-only, mixed and many-event-type ledgers
at 10², 10³, 10⁴ and 10⁵ existing entries; the ε the reservations keep next to the ε recomputed from every entry.

    .venv/bin/python benchmarks/ledger.py [--entries 100 1000 10000 100000] [--reservations 30] [--json]

Each row builds a real DuckDB ledger with that many entries (and its composed state, as the reservations would have
left it), then times `reserve` — the call every release makes — one query at a time, charging one of the ledger's
events as a run does (a run charges its plan's event to every query), and finally runs
`verify_budget` (the full recomputation over every entry). With --json the last line is one JSON object with
`rows`: {ledger, entries, reserve_ms_median, reserve_ms_p95, epsilon_incremental, epsilon_full, ...}.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from dpicl.privacy.accounting.composed import full_epsilon
from dpicl.privacy.accounting.events import SubsampledExponentialEvent, SubsampledGaussianEvent
from dpicl.storage import ledger
from dpicl.storage.db import connect

DELTA = 1e-5
LIMIT = 100.0  # never the constraint here: what is measured is the cost of the accounting


def _events(kind: str) -> list[str]:
    gaussian = SubsampledGaussianEvent(5.0, 0.02, 1.0, "esa").to_json()
    exponential = SubsampledExponentialEvent(0.5, 0.02, 1.0, "ksa-jem").to_json()
    if kind == "gaussian":
        return [gaussian]
    if kind == "exponential":
        return [exponential]
    if kind == "mixed":
        return [gaussian, exponential]
    # 50 event types: 50 runs planned for different numbers of queries
    return [SubsampledGaussianEvent(4.0 + i / 10, 0.02, 1.0, "esa").to_json() for i in range(50)]


def _ledger(path: Path, kind: str, entries: int):
    """A database whose budget holds `entries` entries spread evenly over the kind's events (the state too)."""
    con = connect(path)
    con.execute("INSERT INTO datasets VALUES ('d', 'private', 'text', 'x', 'x', '{}', 1000, 'k'::BLOB, "
                "current_timestamp)")
    ledger.open_budget(con, "d", LIMIT, DELTA)
    events = _events(kind)
    counts = {e: entries // len(events) + (i < entries % len(events)) for i, e in enumerate(events)}
    for event, n in counts.items():
        con.execute("""INSERT INTO ledger (dataset, run_id, backlog, query_id, mechanism, event, epsilon_before,
                       epsilon_after) SELECT 'd', 'old', 'b', 'old-' || ? || '-' || i, 'm', ?, 0, 0
                       FROM range(?) t(i)""", [str(hash(event)), event, n])
        con.execute("INSERT INTO budget_events VALUES ('d', ?, ?)", [event, n])
    con.execute("INSERT INTO budget_spent VALUES ('d', ?)", [full_epsilon(counts, DELTA)])
    return con, events


def measure(kind: str, entries: int, reservations: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        con, events = _ledger(Path(tmp) / "ledger.duckdb", kind, entries)
        times = []
        event = events[-1]  # as a run charges its budget: one event (its plan's) for every query of the backlog
        for i in range(reservations):
            start = time.perf_counter()
            paid = ledger.reserve(con, dataset="d", run_id="bench", backlog="b", query_id=f"q{i}", mechanism="m",
                                  event_json=event)
            times.append((time.perf_counter() - start) * 1000)
            assert paid is not None
        start = time.perf_counter()
        verified = ledger.verify_budget(con, "d")
        verify_s = time.perf_counter() - start
        con.close()
    return {
        "ledger": kind,
        "entries": entries,
        "event_types": len(events),
        "reservations": reservations,
        "reserve_ms_median": float(np.median(times)),
        "reserve_ms_p95": float(np.percentile(times, 95)),
        "reserve_ms_max": float(max(times)),
        "epsilon_incremental": verified["epsilon_incremental"],
        "epsilon_full": verified["epsilon_full"],
        "incremental_over_full": verified["epsilon_incremental"] / verified["epsilon_full"],
        "verify_s": verify_s,
        "ok": verified["ok"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[100, 1_000, 10_000, 100_000])
    parser.add_argument("--ledgers", nargs="+", default=["gaussian", "exponential", "mixed", "many-types"])
    parser.add_argument("--reservations", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    print(f"{'ledger':<12} {'entries':>8} {'median ms':>10} {'p95 ms':>9} {'max ms':>9} {'ε kept':>10} "
          f"{'ε full':>10} {'kept/full':>9} {'verify s':>9} ok")
    for kind in args.ledgers:
        for entries in args.entries:
            row = measure(kind, entries, args.reservations)
            rows.append(row)
            print(f"{kind:<12} {entries:>8} {row['reserve_ms_median']:>10.1f} {row['reserve_ms_p95']:>9.1f} "
                  f"{row['reserve_ms_max']:>9.0f} {row['epsilon_incremental']:>10.5f} {row['epsilon_full']:>10.5f} "
                  f"{row['incremental_over_full']:>9.5f} {row['verify_s']:>9.2f} {row['ok']}", flush=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory of this process: {peak_mb:.0f} MB")
    if args.json:
        print(json.dumps({"rows": rows, "peak_rss_mb": peak_mb}))


if __name__ == "__main__":
    main()
