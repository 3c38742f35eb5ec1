"""Rényi divergences of next-token distributions and the search for the largest feasible mixing weight.

Shared by the token-level mechanisms that keep every private distribution inside a Rényi ball around a public
one (DPS-MOZO, paper 000; PMixED/AdaPMixED, paper 003; MECHANISMS §7, §8). The constraint must hold *exactly*
for the accounting to apply, so the search returns the feasible end of its bracket (MECHANISMS §12.1 item 13),
never an approximate root that may lie just outside the ball.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import logsumexp

from ..search import bisect


def renyi_divergence(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """D_α(p ‖ q) = 1/(α−1)·log Σ p^α q^{1−α} for probability vectors on the same support, α > 1.

    Computed in log space (stable for tiny probabilities). ∞ when p puts mass where q has none.
    """
    if not alpha > 1:
        raise ValueError(f"the Rényi order must be > 1, got {alpha}")
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"distributions of different shapes {p.shape} and {q.shape}")
    support = p > 0
    if np.any(q[support] <= 0):
        return math.inf
    log_terms = alpha * np.log(p[support]) + (1 - alpha) * np.log(q[support])
    return max(0.0, float(logsumexp(log_terms)) / (alpha - 1))


def symmetric_renyi(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """D↔_α(p, q) = max{D_α(p ‖ q), D_α(q ‖ p)}."""
    return max(renyi_divergence(p, q, alpha), renyi_divergence(q, p, alpha))


def largest_feasible(feasible: Callable[[float], bool], upper: float, iterations: int = 40) -> float:
    """The largest λ ∈ [0, ``upper``] found by bisection with ``feasible(λ)`` true; ``upper`` when it is feasible.

    ``feasible(0)`` must hold (the public distribution itself). The result always satisfies ``feasible`` —
    the lower end of the final bracket (``search.bisect``, ``iterations`` steps) — so a mechanism that mixes with it
    stays inside its Rényi ball.
    """
    if not feasible(0.0):
        raise ValueError("λ = 0 must be feasible (the public distribution is inside its own ball)")
    if feasible(upper):
        return float(upper)
    return bisect(feasible, 0.0, float(upper), steps=iterations)
