"""Privacy events: the vocabulary of privacy costs (MECHANISMS §A.2–A.3; in the spirit of Google dp_accounting).

An event is a small frozen value that fully states the mathematics of one mechanism application. Mechanisms
return events, the ledger stores them (as JSON), accountants turn a list of them into (ε, δ). The meaning of
an existing event class never changes — new behaviour gets a new class — because ledger rows are read back
long after they were written.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

_REGISTRY: dict[str, type[PrivacyEvent]] = {}


class UnsupportedEventError(ValueError):
    """An event kind (or event) that this code or this accountant does not know how to account for."""


@dataclass(frozen=True)
class PrivacyEvent:
    """Base class; subclasses set a unique ``kind`` and are registered for deserialisation."""

    kind: ClassVar[str] = ""
    # which datasets count as neighbours: one record added or removed, or one record replaced by another
    neighbouring: ClassVar[str] = "add_remove"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.kind or cls.kind in _REGISTRY:
            raise TypeError(f"event class {cls.__name__} needs a new, unique `kind` (got {cls.kind!r})")
        _REGISTRY[cls.kind] = cls

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def event_from_dict(d: dict[str, Any]) -> PrivacyEvent:
    """Rebuild an event from :meth:`PrivacyEvent.to_dict` output; unknown kinds raise UnsupportedEventError."""
    fields = dict(d)
    kind = fields.pop("kind", None)
    cls = _REGISTRY.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise UnsupportedEventError(f"unknown privacy event kind {kind!r}")
    return cls(**fields)


def event_from_json(s: str) -> PrivacyEvent:
    return event_from_dict(json.loads(s))


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_subsampled(sensitivity: float, sampling_rate: float) -> None:
    _check_positive("sensitivity", sensitivity)
    _check_positive("sampling_rate", sampling_rate)
    if sampling_rate > 1:
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")


@dataclass(frozen=True)
class SubsampledGaussianEvent(PrivacyEvent):
    """Gaussian noise on a statistic of L2 sensitivity ``sensitivity``, under Poisson subsampling.

    The statistic is computed on a Poisson(``sampling_rate``) sample of the private records (add/remove
    neighbours) and released with iid N(0, σ²) noise per coordinate, σ = ``sensitivity * noise_multiplier``.
    ``noise_multiplier`` is therefore σ per unit of sensitivity — the quantity the PRV/RDP accountants
    take. ``mechanism`` is a label (e.g. "esa") and does not change the cost.
    """

    kind: ClassVar[str] = "subsampled_gaussian"

    noise_multiplier: float
    sampling_rate: float
    sensitivity: float
    mechanism: str = ""

    def __post_init__(self) -> None:
        _check_positive("noise_multiplier", self.noise_multiplier)
        _check_subsampled(self.sensitivity, self.sampling_rate)

    @property
    def sigma(self) -> float:
        """Noise standard deviation actually added, per coordinate."""
        return self.sensitivity * self.noise_multiplier


@dataclass(frozen=True)
class SubsampledExponentialEvent(PrivacyEvent):
    """One ε-DP exponential mechanism applied to a Poisson-subsampled private set (add/remove neighbours).

    The records enter the mechanism's input independently with probability ``sampling_rate``; the mechanism
    samples with Pr[y] ∝ exp(ε·u(y)/(2·``sensitivity``)) (or equivalently adds Gumbel noise of scale
    2·``sensitivity``/ε to the utilities), so it is ``epsilon``-DP. ``epsilon`` is the pure-DP parameter of one
    application; ``sensitivity`` is the utility sensitivity already used by the mechanism and does not change
    the cost. The RDP accountant uses the Bun–Steinke RDP bound (MECHANISMS §A.2). ``mechanism`` is a label.
    """

    kind: ClassVar[str] = "subsampled_exponential"

    epsilon: float
    sampling_rate: float
    sensitivity: float
    mechanism: str = ""

    def __post_init__(self) -> None:
        _check_positive("epsilon", self.epsilon)
        _check_subsampled(self.sensitivity, self.sampling_rate)


@dataclass(frozen=True)
class SubsampledPTREvent(PrivacyEvent):
    """One KSA-PTR query (paper 001 App A.3.2, Alg 6–7, Thm 10–12; MECHANISMS §4) on a Poisson subsample.

    The records enter the query independently with probability ``sampling_rate`` (add/remove neighbours). On
    that sample the mechanism runs an ``epsilon_em``-DP exponential mechanism (FindBestK) and then a
    propose-test-release test: Gaussian noise of std ``sensitivity * noise_multiplier`` on a statistic of
    sensitivity ``sensitivity``, calibrated so that the test passes with probability ≤ ``delta0`` when the
    released set is not stable. The query is ``delta0``-approximately (α/(2·nm²) + ε_EM(α))-RDP (Thm 10–11); under
    Poisson(q) it is q·``delta0``-approximately RDP, amplified at the rate q/(1−q·δ0) (see ``amplified_rate``).
    A query whose test fails costs the same as one that passes. ``mechanism`` is a label.
    """

    kind: ClassVar[str] = "subsampled_ptr"

    epsilon_em: float
    noise_multiplier: float
    delta0: float
    sampling_rate: float
    sensitivity: float = 2.0
    mechanism: str = "ksa_ptr"

    def __post_init__(self) -> None:
        _check_positive("epsilon_em", self.epsilon_em)
        _check_positive("noise_multiplier", self.noise_multiplier)
        _check_positive("delta0", self.delta0)
        if self.delta0 >= 1:
            raise ValueError(f"delta0 must be in (0, 1), got {self.delta0!r}")
        _check_subsampled(self.sensitivity, self.sampling_rate)

    @property
    def sigma(self) -> float:
        """Noise standard deviation of the PTR test."""
        return self.sensitivity * self.noise_multiplier

    @property
    def failure_delta(self) -> float:
        """q·δ0: this query's share of δ (Thm 12); the shares of composed queries add up."""
        return self.sampling_rate * self.delta0

    @property
    def amplified_rate(self) -> float:
        """q/(1−q·δ0), at most 1: the rate at which the conditional mechanism (the PTR test passed where it should
        fail, probability ≤ q·δ0, set aside) is amplified. Paper 001 Thm 12 uses q(1−δ0)/(1−q·δ0), whose proof
        has a gap; conditioning on an event of probability ≥ 1 − q·δ0 raises a record's inclusion probability to
        at most q/(1−q·δ0), a larger rate and so a sound one (ε moves by ≤ 1e-3 at the planned settings)."""
        q, d0 = self.sampling_rate, self.delta0
        return min(1.0, q / (1 - q * d0))


