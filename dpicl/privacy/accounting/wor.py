"""RDP amplification by sampling *without replacement* and the fixed-order RDP ↔ (ε, δ) conversion.

MECHANISMS §A.2 ("Sampling without replacement", Wang, Balle, Kasiviswanathan 2019 = paper 000 Thm A.4;
"Inverse at fixed α") and §7 (DPS-MOZO accounting). Substitution neighbours: the private set has n records, a
query uses m of them drawn without replacement, q = m/n. If the mechanism on the m records is (j, ε(j))-RDP
for every integer order j ≤ α, the subsampled mechanism satisfies, for integer α ≥ 2,

    ε'(α) ≤ 1/(α−1) · log( 1 + q² C(α,2) · min{4(e^{ε(2)}−1), e^{ε(2)} · min{2, (e^{ε(∞)}−1)²}}
                             + Σ_{j=3..α} q^j C(α,j) e^{(j−1)ε(j)} · min{2, (e^{ε(∞)}−1)^j} ).

Here ε(∞) = ∞ (nothing is known about the mechanisms we amplify at order ∞), so both min{2, ·} factors are 2. The
bound is evaluated in log space (log-sum-exp, log-binomials from gammaln), so it stays finite for α up to a few
hundred and large ε(j). It is also capped at ε(α) itself: by the joint quasi-convexity of the Rényi divergence,
subsampling never costs more than the un-subsampled mechanism (a coupling pairs subsamples that differ in at
most one record), so the cap is sound and only matters when q or ε(j) is large.

DPS-MOZO (MECHANISMS §7; ``dpicl.privacy.mechanisms.dps_mozo``): a token is charged 4βα at order α — with one
demonstration per token this is *proven*: the Rényi ball is enforced at order 2α with radius r = 4βα/c(α),
c(α) = 1 + (α−½)/(α−1), and Mironov's weak triangle inequality (2017, Prop 11, p = q = 2) puts the releases for two
substituted demonstrations, both within r of the same public p_0 at order 2α, within c(α)·r = 4βα of each other at
order α. (With more demonstrations per token, 4βα is paper 000's unproven Thm B.3 claim; the events say which.)
Since the Rényi divergence is non-decreasing in the order, the same 4βα bounds every order j ≤ α — the ε(j),
2 ≤ j ≤ α, that the Wang et al. bound needs for the mechanism on the subsample (whose substitution neighbours are
exactly the one-shot rows of two different demonstrations) — and nothing is known above α, so ε(∞) = ∞.
``dps_mozo_rdp`` uses exactly that (the reading that also reproduces 000 Table 5's β).

The conversion (BBGHS, Balle et al. 2020 Thm 21) gives ε(δ) = ε_RDP(α) + ``conversion_term(α, δ)``; its inverse
``fixed_order_budget(ε, δ, α)`` = ε − conversion_term(α, δ) is the RDP one may spend at order α for (ε, δ).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable

import numpy as np
from scipy.special import gammaln, logsumexp

from ..errors import shown

_LOG2 = math.log(2.0)
_LOG4 = math.log(4.0)


def _integer_order(order, name: str = "order") -> int:
    if isinstance(order, bool) or not isinstance(order, numbers.Real) or not float(order).is_integer() \
            or order < 2:
        raise ValueError(f"{name} must be an integer Rényi order >= 2, got {shown(order)}")
    return int(order)


def _check_rate(sampling_rate: float) -> float:
    q = float(sampling_rate)
    if not 0 < q <= 1:
        raise ValueError(f"sampling_rate must be in (0, 1] (shots / dataset size), got {shown(sampling_rate)}")
    return q


def _log_expm1(x: float) -> float:
    """log(e^x − 1) for x ≥ 0 without overflow; −∞ at 0."""
    if x <= 0:
        return -math.inf
    if x > 30:
        return x + math.log1p(-math.exp(-x))
    return math.log(math.expm1(x))


def wor_subsampled_rdp(base_rdp: Callable[[int], float], sampling_rate: float, order: int) -> float:
    """Wang et al. 2019 bound on the RDP at integer ``order`` ≥ 2 of a mechanism run on a without-replacement
    subsample of rate ``sampling_rate`` (substitution neighbours), with ε(∞) = ∞, capped at ``base_rdp(order)``.

    ``base_rdp(j)`` is the un-subsampled mechanism's RDP at the integer order j (called for j = 2..order); it must
    be ≥ 0 and may be ``inf`` (then so is the result).
    """
    m = _integer_order(order)
    q = _check_rate(sampling_rate)
    eps = [float(base_rdp(j)) for j in range(2, m + 1)]  # eps[j - 2] = ε(j)
    if any(math.isnan(e) or e < 0 for e in eps):
        raise ValueError(f"base_rdp must return RDP values >= 0 (got {eps})")
    cap = eps[-1]
    if any(math.isinf(e) for e in eps):
        return math.inf
    log_q = math.log(q)
    log_terms = [0.0]  # the leading 1
    # j = 2: q² C(m,2) min{4(e^{ε(2)} − 1), 2 e^{ε(2)}}
    e2 = eps[0]
    log_terms.append(2 * log_q + math.log(m * (m - 1) / 2) + min(_LOG4 + _log_expm1(e2), _LOG2 + e2))
    if m >= 3:
        j = np.arange(3, m + 1, dtype=float)
        log_binom = gammaln(m + 1) - gammaln(j + 1) - gammaln(m - j + 1)
        log_terms.extend((j * log_q + log_binom + (j - 1) * np.asarray(eps[1:]) + _LOG2).tolist())
    bound = float(logsumexp(log_terms)) / (m - 1)
    return min(bound, cap)


def dps_mozo_rdp(beta: float, alpha: int, sampling_rate: float, orders: Iterable[int]) -> np.ndarray:
    """Per-token RDP of DPS-MOZO after without-replacement amplification, at the integer ``orders``.

    At an order m ≤ ``alpha``: the Wang et al. bound with the constant ε(j) := 4·β·α for 2 ≤ j ≤ m (the per-token
    bound at order α — proven for one demonstration per token, whose ball has radius 4βα/c(α) at order 2α; the
    paper's claim for more — and monotonicity in the order); ``inf`` at orders above ``alpha`` (no bound is known
    there).
    """
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be a finite number >= 0, got {shown(beta)}")
    a = _integer_order(alpha, "alpha")
    q = _check_rate(sampling_rate)
    base = 4.0 * float(beta) * a
    out = []
    cache: dict[int, float] = {}
    for order in orders:
        m = _integer_order(order)
        if m > a:
            out.append(math.inf)
            continue
        if m not in cache:
            cache[m] = wor_subsampled_rdp(lambda _j: base, q, m)
        out.append(cache[m])
    return np.asarray(out, dtype=float)


def _check_conversion(alpha: float, delta: float) -> tuple[float, float]:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (math.isfinite(alpha) and alpha > 1):
        raise ValueError(f"alpha must be a finite Rényi order > 1, got {shown(alpha)}")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {shown(delta)}")
    return float(alpha), float(delta)


def conversion_term(alpha: float, delta: float) -> float:
    """log((α−1)/α) − (log δ + log α)/(α−1): what BBGHS adds to an RDP value at order α to give ε at δ."""
    a, d = _check_conversion(alpha, delta)
    return math.log((a - 1) / a) - (math.log(d) + math.log(a)) / (a - 1)


def fixed_order_budget(epsilon: float, delta: float, alpha: float) -> float:
    """ε̃ = ε − log((α−1)/α) + (log δ + log α)/(α−1): the RDP that may be spent at order α for a target (ε, δ)
    (MECHANISMS §A.2 "Inverse at fixed α"). May be ≤ 0 when α is too small for δ (nothing can be spent)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not (
            math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {shown(epsilon)}")
    return float(epsilon) - conversion_term(alpha, delta)
