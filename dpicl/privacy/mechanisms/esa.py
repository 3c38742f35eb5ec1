"""ESA — Embedding Space Aggregation (paper 001 §3.2.1, Alg 3; MECHANISMS §2, §12.1 item 5).

Each of N teachers answers the query from its own demonstrations; their answer embeddings are clipped to
unit norm, summed, Gaussian noise is added to the sum, and the noisy mean picks the closest public (zero-shot)
candidate. Privacy-correct sensitivity: one record changes one teacher's output, i.e. swaps one unit vector
in the sum, so Δ₂ = 2 (the papers used 1).
"""

from __future__ import annotations


import numpy as np

from ..accounting.calibration import plan_gaussian
from ..accounting.events import SubsampledGaussianEvent

SENSITIVITY = 2.0
METHOD = "esa"


def cost(noise_multiplier: float, sampling_rate: float) -> SubsampledGaussianEvent:
    """Privacy event of one ESA release."""
    return SubsampledGaussianEvent(noise_multiplier, sampling_rate, sensitivity=SENSITIVITY, mechanism=METHOD)


def plan(sampling_rate: float, queries: int, epsilon: float, delta: float) -> dict:
    """Per-query noise for answering ``queries`` queries within (ε, δ); no private data involved."""
    return plan_gaussian(METHOD, SENSITIVITY, sampling_rate, queries, epsilon, delta)


def _clip_rows_to_unit_norm(e: np.ndarray) -> np.ndarray:
    """Scale rows with L2 norm > 1 down to norm 1; overflow-safe (rows are pre-scaled by their max |x|)."""
    scale = np.max(np.abs(e), axis=1, keepdims=True)
    direction = e / np.where(scale > 0, scale, 1.0)
    dir_norm = np.linalg.norm(direction, axis=1, keepdims=True)  # in [1, sqrt(d)], or 0 for a zero row
    with np.errstate(over="ignore"):  # a norm beyond the float range is simply clipped to 1
        norm = scale * dir_norm
    return direction / np.where(dir_norm > 0, dir_norm, 1.0) * np.minimum(norm, 1.0)


def noisy_mean(
    teacher_embeddings: np.ndarray,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """DP mean of the N teacher embeddings (N×d): clip rows to norm ≤ 1, sum, add N(0, (Δ·nm)²), divide by N.

    Δ is the module's ``SENSITIVITY``, read here at call time: the one ``cost`` charges for. There is no
    parameter for it, since noise for any other Δ would not be what the ledger records.

    N is the configured number of teachers: every teacher is included, even one with no demonstrations,
    so N itself reveals nothing.
    """
    e = np.asarray(teacher_embeddings, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] < 1:
        raise ValueError(f"teacher_embeddings must be a non-empty N×d array, got shape {e.shape}")
    if not noise_multiplier > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    # Clipping is what makes Δ = 2 hold whatever the encoder returns (data-independent bound). A row with
    # NaN/inf would turn the whole release into NaN and so reveal itself: it counts as a zero vector.
    e = np.where(np.isfinite(e).all(axis=1, keepdims=True), e, 0.0)
    clipped = _clip_rows_to_unit_norm(e)
    noisy_sum = clipped.sum(axis=0) + rng.normal(0.0, SENSITIVITY * noise_multiplier, size=e.shape[1])
    return noisy_sum / e.shape[0]


def select_candidate(noisy_mean: np.ndarray, candidate_embeddings: np.ndarray) -> int:
    """Index of the public candidate with the highest cosine similarity to the noisy mean (post-processing)."""
    c = np.asarray(candidate_embeddings, dtype=np.float64)
    m = np.asarray(noisy_mean, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] != m.shape[-1]:
        raise ValueError(f"candidate_embeddings must be a non-empty C×{m.shape[-1]} array, got {c.shape}")
    c_norm = np.linalg.norm(c, axis=1)
    sims = (c @ m) / (np.where(c_norm > 0, c_norm, 1.0) * max(np.linalg.norm(m), 1e-300))
    return int(np.argmax(sims))


def run(
    teacher_embeddings: np.ndarray,
    candidate_embeddings: np.ndarray,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> int:
    """One ESA release: the index of the chosen public candidate. Its cost is ``cost(nm, q)``."""
    return select_candidate(noisy_mean(teacher_embeddings, noise_multiplier, rng), candidate_embeddings)
