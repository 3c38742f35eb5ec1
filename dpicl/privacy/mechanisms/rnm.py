"""RNM — Report-Noisy-Max private voting with Gaussian noise (paper 001 §3.1, App A.1 Alg 2; MECHANISMS §1,
§A.1, §12.1 item 5).

Each of N teachers predicts one of m class labels for the query; the vote histogram H_j = |{i : o_i = j}| gets
iid Gaussian noise on every class count and the argmax is released. Privacy-correct sensitivity: one record
changes one teacher's demonstrations, so that teacher's vote may move from one class to another — one count goes
down by 1 and another up by 1 — hence Δ₂ = √2 (paper 001 Thm 3; the paper's multi-query accounting, Remark 1,
used 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..accounting.calibration import plan_gaussian
from ..accounting.events import SubsampledGaussianEvent

SENSITIVITY = math.sqrt(2)
METHOD = "rnm"

# A teacher that gives no valid label (e.g. the LLM answered outside the label set) votes ABSTAIN.
ABSTAIN = -1


def cost(noise_multiplier: float, sampling_rate: float) -> SubsampledGaussianEvent:
    """Privacy event of one RNM release."""
    return SubsampledGaussianEvent(noise_multiplier, sampling_rate, sensitivity=SENSITIVITY, mechanism=METHOD)


def plan(sampling_rate: float, queries: int, epsilon: float, delta: float) -> dict:
    """Per-query noise for answering ``queries`` queries within (ε, δ); no private data involved."""
    return plan_gaussian(METHOD, SENSITIVITY, sampling_rate, queries, epsilon, delta)


def vote_histogram(votes: Sequence[int], n_classes: int) -> np.ndarray:
    """Counts of the N teacher votes over classes 0..m−1 (length-m float array).

    A vote is a class index in [0, m), or ``ABSTAIN`` (−1) for a teacher without a valid label, which is
    ignored. Abstaining keeps Δ₂ ≤ √2: one changed teacher then moves one count by 1 (vote ↔ abstain) or
    two counts by 1 each (vote ↔ vote). Any other value is a ValueError (never silently dropped or wrapped).
    N is the configured number of teachers; every teacher votes or abstains, so N reveals nothing.
    """
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 1:
        raise ValueError(f"n_classes must be an integer ≥ 1, got {n_classes!r}")
    v = np.asarray(votes)
    if v.ndim != 1:
        raise ValueError(f"votes must be a 1-D sequence of class indices, got shape {v.shape}")
    if v.size and not np.issubdtype(v.dtype, np.integer):
        raise ValueError(f"votes must be integers in [0, {n_classes}) or {ABSTAIN} (abstain), got dtype {v.dtype}")
    v = v.astype(np.int64)
    bad = (v != ABSTAIN) & ((v < 0) | (v >= n_classes))
    if bad.any():
        raise ValueError(f"{int(bad.sum())} vote(s) outside [0, {n_classes}) and not {ABSTAIN} (abstain)")
    return np.bincount(v[v != ABSTAIN], minlength=n_classes).astype(np.float64)


def noisy_histogram(
    histogram: np.ndarray,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """The vote histogram with iid N(0, (Δ·nm)²) noise on every class count (not itself released).

    Δ is the module's ``SENSITIVITY``, read at call time: the one ``cost`` charges for (no parameter for it)."""
    h = np.asarray(histogram, dtype=np.float64)
    if h.ndim != 1 or h.size < 1 or not np.isfinite(h).all():
        raise ValueError(f"histogram must be a non-empty finite 1-D array, got shape {h.shape}")
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    return h + rng.normal(0.0, SENSITIVITY * noise_multiplier, size=h.shape[0])


def noisy_argmax(
    histogram: np.ndarray,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> int:
    """The released label: argmax of the noisy histogram (ties, probability 0, go to the lowest index)."""
    return int(np.argmax(noisy_histogram(histogram, noise_multiplier, rng)))


def run(votes: Sequence[int], n_classes: int, noise_multiplier: float, rng: np.random.Generator) -> int:
    """One RNM release: the chosen class index. Its cost is ``cost(nm, q)``."""
    return noisy_argmax(vote_histogram(votes, n_classes), noise_multiplier, rng)
