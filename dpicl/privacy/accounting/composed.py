"""A budget's composed state — how many times each distinct event was charged — and two sound ε of it.

A ledger entry adds one to the count of its (stored, canonical JSON) event; a state has as many items as the budget
has *distinct* events, however many entries it holds. Accountants compose by count (`ComposedEvent`), so ε of a
state costs what its distinct events cost, never what its length costs.

* `full_epsilon` — the ledger's accountant (`total_epsilon`: the smaller of PRV and RDP) at the exact counts. The
  reference: what `dpicl budget verify` recomputes from every entry.
* `incremental_epsilon` — what a reservation charges: the smaller of the RDP bound at the exact counts (per-event
  curves cached, summed by count: microseconds) and a PRV bound *stored* for a state that holds the same other events
  and at least as many of the event being added. Composing more never lowers true ε, so a bound for more covers less.
  The stored state's count is chosen so that the RDP bound grows by at most ``TOLERANCE`` up to it, which keeps the PRV
  bound within about that of its value at the exact count; a PRV evaluation (0.1 s to seconds) is then needed once
  per ``TOLERANCE`` of growth instead of once per entry. Where the rounded bound would refuse, the exact count is
  evaluated first, so rounding never refuses what the budget can pay for.

Both are upper bounds of true ε; incremental ≥ full up to the PRV accountant's own discretisation (the stored bound is
at a larger count). Nothing here reads private data: events and counts are public.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol

from ..search import bisect_int, doubling
from .auto import choose_accountant, total_epsilon
from .events import ComposedEvent, PrivacyEvent, event_from_json
from .prv import PRVAccountant
from .rdp import RDPAccountant

# Largest relative growth of the RDP bound across the counts one stored PRV bound covers.
TOLERANCE = 0.004


@functools.lru_cache(maxsize=4096)
def _event(event_json: str) -> PrivacyEvent:
    return event_from_json(event_json)


def count_events(events_json: Iterable[str]) -> dict[str, int]:
    """The state of a list of stored events: {event JSON: how many times it was charged}."""
    return dict(Counter(events_json))


def composed_events(counts: Mapping[str, int]) -> list[PrivacyEvent]:
    """One (composed) event per distinct event of a state, in a fixed order: what accountants compose by count."""
    out: list[PrivacyEvent] = []
    for event_json, n in sorted(counts.items()):
        if n <= 0:
            continue
        event = _event(event_json)
        if isinstance(event, ComposedEvent):
            out.append(ComposedEvent(event.event, event.count * n))
        else:
            out.append(event if n == 1 else ComposedEvent(event, n))
    return out


def full_epsilon(counts: Mapping[str, int], delta: float) -> float:
    """ε of the state at its exact counts (the reference every incremental value is checked against)."""
    return _full_epsilon(tuple(sorted((e, n) for e, n in counts.items() if n > 0)), delta)


@functools.lru_cache(maxsize=256)  # a rerun prices the same state twice; a PRV evaluation can take seconds
def _full_epsilon(counts: tuple[tuple[str, int], ...], delta: float) -> float:
    return total_epsilon(composed_events(dict(counts)), delta)


class BoundStore(Protocol):
    """Where PRV bounds of states are kept (the ledger's `prv_bounds` table; a dict in tests)."""

    def covering(self, base: str, event_json: str, count: int) -> tuple[int, float] | None:
        """(count', ε) of the stored bound with the smallest count' ≥ ``count`` for ``base`` + count' × event."""

    def add(self, base: str, event_json: str, count: int, epsilon: float) -> None: ...


def base_key(counts: Mapping[str, int], event_json: str) -> str:
    """Names the state without ``event_json``: the part a stored bound holds fixed."""
    rest = sorted((e, n) for e, n in counts.items() if e != event_json and n > 0)
    return hashlib.sha256(json.dumps(rest).encode()).hexdigest()[:32]


def incremental_epsilon(counts: Mapping[str, int], event_json: str, delta: float, limit: float,
                        store: BoundStore, reach_at_least: int = 0) -> float:
    """A sound ε of ``counts`` (which includes the event being added, ``event_json``), cheap when a stored PRV
    bound covers it; see the module docstring. A new stored bound covers at least ``reach_at_least`` of the event
    (a batch's last count: one PRV evaluation for the batch)."""
    events = composed_events(counts)
    rdp, prv = RDPAccountant(), PRVAccountant()
    if not all(prv.supports(e) for e in events):
        choose_accountant(events)  # raises when no accountant supports them all
        return rdp.epsilon(events, delta)
    rdp_bound = rdp.epsilon(events, delta)
    if rdp_bound == 0.0:  # public-data releases only
        return 0.0
    base, count = base_key(counts, event_json), counts[event_json]
    found = store.covering(base, event_json, count)
    if found is None:
        reach = max(_reach(rdp, counts, event_json, delta), reach_at_least)
        found = (reach, _prv_epsilon(prv, {**counts, event_json: reach}, delta))
        store.add(base, event_json, *found)
    covered, prv_bound = found
    if min(rdp_bound, prv_bound) > limit and covered > count:
        prv_bound = _prv_epsilon(prv, counts, delta)
        store.add(base, event_json, count, prv_bound)
    return min(rdp_bound, prv_bound)


def _prv_epsilon(prv: PRVAccountant, counts: Mapping[str, int], delta: float) -> float:
    try:
        return prv.epsilon(composed_events(counts), delta)
    except RuntimeError:  # too large for its memory bound, or prv-accountant's numerical failure: RDP answers
        return math.inf


def _reach(rdp: RDPAccountant, counts: Mapping[str, int], event_json: str, delta: float) -> int:
    """The largest count of ``event_json`` whose RDP bound is within TOLERANCE of the bound at its current count."""
    count = counts[event_json]

    def rdp_at(n: int) -> float:
        return rdp.epsilon(composed_events({**counts, event_json: n}), delta)

    target = rdp_at(count) * (1 + TOLERANCE)
    if not math.isfinite(target):
        return count
    # count + 1, count + 2, count + 4, … while within the target (up to count + 2^30), then bisect the last step
    last, first = doubling(lambda step: rdp_at(count + step) <= target, 1, 1 << 30)
    fits = count if last is None else count + last
    too_far = count + (2 * last if first is None else first)
    return bisect_int(lambda n: rdp_at(n) <= target, fits, too_far)
