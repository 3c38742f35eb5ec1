"""PRV accountant: ε of a composition of privacy events (MECHANISMS §A.3; prv-accountant 0.2.0).

Numerical composition of privacy random variables (Gopi, Lee, Wutschitz 2021). We report the library's
``eps_up`` evaluated at δ − ``delta_error`` — a sound upper bound on ε at δ — so a ledger that checks
spending against it never under-charges.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from prv_accountant import PoissonSubsampledGaussianMechanism
from prv_accountant import PRVAccountant as _LibPRVAccountant
from prv_accountant.accountant import compute_safe_domain_size
from prv_accountant.privacy_random_variables import PureDPMechanism

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

# One evaluation holds about 380 bytes per point of its discretisation mesh (measured: 2.1 GB at 5.5 M points) plus
# one array per distinct event; the mesh grows with the number of compositions (√T/eps_error) and the privacy-loss
# range. Past this many bytes the mesh is coarsened (a larger eps_error: still a sound bound, as eps_up includes
# it), and past MAX_EPS_ERROR the composition is refused with AccountantCapacityError (the ledger then answers
# with the RDP bound alone). Peak memory of an evaluation stays near 1 GB whatever the ledger holds.
MAX_BYTES = 1_000_000_000
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
    if key[0] == "gaussian":
        return PoissonSubsampledGaussianMechanism(noise_multiplier=key[1], sampling_probability=key[2])
    return PureDPMechanism(key[1])


class PRVAccountant:
    """Upper-bound ε for lists of Poisson-subsampled Gaussian and pure-DP events (add/remove neighbours), also
    inside ``ComposedEvent``s; ``PublicDataEvent``s cost nothing."""

    name = "prv"

    def __init__(self, eps_error: float = DEFAULT_EPS_ERROR, delta_error: float = DEFAULT_DELTA_ERROR):
        if eps_error <= 0 or delta_error <= 0:
            raise ValueError("eps_error and delta_error must be > 0")
        self.eps_error = eps_error
        self.delta_error = delta_error

    def supports(self, event: PrivacyEvent) -> bool:
        if isinstance(event, ComposedEvent):
            event = event.event
        return isinstance(event, (SubsampledGaussianEvent, SubsampledPureDPEvent, PublicDataEvent))

    def epsilon(self, events: Sequence[PrivacyEvent], delta: float) -> float:
        """Sound upper bound on ε of composing ``events`` at ``delta``; 0.0 for no events."""
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
            return 0.0
        if delta <= self.delta_error:
            raise ValueError(f"delta {delta} must exceed the accountant's delta_error {self.delta_error}")
        # Events with the same key have the same PRV whatever their label or sensitivity (nm is already per unit
        # sensitivity): group them into one self-composition, which is done by FFT power.
        groups = sorted(counts.items())  # deterministic order: the same list always gives the same number
        prvs = [_prv(key) for key, _ in groups]
        n = [c for _, c in groups]
        eps_error = self.mesh_eps_error(prvs, n)
        accountant = _LibPRVAccountant(
            prvs=prvs, max_self_compositions=n, eps_error=eps_error, delta_error=self.delta_error
        )
        # evaluated at δ − delta_error, so the library's δ error is inside the reported (ε, δ) too
        _, _, eps_up = accountant.compute_epsilon(delta=delta - self.delta_error, num_self_compositions=n)
        return max(0.0, float(eps_up))

    def mesh_eps_error(self, prvs: Sequence, counts: Sequence[int]) -> float:
        """The eps_error this evaluation runs at: ``self.eps_error`` unless the mesh would exceed MAX_BYTES, then
        the smallest one that fits; AccountantCapacityError past MAX_EPS_ERROR."""
        eps_error = self.eps_error
        for _ in range(3):  # the domain's half-width grows only with max(L, eps_error): converges at once
            needed = mesh_bytes(prvs, counts, eps_error, self.delta_error)
            if needed <= MAX_BYTES and eps_error <= MAX_EPS_ERROR:
                return eps_error
            eps_error = eps_error * needed / MAX_BYTES * 1.01
            if eps_error > MAX_EPS_ERROR:
                break
        raise AccountantCapacityError(
            f"the PRV accountant would need eps_error {eps_error:.3g} (> {MAX_EPS_ERROR}) to compose "
            f"{sum(counts)} events within {MAX_BYTES / 1e9:g} GB")


def mesh_bytes(prvs: Sequence, counts: Sequence[int], eps_error: float, delta_error: float) -> float:
    """About how many bytes prv-accountant's evaluation of this composition takes, by the library's own domain rule
    (Gopi et al. 2021, Thm 5.5 and Remark 5.6): the mesh that would be built, times the measured bytes per point."""
    half_width = compute_safe_domain_size(prvs, counts, eps_error=eps_error, delta_error=delta_error)
    mesh = eps_error / math.sqrt(sum(counts) / 2 * math.log(12 / delta_error))
    return 2 * half_width / mesh * (380 + 8 * len(prvs))
