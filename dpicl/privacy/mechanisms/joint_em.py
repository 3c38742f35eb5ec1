"""Joint exponential mechanism for private top-k (Gillenwater et al. 2022; paper 001 §3.2.2, App A.3.1 Alg 5;
MECHANISMS §3 steps 1–7, §12.1 item 4).

Releases an ordered sequence s of k distinct items from a histogram of keyword counts with
Pr[s] ∝ exp(ε·u(s)/(2Δ)), u(s) = −max_i (c_(i) − c_{s_i}), where c_(i) is the i-th largest count. It never
enumerates the d!/(d−k)! sequences: sequences are grouped by the entry of the k×d difference matrix that
attains their maximum, the size of every group is computed in one sweep, a group is drawn by Gumbel-max in log
space, and a sequence is drawn uniformly inside the group. Cost O(dk·log(dk)) time, O(dk) memory.

KSA with the joint EM (MECHANISMS §3 steps 1–5): the domain is the set of words of the public zero-shot prompt,
each teacher output adds 1 to every domain word it contains (at most once per output; other words are ignored),
and ``select_keywords`` releases k ranked words. One query costs ``cost(ε, q)``; ``plan`` calibrates ε per query.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from ..accounting.auto import total_epsilon
from ..accounting.calibration import times
from ..accounting.events import SubsampledExponentialEvent
from ..search import largest

# One record replaces one teacher output: each count moves by ≤ 1, but one count can rise while another falls,
# so a difference c_i − c_j moves by ≤ 2 (Gillenwater's SWAP case). The papers' code used 1 (MECHANISMS §12.1.4).
SENSITIVITY = 2.0
METHOD = "ksa-jem"  # name in `dpicl plan`
MECHANISM = "ksa_jem"  # label of the ledger event
_REL_TOL = 1e-6  # relative precision of the planned per-query ε
_EPS_MAX = 1e3  # a per-query ε beyond this is no privacy at all; the search stops there


def _validate(counts: np.ndarray, k: int) -> np.ndarray:
    c = np.asarray(counts, dtype=float)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D array, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError("counts must be finite")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if not 1 <= k <= c.size:
        raise ValueError(f"k must satisfy 1 <= k <= d={c.size}, got {k}")
    return c


def _sorted_entries(c: np.ndarray, k: int):
    """Sort the counts and rank the k×d difference matrix; returns (order, rank, rows, cols, diffs).

    ``order`` maps sorted positions to items. Entry (i, j) stands for "row i of the sequence holds sorted
    position j" with difference c_(i) − c_(j). Entries are ranked by (difference, tie-break) lexicographically,
    the tie-break j+1 + d·(k−1−i) making every rank distinct, strictly increasing along a row and strictly
    decreasing down a column (MECHANISMS §3 step 2). Ranking instead of adding a fractional tie-break to the
    difference keeps the grouping exact for non-integer counts too.
    """
    d = c.size
    order = np.argsort(-c, kind="stable")
    cs = c[order]
    diff = cs[:k, None] - cs[None, :]  # k×d, nondecreasing in j, nonincreasing in i
    i_idx, j_idx = np.indices((k, d))
    tie = (j_idx + 1) + d * (k - 1 - i_idx)
    flat = np.lexsort((tie.ravel(), diff.ravel()))  # ascending by diff, then tie-break
    rank = np.empty(k * d, dtype=np.int64)
    rank[flat] = np.arange(k * d)
    rows, cols = np.unravel_index(flat, (k, d))
    return order, rank.reshape(k, d), rows, cols, diff.ravel()[flat]


def _entry_log_counts(rows: np.ndarray, cols: np.ndarray, k: int) -> np.ndarray:
    """log m̃(a): log of the number of sequences whose largest-ranked entry is the a-th entry.

    Before entry a = (r, c) is reached, row i admits the t_i columns of rank < a; a sequence maximal at a
    fixes s_r = c and fills the other rows from those prefixes, giving Π_{i≠r} (t_i − i) choices (prefixes
    are nested and c lies in exactly the prefixes of rows below r). Passing entry (r, c) moves t_r from c to
    c+1, so the products are prefix sums of per-entry increments, with non-positive factors counted apart.
    """
    n = rows.size
    f_before = cols - rows  # factor of row r just before its entry (t_r = c)
    f_after = f_before + 1
    # Increment of Σ_i log(f_i) over positive factors, and whether a factor turns positive here.
    inc_log = np.zeros(n)
    both = f_before >= 1
    inc_log[both] = np.log(f_after[both]) - np.log(f_before[both])
    becomes_pos = (f_before == 0).astype(np.int64)
    log_sum = np.concatenate(([0.0], np.cumsum(inc_log)[:-1]))  # exclusive prefix sums: state before a
    n_nonpos = k - np.concatenate(([0], np.cumsum(becomes_pos)[:-1]))
    own_log = np.where(both, np.log(np.maximum(f_before, 1)), 0.0)
    own_nonpos = (f_before <= 0).astype(np.int64)
    out = np.full(n, -np.inf)
    ok = (n_nonpos - own_nonpos) == 0
    out[ok] = log_sum[ok] - own_log[ok]
    return out


def sorted_entry_log_counts(counts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per entry of the sorted difference matrix: (utility −diff, log number of sequences maximal there).

    For counts [5, 3, 3, 1], k = 2 the counts are [0, 0, 0, 2, 1, 3, 3, 3] (MECHANISMS §3 test vector).
    """
    c = _validate(counts, k)
    _, _, rows, cols, diffs = _sorted_entries(c, k)
    return 0.0 - diffs, _entry_log_counts(rows, cols, k)  # 0.0 − x avoids −0.0


