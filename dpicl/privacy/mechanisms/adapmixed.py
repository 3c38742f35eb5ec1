"""AdaPMixED — PMixED decoding with noisy screening (paper 003 Alg 1, Thm 4.1/4.2, Thm C.1, Lemma C.1;
MECHANISMS §8, §11.1, §12.1 items 12–14 and 16) for an ensemble of in-context-learning prompts.

Setting. The ensemble has N members, each a prompt over a *disjoint* subset of the private records (a record
belongs to exactly one member, chosen by a keyed hash of the record), and a public member p_0, the zero-shot
prompt's next-token distribution. One record added or removed changes one member's prompt, i.e. it **replaces
one member's next-token distribution** by an arbitrary other one (N, the configured number of members, is
public and fixed: a member whose subset is empty still takes part). Tokens are decoded one at a time; at each
token all N members' next-token distributions are available. Per token (003 Alg 1):

1. Noisy screening: p̄_priv = (1/N)·Σ_i (λ p_i + (1−λ) p_0) with a small fixed λ; K = top-k of p_0 (public);
   Gaussian N(0, σ²) is added to p̄_priv[K] *before* any renormalisation (§12.1 item 16: replacing p_i moves the
   un-renormalised truncated mixture by at most λ√2/N in L2; Woodygan's code renormalised first, which breaks
   that sensitivity). Then, as post-processing: negative entries are clipped to 0 (the paper says nothing;
   Woodygan shifts by |min|, which flattens the vector by a noise-dependent amount — clipping keeps the positive
   entries as they are), p̄_priv[K] and p_0[K] are renormalised over K, and the screen passes when
   D_α(p̄_priv[K] ‖ p̄_0[K]) ≤ T (one-sided, as in Alg 1 line 7; Thm 4.2 writes D↔ — either is post-processing of
   the noisy vector, so the cost is the same). Cost: Gaussian RDP α(λ√2/N)²/(2σ²) = (λ/(Nσ))²·α (Thm 4.1).
2. Screen failed: the token is sampled from p_0 (no further use of private data).
3. Screen passed: PMixED (003 Alg 1 lines 10–17): every member is mixed with p_0 in probability space,
   p̄_i = λ_i p_i + (1−λ_i) p_0, with the largest λ_i ∈ [0, 1] such that D↔_{2α}(p̄_i ‖ p_0) ≤ βα (order 2α: see
   the accounting below) — the feasible end of a search bracket no wider than 2^−24, and the constraint is
   checked with the shared ``symmetric_renyi`` (§12.1 item 13) — and the token is sampled from p = (1/N)·Σ_i p̄_i.

Accounting: reserve the data-independent bound, report the data-dependent value. Before a query is decoded the
ledger is charged, at the single order α, with ``query_bound_rdp`` = tokens × (screening + PMixED bound). The
PMixED bound follows 003 Thm C.1's structure — joint convexity of e^{(α−1)D_α} pairs the N−1 unchanged members
with themselves, leaving the replaced member's two mixtures: log((N−1+e^{(α−1)·D})/N)/(α−1) — but with a **sound**
bound D on the divergence of two points of the ball. 003 takes D = 4βα from a triangle-like inequality (003 Thm
A.5, Steinke 2022 Lemma 33.7) stated for bounds at every order, while its λ search enforces the ball at order α
only; it does fail there: at α = 18, P = (0.97568, 0.018496, 0.0058237), p_0 = (0.97793, 0.016055, 0.0060134),
R = (0.98005, 0.013844, 0.0061021) have D↔_α(·, p_0) ≤ 0.00805 (β = 4.47e-4) yet D_α(P ‖ R) = 0.0729 > 4βα =
0.0322. We therefore enforce the ball **at order 2α** (D↔_{2α}(p̄_i, p_0) ≤ βα) and use Mironov's weak triangle
inequality (2017, Prop 11 with p = q = 2): D_α(P‖R) ≤ (α−½)/(α−1)·D_{2α}(P‖Q) + D_{2α−1}(Q‖R) ≤
(1 + (α−½)/(α−1))·βα, Rényi divergence being non-decreasing in the order (``pairwise_factor``; ≈ 2.03 at α = 18,
against 003's unproven 4). The bound is charged for every token whether or not the screen passed, so the charge
reveals nothing. 003 instead spends, per passed token, the data-dependent max_i D↔_α(p ‖ p_{−i}) (Eq. 3); that
value is computed from the private distributions, so spending by it (or publishing it) would leak (§12.1 item 16;
the paper mentions smooth sensitivity but does not apply it). Here it is computed and returned alongside, as 003
defines it (removal of a member), settled as information only — it is not a DP guarantee. The result of a run is
(ε, δ)-DP by BBGHS of the reserved total at orders ≤ α.

Inputs of ``step`` are next-token **log-probabilities** (N×V for the members, V for p_0, e.g. float32 rows of
an LLM's log-softmax): they are converted to probabilities in float64 and renormalised per row (−inf = token
impossible). A member row that is not a distribution (NaN, +inf, or all −inf) is replaced by p_0 — a member may
be replaced by anything under the analysis, so this keeps the guarantee and does not raise on private data; a
bad public row raises ValueError. The lower-level functions take probabilities.

Defaults (003 Table 4, WikiText-103; MECHANISMS §8): α = 18, β = 0.2, N = 100, σ = 1e-2, λ = 1e-4, T = 4.5,
k = 60. Note that β = 0.2 costs about 14 RDP per token under the data-independent bound; ``plan`` therefore solves
for the largest β that the reserved bound allows for a given budget and number of queries and tokens.

Randomness comes only from the ``np.random.Generator`` passed in (``dpicl.privacy.rng.make_rng``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from ..accounting.events import FixedOrderRDPEvent
from ..accounting.rdp import bbghs_epsilon
from ..accounting.wor import conversion_term, fixed_order_budget
from ..errors import shown
from ..search import largest
from .renyi import largest_feasible, renyi_divergence, symmetric_renyi

METHOD = "adapmixed"  # name in `dpicl plan` and label of the ledger event
ALPHA = 18
BETA = 0.2
PAPER_MEMBERS = 100  # 003's ensemble size; a run's default is its settings' (CPU-sized), dpicl/methods/adapmixed.py
SCREEN_SIGMA = 1e-2
SCREEN_LAMBDA = 1e-4
THRESHOLD = 4.5
TOP_K = 60
_BETA_MAX = 1e6  # β beyond this is never needed (λ = 1 is then feasible for any distributions with common support)
_BISECT_STEPS = 200


# ----------------------------------------------------------------------------------------------------------------
# validation helpers


def _positive(name: str, value, *, upper: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {shown(value)}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be <= {upper}, got {shown(value)}")
    return float(value)


def _count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    return int(value)


def _order(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (math.isfinite(alpha) and alpha > 1):
        raise ValueError(f"alpha must be a finite Rényi order > 1, got {shown(alpha)}")
    return float(alpha)


def _integer_order(alpha) -> int:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not float(alpha).is_integer() or alpha < 2:
        raise ValueError(f"alpha must be an integer Rényi order >= 2 (the ledger's fixed order), got {shown(alpha)}")
    return int(alpha)


def _lam(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be in [0, 1], got {shown(value)}")
    return float(value)


def _distribution(p, name: str) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.size < 1:
        raise ValueError(f"{name} must be a non-empty vector, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or not p.sum() > 0:
        raise ValueError(f"{name} must be a probability vector (finite, >= 0, positive sum)")
    return p


def _members(private, public: np.ndarray) -> np.ndarray:
    private = np.asarray(private, dtype=np.float64)
    if private.ndim != 2 or private.shape[0] < 1 or private.shape[1] != public.shape[0]:
        raise ValueError(f"private must be an N×{public.shape[0]} array with N >= 1, got shape {private.shape}")
    return private


# ----------------------------------------------------------------------------------------------------------------
# inputs


def probs_from_logprobs(logprobs) -> np.ndarray:
    """exp(ℓ − logsumexp ℓ) per row in float64: log-probabilities (float32 from an LLM is fine) to probabilities
    that sum to 1 up to rounding; −inf gives 0. Rows that are not distributions (NaN, +inf, all −inf) come back
    as NaN rows for the caller to handle."""
    lp = np.asarray(logprobs, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = np.isnan(lp).any(axis=-1, keepdims=True) | np.isposinf(lp).any(axis=-1, keepdims=True)
        lp = np.where(bad, 0.0, lp)
        norm = logsumexp(lp, axis=-1, keepdims=True)
        bad = bad | ~np.isfinite(norm)
        p = np.exp(lp - np.where(bad, 0.0, norm))
    return np.where(bad, np.nan, p)


# ----------------------------------------------------------------------------------------------------------------
# PMixED


def mix(p_i, p_0, lam: float) -> np.ndarray:
    """λ·p_i + (1−λ)·p_0 in probability space (not renormalised: the divergence is checked on exactly this)."""
    return lam * np.asarray(p_i, dtype=np.float64) + (1.0 - lam) * np.asarray(p_0, dtype=np.float64)


def ball_order(alpha: float) -> float:
    """The order at which the Rényi ball of radius βα is enforced: 2α (module docstring, accounting)."""
    return 2.0 * _order(alpha)


def pairwise_factor(alpha: float) -> float:
    """c(α) = 1 + (α−½)/(α−1): two points of the ball D↔_{2α} ≤ r are within c(α)·r at order α (Mironov Prop 11)."""
    a = _order(alpha)
    return 1.0 + (a - 0.5) / (a - 1.0)


def _log_divergences(log_m: np.ndarray, log_q: np.ndarray, order: float) -> np.ndarray:
    """D↔_order of every row of exp(log_m) (N×V) and exp(log_q) (V,), vectorised (−inf = 0 probability)."""
    with np.errstate(invalid="ignore"):
        both = np.isfinite(log_m) | np.isfinite(log_q)[None, :]
        forward = np.where(both, order * log_m + (1 - order) * log_q[None, :], -np.inf)
        backward = np.where(both, order * log_q[None, :] + (1 - order) * log_m, -np.inf)
    d = np.maximum(_row_logsumexp(forward), _row_logsumexp(backward)) / (order - 1)
    return np.where(np.isnan(d), np.inf, np.maximum(d, 0.0))


def _mixture_divergences(private: np.ndarray, p_0: np.ndarray, log_0: np.ndarray,
                         order: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """(λ, rows) ↦ D↔_order(mix(p_i, p_0, λ_i) ‖ p_0) for the given rows, for a p_0 without zeros: 5× faster than
    `_log_divergences` of the mixtures (the search evaluates it several times per token).

    With t = log(m/p_0) = log(λ·p_i/p_0 + (1 − λ)), computed once per call, the two directions' exponents are
    log p_0 + order·t and log p_0 − (order−1)·t (the same sums, without a log of the mixture and two masks). The
    sum of two non-negative terms keeps m/p_0's relative precision; log1p(λ·(p_i/p_0 − 1)) lost it where p_i ≪ p_0
    and λ ≈ 1 (1 − 1 + p_i/p_0), by up to 1e-7 in D at p_i/p_0 = 2e-11.
    """
    ratio = private / p_0[None, :]  # finite, as p_0 > 0

    def divergences(lam: np.ndarray, rows: np.ndarray) -> np.ndarray:
        lam = np.asarray(lam, dtype=np.float64)[:, None]
        t = np.multiply(lam, ratio[rows])
        t += 1.0 - lam
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            np.log(t, out=t)  # −inf where the mixture is 0 (λ = 1 and p_i = 0): D(p_0 ‖ m) = ∞ below
            forward = order * t
            forward += log_0
            t *= -(order - 1)
            t += log_0
            d = np.maximum(_row_logsumexp(forward), _row_logsumexp(t)) / (order - 1)
        return np.where(np.isnan(d), np.inf, np.maximum(d, 0.0))

    return divergences


def _row_logsumexp(x: np.ndarray) -> np.ndarray:
    """log Σ exp per row of `x` (overwritten); ±inf rows handled: +inf anywhere gives +inf, all −inf gives −inf."""
    top = x.max(axis=1)
    top = np.where(np.isfinite(top), top, 0.0)
    x -= top[:, None]
    with np.errstate(over="ignore", divide="ignore"):  # a row with +inf: its finite entries may overflow, to +inf
        np.exp(x, out=x)
        return np.log(x.sum(axis=1)) + top


def choose_lambdas(private, p_0, beta: float, alpha: float, tolerance: float = 2.0**-24) -> np.ndarray:
    """Largest λ_i ∈ [0, 1] with D↔_{2α}(mix(p_i, p_0, λ_i) ‖ p_0) ≤ βα for every member row of ``private`` (N×V):
    1 when feasible, else the feasible end of a bracket no wider than ``tolerance`` whose other end is infeasible,
    searched for all rows at once. Every returned λ is checked with the shared ``symmetric_renyi``; a row that fails
    the check by rounding is searched again with it alone.

    The search is regula falsi on √D − √(βα) (Illinois: an end kept twice has its value halved) with a bisection
    every fourth step, so the bracket halves at least that often: D grows like λ² near 0, √D is nearly linear, and
    a handful of evaluations replace bisection's 25 (each is N×V exps and logs).
    """
    order = ball_order(alpha)
    radius = _positive("beta", beta) * _order(alpha)
    p_0 = np.asarray(p_0, dtype=np.float64)
    private = np.atleast_2d(np.asarray(private, dtype=np.float64))
    with np.errstate(divide="ignore"):
        log_0 = np.log(p_0)

    if (p_0 > 0).all():
        divergences = _mixture_divergences(private, p_0, log_0, order)
    else:  # a zero in p_0 (a −inf log-probability): the general form, which masks it
        def divergences(lam: np.ndarray, rows: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore"):
                return _log_divergences(np.log(_mixtures(private[rows], p_0, lam)), log_0, order)

    n = len(private)
    root = math.sqrt(radius)
    lo, hi = np.zeros(n), np.ones(n)
    at_one = divergences(hi, np.arange(n))
    done = at_one <= radius
    lo[done] = 1.0
    g_lo, g_hi = np.full(n, -root), np.sqrt(at_one) - root  # √D − √r at each end: ≤ 0 at lo, > 0 (or ∞) at hi
    moved = np.zeros(n, dtype=np.int8)  # which end the last step moved: −1 lo, +1 hi
    for step in range(4 * (math.ceil(-math.log2(tolerance)) + 1)):  # enough bisections alone to reach it
        rows = np.flatnonzero(~done & (hi - lo > tolerance))
        if rows.size == 0:
            break
        a, b = lo[rows], hi[rows]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            x = a - g_lo[rows] * (b - a) / (g_hi[rows] - g_lo[rows])
        inside = np.isfinite(x) & (x > a) & (x < b) & (step % 4 != 3)
        x = np.where(inside, x, (a + b) / 2)
        d = divergences(x, rows)
        ok, g = d <= radius, np.sqrt(d) - root
        lo_rows, hi_rows = rows[ok], rows[~ok]
        g_hi[lo_rows[moved[lo_rows] == -1]] /= 2  # Illinois: hi kept twice
        g_lo[hi_rows[moved[hi_rows] == 1]] /= 2  # lo kept twice
        lo[lo_rows], g_lo[lo_rows], moved[lo_rows] = x[ok], g[ok], -1
        hi[hi_rows], g_hi[hi_rows], moved[hi_rows] = x[~ok], g[~ok], 1
    for i, lam in enumerate(lo):  # the decision is the shared function's
        if not symmetric_renyi(mix(private[i], p_0, lam), p_0, order) <= radius:
            lo[i] = choose_lambda(private[i], p_0, beta, alpha)
    return lo


def choose_lambda(p_i, p_0, beta: float, alpha: float) -> float:
    """Largest λ ∈ [0, 1] with D↔_{2α}(mix(p_i, p_0, λ) ‖ p_0) ≤ βα: 1 when feasible, else the feasible end of the
    bisection bracket (§12.1 item 13), decided by the shared ``symmetric_renyi`` alone (one row at a time; see
    ``choose_lambdas`` for all members at once)."""
    order = ball_order(alpha)
    radius = _positive("beta", beta) * _order(alpha)
    p_i = np.asarray(p_i, dtype=np.float64)
    p_0 = np.asarray(p_0, dtype=np.float64)

    def feasible(lam: float) -> bool:
        return symmetric_renyi(mix(p_i, p_0, lam), p_0, order) <= radius

    lam = largest_feasible(feasible, 1.0)
    if not feasible(lam):
        raise RuntimeError("the chosen λ must lie inside the Rényi ball")
    return lam


def pmixed(private, p_0, beta: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """PMixED (003 Alg 1 lines 10–14) over all N members (N×V probabilities): (p, λ's), p = mean of the mixtures."""
    p_0 = _distribution(p_0, "p_0")
    private = _members(private, p_0)
    lambdas = choose_lambdas(private, p_0, beta, alpha)
    return _mixtures(private, p_0, lambdas).mean(axis=0), lambdas


def _mixtures(private: np.ndarray, p_0: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    return lambdas[:, None] * private + (1.0 - lambdas[:, None]) * p_0[None, :]


# ----------------------------------------------------------------------------------------------------------------
# noisy screening


@dataclass(frozen=True)
class ScreenResult:
    """Outcome of one noisy screen: passed = divergence ≤ T; divergence = D_α(p̄_priv[K] ‖ p̄_0[K]) of the noisy,
    clipped, renormalised vector (∞ when nothing positive was left after the noise)."""

    passed: bool
    divergence: float


def top_k_support(p_0, top_k: int) -> np.ndarray:
    """K: indices of the ``top_k`` largest entries of p_0 among those > 0 (public; ties broken by index).

    Tokens p_0 gives no mass are left out (Alg 1 takes the top k of p_0 outright): noise on them would make the
    divergence to p̄_0[K] infinite and fail the screen whatever the private data."""
    p_0 = np.asarray(p_0, dtype=np.float64)
    k = _count("top_k", top_k)
    order = np.argsort(-p_0, kind="stable")
    order = order[p_0[order] > 0]
    return np.sort(order[:k])


def noisy_mixture(private, p_0, *, top_k: int, lam: float, sigma: float, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian-mechanism release of the screen (Alg 1 lines 1–4): (K, v) with v the length-V vector that is
    p̄_priv[K] + N(0, σ² I) on K and exactly 0 off K, p̄_priv = mean_i(λ p_i + (1−λ) p_0), no renormalisation
    before the noise (§12.1 item 16). L2 sensitivity λ√2/N for one member replaced."""
    p_0 = _distribution(p_0, "p_0")
    private = _members(private, p_0)
    lam = _lam("lam", lam)
    sigma = _positive("sigma", sigma)
    mixed = lam * private.mean(axis=0) + (1.0 - lam) * p_0
    support = top_k_support(p_0, top_k)
    out = np.zeros_like(p_0)
    out[support] = mixed[support] + rng.normal(0.0, sigma, size=support.size)
    return support, out


def screen_divergence(support: np.ndarray, noisy, p_0, alpha: float) -> float:
    """Post-processing of the noisy vector: clip negatives to 0, renormalise it and p_0 over K, D_α(priv ‖ pub);
    ∞ when no positive mass is left."""
    values = np.clip(np.asarray(noisy, dtype=np.float64)[support], 0.0, None)
    total = values.sum()
    if not total > 0:
        return math.inf
    public = np.asarray(p_0, dtype=np.float64)[support]
    return renyi_divergence(values / total, public / public.sum(), alpha)


def noisy_screen(private, p_0, *, top_k: int, lam: float, sigma: float, threshold: float, alpha: float,
                 rng: np.random.Generator) -> ScreenResult:
    """003 Alg 1 lines 1–7 on N×V member probabilities: passed when the noisy divergence is ≤ ``threshold``.
    Costs ``screen_rdp(alpha, lam, N, sigma)`` whatever the outcome."""
    a = _order(alpha)
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or math.isnan(threshold):
        raise ValueError(f"threshold must be a number, got {shown(threshold)}")
    support, noisy = noisy_mixture(private, p_0, top_k=top_k, lam=lam, sigma=sigma, rng=rng)
    divergence = screen_divergence(support, noisy, p_0, a)
    # nothing positive left after the noise (divergence ∞) fails the screen even when threshold = ∞
    return ScreenResult(passed=bool(math.isfinite(divergence) and divergence <= threshold),
                        divergence=float(divergence))


# ----------------------------------------------------------------------------------------------------------------
# privacy costs


def screen_rdp(alpha: float, lam: float, n_members: int, sigma: float) -> float:
    """RDP of one noisy screen (003 Thm 4.1): Gaussian with L2 sensitivity λ√2/N, α(λ√2/N)²/(2σ²) = (λ/(Nσ))²·α."""
    a = _order(alpha)
    n = _count("n_members", n_members)
    return (_lam("lam", lam) / (n * _positive("sigma", sigma))) ** 2 * a


def member_bound_rdp(alpha: float, beta: float, n_members: int) -> float:
    """Data-independent per-token RDP of PMixED at order α for one member *replaced* (003 Thm C.1's structure):
    log((N−1+e^{(α−1)·c(α)·βα})/N)/(α−1) with c(α) = ``pairwise_factor(α)`` for a ball enforced at order 2α (003
    writes c = 4 with the ball at order α, which does not hold; module docstring), evaluated in log space.

    Used for N = 1 too, where it equals c(α)·βα: 003 (and the reference code) charge βα for a single model, which is
    the *add/remove* case (removing the only member leaves p_0); replacing it moves between two points of the ball.
    """
    a = _order(alpha)
    b = float(beta)
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not (math.isfinite(b) and b >= 0):
        raise ValueError(f"beta must be a finite number >= 0, got {shown(beta)}")
    n = _count("n_members", n_members)
    x = (a - 1) * pairwise_factor(a) * b * a
    log_rest = math.log(n - 1) if n > 1 else -math.inf
    return max(0.0, (float(np.logaddexp(log_rest, x)) - math.log(n)) / (a - 1))


def data_dependent_rdp(mixtures, alpha: float, *, public=None) -> float:
    """max_i D↔_α(p ‖ p_{−i}), p the mean of all N mixtures (N×V), p_{−i} the mean without member i (003 Eq. 3).

    Reported as 003 defines it (removal of one member). It is computed from the private distributions, so it is
    **not** a DP guarantee and must not decide what the ledger is charged (§12.1 item 16). With N = 1 the ensemble
    without the member is the public distribution (003 Thm C.1 proof), which must then be passed as ``public``.
    """
    a = _order(alpha)
    m = np.asarray(mixtures, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] < 1:
        raise ValueError(f"mixtures must be an N×V array with N >= 1, got shape {m.shape}")
    n = m.shape[0]
    p = m.mean(axis=0)
    if n == 1:
        if public is None:
            raise ValueError("with a single member, p_{-i} is the public distribution: pass public=p_0")
        return symmetric_renyi(p, _distribution(public, "public"), a)
    if np.all(m == m[0]):  # every p_{-i} equals p; exactly 0 rather than rounding noise
        return 0.0
    rest = np.clip(m.sum(axis=0)[None, :] - m, 0.0, None) / (n - 1)
    with np.errstate(divide="ignore"):
        return float(np.max(_log_divergences(np.log(rest), np.log(p), a)))


def token_bound_rdp(alpha: float, beta: float, n_members: int, screen_lam: float = SCREEN_LAMBDA,
                    screen_sigma: float = SCREEN_SIGMA) -> float:
    """Data-independent RDP of one token: screening + PMixED bound (charged whether or not the screen passes)."""
    return screen_rdp(alpha, screen_lam, n_members, screen_sigma) + member_bound_rdp(alpha, beta, n_members)


def query_bound_rdp(alpha: float, beta: float, n_members: int, tokens: int, screen_lam: float = SCREEN_LAMBDA,
                    screen_sigma: float = SCREEN_SIGMA) -> float:
    """Data-independent RDP at order α of one query of up to ``tokens`` tokens, reserved before decoding:
    tokens × (screen_rdp + member_bound_rdp)."""
    tokens = _count("tokens", tokens)
    return tokens * token_bound_rdp(alpha, beta, n_members, screen_lam, screen_sigma)


def cost(alpha: int, beta: float, n_members: int, tokens: int, screen_lam: float = SCREEN_LAMBDA,
         screen_sigma: float = SCREEN_SIGMA) -> FixedOrderRDPEvent:
    """Privacy event of one query (the reservation): ``query_bound_rdp`` at the integer order α."""
    a = _integer_order(alpha)
    rdp = query_bound_rdp(a, beta, n_members, tokens, screen_lam, screen_sigma)
    return FixedOrderRDPEvent(a, rdp, mechanism=METHOD)


# ----------------------------------------------------------------------------------------------------------------
# one token


@dataclass(frozen=True)
class StepInfo:
    """What one AdaPMixED token reports. ``rdp_bound`` (screen + PMixED bound) is what the reservation covers,
    the same whether or not the screen passed; ``data_dependent_rdp`` (003 Eq. 3, 0 when the screen failed) is
    information computed from private data, not a DP guarantee; ``screen_divergence`` is post-processing of the
    noisy screen."""

    passed: bool
    screen_divergence: float
    data_dependent_rdp: float
    rdp_bound: float
    members: int


def _sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw from p (≥ 0, normalised by its own sum, which is 1 up to rounding)."""
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.size - 1))


def step(private_logprobs, public_logprobs, *, beta: float, alpha: float = ALPHA, top_k: int = TOP_K,
         screen_lam: float = SCREEN_LAMBDA, screen_sigma: float = SCREEN_SIGMA, threshold: float = THRESHOLD,
         rng: np.random.Generator) -> tuple[int, StepInfo]:
    """One AdaPMixED token (003 Alg 1) from next-token log-probabilities: members N×V, public V.

    Noisy screen; if it fails, the token is drawn from p_0; otherwise from the PMixED mixture p. Returns the token
    id and a ``StepInfo``.
    """
    a = _order(alpha)
    _positive("beta", beta)
    public_lp = np.asarray(public_logprobs)
    if public_lp.ndim != 1:
        raise ValueError(f"public_logprobs must be a vector, got shape {public_lp.shape}")
    p_0 = probs_from_logprobs(public_lp)
    if np.isnan(p_0).any():
        raise ValueError("public_logprobs is not a distribution (NaN, +inf or all -inf)")
    private_lp = np.asarray(private_logprobs)
    if private_lp.ndim != 2 or private_lp.shape[0] < 1 or private_lp.shape[1] != p_0.size:
        raise ValueError(f"private_logprobs must be an N×{p_0.size} array with N >= 1, got {private_lp.shape}")
    private = probs_from_logprobs(private_lp)
    invalid = np.isnan(private).any(axis=1)
    if invalid.any():  # a member may be replaced by anything: use p_0, never raise on private data
        private[invalid] = p_0
    n = private.shape[0]
    bound = token_bound_rdp(a, beta, n, screen_lam, screen_sigma)
    screen = noisy_screen(private, p_0, top_k=top_k, lam=screen_lam, sigma=screen_sigma, threshold=threshold,
                          alpha=a, rng=rng)
    if not screen.passed:
        return _sample(p_0, rng), StepInfo(False, screen.divergence, 0.0, bound, n)
    lambdas = choose_lambdas(private, p_0, beta, a)
    mixtures = _mixtures(private, p_0, lambdas)
    p = mixtures.mean(axis=0)
    dependent = data_dependent_rdp(mixtures, a, public=p_0)
    return _sample(p, rng), StepInfo(True, screen.divergence, dependent, bound, n)


# ----------------------------------------------------------------------------------------------------------------
# planning


def _largest_beta(fits) -> float:
    """Largest β > 0 with fits(β) (the feasible end of the bracket, ``search.largest``); 0.0 if none fits."""
    return largest(fits, start=1e-3, limit=_BETA_MAX, steps=_BISECT_STEPS)


def plan(queries: int, max_new_tokens: int, epsilon: float, delta: float, *, members: int,
         alpha: int = ALPHA, beta: float | None = None, screen_lam: float = SCREEN_LAMBDA,
         screen_sigma: float = SCREEN_SIGMA, top_k: int = TOP_K, threshold: float = THRESHOLD) -> dict:
    """Parameters of ``queries`` AdaPMixED queries of up to ``max_new_tokens`` tokens each within (ε, δ), charged
    with the data-independent bound at the fixed order α; no private data involved.

    Without ``beta``: the largest β (bisection, feasible side) with queries × query_bound_rdp ≤ fixed_order_budget(ε,
    δ, α). With ``beta``: it is checked, and ValueError says how many queries it pays for and which β would fit.
    ``top_k`` and ``threshold`` do not change the cost; they are echoed so that the plan is complete.
    """
    queries = _count("queries", queries)
    tokens = _count("max_new_tokens", max_new_tokens)
    epsilon = _positive("epsilon", epsilon)
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {shown(delta)}")
    delta = float(delta)
    members = _count("members", members)
    a = _integer_order(alpha)
    screen_lam = _positive("screen_lam", screen_lam, upper=1.0)
    screen_sigma = _positive("screen_sigma", screen_sigma)
    _count("top_k", top_k)
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or math.isnan(threshold):
        raise ValueError(f"threshold must be a number, got {shown(threshold)}")
    budget = fixed_order_budget(epsilon, delta, a)
    if not budget > 0:
        raise ValueError(f"at alpha = {a} and delta = {delta:g} the conversion alone costs "
                         f"{conversion_term(a, delta):.4g} >= epsilon = {epsilon:g}; raise alpha or epsilon")

    def total(b: float) -> float:
        return queries * query_bound_rdp(a, b, members, tokens, screen_lam, screen_sigma)

    def fits(b: float) -> bool:
        t = total(b)
        return t <= budget and bbghs_epsilon([t], [a], delta) <= epsilon

    screen_total = queries * tokens * screen_rdp(a, screen_lam, members, screen_sigma)
    if beta is None:
        best = _largest_beta(fits)
        if not best > 0:
            raise ValueError(f"the noisy screening alone costs {screen_total:.4g} RDP over {queries} queries × "
                             f"{tokens} tokens, more than the budget {budget:.4g} at alpha = {a}; raise screen_sigma, "
                             f"lower screen_lam, or answer fewer queries")
        beta = best
    else:
        beta = _positive("beta", beta)
        if not fits(beta):
            per_query = query_bound_rdp(a, beta, members, tokens, screen_lam, screen_sigma)
            paid = int(budget // per_query)
            while paid > 0 and (paid * per_query > budget
                                or bbghs_epsilon([paid * per_query], [a], delta) > epsilon):
                paid -= 1
            best = _largest_beta(fits)
            alternative = f"beta <= {best:.6g} would fit" if best > 0 else "no beta fits (the screening alone " \
                f"costs {screen_total:.4g})"
            raise ValueError(f"beta = {beta:g} costs {per_query:.4g} RDP per query at alpha = {a} "
                             f"({tokens} tokens, {members} members): the budget {budget:.4g} for (epsilon = "
                             f"{epsilon:g}, delta = {delta:g}) pays for {paid} of the {queries} queries; "
                             f"{alternative}")
    per_query = query_bound_rdp(a, beta, members, tokens, screen_lam, screen_sigma)
    certified = bbghs_epsilon([queries * per_query], [a], delta)
    assert certified <= epsilon
    return {
        "method": METHOD,
        "beta": beta,
        "alpha": a,
        "members": members,
        "queries": queries,
        "tokens_per_query": tokens,
        "epsilon": epsilon,
        "delta": delta,
        "screen_lam": screen_lam,
        "screen_sigma": screen_sigma,
        "top_k": int(top_k),
        "threshold": float(threshold),
        "rdp_per_query": per_query,
        "rdp_budget": budget,
        "rdp_total": queries * per_query,
        "conversion_term": conversion_term(a, delta),
        "screen_rdp_per_token": screen_rdp(a, screen_lam, members, screen_sigma),
        "member_rdp_per_token": member_bound_rdp(a, beta, members),
        "epsilon_certified": certified,
    }
