"""DPM private clustering (DP Mondrian, Liebenow et al. 2024) as used by SGA (paper 004; MECHANISMS §5, §12.1
items 8–9), in its privacy-correct variant.

DPM builds a binary tree over the points: at each node an exponential mechanism (EM) picks a split (a dimension
and an interval of a fixed grid; the split position is the interval's centre), Laplace noise is added to the two
child counts, a node whose child would hold ≤ n/2^L points (noisily) becomes a leaf, and after L levels every node
is a leaf. Each leaf releases its noisy mean (DPAvg): Σx plus Gaussian noise, divided by the leaf's noisy count.

Setting. The points are unit-norm (L2 ≤ 1) sentence embeddings of N private teacher outputs plus N public teacher
outputs; n is public (fixed ensemble sizes). Neighbouring datasets differ by one private point being *replaced*
(one private record changes one teacher output). Hence:

* the root count n is exact (free), and the split limit n/2^L is public;
* the bounds are the fixed public box [−1, 1]^d, never min/max of the data (§12.1 item 9), so the candidate
  splits do not depend on the data;
* at each depth, given the tree released so far, the replaced point leaves one node and enters at most one other:
  at most 2 nodes' EM choices and at most 2 Laplace child counts per depth change, each by one point. The
  accountant (not this module) therefore charges 2× the per-depth EM ε and 2× the per-depth Laplace cost;
* the vector of all leaf sums changes by ≤ 2 in L2 (x leaves one sum, x′ enters one), so the Gaussian noise on
  each leaf sum has sensitivity 2; its per-query σ comes from composition over all queries (§12.1 item 8).

Split utility. For a node S with noisy count ñ_S (already released, hence fixed), the score of (d′, b) is
w_c·c + w_e·e with emptiness e = clip(1 − count_b/ñ_S, 0, 1) and centreness c, a continuous piecewise-linear
function of p (the number of points left of the interval centre) with slopes t/(ñ_S·q) and
(1 − t)/(ñ_S(½ − q)). Adding, removing or replacing one point moves count_b and p by at most 1 each, so every
score moves by at most UTILITY_SCALE/ñ_S with UTILITY_SCALE = w_c·max(t/q, (1−t)/(½−q)) + w_e = 3.6 + 5 = 8.6.
The reference code's lower bound ñ − λ on the true count is not needed: the scores use ñ_S, not the true count.
(With a count scale of 0 the child counts are exact and this argument, like any privacy, is void: scale 0 and
ε = inf exist for tests and for the non-private ε = ∞ baseline only.)

The interval width β is estimated from the PUBLIC points only (:func:`interval_size`), so it is free; the
original spent ε_bandwidth on it (and 004 declared it public with ε = 10⁴).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

T_CENTRE = 0.3  # centreness at rank n·q (DPM's t)
Q_CENTRE = 1 / 12  # DPM's q
W_CENTRE = 1.0  # weight of the centreness in the split score
W_EMPTY = 5.0  # weight of the emptiness in the split score
# Lipschitz constant of a split score in the counts, times ñ_S (module docstring): 1·3.6 + 5 = 8.6
UTILITY_SCALE = W_CENTRE * max(T_CENTRE / Q_CENTRE, (1 - T_CENTRE) / (0.5 - Q_CENTRE)) + W_EMPTY
LOWER, UPPER = -1.0, 1.0  # the public box of unit-norm embeddings, per coordinate
_NORM_TOL = 1e-6
_SIGMA_GRID = (UPPER - LOWER) / 2 * np.arange(1, 60) / 100  # 0.01…0.59 of the half-width (original: 0.5…29.5 of 100)


def _check_number(name: str, value: float, *, positive: bool, allow_inf: bool = False) -> float:
    is_number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    v = float(value) if is_number else math.nan
    if math.isnan(v) or (math.isinf(v) and not allow_inf) or (v <= 0 if positive else v < 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a {'' if allow_inf else 'finite '}number {bound}, got {value!r}")
    return v


def _check_int(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _unit_ball_rows(x: np.ndarray) -> np.ndarray:
    """In place: non-finite rows become the zero vector, rows with L2 norm > 1 are scaled to norm 1 (overflow-safe:
    each row is pre-scaled by its max |x|, so a finite row whose norm overflows is still scaled to its direction)."""
    x[~np.isfinite(x).all(axis=1)] = 0.0
    scale = np.max(np.abs(x), axis=1, keepdims=True)  # d ≥ 1, so defined for n = 0 too
    direction = x / np.where(scale > 0, scale, 1.0)
    dir_norm = np.linalg.norm(direction, axis=1, keepdims=True)  # in [1, √d], or 0 for a zero row
    with np.errstate(over="ignore"):  # a norm beyond the float range is simply > 1
        over = (scale * dir_norm)[:, 0] > 1
    x[over] = direction[over] / dir_norm[over]
    return x


def _check_points(points: np.ndarray, name: str = "points", allow_empty: bool = False, *,
                  private: bool = True) -> np.ndarray:
    """Float copy of an n×d array whose rows lie in the unit L2 ball.

    ``private`` points (the default: the points DPM clusters hold private embeddings) are never refused for their
    values, since by then the query has been charged and an error that depends on private data would itself leak
    it. A row with NaN/inf counts as the zero vector (a fixed public value) and a row with L2 norm > 1 is scaled to
    norm exactly 1 (as ESA clips; within 1e-6 of the ball this is mere rounding), each a function of that row
    alone, so one replaced point still moves the leaf sums by ≤ 2. Public points (``private=False``) must already
    be finite with norm ≤ 1 (+1e-6, then scaled to exactly 1), else ValueError. Only the shape, which is public,
    is checked either way. Never echoes point values: they may be private.
    """
    x = np.array(points, dtype=np.float64)  # a copy: the caller's array is never modified
    if x.ndim != 2 or x.shape[1] < 1 or (x.shape[0] < 1 and not allow_empty):
        need = "n×d" if allow_empty else "non-empty n×d"
        raise ValueError(f"{name} must be a {need} array with d >= 1, got shape {x.shape}")
    if private:
        return _unit_ball_rows(x)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite (NaN or inf found); drop or re-embed those rows")
    norms = np.linalg.norm(x, axis=1)
    if np.any(norms > 1 + _NORM_TOL):
        raise ValueError(f"every row of {name} must have L2 norm <= 1 ({int(np.sum(norms > 1 + _NORM_TOL))} rows "
                         "exceed it); normalise the embeddings to unit norm first")
    return _unit_ball_rows(x)  # within the tolerance: scale to exactly 1, so the sensitivity 2 holds exactly


def level_shares(total: float, levels: int, first: int = 0) -> np.ndarray:
    """``total`` split over ``levels`` consecutive depths first..first+levels−1 with weights √(2^i) (DPM's rule).

    Deeper levels hold fewer points per node, so they get more budget. The shares sum to ``total``.
    """
    total = _check_number("total", total, positive=False, allow_inf=True)
    levels = _check_int("levels", levels, 1)
    first = _check_int("first", first, 0)
    w = np.sqrt(2.0) ** np.arange(first, first + levels)
    return total * (w / w.sum())


@dataclass(frozen=True)
class DPMParams:
    """Per-query DPM noise; L = len(em_epsilons) split levels.

    em_epsilons[i]: ε of the split choice at depth i (math.inf = exact argmax); count_scales[i]: Laplace scale of
    the child counts created by the splits at depth i, i.e. the counts of depth i+1 (0 = exact); noise_std: std
    per coordinate of the Gaussian noise on each leaf sum (0 = exact); interval: β, the public width hint of the
    candidate split intervals.
    """

    em_epsilons: tuple[float, ...]
    count_scales: tuple[float, ...]
    noise_std: float
    interval: float

    def __post_init__(self):
        for name in ("em_epsilons", "count_scales"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
                raise ValueError(f"{name} must be a sequence of numbers, one per split level, got {value!r}")
        em = tuple(_check_number(f"em_epsilons[{i}]", e, positive=True, allow_inf=True)
                   for i, e in enumerate(self.em_epsilons))
        counts = tuple(_check_number(f"count_scales[{i}]", s, positive=False) for i, s in enumerate(self.count_scales))
        if len(em) < 1:
            raise ValueError("em_epsilons must hold at least one level")
        if len(counts) != len(em):
            raise ValueError(f"count_scales has {len(counts)} entries but em_epsilons has {len(em)}: "
                             "give one of each per split level")
        object.__setattr__(self, "em_epsilons", em)
        object.__setattr__(self, "count_scales", counts)
        object.__setattr__(self, "noise_std", _check_number("noise_std", self.noise_std, positive=False))
        object.__setattr__(self, "interval", _check_number("interval", self.interval, positive=True))

    @property
    def levels(self) -> int:
        """L, the number of split levels."""
        return len(self.em_epsilons)


@dataclass(frozen=True, eq=False)
class Cluster:
    """One released leaf: its noisy mean and its noisy count (both DP outputs)."""

    centre: np.ndarray
    noisy_count: float


def _grid(interval: float) -> tuple[int, float]:
    """(B, w): number and width of the candidate intervals tiling [LOWER, UPPER]."""
    b = max(1, int((UPPER - LOWER) / interval))
    return b, (UPPER - LOWER) / b


def _centreness(p: np.ndarray, n: float) -> np.ndarray:
    """DPM's centreness of a split with p points to its left, for a node of (noisy) size n.

    0 at the extremes, t at rank n·q, 1 at the median; continuous, slopes t/(nq) and (1−t)/(n/2 − nq).
    """
    a = n / 2 - np.abs(p - n / 2)  # distance in rank to the nearer end (negative when p > n: n is noisy)
    outer = np.abs(n / 2 - p) >= n / 2 - n * Q_CENTRE
    c_outer = a * T_CENTRE / (n * Q_CENTRE)
    c_inner = (T_CENTRE - 2 * Q_CENTRE) / (1 - 2 * Q_CENTRE) + a * (1 - T_CENTRE) / (n / 2 - n * Q_CENTRE)
    return np.where(outer, c_outer, c_inner)


def _split_scores(x: np.ndarray, noisy_count: float, interval: float) -> np.ndarray:
    """split_scores on already-validated points."""
    b, w = _grid(interval)
    d = x.shape[1]
    centres = LOWER + (np.arange(b) + 0.5) * w
    # count_b per dimension: one bincount over all dimensions (interval b is [lo, hi), the last one closed)
    idx = np.clip(np.floor((x - LOWER) / w).astype(np.int64), 0, b - 1)
    counts = np.bincount((idx + b * np.arange(d)).ravel(), minlength=d * b).reshape(d, b)
    # p = #points with coordinate < interval centre, per dimension
    xs = np.sort(x, axis=0)
    left = np.empty((d, b), dtype=np.float64)
    for j in range(d):
        left[j] = np.searchsorted(xs[:, j], centres, side="left")
    empty = np.clip(1.0 - counts / noisy_count, 0.0, 1.0)
    return W_CENTRE * _centreness(left, noisy_count) + W_EMPTY * empty


def split_scores(points: np.ndarray, noisy_count: float, interval: float) -> np.ndarray:
    """Scores (d × B) of every candidate split (dimension d′, interval b) of the node holding ``points``.

    ``noisy_count`` is the node's released count ñ_S (> 0), used as n in both terms, so every score moves by at
    most UTILITY_SCALE/ñ_S when one point is added, removed or replaced (module docstring). ``points`` may be
    empty (a node can be noisily non-empty).
    """
    x = _check_points(points, allow_empty=True)
    n = _check_number("noisy_count", noisy_count, positive=True)
    beta = _check_number("interval", interval, positive=True)
    return _split_scores(x, n, beta)


def choose_split(scores: np.ndarray, epsilon: float, noisy_count: float, rng: np.random.Generator) -> tuple[int, int]:
    """ε-DP choice of a split: (dimension, interval index).

    Exponential mechanism with Δu = UTILITY_SCALE/ñ: Pr[(d′, b)] ∝ exp(ε·score/(2Δu)), drawn as the argmax of
    the scaled scores plus standard Gumbel noise (one draw per candidate; the candidate set is data-independent).
    ε = inf gives the exact argmax (first maximum) and draws nothing.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.size < 1:
        raise ValueError(f"scores must be a non-empty d×B array, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    eps = _check_number("epsilon", epsilon, positive=True, allow_inf=True)
    n = _check_number("noisy_count", noisy_count, positive=True)
    flat = s.ravel()
    if math.isinf(eps):
        k = int(np.argmax(flat))
    else:
        k = int(np.argmax(flat * (eps * n / (2.0 * UTILITY_SCALE)) + rng.gumbel(size=flat.size)))
    dim, b = divmod(k, s.shape[1])
    return dim, b


def _noisy(count: int, scale: float, rng: np.random.Generator) -> float:
    return float(count) + (float(rng.laplace(0.0, scale)) if scale > 0 else 0.0)


def _leaves(x: np.ndarray, params: DPMParams, rng: np.random.Generator) -> list[tuple[np.ndarray, float]]:
    """BuildClustering: (point indices, noisy count) of every leaf, depth first (S0 before S1)."""
    levels = params.levels
    split_limit = x.shape[0] / 2.0**levels
    _, w = _grid(params.interval)
    leaves = []
    stack = [(np.arange(x.shape[0]), float(x.shape[0]), 0)]  # root: n is public, so ñ_root = n exactly
    while stack:
        members, n_noisy, depth = stack.pop()
        if depth >= levels:
            leaves.append((members, n_noisy))
            continue
        s = x[members]
        dim, b = choose_split(_split_scores(s, n_noisy, params.interval), params.em_epsilons[depth], n_noisy, rng)
        pos = LOWER + (b + 0.5) * w
        right = s[:, dim] > pos
        s0, s1 = members[right], members[~right]
        scale = params.count_scales[depth]
        n0, n1 = _noisy(s0.size, scale, rng), _noisy(s1.size, scale, rng)  # both drawn, always
        if n0 <= split_limit or n1 <= split_limit:
            leaves.append((members, n_noisy))
        else:
            stack.append((s1, n1, depth + 1))
            stack.append((s0, n0, depth + 1))  # popped first
    return leaves


def cluster(points: np.ndarray, params: DPMParams, rng: np.random.Generator) -> list[Cluster]:
    """DPM on n unit-norm points: the leaves' noisy means and noisy counts, largest noisy count first.

    A row that is not finite counts as the zero vector and a row with norm > 1 is scaled to norm 1 (never an
    error: the query is already charged, and a failure that depends on private data would leak it).

    Every leaf is released, empty ones too (centre = noise / max(ñ, 1)): the set of leaves is determined by
    DP outputs only. The ordering uses the noisy counts, never the exact sizes (§12.1 item 9).
    """
    x = _check_points(points)
    if not isinstance(params, DPMParams):
        raise TypeError(f"params must be a DPMParams, got {type(params).__name__}")
    clusters = []
    for members, n_noisy in _leaves(x, params, rng):
        noisy_sum = x[members].sum(axis=0)
        if params.noise_std > 0:
            noisy_sum = noisy_sum + rng.normal(0.0, params.noise_std, size=x.shape[1])
        clusters.append(Cluster(noisy_sum / max(n_noisy, 1.0), n_noisy))
    return sorted(clusters, key=lambda c: -c.noisy_count)


def _gap_percentile(sorted_values: np.ndarray, percentile: float) -> np.ndarray:
    """Percentile of the consecutive gaps along the last axis."""
    return np.percentile(np.diff(sorted_values, axis=-1), percentile, axis=-1)


def interval_size(public_points: np.ndarray, rng: np.random.Generator, percentile: float = 65.0,
                  repeats: int = 30) -> float:
    """IntervalSizeEst on the PUBLIC points only (free): β = ½σ′ for the Gaussian σ′ whose gap statistic matches.

    Data statistic: sort every dimension, take the m−1 consecutive gaps, average them over the dimensions, and
    take their ``percentile``. Codebook: for each σ′ in (UPPER−LOWER)/2 × {0.01, …, 0.59} (DPM's grid 0.5…29.5 for
    data on a 0–100 scale, scaled to the box), the same percentile of the gaps of m sorted N(0, σ′²) samples,
    averaged over ``repeats`` draws. With fewer than 2 public points there is no gap: β = (UPPER−LOWER)/2.
    """
    x = _check_points(public_points, "public_points", allow_empty=True, private=False)
    q = _check_number("percentile", percentile, positive=False)
    if q > 100:
        raise ValueError(f"percentile must be in [0, 100], got {percentile!r}")
    repeats = _check_int("repeats", repeats, 1)
    m = x.shape[0]
    if m < 2:
        return (UPPER - LOWER) / 2
    target = float(np.percentile(np.diff(np.sort(x, axis=0), axis=0).mean(axis=1), q))
    codebook = np.array([_gap_percentile(np.sort(rng.normal(0.0, s, size=(repeats, m)), axis=1), q).mean()
                         for s in _SIGMA_GRID])
    return float(0.5 * _SIGMA_GRID[int(np.argmin(np.abs(codebook - target)))])
