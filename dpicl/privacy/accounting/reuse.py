"""What a rerun pays: the re-charging rule for reused subsamples (docs/ops/rerun-and-plan.md, `dpicl rerun`).

Pure: events and mechanism labels come in as plain data (event JSON, ledger mechanism names); the database reads
live in `dpicl.storage.reruns`, the analysis and the Prefect tasks in `dpicl.tasks.rerun`.

What is free and what is charged:

* ``--from release`` re-runs only the post-processing of the source run's DP aggregates (already paid for) with
  public data. Free: served again as stored (`served`), or recomputed with new release settings
  (`post-processed`). Each such release still gets its ledger entry, with a `PublicDataEvent` (ε 0), so that every
  release has one (as synthetic-icl does).
* ``--from aggregate`` draws a new DP aggregate from private artifacts (the stored teacher outputs / votes /
  embeddings): a NEW release, charged through the ledger's reserve-before-draw path — also when the method and
  its parameters are the source's (new noise is a new release).

Reusing a subsample: a query's teacher outputs come from one Poisson subsample S of the private data. The
amplification by subsampling that the per-query events claim holds for a subsample that one mechanism uses once
(privacy invariant 2: a fresh subsample per query). A query whose S was never used by a release (the budget
refused it at aggregate) is `fresh`: charged the planned event as is. A query whose S a mechanism already used is
`reused`: every mechanism on S is charged *without* amplification (the event with sampling rate 1) — the new one,
and, once per S, a top-up entry that re-charges the earlier amplified use(s) at rate 1. Sound: conditioned on
whether a record is in S, all mechanisms on S are ordinary mechanisms on a fixed dataset and compose as such;
the amplified charges of the other (fresh, independent) subsamples stay valid. Conservative, so expensive: the
dry run says how much before anything is paid.

A use of S is a ledger entry charged for a mechanism on S (free public-data entries are no use); a top-up entry is
recognised by its mechanism name (`<mechanism>` + ``TOP_UP``), which never matches a draw's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence

from ..search import bisect_int
from .accountant import ledger_epsilon
from .events import PublicDataEvent, event_from_json
from .guard import PrivacyGuardError

TOP_UP = ":reuse-top-up"  # suffix of the ledger mechanism of a top-up entry
# what a `fresh`/`reused` query costs, what `served`/`post-processed` ones cost: see the module docstring
CHARGED, FREE = ("fresh", "reused"), ("served", "post-processed")

Use = tuple[str, str]  # (ledger mechanism, event JSON) of one charge on a subsample


def unamplified(event_json: str) -> str:
    """The same mechanism charged without amplification by subsampling (rate 1): what a draw on a subsample that a
    release already used pays. PrivacyGuardError for an event that claims no sampling rate (cannot be re-charged)."""
    event = event_from_json(event_json)
    if not hasattr(event, "sampling_rate"):
        raise PrivacyGuardError(f"a ledger event of kind {event.kind!r} has no sampling rate; a draw on a reused "
                                "subsample cannot be charged soundly")
    return dataclasses.replace(event, sampling_rate=1.0).to_json()


def uses_of_subsamples(entries: Iterable[tuple[str, str, str]], query_ids: Iterable[str]) -> dict[str, list[Use]]:
    """Per query: the (mechanism, event JSON) of every charge on its subsample, in the order of `entries`
    ((query id, mechanism, event JSON) ledger rows, oldest first); free public-data entries are left out."""
    uses: dict[str, list[Use]] = {q: [] for q in query_ids}
    for query_id, mechanism, event in entries:
        if json.loads(event).get("kind") != PublicDataEvent.kind:
            uses[query_id].append((mechanism, event))
    return uses


def category(uses: Sequence[Use]) -> str:
    """`reused` when a mechanism already used the query's subsample, else `fresh`."""
    return "reused" if uses else "fresh"


def top_ups(uses: Sequence[Use]) -> list[Use]:
    """The (mechanism, event) top-ups a reused subsample still owes: its amplified uses not yet re-charged at rate 1."""
    amplified = [(m, e) for m, e in uses if not m.endswith(TOP_UP) and json.loads(e).get("sampling_rate", 1) < 1]
    done = sum(m.endswith(TOP_UP) for m, _ in uses)
    return [(m + TOP_UP, unamplified(e)) for m, e in amplified[done:]]


def new_charges(query_ids: Sequence[str], categories: Mapping[str, str], owed: Mapping[str, Sequence[Use]],
                event_json: str, reused_event: str | None) -> list[str]:
    """The event JSON of every ledger entry a rerun of `query_ids` adds: per query the planned event (`reused`:
    `reused_event`, the planned one unamplified), then every top-up it owes."""
    adds = [reused_event if categories[q] == "reused" else event_json for q in query_ids]
    adds += [e for q in query_ids for _, e in owed.get(q, [])]
    return adds


def affordable_prefix(query_ids: Sequence[str], categories: Mapping[str, str], owed: Mapping[str, Sequence[Use]],
                      event_json: str, reused_event: str | None, spent: Sequence[str], limit: float,
                      delta: float) -> int:
    """The most queries from the front of the rerun that the budget can pay for (bisection on the accountant), given
    the ledger's `spent` events and the budget (`limit`, `delta`)."""
    def fits(n: int) -> bool:
        adds = new_charges(query_ids[:n], categories, owed, event_json, reused_event)
        return ledger_epsilon([*spent, *adds], delta) <= limit

    return bisect_int(fits, 0, len(query_ids))  # none fits trivially; all do not (the caller checked)
