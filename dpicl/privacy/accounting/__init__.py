"""Privacy accounting: events (the vocabulary of costs), accountants, calibration (MECHANISMS §A.2–A.3).

``total_epsilon`` is what the ledger calls. It never falls back to a naive sum of per-event ε: an event no
accountant supports is an error. The PRV accountant (tight) is used when it supports every event — all-Gaussian
ledgers keep exactly their former values — otherwise the RDP accountant (Bun–Steinke exponential mechanism,
Poisson amplification, approximate RDP for KSA-PTR, BBGHS conversion) when it supports every event. A ledger
with any KSA-PTR event therefore always goes to RDP: PRV has no model of the PTR failure probability.
"""

from __future__ import annotations

from .auto import AutoAccountant, choose_accountant, total_epsilon
from .calibration import calibrate_noise_multiplier, find_noise_multiplier, max_additional
from .events import (
    PrivacyEvent,
    SubsampledExponentialEvent,
    SubsampledGaussianEvent,
    SubsampledPTREvent,
    UnsupportedEventError,
    event_from_dict,
    event_from_json,
)
from .prv import PRVAccountant
from .rdp import RDPAccountant

__all__ = [
    "AutoAccountant",
    "PRVAccountant",
    "PrivacyEvent",
    "RDPAccountant",
    "SubsampledExponentialEvent",
    "SubsampledGaussianEvent",
    "SubsampledPTREvent",
    "UnsupportedEventError",
    "calibrate_noise_multiplier",
    "choose_accountant",
    "event_from_dict",
    "event_from_json",
    "find_noise_multiplier",
    "max_additional",
    "total_epsilon",
]
