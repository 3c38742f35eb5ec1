"""PRV accountant: ε of a composition of privacy events (MECHANISMS §A.3; prv-accountant 0.2.0).

Numerical composition of privacy random variables (Gopi, Lee, Wutschitz 2021). We report the library's
``eps_up`` evaluated at δ − ``delta_error`` — a sound upper bound on ε at δ — so a ledger that checks
spending against it never under-charges.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import Counter
from collections.abc import Sequence

from .events import (
    ComposedEvent,
    PrivacyEvent,
    PublicDataEvent,
    SubsampledGaussianEvent,
    SubsampledPureDPEvent,
    UnsupportedEventError,
    flatten,
)

# eps_up = estimate + eps_error. 0.005 keeps a 100-event check near a second on a laptop core and is tight
# enough that the papers' noise multipliers (find_noise_multiplier, eps_error=0.01) already certify.
DEFAULT_EPS_ERROR = 0.005
DEFAULT_DELTA_ERROR = 1e-10

# One evaluation of one event holds about 388 bytes per point of its discretisation mesh (measured: 2.1 GB at
# 5.5 M points) plus BYTES_PER_EVENT_POINT per point for each further distinct event (measured: 4.0 GB for 50 distinct Gaussian events at
# 10⁵ compositions when this was 8); the mesh grows with the number of compositions (√T/eps_error) and the privacy-loss
# range. Past this many bytes the mesh is coarsened (a larger eps_error: still a sound bound, as eps_up includes
# it), and past MAX_EPS_ERROR the composition is refused with AccountantCapacityError (the ledger then answers
# with the RDP bound alone). Peak memory of an evaluation stays near 1 GB whatever the ledger holds.
MAX_BYTES = 1_000_000_000
BYTES_PER_EVENT_POINT = 56
MAX_EPS_ERROR = 0.1


class AccountantCapacityError(RuntimeError):
    """The composition is too large for the PRV accountant within its memory bound (a looser accountant must
    answer)."""


def _prv_key(event: PrivacyEvent) -> tuple:
    """What an event's privacy random variable depends on (labels and absolute noise scales do not matter)."""
    if isinstance(event, SubsampledGaussianEvent):
        return ("gaussian", float(event.noise_multiplier), float(event.sampling_rate))
    # pure DP, amplified: composed as randomized response, the worst ε̄-DP mechanism
    return ("pure_dp", float(event.amplified_epsilon))


def _prv(key: tuple):
    # prv-accountant (and the scipy modules it loads) is imported where it is used: a second off every CLI start
    from prv_accountant import PoissonSubsampledGaussianMechanism
    from prv_accountant.privacy_random_variables import PureDPMechanism

    if key[0] == "gaussian":
        return PoissonSubsampledGaussianMechanism(noise_multiplier=key[1], sampling_probability=key[2])
    return PureDPMechanism(key[1])