@dataclass(frozen=True)
class SubsampledDPMEvent(PrivacyEvent):
    """One SGA query (paper 004; MECHANISMS §5, §12.1 items 8–9): DPM private clustering on a Poisson subsample.

    The records enter the query independently with probability ``sampling_rate`` (add/remove neighbours); one
    sampled record changes one private teacher output, i.e. replaces one embedding point of the clustering. On
    those points the mechanism releases, per depth i of the tree, the split choices of the nodes at that depth
    (exponential mechanisms, each ``em_epsilons[i]``-DP for one point added to or removed from its node) and the
    Laplace counts of the children created at depth i+1 (``count_epsilons[i]``-DP per count, sensitivity 1),
    then the leaf sums with Gaussian noise of std ``sensitivity * noise_multiplier`` (unit-norm points: a
    replaced point moves the vector of leaf sums by ≤ 2). A replaced point leaves one node and enters at most
    one other at every depth, so each depth is charged ``nodes_per_level`` (= 2) exponential mechanisms and
    ``nodes_per_level`` Laplace counts. The root count (the number of points) and the split interval width
    (from public points) are public. ``mechanism`` is a label.
    """

    kind: ClassVar[str] = "subsampled_dpm"

    em_epsilons: tuple[float, ...]
    count_epsilons: tuple[float, ...]
    noise_multiplier: float
    sampling_rate: float
    sensitivity: float = 2.0
    nodes_per_level: int = 2
    mechanism: str = "sga"

    def __post_init__(self) -> None:
        for name in ("em_epsilons", "count_epsilons"):
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values)  # JSON gives lists; the event stays hashable
            if not values:
                raise ValueError(f"{name} must list one ε per level")
            for v in values:
                _check_positive(name, v)
        if len(self.em_epsilons) != len(self.count_epsilons):
            raise ValueError("em_epsilons and count_epsilons must have one entry per level each")
        _check_positive("noise_multiplier", self.noise_multiplier)
        _check_subsampled(self.sensitivity, self.sampling_rate)
        if isinstance(self.nodes_per_level, bool) or not isinstance(self.nodes_per_level, int) \
                or self.nodes_per_level < 1:
            raise ValueError(f"nodes_per_level must be an integer >= 1, got {self.nodes_per_level!r}")

    @property
    def sigma(self) -> float:
        """Noise standard deviation per coordinate of a leaf sum."""
        return self.sensitivity * self.noise_multiplier

    @property
    def pure_epsilon(self) -> float:
        """ε of the split choices and counts together (pure DP, before subsampling)."""
        return self.nodes_per_level * (math.fsum(self.em_epsilons) + math.fsum(self.count_epsilons))


@dataclass(frozen=True)
class SubsampledPureDPEvent(PrivacyEvent):
    """One ``epsilon``-DP mechanism on a Poisson(``sampling_rate``) subsample (add/remove neighbours), with no
    further structure the accountant may use — e.g. report-noisy-max with exponential noise (paper 002).

    Amplified to ε̄ = log(1 + q(e^ε − 1)); the PRV accountant composes it as randomized response with ε̄ (the
    worst ε̄-DP mechanism, 002's ``PureDPMechanism``), the RDP accountant with the pure-DP bound (Bun–Steinke,
    which holds for every ε-DP mechanism). ``sensitivity`` is the one the mechanism used; ``mechanism`` a label.
    """

    kind: ClassVar[str] = "subsampled_pure_dp"

    epsilon: float
    sampling_rate: float
    sensitivity: float
    mechanism: str = ""

    def __post_init__(self) -> None:
        _check_positive("epsilon", self.epsilon)
        _check_subsampled(self.sensitivity, self.sampling_rate)

    @property
    def amplified_epsilon(self) -> float:
        """ε̄ = log(1 + q(e^ε − 1)) (Balle et al. 2018; 002 Thm A.5)."""
        return math.log1p(self.sampling_rate * math.expm1(self.epsilon))


