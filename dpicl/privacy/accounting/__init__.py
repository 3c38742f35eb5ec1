"""Privacy accounting: events (the vocabulary of costs), accountants, calibration (MECHANISMS §A.2–A.3).

``total_epsilon`` is what the ledger calls. It never falls back to a naive sum of per-event ε: an event no
accountant supports is an error. The PRV accountant (tight) is used when it supports every event — all-Gaussian
ledgers keep exactly their former values — otherwise the RDP accountant (Bun–Steinke exponential mechanism,
Poisson amplification, approximate RDP for KSA-PTR, BBGHS conversion) when it supports every event. A ledger
with any KSA-PTR event therefore always goes to RDP: PRV has no model of the PTR failure probability.

Every accountant follows the ``Accountant`` protocol and is found by name (``create_accountant``: "auto", "prv",
"rdp"); ``ledger_epsilon`` is the ledger's ("auto") on a list of stored events, composed by count.
"""

from __future__ import annotations

from .accountant import ACCOUNTANTS, LEDGER_ACCOUNTANT, Accountant, create_accountant, ledger_epsilon
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
    "ACCOUNTANTS",
    "LEDGER_ACCOUNTANT",
    "Accountant",
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
    "create_accountant",
    "event_from_dict",
    "event_from_json",
    "find_noise_multiplier",
    "ledger_epsilon",
    "max_additional",
    "total_epsilon",
]
