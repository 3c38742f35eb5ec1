"""Joint exponential mechanism for private top-k (Gillenwater et al. 2022; paper 001 §3.2.2, App A.3.1 Alg 5;
MECHANISMS §3 steps 1–7, §12.1 item 4).

Releases an ordered sequence s of k distinct items from a histogram of keyword counts with
Pr[s] ∝ exp(ε·u(s)/(2Δ)), u(s) = −max_i (c_(i) − c_{s_i}), where c_(i) is the i-th largest count. It never
enumerates the d!/(d−k)! sequences: sequences are grouped by the entry of the k×d difference matrix that
attains their maximum, the size of every group is computed in one sweep, a group is drawn by Gumbel-max in log
space, and a sequence is drawn uniformly inside the group. Cost O(dk·log(dk)) time, O(dk) memory.
"""

from __future__ import annotations

import numpy as np

# One record replaces one teacher output: each count moves by ≤ 1, but one count can rise while another falls,
# so a difference c_i − c_j moves by ≤ 2 (Gillenwater's SWAP case). The papers' code used 1 (MECHANISMS §12.1.4).
SENSITIVITY = 2.0
METHOD = "joint_em"


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
    sensitivity: float = SENSITIVITY,
) -> np.ndarray:
    """ε-DP ordered top-k: item indices, best rank first, drawn with Pr[s] ∝ exp(ε·u(s)/(2Δ))."""
    c = _validate(counts, k)
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    if not (np.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"sensitivity must be finite and > 0, got {sensitivity}")
    order, rank, rows, cols, diffs = _sorted_entries(c, k)
    log_counts = _entry_log_counts(rows, cols, k)
    # Gumbel-max over groups: argmax of log m̃ + ε·u/(2Δ) + Gumbel stays in log space (no overflow).
    scores = log_counts - epsilon * diffs / (2.0 * sensitivity)
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
