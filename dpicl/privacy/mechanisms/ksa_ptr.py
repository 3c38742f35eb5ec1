"""KSA-PTR: the top keyword set by FindBestK + propose-test-release (paper 001 App A.3.2, Alg 6–7, Thm 10–12;
MECHANISMS §4, §12.1 items 1–3).

Each teacher output contributes the *set* of its keywords to a histogram over a data-dependent domain. FindBestK
picks a boundary k* by an exponential mechanism over the gaps between consecutive sorted counts; a Gaussian
propose-test-release test then checks privately that the tested gap exceeds 2. When it does, the top set is the
same on every neighbouring dataset and is released exactly (unordered); when the test fails the caller answers
zero-shot. Either way the query costs one ``SubsampledPTREvent``.

Why 2 and Δ = 2: one record changes one teacher's output, so every token count moves by at most 1 (a token
counts at most once per teacher) and every count of the sorted, zero-padded histogram moves by at most 1. A gap
between consecutive sorted counts therefore moves by at most 2 (the FindBestK utility and the PTR statistic have
sensitivity 2), and a gap > 2 on D stays > 0 on every neighbour: the set above it is unchanged.

Fixes of the reference code (MECHANISMS §12.1): the released set is the first k*+1 tokens, the set the tested gap
g[k*] certifies (the code released k*); FindBestK's Gumbel scale is 2Δ/ε = 4/ε (the code used 2/ε, spending 2ε);
δ0 = frac·δ/(q·T) because the failure probabilities of T queries add up (the code subtracted one q·δ0).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.special import ndtri

from ..accounting.auto import total_epsilon
from ..accounting.calibration import times
from ..accounting.events import SubsampledPTREvent
from ..search import smallest
from . import joint_em

SENSITIVITY = 2.0  # of a gap between consecutive sorted counts (module docstring)
STABLE_GAP = 2.0  # a gap above this leaves the set above it unchanged on every neighbour
K_MAX = 30  # the reference code's cap on the released set (001: "k ≤ 30")
METHOD = "ksa-ptr"  # name in `dpicl plan`
MECHANISM = "ksa_ptr"  # label of the ledger event
_REL_TOL = 1e-6  # relative precision of the planned noise multiplier
_NM_MAX = 1e6


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_probability(name: str, value: float) -> None:
    _check_positive(name, value)
    if value >= 1:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")


def _check_k_max(k_max: int) -> None:
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
        raise ValueError(f"k_max must be an integer >= 1, got {k_max!r}")


def histogram(token_sets: Iterable[Iterable[str]]) -> tuple[list[str], np.ndarray]:
    """Sorted histogram over the data-dependent domain of MECHANISMS §4 step 1.

    Each teacher output is given as its keywords (already tokenized and stop-word filtered outside the privacy
    package); a token counts at most once per output, so one changed output moves every count by ≤ 1.
    Returns (tokens, counts) sorted by count descending, then token: a deterministic order, so ties never depend
    on input order or hashing. The order among tied tokens does not matter for privacy: a released set is the
    set above a gap > 2 (no tie across its boundary), and it is released in random order.
    """
    counts: Counter[str] = Counter()
    for i, tokens in enumerate(token_sets):
        if isinstance(tokens, (str, bytes)):
            raise TypeError(f"token set {i} is a string; pass an iterable of tokens")
        distinct = set(tokens)
        if not all(isinstance(t, str) for t in distinct):
            raise TypeError(f"token set {i} holds a non-string token")
        counts.update(distinct)
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [t for t, _ in items], np.asarray([c for _, c in items], dtype=np.int64)


def gaps(sorted_counts: Sequence[float], k_max: int = K_MAX) -> np.ndarray:
    """The FindBestK utilities g[0..k_max−1]: gaps between consecutive sorted counts, zero-padded.

    Reading of MECHANISMS §4 step 2 (notebook cell 19): g[k] = c[k] − c[k+1] for k < min(len−1, k_max); when the
    list is short (len ≤ k_max) the gap below the last count, to the implicit zero count of every unseen token,
    is g[len−1] = c[len−1]. Both are c̄[k] − c̄[k+1] for the counts c̄ padded with zeros. We also keep the indices
    len ≤ k < k_max with their gap 0 − 0 = 0, which the code drops: the range {0, …, k_max−1} of the exponential
    mechanism must not depend on the data (a neighbour can add up to a whole output's worth of new tokens, and
    an output that has probability 0 on one side breaks ε-DP). The test then fails on such a k with probability
    ≥ 1 − δ0. Every g[k] moves by ≤ 2 between neighbours (module docstring).
    """
    _check_k_max(k_max)
    c = np.asarray(sorted_counts, dtype=float)
    if c.ndim != 1:
        raise ValueError(f"sorted_counts must be a 1-D array, got shape {c.shape}")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("sorted_counts must be finite and >= 0")
    if np.any(np.diff(c) > 0):
        raise ValueError("sorted_counts must be sorted in descending order")
    padded = np.zeros(k_max + 1)
    n = min(c.size, k_max + 1)
    padded[:n] = c[:n]
    return padded[:-1] - padded[1:]


def find_best_k(
    sorted_counts: Sequence[float],
    epsilon_em: float,
    rng: np.random.Generator,
    k_max: int = K_MAX,
) -> int:
    """FindBestK (Alg 7): ε_EM-DP argmax of the gaps, by Gumbel noise of scale 2·Δ/ε_EM = 4/ε_EM.

    Δ is the module's ``SENSITIVITY`` (read at call time, as in :func:`ptr_offset` and :func:`ptr_passes`): the
    one ``cost`` charges for; there is no parameter for it.

    Returns the 0-based gap index k*; the set it proposes is the first k*+1 tokens.
    """
    _check_positive("epsilon_em", epsilon_em)
    g = gaps(sorted_counts, k_max)
    return int(np.argmax(g + rng.gumbel(0.0, 2.0 * SENSITIVITY / epsilon_em, size=g.size)))


def ptr_offset(noise_multiplier: float, delta0: float) -> float:
    """Φ⁻¹(1−δ0)·Δ·nm (Δ = ``SENSITIVITY``): the test's margin, so an unstable gap passes with probability δ0."""
    _check_positive("noise_multiplier", noise_multiplier)
    _check_probability("delta0", delta0)
    # −Φ⁻¹(δ0) = Φ⁻¹(1−δ0) exactly: the value of scipy.stats.norm.isf(δ0), without its per-call overhead
    return float(-ndtri(delta0)) * SENSITIVITY * noise_multiplier


