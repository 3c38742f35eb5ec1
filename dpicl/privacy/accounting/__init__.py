"""Privacy accounting: events (the vocabulary of costs), accountants, calibration (MECHANISMS §A.2–A.3).

``total_epsilon`` is what the ledger calls. It never falls back to a naive sum of per-event ε: an event no
accountant supports is an error. The PRV accountant (tight) is used when it supports every event — all-Gaussian
ledgers keep exactly their former values — otherwise the RDP accountant (Bun–Steinke exponential mechanism,
Poisson amplification, BBGHS conversion) when it supports every event.
"""

from __future__ import annotations

from collections.abc import Sequence

from .calibration import calibrate_noise_multiplier, find_noise_multiplier
from .calibration import max_additional as _max_additional
from .events import (
    PrivacyEvent,
    SubsampledExponentialEvent,
    SubsampledGaussianEvent,
    UnsupportedEventError,
    event_from_dict,
    event_from_json,
)
from .prv import PRVAccountant
from .rdp import RDPAccountant


def choose_accountant(events: Sequence[PrivacyEvent]):
    """The accountant ``total_epsilon`` uses for ``events``: PRV if it supports them all, else RDP if it does."""
    for accountant in (PRVAccountant(), RDPAccountant()):
        if all(accountant.supports(e) for e in events):
            return accountant
    raise UnsupportedEventError(
        f"no accountant supports all of {sorted({type(e).__name__ for e in events})}"
    )


def total_epsilon(events: Sequence[PrivacyEvent], delta: float) -> float:
    """Upper bound on ε of composing all ``events`` at ``delta`` (PRV when it can, else RDP)."""
    return choose_accountant(events).epsilon(events, delta)


class AutoAccountant:
    """An accountant object whose ``epsilon`` is :func:`total_epsilon` (the ledger's choice, per call)."""

    name = "auto"

    def supports(self, event: PrivacyEvent) -> bool:
        return PRVAccountant().supports(event) or RDPAccountant().supports(event)

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        return total_epsilon(events, delta)


def max_additional(
    events_so_far: Sequence[PrivacyEvent],
    new_event: PrivacyEvent,
    epsilon_limit: float,
    delta: float,
    accountant=None,
    upper: int = 100_000,
) -> int:
    """:func:`calibration.max_additional`, by default with the accountant :func:`total_epsilon` would choose."""
    return _max_additional(
        events_so_far, new_event, epsilon_limit, delta, accountant=accountant or AutoAccountant(), upper=upper
    )


max_additional.__doc__ = (max_additional.__doc__ or "") + "\n\n" + (_max_additional.__doc__ or "")

__all__ = [
    "AutoAccountant",
    "PRVAccountant",
    "PrivacyEvent",
    "RDPAccountant",
    "SubsampledExponentialEvent",
    "SubsampledGaussianEvent",
    "UnsupportedEventError",
    "calibrate_noise_multiplier",
    "choose_accountant",
    "event_from_dict",
    "event_from_json",
    "find_noise_multiplier",
    "max_additional",
    "total_epsilon",
]
