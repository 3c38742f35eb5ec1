"""RDP accountant: ε of a composition of Poisson-subsampled Gaussian, exponential-mechanism and KSA-PTR events.

MECHANISMS §A.2. Per event, the Rényi-DP curve ε(α) of the base mechanism on the integer grid α = 2, 3, …:

* Gaussian, noise multiplier nm (per unit sensitivity): α / (2 nm²), ε(∞) = ∞.
* ε-DP exponential mechanism (Bun & Steinke 2016): min(α ε²/2, 1/(α−1)·log[(sinh(αε) − sinh((α−1)ε))/sinh(ε)]),
  ε(∞) = ε. The ratio of sinh's equals cosh((α−½)ε)/cosh(ε/2), which we evaluate through a stable log cosh.
* KSA-PTR query (ε_EM FindBestK + Gaussian PTR test, failure probability δ0; 001 Thm 10–11): δ0-*approximate* RDP
  (001 Def 6) with curve α/(2 nm²) + ε_EM(α), ε(∞) = ∞. Under Poisson(q) it is q·δ0-approximately RDP with the
  amplification bound evaluated at the rate q(1−δ0)/(1−q·δ0) (001 Thm 12). Approximate-RDP composition adds the
  curves and adds the δ's, so a ledger carries the failure term Σ q_i·δ0_i over *all* its PTR events (the
  reference code subtracted one q·δ0 for 100 queries; MECHANISMS §12.1 item 3).
* DPM/SGA query (004; ``SubsampledDPMEvent``): per level, ``nodes_per_level`` exponential mechanisms and as many
  Laplace counts (Mironov 2017: 1/(α−1)·log[α/(2α−1)·e^{(α−1)ε} + (α−1)/(2α−1)·e^{−αε}]), bounded also as one
  pure-DP mechanism of their total ε, plus the Gaussian leaf sums; ε(∞) = ∞. All parts see the same sample,
  so the sum is amplified once.

Then Poisson(q) subsampling with the general upper bound (autodp ``compose_poisson_subsampled_mechanisms1``,
``improved_bound_flag=False``; 003 Thm A.4), for integer m ≥ 2:

    ε'(m) = 1/(m−1) · log[ (1−q)^{m−1}(1+(m−1)q) + Σ_{j=2..m} C(m,j) q^j (1−q)^{m−j} e^{(j−1)ε(j)} ],

evaluated by log-sum-exp and capped at log(1 + q(e^{ε(∞)} − 1)) (``amplification="steinke"``, as quoted by
003 Thm A.4). The **default** is ``amplification="autodp"``: e^{j·ε(j+1)} instead of e^{(j−1)ε(j)} for the terms
j ≥ 3, which is what autodp 0.2.3.1's ``AmplificationBySampling(...).RenyiDP`` really evaluates (``cgf(j-1+1)``)
and where the papers' numbers (MECHANISMS §11.1: 0.9927 / 2.99845 / 7.99574 …) come from. It is never smaller
than the "steinke" form, i.e. more conservative (ε 0.9927 vs 0.7956 for 100 × EM(0.77) at q = 400/14732). The
tighter form stays opt-in until its validity for add/remove neighbours in both directions is checked (Zhu & Wang
2019's general bound carries an extra factor on the j ≥ 3 terms): when unsure, charge more. Curves add under composition; the total is
converted with BBGHS (Balle et al. 2020, Thm 21) minimised over the integer grid:

    ε(δ) = min_α max(0, ε_RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1)),

taken at δ − Σ q_i·δ0_i when the ledger holds PTR events (∞ when that is ≤ 0: the failures alone exceed δ).

Looser than the PRV accountant for Gaussian events but sound, and it covers the exponential mechanism.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from scipy.special import gammaln, logsumexp

from .events import (
    ComposedEvent,
    DPSMozoEvent,
    FixedOrderRDPEvent,
    PrivacyEvent,
    PublicDataEvent,
    SubsampledDPMEvent,
    SubsampledExponentialEvent,
    SubsampledGaussianEvent,
    SubsampledPTREvent,
    SubsampledPureDPEvent,
    UnsupportedEventError,
    flatten,
)

# The reference code (001 notebook, PubDP-ICL privacy_accountant.py) minimises over integer α < alpha_max = 200.
DEFAULT_ALPHAS = tuple(range(2, 200))


def _log_cosh(x: np.ndarray) -> np.ndarray:
    ax = np.abs(x)
    return ax + np.log1p(np.exp(-2.0 * ax)) - math.log(2.0)


def exponential_rdp(epsilon: float, alphas: Iterable[float]) -> np.ndarray:
    """Bun–Steinke RDP of an ε-DP exponential mechanism at orders ``alphas`` (> 1)."""
    a = np.asarray(list(alphas), dtype=float)
    if np.any(a <= 1):
        raise ValueError("RDP orders must be > 1")
    eps = float(epsilon)
    # (sinh(αε) − sinh((α−1)ε)) / sinh(ε) = cosh((α−½)ε) / cosh(ε/2)
    bs = (_log_cosh((a - 0.5) * eps) - _log_cosh(np.asarray(eps / 2))) / (a - 1)
    return np.minimum(np.minimum(a * eps * eps / 2, bs), eps)


def laplace_rdp(epsilon: float, alphas: Iterable[float]) -> np.ndarray:
    """RDP of the Laplace mechanism with scale Δ/ε (Mironov 2017, Prop 6), capped at ε:
    1/(α−1)·log[α/(2α−1)·e^{(α−1)ε} + (α−1)/(2α−1)·e^{−αε}]."""
    a = np.asarray(list(alphas), dtype=float)
    if np.any(a <= 1):
        raise ValueError("RDP orders must be > 1")
    eps = float(epsilon)
    log_moment = np.logaddexp(np.log(a / (2 * a - 1)) + (a - 1) * eps, np.log((a - 1) / (2 * a - 1)) - a * eps)
    return np.minimum(log_moment / (a - 1), eps)


def dpm_rdp(event: SubsampledDPMEvent, alphas: Iterable[float]) -> np.ndarray:
    """RDP of one DPM query before subsampling: the split choices and counts of every level (each charged
    ``nodes_per_level`` times), bounded also as one pure-DP mechanism of their total ε (the conversion holds for
    any ε-DP mechanism), plus the Gaussian leaf sums."""
    a = np.asarray(list(alphas), dtype=float)
    n = event.nodes_per_level
    parts = sum(n * exponential_rdp(e, a) for e in event.em_epsilons)
    parts = parts + sum(n * laplace_rdp(e, a) for e in event.count_epsilons)
    return np.minimum(parts, exponential_rdp(event.pure_epsilon, a)) + gaussian_rdp(event.noise_multiplier, a)


def gaussian_rdp(noise_multiplier: float, alphas: Iterable[float]) -> np.ndarray:
    """RDP of the Gaussian mechanism with noise std ``noise_multiplier`` per unit L2 sensitivity."""
    a = np.asarray(list(alphas), dtype=float)
    return a / (2.0 * float(noise_multiplier) ** 2)


AMPLIFICATION_BOUNDS = ("autodp", "steinke")


def poisson_subsampled_rdp(
    base_rdp: Callable[[np.ndarray], np.ndarray],
    sampling_rate: float,
    max_order: int,
    eps_inf: float = math.inf,
    bound: str = "steinke",
) -> np.ndarray:
    """General Poisson-subsampling upper bound (MECHANISMS §A.2) at the integer orders 2, 3, …, ``max_order``.

    ``base_rdp`` maps an array of orders to the base mechanism's RDP; ``eps_inf`` is its ε(∞) (the cap
    log(1 + q(e^{ε(∞)} − 1))). ``bound`` picks the term of index j ≥ 3 in the sum:

    * ``"steinke"``: C(m,j) q^j (1−q)^{m−j} e^{(j−1)ε(j)} — Steinke 2022 / 003 Thm A.4, as written in §A.2.
    * ``"autodp"``: the same with e^{j·ε(j+1)} — what autodp 0.2.3.1 ``AmplificationBySampling(
      PoissonSampling=True).amplify(..., improved_bound_flag=False).RenyiDP`` actually evaluates
      (``cgf(j-1+1)`` in ``compose_poisson_subsampled_mechanisms1``) and what reproduces the papers' numbers.
      Since (α−1)ε(α) is non-decreasing in α it is never below ``"steinke"``: more conservative, equally sound.
    """
    if bound not in AMPLIFICATION_BOUNDS:
        raise ValueError(f"bound must be one of {AMPLIFICATION_BOUNDS}, got {bound!r}")
    q = float(sampling_rate)
    if not 0 < q <= 1:
        raise ValueError(f"sampling_rate must be in (0, 1], got {q}")
    orders = np.arange(2, int(max_order) + 1, dtype=float)
    cap = math.log1p(q * math.expm1(eps_inf)) if math.isfinite(eps_inf) else math.inf
    if q == 1.0:
        return np.minimum(np.asarray(base_rdp(orders), dtype=float), cap)
    # log-moment exponent of the j-th term, j = 2..max_order
    if bound == "steinke":
        expo = (orders - 1) * np.asarray(base_rdp(orders), dtype=float)
    else:
        expo = orders * np.asarray(base_rdp(orders + 1), dtype=float)
        expo[0] = np.asarray(base_rdp(orders[:1]), dtype=float)[0]  # j = 2: ε(2), as in autodp
    m = orders[:, None]  # order, rows
    j = orders[None, :]  # summation index, columns
    log_q, log_1q = math.log(q), math.log1p(-q)
    terms = (gammaln(m + 1) - gammaln(j + 1) - gammaln(np.maximum(m - j, 0) + 1)
             + j * log_q + (m - j) * log_1q + expo[None, :])
    terms = np.where(j <= m, terms, -np.inf)
    head = (orders - 1) * log_1q + np.log1p((orders - 1) * q)
    log_moment = logsumexp(np.concatenate([head[:, None], terms], axis=1), axis=1)
    return np.minimum(log_moment / (orders - 1), cap)


def bbghs_epsilon(rdp: Sequence[float], alphas: Sequence[float], delta: float) -> float:
    """BBGHS conversion of an RDP curve to ε at ``delta``, minimised over the given orders."""
    a = np.asarray(alphas, dtype=float)
    r = np.asarray(rdp, dtype=float)
    vals = r + np.log((a - 1) / a) - (math.log(delta) + np.log(a)) / (a - 1)
    return float(max(0.0, np.min(vals)))


_SUPPORTED = (SubsampledGaussianEvent, SubsampledExponentialEvent, SubsampledPTREvent, SubsampledDPMEvent,
              SubsampledPureDPEvent, DPSMozoEvent, FixedOrderRDPEvent, PublicDataEvent)


class RDPAccountant:
    """Upper-bound ε for Poisson-subsampled Gaussian, exponential-mechanism, pure-DP, KSA-PTR and DPM events, fixed-
    order RDP bounds (AdaPMixED) — all add/remove — or for DPS-MOZO's substitution events; also inside
    ``ComposedEvent``s. Events of the two neighbouring relations are never composed with each other."""

    name = "rdp"

    def __init__(self, alphas: Sequence[int] = DEFAULT_ALPHAS, amplification: str = "autodp"):
        if amplification not in AMPLIFICATION_BOUNDS:
            raise ValueError(f"amplification must be one of {AMPLIFICATION_BOUNDS}, got {amplification!r}")
        self.amplification = amplification
        alphas = sorted({int(a) for a in alphas})
        if not alphas or alphas[0] < 2 or any(int(a) != a for a in alphas):
            raise ValueError("alphas must be integers >= 2")
        self.alphas = tuple(alphas)
        self._index = np.asarray(self.alphas) - 2  # the bound at order m needs every order 2..m

    def supports(self, event: PrivacyEvent) -> bool:
        if isinstance(event, ComposedEvent):
            event = event.event
        return isinstance(event, _SUPPORTED)

    @staticmethod
    def _key(event: PrivacyEvent) -> tuple:
        """What the event's amplified curve depends on (labels and the noise's absolute scale do not matter)."""
        if isinstance(event, SubsampledGaussianEvent):
            return ("gaussian", float(event.noise_multiplier), float(event.sampling_rate))
        if isinstance(event, (SubsampledExponentialEvent, SubsampledPureDPEvent)):  # the same pure-DP bound
            return ("exponential", float(event.epsilon), float(event.sampling_rate))
        if isinstance(event, DPSMozoEvent):  # per token; the event's `tokens` multiply it
            return ("dps_mozo", float(event.beta), int(event.alpha), float(event.sampling_rate))
        if isinstance(event, FixedOrderRDPEvent):
            return ("fixed_order", int(event.alpha), float(event.rdp), 1.0)
        if isinstance(event, SubsampledPTREvent):
            return ("ptr", float(event.epsilon_em), float(event.noise_multiplier), float(event.amplified_rate))
        if isinstance(event, SubsampledDPMEvent):
            return ("dpm", dataclasses.replace(event, sampling_rate=1.0, mechanism=""), float(event.sampling_rate))
        raise UnsupportedEventError(f"RDP accountant cannot account for {type(event).__name__}")

    def _curve(self, key: tuple) -> np.ndarray:
        return _cached_curve(self, key)

    def _compute_curve(self, key: tuple) -> np.ndarray:
        kind, *params, q = key
        orders = np.asarray(self.alphas)
        if kind == "dps_mozo":  # sampling without replacement (Wang et al. 2019); nothing known above α
            from .wor import dps_mozo_rdp

            beta, alpha = params
            return dps_mozo_rdp(beta, alpha, q, orders)
        if kind == "fixed_order":  # a bound at α holds at every lower order (RDP grows with the order)
            alpha, rdp = params
            return np.where(orders <= alpha, rdp, math.inf)
        if kind == "gaussian":
            (nm,) = params
            base, eps_inf = (lambda a: gaussian_rdp(nm, a)), math.inf
        elif kind == "exponential":
            (eps,) = params
            base, eps_inf = (lambda a: exponential_rdp(eps, a)), eps
        elif kind == "dpm":  # splits, counts and the Gaussian leaf sums on the same sample: amplified together
            (event,) = params
            base, eps_inf = (lambda a: dpm_rdp(event, a)), math.inf
        else:  # ptr: FindBestK and the PTR test compose; the conditional mechanism has no finite ε(∞)
            eps_em, nm = params
            base, eps_inf = (lambda a: gaussian_rdp(nm, a) + exponential_rdp(eps_em, a)), math.inf
        curve = poisson_subsampled_rdp(base, q, self.alphas[-1], eps_inf, self.amplification)
        return curve[self._index]

    def __eq__(self, other: object) -> bool:  # the curves depend on these two only (the cache's key)
        return isinstance(other, RDPAccountant) and (self.alphas, self.amplification) == (
            other.alphas, other.amplification)

    def __hash__(self) -> int:
        return hash((self.alphas, self.amplification))

    def _check(self, events: Sequence[PrivacyEvent]) -> None:
        for event in events:
            if not self.supports(event):
                raise UnsupportedEventError(f"RDP accountant cannot account for {type(event).__name__}")
        relations = {e.neighbouring for e, _ in flatten(events) if not isinstance(e, PublicDataEvent)}
        if len(relations) > 1:
            raise UnsupportedEventError(
                "cannot compose events for different neighbouring relations (add/remove one record vs replace "
                "one record): DPS-MOZO's guarantee is for replacement, every other method's for add/remove, so a "
                "private dataset's budget is spent by DPS-MOZO alone or by the other methods alone (ingesting the same "
                "records again under another name would not avoid this: it would hide real spending)")

    def rdp(self, events: Sequence[PrivacyEvent]) -> np.ndarray:
        """Composed (approximate-)RDP curve of ``events`` at ``self.alphas``."""
        self._check(events)
        counts: Counter = Counter()
        for event, count in flatten(events):
            if isinstance(event, PublicDataEvent):
                continue
            counts[self._key(event)] += count * (event.tokens if isinstance(event, DPSMozoEvent) else 1)
        total = np.zeros(len(self.alphas))
        for key, count in sorted(counts.items(), key=lambda kv: repr(kv[0])):  # fixed order: same sum
            total = total + count * self._curve(key)
        return total

    def failure_delta(self, events: Sequence[PrivacyEvent]) -> float:
        """Σ q_i·δ0_i over the PTR events: the δ of the composed approximate RDP (0.0 without PTR events)."""
        self._check(events)
        return math.fsum(count * e.failure_delta for e, count in flatten(events) if isinstance(e, SubsampledPTREvent))

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        """Sound upper bound on ε of composing ``events`` at ``delta``; 0.0 for no events.

        BBGHS at δ − Σ q_i·δ0_i; ``math.inf`` when the PTR failure terms alone use up δ.
        """
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        curve = self.rdp(events)
        if not events or not np.any(curve > 0):  # nothing, or public-data releases only
            return 0.0
        remaining = delta - self.failure_delta(events)
        if remaining <= 0:
            return math.inf
        return bbghs_epsilon(curve, self.alphas, remaining)


@functools.lru_cache(maxsize=4096)
def _cached_curve(accountant: RDPAccountant, key: tuple) -> np.ndarray:
    """An event's amplified curve, computed once per process: a ledger composes a few distinct events many times."""
    curve = accountant._compute_curve(key)
    curve.setflags(write=False)
    return curve
