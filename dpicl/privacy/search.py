"""The one root finder of the privacy core: bracket, then bisect, and return the FEASIBLE end (MECHANISMS §12.1 item 13).

Every search in the core looks for the boundary of a constraint that must hold exactly for the accounting to
apply: the smallest noise multiplier the accountant certifies, the largest ε, β or mixing weight that fits. None
of them may return an approximate root that lies just on the wrong side. So :func:`bisect` keeps a bracket
``(ok, bad)`` and only ever moves ``ok`` to a point where ``feasible`` was evaluated true; it returns ``ok`` — the
caller's starting point (feasible by the caller's own check) or a point certified by ``feasible`` — never a
midpoint it did not test, never ``bad``. (A general root finder such as ``scipy.optimize.brentq`` promises neither.)

The bracket may point either way: ``ok < bad`` searches for the largest feasible value (ε, β, λ), ``ok > bad`` for
the smallest (a noise multiplier). ``feasible`` must be deterministic and, for the answer to be the boundary,
monotone across the bracket; whatever it is, the answer is a point where it held.

* :func:`doubling` — the bracketing step most searches start with: ``start``, 2·``start``, … while a predicate holds.
* :func:`largest` / :func:`smallest` — bracket by doubling, then bisect.
* :func:`bisect_int` — the same for integers (the largest count that fits).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, TypeVar

N = TypeVar("N", int, float)


def bisect(feasible: Callable[[float], bool], ok: float, bad: float, *, rel_tol: float | None = None,
           relative_to: Literal["upper", "lower"] = "upper", steps: int | None = None,
           geometric_above: float | None = None, give_up_below: float | None = None) -> float | None:
    """Narrow the bracket ``(ok, bad)`` by bisection and return its feasible end.

    ``ok`` must be feasible (not evaluated here: the caller knows it, e.g. λ = 0 or a certified value); ``bad`` is
    the other end, normally infeasible (it is never evaluated and never returned). Each step evaluates the midpoint
    and moves ``ok`` there when ``feasible`` holds, else ``bad``. It stops when

    * ``rel_tol`` is given and the bracket's width is at most ``rel_tol`` times its upper end (``relative_to=
      "upper"``) or its lower end (``"lower"``);
    * ``steps`` midpoints have been evaluated;
    * floating point has no midpoint strictly inside the bracket left (the bracket cannot narrow any more).

    ``geometric_above``: while upper / lower exceeds it (lower > 0), the midpoint is the geometric mean (a bracket
    spanning decades). ``give_up_below``: None is returned if the bracket's upper end drops below it before the
    precision is reached (nothing useful is feasible).
    """
    if rel_tol is None and steps is None:
        raise ValueError("bisect needs a precision: rel_tol or steps")
    if relative_to not in ("upper", "lower"):
        raise ValueError(f"relative_to must be 'upper' or 'lower', got {relative_to!r}")
    done = 0
    while steps is None or done < steps:
        lo, hi = (ok, bad) if ok < bad else (bad, ok)
        if rel_tol is not None and not hi - lo > rel_tol * (hi if relative_to == "upper" else lo):
            break
        if give_up_below is not None and hi < give_up_below:
            return None
        if geometric_above is not None and lo > 0 and hi / lo > geometric_above:
            mid = math.sqrt(lo * hi)
        else:
            mid = (lo + hi) / 2
        if not lo < mid < hi:
            break
        if feasible(mid):
            ok = mid
        else:
            bad = mid
        done += 1
    return ok


def doubling(predicate: Callable[[N], bool], start: N, limit: N) -> tuple[N | None, N | None]:
    """Evaluate ``predicate`` at ``start``, 2·``start``, 4·``start``, … while it holds, up to ``limit``.

    Returns ``(last, first)``: ``last`` the last point where it held (None if it failed at ``start``), ``first`` the
    first point where it failed (None when it held up to the last point ≤ ``limit``: the next one was not tried).
    """
    last, x = None, start
    while predicate(x):
        last, x = x, 2 * x
        if x > limit:
            return last, None
    return last, x


def largest(feasible: Callable[[float], bool], *, start: float = 1.0, limit: float, **options) -> float | None:
    """The largest x > 0 with ``feasible(x)``, 0.0 standing for "none" (feasible by convention, never evaluated):
    double from ``start`` while feasible — the last feasible point once doubling passes ``limit`` — then
    :func:`bisect` between the last feasible point (or 0.0) and the first infeasible one, with ``options``."""
    last, first = doubling(feasible, start, limit)
    if first is None:
        return last
    return bisect(feasible, 0.0 if last is None else last, first, **options)


def smallest(feasible: Callable[[float], bool], *, start: float = 1.0, limit: float, lower: float = 0.0,
             **options) -> float | None:
    """The smallest x with ``feasible(x)`` (a noise multiplier: feasible ones grow without bound): double from
    ``start`` until feasible (None if nothing ≤ ``limit`` is), then :func:`bisect` between that point and
    ``lower`` (taken as infeasible, never evaluated), with ``options``."""
    _, first = doubling(lambda x: not feasible(x), start, limit)
    if first is None:
        return None
    return bisect(feasible, first, lower, **options)


def bisect_int(feasible: Callable[[int], bool], ok: int, bad: int) -> int:
    """:func:`bisect` for integers: narrow ``(ok, bad)`` (``ok`` feasible, not evaluated; ``bad`` not evaluated) until
    they are adjacent, and return ``ok`` — e.g. the largest count that fits when ``ok < bad``."""
    while abs(bad - ok) > 1:
        mid = (ok + bad) // 2
        if feasible(mid):
            ok = mid
        else:
            bad = mid
    return ok