def _check_order(alpha: int) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, int) or alpha < 2:
        raise ValueError(f"alpha must be an integer Rényi order >= 2, got {alpha!r}")


@dataclass(frozen=True)
class DPSMozoEvent(PrivacyEvent):
    """``tokens`` token steps of DPS-MOZO (paper 000, Alg 1; MECHANISMS §7) — **substitution** neighbours.

    Every step draws ``sampling_rate``·|D| demonstrations without replacement and mixes each one-shot
    distribution with the public zero-shot one inside a Rényi ball around it. A step is charged 4βα at every
    order ≤ α (nothing known above α), amplified with Wang et al. 2019's bound for sampling without replacement.
    ``guarantee`` says what that 4βα rests on:

    * ``"proven"`` — one demonstration per step and the ball enforced at order 2α with radius 4βα/c(α),
      c(α) = 1 + (α−½)/(α−1): two releases for neighbouring data are then within 4βα at order α (Mironov's weak
      triangle inequality; ``dpicl.privacy.mechanisms.dps_mozo``).
    * ``"paper-claim"`` — paper 000's Thm B.3 claim, which has no valid proof (MECHANISMS §7 and §12.1 item 15;
      docs/PRIVACY.md): several demonstrations per step (their renormalised product), opted into explicitly, or an
      entry written before the field existed (ball at order α, for which the claim is false even for one shot).
      It is the default, so that an entry never claims more than it was written with.

    Being for substitution neighbours, it cannot be composed with add/remove events in one ledger.
    """

    kind: ClassVar[str] = "dps_mozo"
    neighbouring: ClassVar[str] = "substitution"
    guarantees: ClassVar[tuple[str, ...]] = ("proven", "paper-claim")

    beta: float
    alpha: int
    sampling_rate: float
    tokens: int
    mechanism: str = "dps_mozo"
    guarantee: str = "paper-claim"

    def __post_init__(self) -> None:
        _check_positive("beta", self.beta)
        _check_order(self.alpha)
        _check_positive("sampling_rate", self.sampling_rate)
        if self.sampling_rate > 1:
            raise ValueError(f"sampling_rate must be in (0, 1], got {self.sampling_rate!r}")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1:
            raise ValueError(f"tokens must be an integer >= 1, got {self.tokens!r}")
        if self.guarantee not in self.guarantees:
            raise ValueError(f"guarantee must be one of {self.guarantees}, got {self.guarantee!r}")


@dataclass(frozen=True)
class FixedOrderRDPEvent(PrivacyEvent):
    """A Rényi-DP bound ``rdp`` at the single integer order ``alpha`` of a mechanism without subsampling (add/remove
    neighbours); being a bound at α it holds at every order ≤ α too, and nothing is known above α.

    AdaPMixED (paper 003; MECHANISMS §8) charges a query this way: its data-independent upper bound, the noisy
    screening plus the PMixED bound of every token, at the order α its Rényi balls are drawn for.
    """

    kind: ClassVar[str] = "fixed_order_rdp"

    alpha: int
    rdp: float
    mechanism: str = ""

    def __post_init__(self) -> None:
        _check_order(self.alpha)
        _check_positive("rdp", self.rdp)


@dataclass(frozen=True)
class PublicDataEvent(PrivacyEvent):
    """A release computed from public data and earlier DP releases only (e.g. in-context learning with DP synthetic
    demonstrations): post-processing, so it costs nothing. It exists so that every release has its ledger entry."""

    kind: ClassVar[str] = "public_data"

    mechanism: str = ""


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """``count`` applications of ``event`` charged as one ledger entry (e.g. every token step of a DP synthetic
    demonstration set, paper 002). Accountants compose it exactly as ``count`` separate copies."""

    kind: ClassVar[str] = "composed"

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if isinstance(self.event, dict):  # read back from JSON
            object.__setattr__(self, "event", event_from_dict(self.event))
        if not isinstance(self.event, PrivacyEvent) or isinstance(self.event, ComposedEvent):
            raise ValueError("a ComposedEvent wraps one (non-composed) privacy event")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"count must be an integer >= 1, got {self.count!r}")

    @property
    def neighbouring(self) -> str:  # type: ignore[override]
        return self.event.neighbouring

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "event": self.event.to_dict(), "count": self.count}


def flatten(events) -> list[tuple[PrivacyEvent, int]]:
    """(event, multiplicity) pairs with every ComposedEvent unwrapped."""
    return [(e.event, e.count) if isinstance(e, ComposedEvent) else (e, 1) for e in events]