def count_sequences_by_utility(counts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct utility values (descending) and the log number of ordered k-sequences attaining each."""
    utilities, log_counts = sorted_entry_log_counts(counts, k)
    keep = np.isfinite(log_counts)
    u, lc = utilities[keep], log_counts[keep]
    uniq, inv = np.unique(u, return_inverse=True)
    agg = np.full(uniq.size, -np.inf)
    np.logaddexp.at(agg, inv, lc)
    return uniq[::-1], agg[::-1]


def _pick_excluding(rng: np.random.Generator, t: int, taken: list[int]) -> int:
    """Uniform draw from {0..t−1} minus ``taken`` (whose members below t are all skipped)."""
    below = sorted(x for x in taken if x < t)
    idx = int(rng.integers(t - len(below)))
    for x in below:  # shift past excluded values in ascending order
        if idx >= x:
            idx += 1
    return idx


def sample_topk(
    counts: np.ndarray,
    k: int,
    epsilon: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """ε-DP ordered top-k: item indices, best rank first, drawn with Pr[s] ∝ exp(ε·u(s)/(2Δ)).

    Δ is the module's ``SENSITIVITY``, read at call time: the one ``cost`` charges for (no parameter for it)."""
    c = _validate(counts, k)
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    order, rank, rows, cols, diffs = _sorted_entries(c, k)
    log_counts = _entry_log_counts(rows, cols, k)
    # Gumbel-max over groups: argmax of log m̃ + ε·u/(2Δ) + Gumbel stays in log space (no overflow).
    scores = log_counts - epsilon * diffs / (2.0 * SENSITIVITY)
    a = int(np.argmax(scores + rng.gumbel(size=scores.size)))
    r, col = int(rows[a]), int(cols[a])
    seq = [col] * k
    taken = [col]
    for i in range(k):
        if i == r:
            continue
        t = int(np.searchsorted(rank[i], a, side="left"))  # columns of row i ranked below entry a
        s_i = _pick_excluding(rng, t, taken)
        seq[i] = s_i
        taken.append(s_i)
    return order[np.asarray(seq, dtype=np.int64)]


def cost(epsilon: float, sampling_rate: float, mechanism: str = MECHANISM) -> SubsampledExponentialEvent:
    """Privacy event of one KSA joint-EM query (ε-DP exponential mechanism, utility sensitivity 2)."""
    return SubsampledExponentialEvent(epsilon, sampling_rate, sensitivity=SENSITIVITY, mechanism=mechanism)


def _check_target(sampling_rate: float, queries: int, epsilon: float, delta: float) -> None:
    if not (math.isfinite(sampling_rate) and 0 < sampling_rate <= 1):
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
    if isinstance(queries, bool) or not isinstance(queries, (int, np.integer)) or queries < 1:
        raise ValueError(f"queries must be an integer >= 1, got {queries!r}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def per_query_epsilon(sampling_rate: float, queries: int, epsilon: float, delta: float) -> float:
    """Largest per-query ε (to 1e-6 relative) whose ``queries`` subsampled EM events compose to ≤ ``epsilon``.

    Composition by the ledger's accountant (RDP for exponential-mechanism events). Bisection; the feasible end
    of the final bracket is returned, so the result always fits.
    """
    _check_target(sampling_rate, queries, epsilon, delta)

    def fits(x: float) -> bool:
        return total_epsilon(times(cost(x, sampling_rate), queries), delta) <= epsilon

    lo = largest(fits, start=1.0, limit=_EPS_MAX, rel_tol=_REL_TOL)  # 0 ("no release") when nothing fits
    if lo == 0.0:
        raise ValueError(f"ε = {epsilon:g} at δ = {delta:g} is too small for {queries} queries")
    return lo


def plan(sampling_rate: float, queries: int, epsilon: float, delta: float) -> dict:
    """Per-query EM ε for answering ``queries`` KSA joint-EM queries within (ε, δ); no private data involved."""
    eps_em = per_query_epsilon(sampling_rate, queries, epsilon, delta)
    return {
        "method": METHOD,
        "epsilon": epsilon,
        "delta": delta,
        "queries": queries,
        "sampling_rate": sampling_rate,
        "epsilon_em": eps_em,
        "sensitivity": SENSITIVITY,
        "epsilon_certified": total_epsilon(times(cost(eps_em, sampling_rate), queries), delta),
    }


def histogram_on_domain(token_sets: Iterable[Iterable[str]], domain: Sequence[str]) -> np.ndarray:
    """Counts over the public ``domain``: how many teacher outputs contain each domain token (§3 steps 1–3).

    Each output is given as its tokens (tokenized and filtered outside the privacy package); a token counts at
    most once per output and tokens outside the domain are ignored, so one changed output moves every count
    by ≤ 1. The domain must come from public data (the zero-shot prompt) and hold distinct tokens.
    """
    index = {token: i for i, token in enumerate(domain)}
    if len(index) != len(domain):
        raise ValueError("domain must hold distinct tokens")
    counts = np.zeros(len(index))
    for n, tokens in enumerate(token_sets):
        if isinstance(tokens, (str, bytes)):
            raise TypeError(f"token set {n} is a string; pass an iterable of tokens")
        for token in set(tokens):
            i = index.get(token)
            if i is not None:
                counts[i] += 1
    return counts


def select_keywords(
    domain: Sequence[str], counts: np.ndarray, k: int, epsilon: float, rng: np.random.Generator
) -> list[str]:
    """The k ranked domain tokens released by the joint EM (k = min(k, |domain|)), best first.

    An empty domain gives [] without drawing any noise: the domain comes from the public prompt, so its being
    empty is a public fact and the output does not depend on private data.
    """
    tokens = list(domain)
    c = np.asarray(counts, dtype=float)
    if c.shape != (len(tokens),):
        raise ValueError(f"counts must have one entry per domain token ({len(tokens)}), got shape {c.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not tokens:
        return []
    return [tokens[i] for i in sample_topk(c, min(int(k), len(tokens)), epsilon, rng)]
