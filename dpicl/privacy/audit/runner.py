"""Running an audit: the registry of audited mechanisms, ``run_audit`` and its result."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..rng import benchmark_rng
from .cases import DEFAULT_DELTA, SPECS
from .estimate import lower_bound_from_pairs

DEFAULT_CONFIDENCE = 0.95


@dataclass
class AuditResult:
    """Outcome of one audit. ``passed`` is ``epsilon_lower_bound <= claimed_epsilon``.

    ``trials`` is the number of runs per neighbouring dataset (per pair); half of them chose the event
    (``selection``), the other half gave ``epsilon_lower_bound`` at ``confidence``. ``broken`` names the
    deliberately broken variant that ran (tests only), or is None.
    """

    mechanism: str
    claimed_epsilon: float
    epsilon_lower_bound: float
    passed: bool
    delta: float
    confidence: float
    trials: int
    pairs: int
    event: str
    direction: str
    pair: str
    point_estimate: float
    counts: dict
    neighbours: str
    statistic: str
    parameters: dict
    selection: str
    seed: int | None
    seconds: float
    broken: str | None = None
    note: str | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready: numbers are floats/ints, infinities become None."""
        return _jsonable({
            "mechanism": self.mechanism,
            "claimed_epsilon": self.claimed_epsilon,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "passed": self.passed,
            "delta": self.delta,
            "confidence": self.confidence,
            "trials": self.trials,
            "pairs": self.pairs,
            "event": self.event,
            "direction": self.direction,
            "pair": self.pair,
            "point_estimate": self.point_estimate,
            "counts": self.counts,
            "neighbours": self.neighbours,
            "statistic": self.statistic,
            "parameters": self.parameters,
            "selection": self.selection,
            "seed": self.seed,
            "seconds": self.seconds,
            "broken": self.broken,
            "note": self.note,
            "details": self.details,
        })


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def _resolve_broken(name: str, broken) -> str | None:
    variants = SPECS[name].broken_variants
    if broken is None or broken is False:
        return None
    if broken is True:
        return next(iter(variants))
    if broken not in variants:
        raise ValueError(f"unknown broken variant {broken!r} of {name}; one of: {', '.join(variants)}")
    return broken


def run_audit(
    name: str,
    trials: int | None = None,
    seed: int | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    delta: float = DEFAULT_DELTA,
    *,
    broken: bool | str | None = None,
    selection_fraction: float = 0.5,
) -> AuditResult:
    """Audit mechanism ``name`` (one of ``AUDITS``): run it ``trials`` times (default: the mechanism's own) on each
    dataset of its worst-case neighbouring pair(s), bound ε from below, compare with the claimed ε at ``delta``.

    ``seed`` fixes the random stream: allowed because an audit only ever runs on synthetic inputs (test mode);
    without it the generator is cryptographically seeded. ``broken`` (tests only) runs a deliberately broken
    variant — True for the first one, or its name (``AUDITS[name].broken_variants``) — with the correct
    mechanism's claim, to check that the audit catches it.
    """
    if name not in SPECS:
        raise ValueError(f"unknown mechanism {name!r}; one of: {', '.join(SPECS)}")
    spec = SPECS[name]
    if trials is None:
        trials = spec.default_trials
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 100:
        raise ValueError(f"trials must be an integer >= 100, got {trials!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    variant = _resolve_broken(name, broken)
    rng = benchmark_rng(seed)
    start = time.perf_counter()
    case = spec.function(int(trials), rng, float(delta), variant)
    bound = lower_bound_from_pairs(case.pairs, delta, confidence, selection_fraction)
    return AuditResult(
        mechanism=name,
        claimed_epsilon=float(case.claimed_epsilon),
        epsilon_lower_bound=float(bound.epsilon_lower_bound),
        passed=bool(bound.epsilon_lower_bound <= case.claimed_epsilon),
        delta=float(delta),
        confidence=float(confidence),
        trials=int(trials),
        pairs=len(case.pairs),
        event=bound.event,
        direction=bound.direction,
        pair=bound.pair,
        point_estimate=bound.point_estimate,
        counts={"numerator": [bound.k_num, bound.n_num], "denominator": [bound.k_den, bound.n_den]},
        neighbours=case.neighbours,
        statistic=case.statistic,
        parameters=case.parameters,
        selection=f"split: event chosen on the first {selection_fraction:.0%} of the trials, Clopper–Pearson bound "
                  "on the rest",
        seed=seed,
        seconds=time.perf_counter() - start,
        broken=variant,
        note=case.note,
        details=case.details,
    )


class MechanismAudit:
    """``AUDITS[name](trials=..., seed=..., confidence=..., delta=..., broken=...)`` runs ``run_audit(name, ...)``."""

    def __init__(self, name: str):
        self.name = name
        spec = SPECS[name]
        self.default_trials = spec.default_trials
        self.broken_variants = dict(spec.broken_variants)
        self.description = spec.description

    def __call__(self, **kwargs) -> AuditResult:
        return run_audit(self.name, **kwargs)

    def __repr__(self) -> str:
        return f"MechanismAudit({self.name!r})"


AUDITS: dict[str, MechanismAudit] = {name: MechanismAudit(name) for name in SPECS}
