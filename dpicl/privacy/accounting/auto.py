"""The ledger's accountant choice: PRV when it supports every event (tight; all-Gaussian ledgers), else RDP
when it does (exponential-mechanism and KSA-PTR events, alone or mixed with Gaussians: PRV supports neither);
never a naive sum — an event no accountant supports is an error."""

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
