"""What an accountant is, the accountants that exist (by name), and the ledger's accountant on stored events.

After opacus's ``IAccountant`` and its registry: an :class:`Accountant` says which privacy events it can compose
(``supports``) and bounds ε of a composition at δ (``epsilon``, a sound upper bound; an unsupported event is an
error, never a naive sum). :data:`ACCOUNTANTS` names the ones there are:

* ``"prv"`` — :class:`~.prv.PRVAccountant`, numerical composition (tight for Gaussians);
* ``"rdp"`` — :class:`~.rdp.RDPAccountant`, Rényi DP with the BBGHS conversion (every event type);
* ``"auto"`` — :class:`~.auto.AutoAccountant`, the smaller of the two among those that support every event: the
  ledger's accountant (:data:`LEDGER_ACCOUNTANT`).

:func:`ledger_epsilon` is that accountant on a list of stored (JSON) events, composed by count: the reference value
the ledger's spending is checked against (``dpicl budget verify``; a rerun's price).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from .auto import AutoAccountant
from .composed import count_events, full_epsilon
from .events import PrivacyEvent
from .prv import PRVAccountant
from .rdp import RDPAccountant


@runtime_checkable
class Accountant(Protocol):
    """Composes privacy events into a sound upper bound on ε at a given δ."""

    name: str

    def supports(self, event: PrivacyEvent) -> bool:
        """Whether ``epsilon`` can compose ``event`` (a ComposedEvent: its inner event)."""
        ...

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        """Upper bound on ε of composing all ``events`` at ``delta``; raises on an event it does not support."""
        ...


ACCOUNTANTS: dict[str, Callable[[], Accountant]] = {
    "auto": AutoAccountant,
    "prv": PRVAccountant,
    "rdp": RDPAccountant,
}

LEDGER_ACCOUNTANT = "auto"  # what the ledger charges with (total_epsilon)


def create_accountant(name: str) -> Accountant:
    """A new accountant of the kind ``name`` (one of :data:`ACCOUNTANTS`, with its default settings)."""
    try:
        factory = ACCOUNTANTS[name]
    except KeyError:
        raise ValueError(f"no accountant named {name!r}; the accountants are {', '.join(sorted(ACCOUNTANTS))}") from None
    return factory()


def ledger_epsilon(events_json: Iterable[str], delta: float) -> float:
    """The ledger's accountant (``"auto"``, i.e. ``total_epsilon``) on a list of stored events, composed by count:
    the full reference value (``composed.full_epsilon`` of their state)."""
    return full_epsilon(count_events(events_json), delta)