class PRVAccountant:
    """Upper-bound ε for lists of Poisson-subsampled Gaussian and pure-DP events (add/remove neighbours), also
    inside ``ComposedEvent``s; ``PublicDataEvent``s cost nothing."""

    name = "prv"

    def __init__(self, eps_error: float = DEFAULT_EPS_ERROR, delta_error: float = DEFAULT_DELTA_ERROR,
                 max_bytes: float | None = None, max_eps_error: float | None = None):
        """``max_bytes`` / ``max_eps_error``: the memory bound and the coarsest mesh allowed (default MAX_BYTES and
        MAX_EPS_ERROR); a smaller bound is a faster, looser evaluation."""
        if eps_error <= 0 or delta_error <= 0:
            raise ValueError("eps_error and delta_error must be > 0")
        self.eps_error = eps_error
        self.delta_error = delta_error
        self.max_bytes = max_bytes
        self.max_eps_error = max_eps_error

    def supports(self, event: PrivacyEvent) -> bool:
        if isinstance(event, ComposedEvent):
            event = event.event
        return isinstance(event, (SubsampledGaussianEvent, SubsampledPureDPEvent, PublicDataEvent))

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        """Sound upper bound on ε of composing ``events`` at ``delta``; 0.0 for no events."""
        return max(0.0, self._bounds(events, delta)[2])

    def estimate(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        """The library's point estimate of ε (within the mesh's eps_error of the truth, not a bound): for searches
        that a certification with :meth:`epsilon` then checks — never for a charge."""
        return max(0.0, self._bounds(events, delta)[1])

    def _bounds(self, events: Sequence[PrivacyEvent], delta: float) -> tuple[float, float, float]:
        """(lower, estimate, upper) ε of composing ``events`` at ``delta`` (zeros for no events)."""
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        for event in events:
            if not self.supports(event):
                raise UnsupportedEventError(f"PRV accountant cannot account for {type(event).__name__}")
        counts: Counter = Counter()
        for event, count in flatten(events):
            if not isinstance(event, PublicDataEvent):
                counts[_prv_key(event)] += count
        if not counts:
            return 0.0, 0.0, 0.0
        if delta <= self.delta_error:
            raise ValueError(f"delta {delta} must exceed the accountant's delta_error {self.delta_error}")
        # Events with the same key have the same PRV whatever their label or sensitivity (nm is already per unit
        # sensitivity): group them into one self-composition, which is done by FFT power.
        groups = sorted(counts.items())  # deterministic order: the same list always gives the same number
        keys = tuple(key for key, _ in groups)
        n = tuple(c for _, c in groups)
        eps_error = self.mesh_eps_error(keys, n)
        from prv_accountant import PRVAccountant as _LibPRVAccountant

        with warnings.catch_warnings():  # eps_max is our (larger than safe) domain, not an assumption on ε
            warnings.simplefilter("ignore", UserWarning)
            accountant = _LibPRVAccountant(prvs=[_prv(key) for key in keys], max_self_compositions=list(n),
                                           eps_error=eps_error, delta_error=self.delta_error,
                                           eps_max=fast_half_width(keys, n, eps_error, self.delta_error))
        # evaluated at δ − delta_error, so the library's δ error is inside the reported (ε, δ) too
        lower, estimate, upper = accountant.compute_epsilon(delta=delta - self.delta_error, num_self_compositions=n)
        return float(lower), float(estimate), float(upper)

    def mesh_eps_error(self, keys: tuple, counts: tuple[int, ...]) -> float:
        """The eps_error an evaluation of ``counts`` of the PRVs ``keys`` (see ``_prv_key``) runs at:
        ``self.eps_error`` unless the mesh would exceed the memory bound, then the smallest one that fits;
        AccountantCapacityError past the coarsest allowed."""
        max_bytes = MAX_BYTES if self.max_bytes is None else self.max_bytes
        max_eps_error = MAX_EPS_ERROR if self.max_eps_error is None else self.max_eps_error
        eps_error = self.eps_error
        for _ in range(3):  # the domain's half-width grows only with max(L, eps_error): converges at once
            needed = mesh_bytes(keys, counts, eps_error, self.delta_error)
            if needed <= max_bytes and eps_error <= max_eps_error:
                return eps_error
            eps_error = eps_error * needed / max_bytes * 1.01
            if eps_error > max_eps_error:
                break
        raise AccountantCapacityError(
            f"the PRV accountant would need eps_error {eps_error:.3g} (> {max_eps_error}) to compose "
            f"{sum(counts)} events within {max_bytes / 1e9:g} GB")


def _mesh(counts: Sequence[int], eps_error: float, delta_error: float) -> float:
    """prv-accountant's mesh size (Gopi et al. 2021, Thm 5.5)."""
    return eps_error / math.sqrt(sum(counts) / 2 * math.log(12 / delta_error))


@functools.lru_cache(maxsize=4096)
def _rdp_half_width(keys: tuple, counts: tuple[int, ...], delta_error: float) -> float:
    """The part of the library's safe domain size that does not depend on eps_error (RDP bounds over many orders,
    a fifth of a second: searches ask for it again and again)."""
    from prv_accountant.accountant import compute_safe_domain_size

    return compute_safe_domain_size([_prv(key) for key in keys], list(counts), eps_error=0.0,
                                    delta_error=delta_error) - 3


def safe_half_width(keys: tuple, counts: tuple[int, ...], eps_error: float, delta_error: float) -> float:
    """prv-accountant's ``compute_safe_domain_size`` (Gopi et al. 2021, Remark 5.6): max(L, eps_error) + 3."""
    return max(_rdp_half_width(keys, counts, delta_error), eps_error) + 3


def fast_half_width(keys: tuple, counts: tuple[int, ...], eps_error: float, delta_error: float) -> float:
    """A half-width at least the library's safe domain size whose mesh has a length scipy's FFT transforms fast
    (few small prime factors): an arbitrary length can cost ten times as much (measured: 5.4 s against 0.75 s at
    3.8 M points). A larger domain with the same mesh only tightens the truncation, so the bound stays sound."""
    from scipy.fft import next_fast_len

    half_width = safe_half_width(keys, counts, eps_error, delta_error)
    mesh = _mesh(counts, eps_error, delta_error)
    # the library builds 2·ceil(L/mesh) + 2 points (an even count); one spare cell keeps L' ≥ L after rounding
    size = 2 * math.ceil(half_width / mesh) + 4
    while (size := next_fast_len(size, real=True)) % 2:
        size += 1
    return (size / 2 - 1.5) * mesh


def mesh_bytes(keys: tuple, counts: tuple[int, ...], eps_error: float, delta_error: float) -> float:
    """About how many bytes prv-accountant's evaluation of this composition takes: the mesh that would be built
    (:func:`fast_half_width`), times the measured bytes per point."""
    half_width = fast_half_width(keys, counts, eps_error, delta_error)
    return 2 * half_width / _mesh(counts, eps_error, delta_error) * (388 + BYTES_PER_EVENT_POINT * (len(keys) - 1))
