"""The composed state of a budget: ε by count equals ε of the entries one by one; the incremental bound a reservation
charges is never below the full recomputation, and close to it; the PRV accountant's memory bound."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpicl.privacy.accounting import total_epsilon
from dpicl.privacy.accounting.composed import (
    TOLERANCE,
    base_key,
    composed_events,
    count_events,
    full_epsilon,
    incremental_epsilon,
)
from dpicl.privacy.accounting.events import (
    ComposedEvent,
    SubsampledExponentialEvent,
    SubsampledGaussianEvent,
    SubsampledPTREvent,
)
from dpicl.privacy.accounting.prv import AccountantCapacityError, PRVAccountant, mesh_bytes

DELTA = 1e-5
GAUSSIANS = [SubsampledGaussianEvent(nm, q, 1.0, "esa") for nm, q in ((3.0, 0.05), (6.0, 0.02), (1.5, 0.01))]
EXPONENTIALS = [SubsampledExponentialEvent(eps, q, 1.0, "ksa-jem") for eps, q in ((0.5, 0.05), (1.0, 0.02))]
PTR = SubsampledPTREvent(epsilon_em=0.5, noise_multiplier=4.0, sampling_rate=0.02, sensitivity=1.0, delta0=1e-7)


class DictStore:
    """The BoundStore protocol on a dict (the ledger keeps the same rows in `prv_bounds`)."""

    def __init__(self):
        self.rows: dict[tuple[str, str], dict[int, float]] = {}
        self.evaluations = 0

    def covering(self, base, event_json, count):
        found = [c for c in self.rows.get((base, event_json), {}) if c >= count]
        return (min(found), self.rows[(base, event_json)][min(found)]) if found else None

    def add(self, base, event_json, count, epsilon):
        self.evaluations += 1
        self.rows.setdefault((base, event_json), {}).setdefault(count, epsilon)


def test_composition_by_count_equals_the_entries_one_by_one():
    entries = [GAUSSIANS[0]] * 7 + [EXPONENTIALS[0]] * 3 + [ComposedEvent(GAUSSIANS[1], 4)] * 2
    counts = count_events(e.to_json() for e in entries)
    assert sorted(counts.values()) == [2, 3, 7]
    assert full_epsilon(counts, DELTA) == pytest.approx(total_epsilon(entries, DELTA), rel=1e-9)
    # a stored composed event charged twice composes its inner event count × 2 times
    composed = [e for e in composed_events(counts) if e.event == GAUSSIANS[1]]
    assert composed == [ComposedEvent(GAUSSIANS[1], 8)]


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(st.lists(st.sampled_from(range(len(GAUSSIANS) + len(EXPONENTIALS) + 1)), min_size=1, max_size=5),
       st.lists(st.integers(1, 30), min_size=5, max_size=5))
def test_incremental_is_never_below_full_on_random_mixed_ledgers(kinds, runs):
    """Runs charge a random sequence of event kinds (as runs with different plans do), each many times; after each
    run the incremental ε is ≥ the full recomputation (both sound; the incremental one is what is charged)."""
    pool = [*GAUSSIANS, *EXPONENTIALS, PTR]
    store, counts = DictStore(), {}
    for kind, length in zip(kinds, runs, strict=False):
        event_json = pool[kind].to_json()
        for _ in range(length):
            counts[event_json] = counts.get(event_json, 0) + 1
            incremental = incremental_epsilon(counts, event_json, DELTA, math.inf, store)
        full = full_epsilon(counts, DELTA)
        assert incremental >= full, (counts, incremental, full)


def test_incremental_is_within_tolerance_of_full_on_a_gaussian_ledger_and_evaluates_rarely():
    event_json = GAUSSIANS[1].to_json()
    store, counts = DictStore(), {event_json: 2_000}
    for n in range(2_001, 2_101):
        counts[event_json] = n
        incremental = incremental_epsilon(counts, event_json, DELTA, math.inf, store)
        if n in (2_001, 2_050, 2_100):
            assert 0 <= incremental / full_epsilon(counts, DELTA) - 1 <= 2 * TOLERANCE
    # a PRV evaluation per TOLERANCE of growth, not per reservation (ε grows ~2.5 % over these 100)
    assert store.evaluations < 20


def test_near_the_limit_rounding_never_refuses_what_the_exact_state_pays_for():
    event_json = GAUSSIANS[0].to_json()
    exact = {event_json: 50}
    limit = full_epsilon(exact, DELTA) * (1 + TOLERANCE / 4)  # fits exactly; a bound for a larger count may not
    store = DictStore()
    # a stored bound for a larger count, above the limit: the exact count is evaluated instead of refusing
    store.add(base_key(exact, event_json), event_json, 60, limit * 2)
    assert incremental_epsilon(exact, event_json, DELTA, limit, store) <= limit
    assert store.rows[(base_key(exact, event_json), event_json)][50] <= limit  # and kept for the next call


def test_the_batch_reach_covers_the_whole_batch_with_one_evaluation():
    store, counts, event_json = DictStore(), {GAUSSIANS[0].to_json(): 100}, GAUSSIANS[0].to_json()
    for _ in range(16):
        counts[event_json] += 1
        incremental_epsilon(counts, event_json, DELTA, math.inf, store, reach_at_least=116)
    assert store.evaluations == 1


def test_prv_refuses_a_composition_beyond_its_memory_bound_and_the_ledger_falls_back_to_rdp():
    big = ComposedEvent(SubsampledGaussianEvent(0.6, 0.667, 1.0, "esa"), 10_000)  # 24 GB in the library's search
    assert mesh_bytes((("gaussian", 0.6, 0.667),), (10_000,), 0.005, 1e-10) > 2e9  # the premise: unbounded, this would not fit
    with pytest.raises(AccountantCapacityError):
        PRVAccountant().epsilon([big], DELTA)
    assert math.isfinite(total_epsilon([big], DELTA))  # RDP answers; nothing crashes


def test_a_composition_over_the_memory_bound_is_coarsened_and_stays_an_upper_bound(monkeypatch):
    import dpicl.privacy.accounting.prv as prv_module

    event = ComposedEvent(SubsampledGaussianEvent(5.0, 0.02, 1.0, "esa"), 3_000)
    unbounded = PRVAccountant().epsilon([event], DELTA)  # the default mesh fits the default bound
    monkeypatch.setattr(prv_module, "MAX_BYTES", 2e7)
    prv = PRVAccountant()
    key = (("gaussian", 5.0, 0.02),)
    eps_error = prv.mesh_eps_error(key, (3_000,))
    assert eps_error > prv.eps_error  # the premise: under this bound the default mesh does not fit
    assert mesh_bytes(key, (3_000,), eps_error, prv.delta_error) <= 2e7
    bounded = prv.epsilon([event], DELTA)
    # both are upper bounds of the same true ε, each within its own error of the estimate
    assert unbounded - 2 * prv.eps_error <= bounded <= unbounded + 2 * eps_error
