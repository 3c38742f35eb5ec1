"""The last check before a draw: the privacy event of the parameters a mechanism is about to use must be the
event the ledger reserved (privacy invariant 9, docs/PRIVACY.md, "what is charged is what is used").

Callers rebuild the event from the values they pass to the mechanism — the sampling rate they sample at, the
noise they add, the tokens they may decode, the members or shots they prompt — with the same cost function that
priced the reservation, and call :func:`require_paid` before the first random draw. A mismatch raises
:class:`PrivacyGuardError` and nothing is drawn: the reservation stays charged (spent budget is never returned)
but no release is made from parameters that were not paid for.
"""

from __future__ import annotations

import math
from typing import Any

from .events import PrivacyEvent, event_from_json


class PrivacyGuardError(RuntimeError):
    """The parameters about to be used differ from the reserved privacy event; nothing was drawn."""


def _differences(reserved: Any, used: Any, path: str = "") -> list[str]:
    if isinstance(reserved, dict) and isinstance(used, dict):
        out = []
        for key in sorted(set(reserved) | set(used)):
            out += _differences(reserved.get(key), used.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(reserved, (list, tuple)) and isinstance(used, (list, tuple)) and len(reserved) == len(used):
        return [d for i, (r, u) in enumerate(zip(reserved, used)) for d in _differences(r, u, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(reserved, numbers) and isinstance(used, numbers) and not isinstance(reserved, bool) \
            and not isinstance(used, bool):
        # the same float computed twice is equal; the tolerance only absorbs a JSON round trip
        return [] if math.isclose(reserved, used, rel_tol=1e-12, abs_tol=0.0) else [f"{path}: reserved {reserved!r}, "
                                                                                    f"used {used!r}"]
    return [] if reserved == used else [f"{path}: reserved {reserved!r}, used {used!r}"]


def require_paid(reserved: str | PrivacyEvent, used: PrivacyEvent, *, what: str = "this release") -> None:
    """Raise PrivacyGuardError unless `used` (built from the parameters about to be used) equals `reserved`.

    Only event parameters (numbers and mechanism names, all public) appear in the message.
    """
    reserved_event = event_from_json(reserved) if isinstance(reserved, str) else reserved
    problems = _differences(reserved_event.to_dict(), used.to_dict())
    if problems:
        raise PrivacyGuardError(
            f"refusing to draw for {what}: the parameters about to be used are not the ones the ledger was charged "
            f"for ({'; '.join(problems)}). Nothing was drawn; the reservation stays charged. This is a bug in dpicl "
            "or a run whose stored plan was tampered with: report it")
