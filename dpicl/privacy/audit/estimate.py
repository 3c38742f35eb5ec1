"""Statistics of an empirical privacy audit: Clopper–Pearson intervals and a lower bound on ε from output events.

If a mechanism M is (ε, δ)-DP, then for every event E and every pair of neighbouring inputs D, D′

    P[M(D) ∈ E] ≤ e^ε · P[M(D′) ∈ E] + δ,   hence   ε ≥ log((P[M(D) ∈ E] − δ) / P[M(D′) ∈ E]),

and the same with D and D′ swapped. An audit runs M many times on D and on D′ and replaces the two probabilities by
a Clopper–Pearson lower bound for the numerator and upper bound for the denominator (Jagielski et al. 2020,
Nasr et al. 2021). Both come from one two-sided interval at ``confidence`` each (each tail (1 − confidence)/2), so
the pair holds jointly with probability ≥ ``confidence`` and the reported bound exceeds the true ε of the pair
with probability ≤ 1 − ``confidence``.

Multiple comparisons. Searching many events (thresholds, output sets, directions, neighbouring pairs) and
reporting the best interval would bias the bound upwards. We use **sample splitting**: the first
``selection_fraction`` of the trials of every dataset choose the event (the one whose bound, computed on those
trials alone, is the largest), and the Clopper–Pearson bound is computed once, for that single event, on the
remaining trials, which played no part in the choice. The bound is therefore valid at ``confidence`` whatever the
selection did. (A Bonferroni correction over a fixed grid of events would be the alternative; splitting keeps
the full confidence for the final interval and lets the event family depend on the data.)

Event families:

* continuous scalar outputs (a noisy margin, a projection of a noisy vector): one-sided threshold events
  {s > t} and {s ≤ t}, t from the pooled selection samples at ranks spaced geometrically from both ends (tails
  are where the privacy loss is largest);
* discrete outputs (a released token, class, set): sets of outcomes; the outcomes are ranked by their estimated
  likelihood ratio on the selection trials and the candidate events are the prefixes of that ranking (the
  Neyman–Pearson-optimal sets if the estimates were exact).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..search import smallest

__all__ = [
    "EventBound",
    "SamplePair",
    "clopper_pearson",
    "epsilon_lower_bound",
    "lower_bound_from_pairs",
    "pair_epsilon",
]

_THRESHOLDS_PER_TAIL = 400  # candidate thresholds per tail of the pooled selection samples
_MAX_DESCRIBED = 8  # outcomes named in an event description


def _check_confidence(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    return float(delta)


def clopper_pearson(k, n, confidence: float = 0.95):
    """Two-sided Clopper–Pearson (exact binomial) interval for k successes in n trials: (lower, upper).

    Each tail has probability (1 − confidence)/2; lower = 0 when k = 0 and upper = 1 when k = n, so for k = 0 the
    upper bound is 1 − ((1 − confidence)/2)^(1/n). Works elementwise on arrays (returns arrays) and on scalars
    (returns floats).
    """
    from scipy.stats import beta as beta_dist  # scipy.stats takes a third of a second to import: on use only

    c = _check_confidence(confidence)
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    if np.any(n_arr < 1) or np.any(k_arr < 0) or np.any(k_arr > n_arr) or np.any(k_arr != np.round(k_arr)):
        raise ValueError("clopper_pearson needs integers 0 <= k <= n with n >= 1")
    tail = (1.0 - c) / 2.0
    # keep the Beta parameters valid where the closed-form ends (0 and 1) apply
    lower = np.where(k_arr > 0, beta_dist.ppf(tail, np.maximum(k_arr, 1), n_arr - k_arr + 1), 0.0)
    upper = np.where(k_arr < n_arr, beta_dist.ppf(1 - tail, k_arr + 1, np.maximum(n_arr - k_arr, 1)), 1.0)
    if lower.ndim == 0:
        return float(lower), float(upper)
    return lower, upper


def _log_ratio_bound(k_num, n_num, k_den, n_den, delta: float, confidence: float) -> np.ndarray:
    """log((CP_lower(k_num/n_num) − δ) / CP_upper(k_den/n_den)), −inf where the numerator is ≤ 0."""
    lower, _ = clopper_pearson(np.asarray(k_num), np.broadcast_to(n_num, np.shape(k_num)), confidence)
    _, upper = clopper_pearson(np.asarray(k_den), np.broadcast_to(n_den, np.shape(k_den)), confidence)
    num = np.asarray(lower) - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(num > 0, np.log(np.maximum(num, 1e-300)) - np.log(upper), -np.inf)


def _point_estimate(k_num: int, n_num: int, k_den: int, n_den: int, delta: float) -> float:
    num = k_num / n_num - delta
    if num <= 0:
        return 0.0
    if k_den == 0:
        return math.inf
    return max(0.0, math.log(num / (k_den / n_den)))


@dataclass(frozen=True)
class SamplePair:
    """Outputs of a mechanism on two neighbouring inputs D and D′ (one entry per trial).

    ``kind`` is "continuous" (a real-valued statistic, thresholded) or "discrete" (outcome labels: ints or
    strings, sets of which are the events). ``label`` names the pair in reports.
    """

    samples_d: np.ndarray
    samples_d_prime: np.ndarray
    kind: str = "continuous"
    label: str = "D, D′"

    def __post_init__(self):
        if self.kind not in ("continuous", "discrete"):
            raise ValueError(f"kind must be 'continuous' or 'discrete', got {self.kind!r}")
        for name in ("samples_d", "samples_d_prime"):
            a = np.asarray(getattr(self, name))
            if a.ndim != 1 or a.size < 4:
                raise ValueError(f"{name} must be a 1-D array of at least 4 trials, got shape {a.shape}")
            if self.kind == "continuous":
                a = a.astype(np.float64)
                if np.isnan(a).any():
                    raise ValueError(f"{name} contains NaN")
            object.__setattr__(self, name, a)


@dataclass(frozen=True)
class EventBound:
    """The audit's answer for one (set of) neighbouring pair(s).

    ``epsilon_lower_bound`` = max(0, log((CP_lower(k_num/n_num) − δ)/CP_upper(k_den/n_den))) on the held-out
    trials for the single event chosen on the selection trials; ``direction`` says which dataset is the numerator
    ("D" means P[M(D) ∈ E] ≤ e^ε P[M(D′) ∈ E] + δ was tested). ``point_estimate`` is the same ratio without
    confidence intervals (∞ when the event never occurred on the denominator side).
    """

    epsilon_lower_bound: float
    event: str
    direction: str
    pair: str
    k_num: int
    n_num: int
    k_den: int
    n_den: int
    p_num_lower: float
    p_den_upper: float
    point_estimate: float
    selection_bound: float
    delta: float
    confidence: float

    def to_dict(self) -> dict:
        return {
            "epsilon_lower_bound": float(self.epsilon_lower_bound),
            "event": self.event,
            "direction": self.direction,
            "pair": self.pair,
            "counts": {"numerator": [int(self.k_num), int(self.n_num)],
                       "denominator": [int(self.k_den), int(self.n_den)]},
            "p_numerator_lower": float(self.p_num_lower),
            "p_denominator_upper": float(self.p_den_upper),
            "point_estimate": _finite_or_none(self.point_estimate),
            "selection_bound": _finite_or_none(self.selection_bound),
        }


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class _Candidate:
    score: float
    pair_index: int
    numerator_is_d: bool
    # continuous: (side, threshold); discrete: the set of outcome labels
    side: str | None = None
    threshold: float | None = None
    outcomes: tuple | None = None


def _split(a: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    m = int(round(a.size * fraction))
    m = min(max(m, 2), a.size - 2)
    return a[:m], a[m:]


def _continuous_candidate(x: np.ndarray, y: np.ndarray, delta: float, confidence: float, index: int) -> _Candidate:
    xs, ys = np.sort(x), np.sort(y)
    pooled = np.sort(np.concatenate([xs, ys]))
    n = pooled.size
    ranks = np.unique(np.round(np.geomspace(1, n / 2, _THRESHOLDS_PER_TAIL)).astype(np.int64))
    ranks = np.unique(np.concatenate([ranks - 1, n - ranks - 1]))
    ranks = ranks[(ranks >= 0) & (ranks < n)]
    t = np.unique(pooled[ranks])
    above_x = xs.size - np.searchsorted(xs, t, side="right")
    above_y = ys.size - np.searchsorted(ys, t, side="right")
    options = [  # (side, numerator is D, k_num, n_num, k_den, n_den)
        ("above", True, above_x, xs.size, above_y, ys.size),
        ("above", False, above_y, ys.size, above_x, xs.size),
        ("below", True, xs.size - above_x, xs.size, ys.size - above_y, ys.size),
        ("below", False, ys.size - above_y, ys.size, xs.size - above_x, xs.size),
    ]
    best = _Candidate(-math.inf, index, True, "above", float(t[0]))
    for side, num_is_d, k_num, n_num, k_den, n_den in options:
        scores = _log_ratio_bound(k_num, n_num, k_den, n_den, delta, confidence)
        i = int(np.argmax(scores))
        if scores[i] > best.score:
            best = _Candidate(float(scores[i]), index, num_is_d, side, float(t[i]))
    return best


def _discrete_candidate(x: np.ndarray, y: np.ndarray, delta: float, confidence: float, index: int) -> _Candidate:
    labels, inverse = np.unique(np.concatenate([x, y]), return_inverse=True)
    cx = np.bincount(inverse[: x.size], minlength=labels.size)
    cy = np.bincount(inverse[x.size:], minlength=labels.size)
    log_ratio = np.log((cx + 0.5) / x.size) - np.log((cy + 0.5) / y.size)
    best = _Candidate(-math.inf, index, True, outcomes=(labels[0].item(),))
    for num_is_d in (True, False):
        order = np.argsort(-log_ratio if num_is_d else log_ratio, kind="stable")
        c_num, c_den = (cx, cy) if num_is_d else (cy, cx)
        n_num, n_den = (x.size, y.size) if num_is_d else (y.size, x.size)
        scores = _log_ratio_bound(np.cumsum(c_num[order]), n_num, np.cumsum(c_den[order]), n_den, delta, confidence)
        i = int(np.argmax(scores))
        if scores[i] > best.score:
            best = _Candidate(float(scores[i]), index, num_is_d,
                              outcomes=tuple(v.item() for v in labels[order[: i + 1]]))
    return best


def _describe(candidate: _Candidate) -> str:
    if candidate.outcomes is None:
        op = ">" if candidate.side == "above" else "<="
        return f"statistic {op} {candidate.threshold:.6g}"
    shown = [str(v) for v in candidate.outcomes[:_MAX_DESCRIBED]]
    more = len(candidate.outcomes) - len(shown)
    return "output in {" + ", ".join(shown) + (f", … ({more} more)" if more > 0 else "") + "}"


def lower_bound_from_pairs(
    pairs: Sequence[SamplePair],
    delta: float,
    confidence: float = 0.95,
    selection_fraction: float = 0.5,
) -> EventBound:
    """Lower bound on ε from one or more neighbouring pairs, with the event chosen on held-out-free selection
    trials (module docstring): the pair, direction and event with the best selection-trial bound are evaluated
    once on the remaining trials."""
    delta = _check_delta(delta)
    confidence = _check_confidence(confidence)
    if not 0 < selection_fraction < 1:
        raise ValueError(f"selection_fraction must be in (0, 1), got {selection_fraction!r}")
    if not pairs:
        raise ValueError("no sample pairs")
    best: _Candidate | None = None
    held_out = []
    for i, pair in enumerate(pairs):
        x_sel, x_est = _split(pair.samples_d, selection_fraction)
        y_sel, y_est = _split(pair.samples_d_prime, selection_fraction)
        held_out.append((x_est, y_est))
        pick = _continuous_candidate if pair.kind == "continuous" else _discrete_candidate
        candidate = pick(x_sel, y_sel, delta, confidence, i)
        if best is None or candidate.score > best.score:
            best = candidate
    assert best is not None
    x_est, y_est = held_out[best.pair_index]
    if best.outcomes is None:
        in_x = x_est > best.threshold if best.side == "above" else x_est <= best.threshold
        in_y = y_est > best.threshold if best.side == "above" else y_est <= best.threshold
    else:
        outcomes = np.asarray(best.outcomes)
        in_x, in_y = np.isin(x_est, outcomes), np.isin(y_est, outcomes)
    k_x, k_y = int(in_x.sum()), int(in_y.sum())
    if best.numerator_is_d:
        k_num, n_num, k_den, n_den = k_x, x_est.size, k_y, y_est.size
    else:
        k_num, n_num, k_den, n_den = k_y, y_est.size, k_x, x_est.size
    lower, _ = clopper_pearson(k_num, n_num, confidence)
    _, upper = clopper_pearson(k_den, n_den, confidence)
    bound = float(_log_ratio_bound(np.asarray([k_num]), n_num, np.asarray([k_den]), n_den, delta, confidence)[0])
    event = _describe(best)
    if not math.isfinite(best.score):
        event = f"no informative event on the selection trials (evaluated: {event})"
    return EventBound(
        epsilon_lower_bound=max(0.0, bound),
        event=event,
        direction="D" if best.numerator_is_d else "D′",
        pair=pairs[best.pair_index].label,
        k_num=k_num, n_num=n_num, k_den=k_den, n_den=n_den,
        p_num_lower=lower, p_den_upper=upper,
        point_estimate=_point_estimate(k_num, n_num, k_den, n_den, delta),
        selection_bound=best.score,
        delta=delta,
        confidence=confidence,
    )


def epsilon_lower_bound(
    samples_d,
    samples_d_prime,
    delta: float,
    confidence: float = 0.95,
    *,
    discrete: bool = False,
    selection_fraction: float = 0.5,
) -> EventBound:
    """Lower bound on ε from the outputs of a mechanism on one neighbouring pair (module docstring).

    ``discrete=False``: the samples are real numbers and the events are thresholds; ``discrete=True``: they are
    outcome labels and the events are sets of outcomes. The bound is ``.epsilon_lower_bound``.
    """
    pair = SamplePair(np.asarray(samples_d), np.asarray(samples_d_prime), "discrete" if discrete else "continuous")
    return lower_bound_from_pairs([pair], delta, confidence, selection_fraction)


def pair_epsilon(p, q, delta: float) -> float:
    """Exact smallest ε with P(E) ≤ e^ε Q(E) + δ and Q(E) ≤ e^ε P(E) + δ for every event E, for two discrete
    distributions p, q over the same outcomes (the hockey-stick divergence solved for ε). ∞ if none exists."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError("p and q must be 1-D distributions over the same outcomes")
    delta = _check_delta(delta)

    def excess(eps: float) -> float:
        return max(np.maximum(p - math.exp(eps) * q, 0).sum(), np.maximum(q - math.exp(eps) * p, 0).sum())

    if excess(0.0) <= delta:
        return 0.0
    # the smallest ε whose excess is ≤ δ (the upper end of the final bracket)
    eps = smallest(lambda e: excess(e) <= delta, start=1.0, limit=700, lower=0.0, steps=100)
    return math.inf if eps is None else eps