def ptr_passes(
    gap: float,
    noise_multiplier: float,
    delta0: float,
    rng: np.random.Generator,
) -> bool:
    """The PTR test (Alg 6): d̂ = max(2, gap) + N(0, (Δ·nm)²) − offset > 2, with Δ = ``SENSITIVITY``.

    When gap ≤ 2, d̂ − 2 = N(0, (Δ·nm)²) − offset, which is > 0 with probability δ0. Only the bit is used.
    """
    g = float(gap)
    if not math.isfinite(g):
        raise ValueError(f"gap must be finite, got {gap!r}")
    offset = ptr_offset(noise_multiplier, delta0)
    d_hat = max(STABLE_GAP, g) + rng.normal(0.0, SENSITIVITY * noise_multiplier) - offset
    return bool(d_hat > STABLE_GAP)


def release_set(
    tokens_sorted: Sequence[str],
    counts_sorted: Sequence[float],
    epsilon_em: float,
    noise_multiplier: float,
    delta0: float,
    rng: np.random.Generator,
    k_max: int = K_MAX,
) -> list[str] | None:
    """One KSA-PTR release: the first k*+1 tokens in random order, or None when the test fails.

    ``tokens_sorted``/``counts_sorted`` come from :func:`histogram`. The set is the one the tested gap g[k*]
    certifies (MECHANISMS §12.1 item 1); it is shuffled because the ranking is not released. On None the caller
    falls back to the zero-shot answer; the query is charged ``cost(...)`` either way. The list is shorter than
    k*+1 only if the test passed on a zero gap beyond the histogram, an event of probability ≤ δ0.
    """
    tokens = list(tokens_sorted)
    if len(tokens) != len(counts_sorted):
        raise ValueError(f"{len(tokens)} tokens but {len(counts_sorted)} counts")
    k = find_best_k(counts_sorted, epsilon_em, rng, k_max)
    if not ptr_passes(gaps(counts_sorted, k_max)[k], noise_multiplier, delta0, rng):
        return None
    chosen = tokens[: k + 1]
    return [chosen[i] for i in rng.permutation(len(chosen))]


