"""The ledger's accountant: the smaller sound bound of the PRV accountant (tight for all-Gaussian ledgers) and
the RDP accountant (exponential-mechanism, KSA-PTR, DPM and token-level events, which PRV does not support, and
subsampled pure-DP steps, where it is the tighter) among those that support every event; never a naive sum — an
event no accountant supports is an error."""

from __future__ import annotations

from collections.abc import Sequence

from .events import PrivacyEvent, UnsupportedEventError
from .prv import PRVAccountant
from .rdp import RDPAccountant


def choose_accountant(events: Sequence[PrivacyEvent]):
    """The accountant ``total_epsilon`` uses for ``events``: PRV if it supports them all, else RDP if it does."""
    for accountant in (PRVAccountant(), RDPAccountant()):
        if all(accountant.supports(e) for e in events):
            return accountant
    raise UnsupportedEventError(f"no accountant supports all of {sorted({type(e).__name__ for e in events})}")


def total_epsilon(events: Sequence[PrivacyEvent], delta: float, prv: PRVAccountant | None = None) -> float:
    """Upper bound on ε of composing all ``events`` at ``delta``: the smaller of the PRV and RDP accountants' bounds
    among those that support every event (both are sound; PRV is the tighter for Gaussians, RDP for subsampled
    pure-DP steps, which PRV can only compose as randomized response).

    prv-accountant 0.2.0 sometimes fails numerically ("Discrete mean differs from continuous mean", e.g. for
    pure-DP steps with ε̄ just above 0.1); the RDP bound then answers alone. ``prv``: the PRV accountant to use
    (default: the ledger's).
    """
    choose_accountant(events)  # raises when no accountant supports them all
    bounds = []
    for accountant in (prv or PRVAccountant(), RDPAccountant()):
        if all(accountant.supports(e) for e in events):
            try:
                bounds.append(accountant.epsilon(events, delta))
            except RuntimeError:
                if accountant.name == "rdp":
                    raise
    return min(bounds)


class AutoAccountant:
    """An accountant object whose ``epsilon`` is :func:`total_epsilon` (the ledger's choice, per call), with ``prv``
    as its PRV accountant (default: the ledger's)."""

    name = "auto"

    def __init__(self, prv: PRVAccountant | None = None):
        self.prv = prv

    def supports(self, event: PrivacyEvent) -> bool:
        return PRVAccountant().supports(event) or RDPAccountant().supports(event)

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        return total_epsilon(events, delta, self.prv)
