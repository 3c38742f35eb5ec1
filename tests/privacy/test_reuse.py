"""The re-charging rule for reused subsamples (dpicl/privacy/accounting/reuse.py) on plain data: a subsample no
mechanism used is fresh; each amplified use of a reused one owes one top-up at sampling rate 1, once; free
public-data entries are no use; the budget's affordable prefix is the longest one the accountant can pay."""

from __future__ import annotations

import json

import pytest

from dpicl.privacy.accounting import ledger_epsilon
from dpicl.privacy.accounting.events import (
    PublicDataEvent,
    SubsampledGaussianEvent,
    event_from_json,
)
from dpicl.privacy.accounting.guard import PrivacyGuardError
from dpicl.privacy.accounting.reuse import (
    CHARGED,
    FREE,
    TOP_UP,
    affordable_prefix,
    category,
    new_charges,
    top_ups,
    unamplified,
    uses_of_subsamples,
)

DELTA = 1e-5
ESA = SubsampledGaussianEvent(2.0, 0.05, 2.0, "esa").to_json()
RNM = SubsampledGaussianEvent(4.0, 0.05, 1.0, "rnm").to_json()
FREE_ENTRY = PublicDataEvent("esa:post-processing").to_json()


def test_unamplified_is_the_same_event_at_rate_one():
    event = event_from_json(unamplified(ESA))
    assert event == SubsampledGaussianEvent(2.0, 1.0, 2.0, "esa")
    with pytest.raises(PrivacyGuardError, match="no sampling rate"):
        unamplified(FREE_ENTRY)


def test_a_subsample_no_mechanism_used_is_fresh_and_owes_nothing():
    uses = uses_of_subsamples([("q1", "esa", FREE_ENTRY)], ["q0", "q1"])  # a free entry is no use
    assert uses == {"q0": [], "q1": []}
    assert category(uses["q0"]) == category(uses["q1"]) == "fresh"
    assert top_ups(uses["q0"]) == []


def test_two_amplified_uses_owe_two_top_ups_at_rate_one_and_a_paid_one_is_not_owed_again():
    uses = uses_of_subsamples([("q0", "esa", ESA), ("q1", "esa", ESA), ("q0", "rnm", RNM)], ["q0", "q1"])
    assert uses["q0"] == [("esa", ESA), ("rnm", RNM)]  # in ledger order
    assert category(uses["q0"]) == "reused"
    owed = top_ups(uses["q0"])
    assert owed == [("esa" + TOP_UP, unamplified(ESA)), ("rnm" + TOP_UP, unamplified(RNM))]
    assert all(event_from_json(e).sampling_rate == 1.0 for _, e in owed)

    # a rerun paid the first top-up and drew at rate 1 (no amplification claimed: nothing to top up for it)
    later = [*uses["q0"], owed[0], ("esa", unamplified(ESA))]
    assert top_ups(later) == [("rnm" + TOP_UP, unamplified(RNM))]
    assert top_ups([*later, top_ups(later)[0]]) == []


def test_new_charges_planned_event_per_query_then_the_top_ups():
    categories = {"q0": "fresh", "q1": "reused"}
    owed = {"q0": [], "q1": [("esa" + TOP_UP, unamplified(ESA))]}
    assert new_charges(["q0", "q1"], categories, owed, ESA, unamplified(ESA)) == [ESA, unamplified(ESA),
                                                                                   unamplified(ESA)]
    free = {"q0": "served", "q1": "post-processed"}
    assert new_charges(["q0", "q1"], free, {}, FREE_ENTRY, None) == [FREE_ENTRY, FREE_ENTRY]
    assert set(CHARGED) | set(FREE) == {"fresh", "reused", "served", "post-processed"}


def test_affordable_prefix_is_the_longest_the_budget_pays_for():
    ids = [f"q{i}" for i in range(6)]
    categories = {q: ("fresh" if i % 2 else "reused") for i, q in enumerate(ids)}
    owed = {q: ([("esa" + TOP_UP, unamplified(ESA))] if categories[q] == "reused" else []) for q in ids}
    spent = [ESA] * 3

    def cost(n):
        return ledger_epsilon([*spent, *new_charges(ids[:n], categories, owed, ESA, unamplified(ESA))], DELTA)

    limit = (cost(3) + cost(4)) / 2
    assert affordable_prefix(ids, categories, owed, ESA, unamplified(ESA), spent, limit, DELTA) == 3
    assert affordable_prefix(ids, categories, owed, ESA, unamplified(ESA), spent, cost(0) / 2, DELTA) == 0
    assert json.loads(ESA)["sampling_rate"] < 1  # the fixture claims amplification
