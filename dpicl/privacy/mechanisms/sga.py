"""SGA planning and cost (paper 004; MECHANISMS §5, §12.1 items 7–9): what one query of DPM private clustering
over the private and public teachers' embeddings costs, and its per-query parameters for a target (ε, δ).

A query releases, per tree level, the split choices (exponential mechanisms, ``em_epsilon`` per query summed over
the levels) and the children's noisy counts (Laplace, ``count_epsilon`` summed over the levels), both split over
the levels with DPM's weights √(2^i); then the leaf sums with Gaussian noise, Δ2 = 2 (``dpm.py`` has the
mechanism, ``SubsampledDPMEvent`` the accounting). Differences from the paper's accounting, all on the side of
charging more: the Gaussian part is calibrated over all queries (the code spent its ε_GM on every query, §12.1
item 8), the counts are paid for (the code gave them ε = 10⁴), a replaced private point is charged at two nodes
per level (the paper analyses adding one point), and q is the private pool's rate (§12.1 item 7).

Defaults: without ``em_epsilon`` / ``count_epsilon``, they are the largest per-query values, in the ratio
``EM_SHARE`` : ``COUNT_SHARE``, whose split choices and counts together would spend ``EM_SHARE + COUNT_SHARE`` of ε
over the planned queries (a given one is kept and the other fills that share); the Gaussian noise is then the
smallest that keeps the whole composition within (ε, δ). The split is a heuristic, the total is certified.
"""

from __future__ import annotations

import numpy as np

from ..accounting.auto import total_epsilon
from ..accounting.calibration import times
from ..accounting.events import SubsampledDPMEvent
from ..search import bisect, largest
from .dpm import level_shares

METHOD = "sga"  # name in `dpicl plan`
MECHANISM = "sga"  # label of the ledger event
SENSITIVITY = 2.0  # leaf sums of unit-norm points, one point replaced
EM_SHARE = 0.25
COUNT_SHARE = 0.15
_REL_TOL = 1e-4
_NM_MAX = 1e4
_NM_NEGLIGIBLE = 1e9
_EPS_FLOOR = 1e-6


def level_epsilons(em_epsilon: float, count_epsilon: float, levels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-level ε of the split choices (depths 0..L−1) and of the child counts (created at depths 1..L)."""
    return (tuple(level_shares(em_epsilon, levels, first=0).tolist()),
            tuple(level_shares(count_epsilon, levels, first=1).tolist()))


def cost(em_epsilon: float, count_epsilon: float, noise_multiplier: float, levels: int,
         sampling_rate: float) -> SubsampledDPMEvent:
    """Privacy event of one SGA query."""
    em, counts = level_epsilons(em_epsilon, count_epsilon, levels)
    return SubsampledDPMEvent(em, counts, noise_multiplier, sampling_rate, sensitivity=SENSITIVITY,
                              mechanism=MECHANISM)


def _pure_part_epsilon(em_epsilon: float, count_epsilon: float, levels: int, sampling_rate: float, queries: int,
                       delta: float) -> float:
    """ε of the split choices and counts alone over ``queries`` queries: the event with negligible Gaussian noise,
    accounted exactly as the ledger will (amplified without a cap, since the whole event has none)."""
    event = cost(em_epsilon, count_epsilon, _NM_NEGLIGIBLE, levels, sampling_rate)
    return total_epsilon(times(event, queries), delta)


def _largest(fits) -> float:
    """Largest x > 0 with fits(x), to _REL_TOL (the feasible end of the bracket); 0.0 if none (or only values the
    bracket places below _EPS_FLOOR: nothing useful fits)."""
    x = largest(fits, start=1.0, limit=1e3, rel_tol=_REL_TOL, give_up_below=_EPS_FLOOR)
    return 0.0 if x is None else x


def _pure_parts(levels: int, sampling_rate: float, queries: int, target: float, delta: float,
                em_epsilon: float | None, count_epsilon: float | None) -> tuple[float, float]:
    """The per-query (ε_em, ε_cnt): given ones are kept; missing ones are the largest for which the split choices
    and counts together spend ``target`` (both missing: in the ratio EM_SHARE : COUNT_SHARE)."""
    if em_epsilon is not None and count_epsilon is not None:
        return em_epsilon, count_epsilon
    if em_epsilon is None and count_epsilon is None:
        ratio = COUNT_SHARE / EM_SHARE
        x = _largest(lambda e: _pure_part_epsilon(e, ratio * e, levels, sampling_rate, queries, delta) <= target)
        em_epsilon, count_epsilon = x, ratio * x
    elif em_epsilon is None:
        em_epsilon = _largest(lambda e: _pure_part_epsilon(e, count_epsilon, levels, sampling_rate, queries,
                                                           delta) <= target)
    else:
        count_epsilon = _largest(lambda c: _pure_part_epsilon(em_epsilon, c, levels, sampling_rate, queries,
                                                              delta) <= target)
    if em_epsilon == 0.0 or count_epsilon == 0.0:
        raise ValueError(f"the budget leaves nothing for the split choices and counts (target ε = {target:g}); "
                         "lower the given em_epsilon / count_epsilon or raise ε")
    return em_epsilon, count_epsilon


def plan(sampling_rate: float, queries: int, epsilon: float, delta: float, *, levels: int,
         em_epsilon: float | None = None, count_epsilon: float | None = None) -> dict:
    """Per-query parameters of ``queries`` SGA queries within (ε, δ); no private data involved."""
    if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or levels < 1:
        raise ValueError(f"levels must be an integer >= 1, got {levels!r}")
    em_epsilon, count_epsilon = _pure_parts(levels, sampling_rate, queries, (EM_SHARE + COUNT_SHARE) * epsilon,
                                            delta, em_epsilon, count_epsilon)

    def fits(nm: float) -> bool:
        event = cost(em_epsilon, count_epsilon, nm, levels, sampling_rate)
        return total_epsilon(times(event, queries), delta) <= epsilon

    if not fits(_NM_MAX):
        raise ValueError(f"the split choices (ε_EM = {em_epsilon:g}) and counts (ε = {count_epsilon:g}) per query "
                         f"already exceed ε = {epsilon:g} over {queries} queries; lower em_epsilon / count_epsilon")
    # smallest nm that fits: _NM_MAX fits, 1e-3 does not (or is the floor); geometric steps across the decades
    nm = bisect(fits, _NM_MAX, 1e-3, rel_tol=_REL_TOL, geometric_above=4)
    event = cost(em_epsilon, count_epsilon, nm, levels, sampling_rate)
    return {
        "method": METHOD,
        "epsilon": epsilon,
        "delta": delta,
        "queries": queries,
        "sampling_rate": sampling_rate,
        "levels": levels,
        "em_epsilon": em_epsilon,
        "count_epsilon": count_epsilon,
        "em_epsilons": list(event.em_epsilons),
        "count_scales": [1 / e for e in event.count_epsilons],
        "noise_multiplier": nm,
        "sensitivity": SENSITIVITY,
        "sigma": event.sigma,
        "epsilon_certified": total_epsilon(times(event, queries), delta),
    }