def cost(epsilon_em: float, noise_multiplier: float, delta0: float, sampling_rate: float) -> SubsampledPTREvent:
    """Privacy event of one KSA-PTR query (whether its test passes or fails)."""
    return SubsampledPTREvent(epsilon_em, noise_multiplier, delta0, sampling_rate, SENSITIVITY, MECHANISM)


def _smallest_noise_multiplier(epsilon_em: float, delta0: float, sampling_rate: float, queries: int,
                               epsilon: float, delta: float) -> float:
    """Smallest nm (to _REL_TOL) with T PTR events ≤ ε at δ; the feasible end of the final bracket."""

    def fits(nm: float) -> bool:
        return total_epsilon(times(cost(epsilon_em, nm, delta0, sampling_rate), queries), delta) <= epsilon

    # as nm → 0 the Gaussian RDP (and ε) grows without bound: 0 is the infeasible end
    nm = smallest(fits, start=1.0, limit=_NM_MAX, lower=0.0, rel_tol=_REL_TOL)
    if nm is None:
        raise ValueError(f"no noise multiplier fits ε = {epsilon:g}: FindBestK with ε_EM = {epsilon_em:g} "
                         f"alone spends it over {queries} queries")
    return nm


def plan(
    sampling_rate: float,
    queries: int,
    epsilon: float,
    delta: float,
    *,
    delta0_fraction: float = 0.5,
    em_epsilon: float | None = None,
) -> dict:
    """Per-query (ε_EM, nm, δ0) for ``queries`` KSA-PTR queries within (ε, δ); no private data involved.

    δ0 = delta0_fraction·δ/(q·T), so the T failure terms q·δ0 take delta0_fraction of δ (§12.1 item 3). Without
    ``em_epsilon``, ε_EM is the largest per-query ε for which T subsampled FindBestK's alone would spend ε/2 at the
    δ left over. Then nm is the smallest noise multiplier for which T PTR events compose to ≤ ε at δ under the
    ledger's (RDP) accountant — the value returned as ``epsilon_certified``.
    """
    _check_positive("sampling_rate", sampling_rate)
    if sampling_rate > 1:
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
    if isinstance(queries, bool) or not isinstance(queries, (int, np.integer)) or queries < 1:
        raise ValueError(f"queries must be an integer >= 1, got {queries!r}")
    _check_positive("epsilon", epsilon)
    _check_probability("delta", delta)
    _check_probability("delta0_fraction", delta0_fraction)
    delta0 = delta0_fraction * delta / (sampling_rate * queries)
    if not delta0 < 1:
        raise ValueError(f"δ0 = delta0_fraction·δ/(q·T) = {delta0:g} must be < 1")
    if em_epsilon is None:  # at the δ the T failure terms q·δ0 leave
        em_epsilon = joint_em.per_query_epsilon(sampling_rate, queries, epsilon / 2, (1 - delta0_fraction) * delta)
    else:
        _check_positive("em_epsilon", em_epsilon)
    nm = _smallest_noise_multiplier(em_epsilon, delta0, sampling_rate, queries, epsilon, delta)
    event = cost(em_epsilon, nm, delta0, sampling_rate)
    return {
        "method": METHOD,
        "epsilon": epsilon,
        "delta": delta,
        "queries": queries,
        "sampling_rate": sampling_rate,
        "epsilon_em": em_epsilon,
        "noise_multiplier": nm,
        "sensitivity": SENSITIVITY,
        "sigma": event.sigma,
        "delta0": delta0,
        "delta0_fraction": delta0_fraction,
        "failure_delta": event.failure_delta * queries,
        "offset": ptr_offset(nm, delta0),
        "epsilon_certified": total_epsilon(times(event, queries), delta),
    }
