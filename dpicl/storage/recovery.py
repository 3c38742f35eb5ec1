"""A retry after a crash reuses the charge the crashed run paid and never used (privacy invariant 8, docs/PRIVACY.md).

A run that dies between reserving a release's charge (committed before anything is drawn) and committing the
release leaves a ledger entry without a release. Paying again on the retry would charge twice for one release. The
retry may instead take over that charge — sound because nothing a draw produced left the crashed process before
its release was committed (docs/PRIVACY.md, "Crash recovery"), so the retry's draw is the only one anybody sees.

A charge is taken over only when all of these hold:

* same private dataset, backlog, query, mechanism and the identical event JSON (the same price for the same
  thing; a rerun's top-up entries have their own mechanism name and never match a draw's);
* the run that paid is `crashed` (its process is gone: `runs.mark_crashed_runs`), and so is every run that took
  the charge over before (a charge is never shared by two live runs);
* no release and no synthetic dataset uses the entry;
* no DP aggregate was stored for that query by the paying run or a run that took it over: a stored aggregate is
  paid for by this entry and stays releasable (`dpicl rerun --from release`), so it is not lost — the retry pays
  for a new draw.

A synthesis names its charge after its own run (query id = run id), so a retry, a new run, matches a crashed
synthesis's charge by backlog (`synthetic:<name>`), mechanism and event instead.

Every take-over is recorded (`ledger_reuses`, committed before the caller draws): the ledger entry itself is never
changed, and `dpicl rerun` counts a reused charge as a use of the new run's subsample.
"""

from __future__ import annotations

import duckdb

from dpicl.storage.db import transaction
from dpicl.storage.ledger import Reservation

SYNTHETIC_PREFIX = "synthetic:"

_FIND = """
SELECT l.entry_id, l.epsilon_before, l.epsilon_after FROM ledger l JOIN runs r ON r.run_id = l.run_id
WHERE l.dataset = $dataset AND l.backlog = $backlog AND l.mechanism = $mechanism
  AND CAST(l.event AS VARCHAR) = $event
  AND (l.query_id = $query_id OR ($synthesis AND l.query_id = l.run_id))
  AND l.run_id <> $run_id AND r.status = 'crashed'
  AND NOT EXISTS (SELECT 1 FROM releases x WHERE x.entry_id = l.entry_id)
  AND NOT EXISTS (SELECT 1 FROM datasets d
                  WHERE d.field_map ->> 'ledger_entry' = CAST(l.entry_id AS VARCHAR))
  AND NOT EXISTS (SELECT 1 FROM ledger_reuses u JOIN runs ur ON ur.run_id = u.run_id
                  WHERE u.entry_id = l.entry_id AND (ur.status <> 'crashed' OR u.run_id = $run_id))
  AND NOT EXISTS (SELECT 1 FROM artifacts a
                  WHERE a.stage = 'aggregate' AND a.backlog = l.backlog AND a.query_id = l.query_id
                    AND (a.run_id = l.run_id
                         OR a.run_id IN (SELECT u.run_id FROM ledger_reuses u WHERE u.entry_id = l.entry_id)))
ORDER BY l.entry_id
LIMIT 1
"""


def has_crashed_runs(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether any run is marked crashed (only then can an unused charge wait to be taken over)."""
    return con.execute("SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'crashed')").fetchone()[0]


def _unused_charge(con: duckdb.DuckDBPyConnection, dataset: str, run_id: str, backlog: str, query_id: str,
                   mechanism: str, event_json: str):
    synthesis = backlog.startswith(SYNTHETIC_PREFIX) and query_id == run_id
    return con.execute(_FIND, {"dataset": dataset, "backlog": backlog, "mechanism": mechanism, "event": event_json,
                               "query_id": query_id, "synthesis": synthesis, "run_id": run_id}).fetchone()


def reusable_queries(con: duckdb.DuckDBPyConnection, *, dataset: str, run_id: str, backlog: str,
                     query_ids: list[str], mechanism: str, event_json: str) -> set[str]:
    """The queries of `query_ids` whose release a crashed run paid for and never used (reads only): run `run_id` can
    answer them by taking their charges over, whatever the budget has left."""
    if not has_crashed_runs(con):
        return set()
    return {q for q in query_ids if _unused_charge(con, dataset, run_id, backlog, q, mechanism, event_json)}


def take_over_unused_charge(con: duckdb.DuckDBPyConnection, *, dataset: str, run_id: str, backlog: str,
                            query_id: str, mechanism: str, event_json: str) -> Reservation | None:
    """The reservation of a crashed run's unused charge for exactly this release, now run `run_id`'s (recorded and
    committed); None when there is none (the caller pays as usual)."""
    with transaction(con):
        row = _unused_charge(con, dataset, run_id, backlog, query_id, mechanism, event_json)
        if row is None:
            return None
        entry_id, before, after = row
        con.execute("INSERT INTO ledger_reuses (entry_id, run_id) VALUES (?, ?)", [entry_id, run_id])
    return Reservation(entry_id, dataset, backlog, query_id, before, after)


def reused_entries(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> list[int]:
    """Ledger entries that runs `run_ids` took over from crashed runs (their draws are charged there)."""
    return [r[0] for r in con.execute("SELECT DISTINCT entry_id FROM ledger_reuses WHERE run_id = ANY(?) "
                                      "ORDER BY entry_id", [run_ids]).fetchall()]
