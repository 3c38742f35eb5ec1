"""Privacy accounting: events (the vocabulary of costs), accountants, calibration (MECHANISMS §A.2–A.3).

``total_epsilon`` is what the ledger calls. It never falls back to a naive sum of per-event ε: an event no
accountant supports is an error.
"""

from __future__ import annotations

from collections.abc import Sequence

from .calibration import calibrate_noise_multiplier, find_noise_multiplier, max_additional
from .events import (
    PrivacyEvent,
    SubsampledGaussianEvent,
    UnsupportedEventError,
    event_from_dict,
    event_from_json,
)
from .prv import PRVAccountant


def total_epsilon(events: Sequence[PrivacyEvent], delta: float) -> float:
    """Upper bound on ε of composing all ``events`` at ``delta`` (PRV accountant; RDP to come)."""
    accountant = PRVAccountant()
    unsupported = [e for e in events if not accountant.supports(e)]
    if unsupported:
        raise UnsupportedEventError(
            f"no accountant supports {sorted({type(e).__name__ for e in unsupported})}"
        )
    return accountant.epsilon(events, delta)


__all__ = [
    "PRVAccountant",
    "PrivacyEvent",
    "SubsampledGaussianEvent",
    "UnsupportedEventError",
    "calibrate_noise_multiplier",
    "event_from_dict",
    "event_from_json",
    "find_noise_multiplier",
    "max_additional",
    "total_epsilon",
]
