"""DPS-MOZO — DP sampling by mixing one-shot and zero-shot outputs (paper 000, Alg 1, Table 5; MECHANISMS §7,
§12.1 items 13–15), with the Rényi ball enforced at order 2α so that one shot per token has a proven bound.

**Algorithm** (one token; the caller computes the log-probabilities with the LLM and repeats up to T_max times):

1. S_t ← ``shots`` demonstrations drawn without replacement from the private set D, fresh for every token
   (:func:`sample_demonstrations`).
2. ℓ_0 = the zero-shot prompt's next-token log-probabilities; K = ids of the top-k entries of ℓ_0
   (:func:`public_top_k`; public: it depends on the query and the DP output so far only).
3. Every row — ℓ_0 and the one-shot rows ℓ_i (one demonstration each) — is truncated to K and renormalised over K
   (:func:`truncate`; Alg 1 lines 7/10 say "∈ K", a typo for ∉ K).
4. Mixing in logit space: p̄_λ = softmax(λ·ℓ_i + (1−λ)·ℓ_0) over K (:func:`mix_logits`), with λ_i the largest
   λ ∈ [0, 1.5] found by bisection such that D↔_{2α}(p̄_λ ‖ p_0) ≤ r, p_0 = softmax(ℓ_0) (:func:`choose_lambda`;
   the ball's order and radius: :func:`ball_order`, :func:`ball_radius`). The λ returned is the feasible end of
   the bisection bracket and the constraint is checked on it, so the ball holds exactly (§12.1 item 13).
5. y_t ∼ normalise(Π_i p̄_{λ_i}) over K (:func:`product_distribution`, :func:`step`); y_t is always in K.

A one-shot row that contains NaN or +∞ inside K (a broken model output) is replaced by the public row (λ = 0);
this is a function of that row only, so the constraint — hence the accounting — still holds, and the mechanism
does not crash on private data.

**Why order 2α.** The paper (Thm B.3) enforces the ball at order α, D↔_α(p̄_λ, p_0) ≤ βα, and claims every token
is (α, 4βα)-RDP. That is false even for one shot: two points of an order-α ball can be arbitrarily far apart at
order α. With α = 5, β = 0.3422 (claimed 4βα = 6.84) and a zero-shot tail probability t, the two neighbouring
releases — one demonstration pushing the tail token up, its substitute pushing it down — are D_α = 8.6 apart at
t = 1e-9 and the divergence grows like log(1/t)/(α−1) without limit (tests/privacy/test_dps_mozo.py). Mironov's weak
triangle inequality (2017, Prop 11 with p = q = 2) repairs it when the ball is enforced at order 2α:
D_α(P‖R) ≤ (α−½)/(α−1)·D_{2α}(P‖Q) + D_{2α−1}(Q‖R), and D_{2α−1} ≤ D_{2α}; so two points P, R within r of
Q = p_0 at order 2α (in both directions) are within c(α)·r at order α, c(α) = 1 + (α−½)/(α−1)
(:func:`pairwise_factor`: 2.125 at α = 5, → 2 for large α) — the constant AdaPMixED uses for the same reason.

**Accounting** (:func:`plan`, :func:`cost`; ``dpicl.privacy.accounting.wor``). β keeps the paper's meaning *for
the ledger*: a token costs 4βα at order α (hence at every order j ≤ α; nothing is known above α), amplified by
sampling without replacement with q = shots/|D| (Wang et al. 2019, ε(∞) = ∞), and β is calibrated exactly as in
000 Table 5: the largest β with steps · ε'(α) ≤ ε̃ = ε − log((α−1)/α) + (log δ + log α)/(α−1)
(:func:`calibrate_beta`; steps = queries × max_new_tokens; α, unless given, the smallest integer with ε̃ ≥ ε/2,
:func:`choose_alpha`). What the ball is for a given β depends on ``shots``:

* **shots = 1 — proven** (``guarantee = "proven"``): radius r = 4βα / c(α) at order 2α. A substitution
  neighbour changes the one-shot row of the (single) drawn demonstration only; both releases are mixtures in the
  ball around the same public p_0 (K, p_0 depend on public data and earlier outputs only), so by the inequality
  above they are within c(α)·r = 4βα at order α — the number the ledger is charged. The without-replacement bound
  needs ε(j) for 2 ≤ j ≤ α: 4βα for each (the order-α bound, Rényi divergence being non-decreasing in the order).
* **shots > 1 — the paper's claim** (``guarantee = "paper-claim"``): radius βα at order 2α (inside the paper's
  order-α ball, so its claim covers it), charged 4βα. No proof: the release is a renormalised pointwise product of
  the mixtures, not a product measure, so 000's additivity step does not apply, and the weak triangle inequality
  bounds one factor, not the renormalised product. :func:`plan` and :func:`cost` refuse shots > 1 unless the
  caller passes ``accept_unproven_guarantee=True``; the events then carry ``guarantee = "paper-claim"`` and
  ``dpicl budget show`` counts them.

``epsilon_certified`` is the BBGHS conversion of the composed curve minimised over the orders 2..α, never above ε.
The events are for substitution neighbours and cannot be composed with add/remove events in one ledger.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..accounting.events import DPSMozoEvent
from ..accounting.rdp import bbghs_epsilon
from ..accounting.wor import dps_mozo_rdp, fixed_order_budget
from ..errors import shown
from ..search import largest
from .renyi import largest_feasible, symmetric_renyi

METHOD = "dps-mozo"  # name in `dpicl plan`
MECHANISM = "dps_mozo"  # label of the ledger event
LAMBDA_MAX = 1.5  # upper end of the λ search (000 §4.1)
DEFAULT_TOP_K = 100
_BETA_REL_TOL = 1e-6
_ALPHA_MAX = 10**6
BALL_ORDER_FACTOR = 2  # the ball is enforced at order 2α (module docstring)
PROVEN = "proven"  # ``guarantee`` of a one-shot DPS-MOZO event: Mironov's weak triangle inequality
PAPER_CLAIM = "paper-claim"  # shots > 1: 000 Thm B.3's claim, no proof (refused unless accepted explicitly)


# ----------------------------------------------------------------------------------------------- input checks

def _positive_int(name: str, value, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {shown(value)}{hint}")
    return int(value)


def _positive_number(name: str, value, hint: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {shown(value)}{hint}")
    return float(value)


def _delta(delta) -> float:
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1) (usually 1/|D| or smaller), got {shown(delta)}")
    return float(delta)


def _order(alpha, name: str = "alpha") -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (math.isfinite(alpha) and alpha > 1):
        raise ValueError(f"{name} must be a finite Rényi order > 1, got {shown(alpha)}")
    return float(alpha)


def _integer_order(alpha) -> int:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not float(alpha).is_integer() or alpha < 2:
        raise ValueError(f"alpha must be an integer Rényi order >= 2, got {shown(alpha)} (or leave it out: "
                         "choose_alpha picks one)")
    return int(alpha)


def _vector(name: str, x) -> np.ndarray:
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 1 or v.size < 1:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {v.shape}")
    return v


# ------------------------------------------------------------------------------------------------ Rényi ball

def ball_order(alpha) -> float:
    """The order at which the Rényi ball is enforced: 2α (module docstring, "Why order 2α")."""
    return BALL_ORDER_FACTOR * _order(alpha)


def pairwise_factor(alpha) -> float:
    """c(α) = 1 + (α−½)/(α−1): two distributions within r of p_0 at order 2α (both directions) are within c(α)·r
    of each other at order α (Mironov 2017, Prop 11 with p = q = 2, and D_{2α−1} ≤ D_{2α})."""
    a = _order(alpha)
    return 1.0 + (a - 0.5) / (a - 1.0)


def guarantee(shots, accept_unproven_guarantee: bool = False) -> str:
    """``"proven"`` for one shot per token; for more, ``"paper-claim"`` if ``accept_unproven_guarantee`` is True,
    otherwise ValueError (the refusal happens before anything is charged or drawn)."""
    shots = _positive_int("shots", shots)
    if shots == 1:
        return PROVEN
    if accept_unproven_guarantee is not True:
        raise ValueError(
            f"DPS-MOZO with shots = {shots} rests on paper 000's unproven claim (its bound is proven for one shot per "
            "token only: the release is a renormalised product of the mixtures, to which the paper's additivity step "
            "does not apply; docs/PRIVACY.md). Use shots = 1, or opt in explicitly with accept_unproven_guarantee "
            "(config `method.accept_unproven_guarantee: true`): its ledger entries are then labelled "
            f"guarantee = {PAPER_CLAIM!r} and `dpicl budget show` counts them")
    return PAPER_CLAIM


def ball_radius(beta: float, alpha, shots: int) -> float:
    """Radius r of the order-2α ball for the ledger's β (a token is charged 4βα at order α): 4βα/c(α) for one shot
    (then c(α)·r = 4βα is proven), βα for more (the paper's radius; its 4βα is a claim)."""
    beta = _positive_number("beta", beta)
    a = _order(alpha)
    if _positive_int("shots", shots) == 1:
        return 4.0 * beta * a / pairwise_factor(a)
    return beta * a


# --------------------------------------------------------------------------------------------------- mechanism

def public_top_k(zero_shot_logprobs, k: int) -> np.ndarray:
    """Vocabulary ids of the ``k`` largest zero-shot entries (public), largest first, ties to the lower id.

    The ``k`` selected entries must be finite: otherwise p_0 has no mass on part of K and the Rényi ball is
    undefined there.
    """
    z = _vector("zero_shot_logprobs", zero_shot_logprobs)
    k = _positive_int("k", k)
    if k > z.size:
        raise ValueError(f"top_k = {k} exceeds the vocabulary size {z.size}; lower top_k")
    if np.isnan(z).any():
        raise ValueError("zero_shot_logprobs contains NaN; the public (zero-shot) model output is broken")
    threshold = np.partition(z, z.size - k)[z.size - k]  # the k-th largest value (O(V), not a full sort)
    above = np.flatnonzero(z > threshold)
    ties = np.flatnonzero(z == threshold)[: k - above.size]  # lower ids first
    chosen = np.concatenate([above, ties])
    ids = chosen[np.lexsort((chosen, -z[chosen]))]
    if not np.isfinite(z[ids]).all():
        raise ValueError(f"fewer than top_k = {k} zero-shot entries are finite (or one is +inf); lower top_k")
    return ids


def truncate(logprobs, ids: np.ndarray) -> np.ndarray:
    """Log-probabilities restricted to the public ids K and renormalised over K (entry j ↔ vocabulary id
    ``ids[j]``; the −∞ outside K are dropped). Accepts one row (V,) or several (n×V)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim not in (1, 2) or lp.shape[-1] < 1:
        raise ValueError(f"logprobs must be a (V,) or (n, V) array, got shape {lp.shape}")
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size < 1 or ids.min() < 0 or ids.max() >= lp.shape[-1]:
        raise ValueError(f"ids must be a non-empty 1-D array of vocabulary ids < {lp.shape[-1]}")
    return _log_softmax(lp[..., ids])


def mix_logits(one_shot, zero_shot, lam: float) -> np.ndarray:
    """Log-probabilities of p̄_λ = softmax(λ·ℓ_i + (1−λ)·ℓ_0) over K (both rows over K; λ = 0 gives p_0 exactly)."""
    one = _vector("one_shot", one_shot)
    zero = _vector("zero_shot", zero_shot)
    if one.shape != zero.shape:
        raise ValueError(f"one_shot and zero_shot must both be over K, got shapes {one.shape} and {zero.shape}")
    lam = float(lam)
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam must be a finite number >= 0, got {shown(lam)}")
    return _mix(one, zero, lam)


def _mix(one: np.ndarray, zero: np.ndarray, lam: float) -> np.ndarray:
    if lam == 0.0:  # not 0·ℓ_i: that is NaN where ℓ_i = −∞
        return _log_softmax(zero)
    return _log_softmax(lam * one + (1.0 - lam) * zero)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    """log softmax along the last axis in plain numpy (scipy's costs ~0.3 ms a call on these short vectors);
    NaN in a row that is NaN, +∞ or all −∞ (such a row has no distribution)."""
    m = x.max(axis=-1, keepdims=True)
    if np.isfinite(m).all():
        shifted = x - m
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shifted = x - m
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _fast_renyi(lp: np.ndarray, lq: np.ndarray, alpha: float) -> float:
    """D_α(p ‖ q) from log-probabilities, one of which is finite everywhere (log p_0): the formula of
    ``renyi.renyi_divergence`` without its overhead. It only steers the λ search; the shared function decides."""
    t = alpha * lp + (1 - alpha) * lq  # +∞ where q = 0 < p (then D = ∞), −∞ where p = 0 (no term)
    m = t.max()
    if m == math.inf:
        return math.inf
    return max(0.0, (float(m) + math.log(np.exp(t - m).sum())) / (alpha - 1))


def choose_lambda(one_shot, zero_shot, beta: float, alpha: float, upper: float = LAMBDA_MAX, *,
                  shots: int = 1) -> float:
    """The largest λ ∈ [0, ``upper``] found by bisection with D↔_{2α}(p̄_λ ‖ p_0) ≤ ``ball_radius(β, α, shots)``
    (``upper`` when feasible there); ``shots`` is the number of one-shot rows of the token (the radius depends on
    it; :func:`next_token_distribution` passes it).

    The feasible end of the bracket is returned (``renyi.largest_feasible``) and the constraint is checked on it
    (an error, never a silent violation), evaluated by ``renyi.symmetric_renyi`` on exactly the arrays
    :func:`mix_logits` returns. (A fast evaluation of the same formula steers the bisection; should it disagree
    with the shared function at the boundary, the bisection is redone with the shared one.) A one-shot row with
    NaN or +∞, or without any finite entry, gets λ = 0. The divergence need not be monotone in λ: "largest" is
    the largest the bisection finds, as in the paper.
    """
    one = _vector("one_shot", one_shot)
    zero = _vector("zero_shot", zero_shot)
    if one.shape != zero.shape:
        raise ValueError(f"one_shot and zero_shot must both be over K, got shapes {one.shape} and {zero.shape}")
    beta = _positive_number("beta", beta)
    alpha = _order(alpha)
    upper = float(upper)
    if not (math.isfinite(upper) and upper >= 0):
        raise ValueError(f"upper must be a finite number >= 0, got {shown(upper)}")
    if not np.isfinite(zero).all():
        raise ValueError("zero_shot must be finite over K (choose K with public_top_k)")
    return _choose_lambda(one, zero, ball_radius(beta, alpha, shots), ball_order(alpha), upper)[0]


def _choose_lambda(one: np.ndarray, zero: np.ndarray, radius: float, order: float,
                   upper: float) -> tuple[float, float]:
    """(λ, D↔_order(p̄_λ ‖ p_0) as the shared function evaluates it) for validated rows: the ball D↔_order ≤ radius."""
    if np.isnan(one).any() or np.isposinf(one).any() or not np.isfinite(one).any():
        return 0.0, 0.0
    log_p0 = _mix(one, zero, 0.0)
    p0 = np.exp(log_p0)
    last = {}

    def feasible(lam: float) -> bool:  # the constraint itself, through the shared renyi module
        last[lam] = symmetric_renyi(np.exp(_mix(one, zero, lam)), p0, order)
        return last[lam] <= radius

    def probably_feasible(lam: float) -> bool:  # the same formula, fast: only steers the search
        lp = _mix(one, zero, lam)
        return max(_fast_renyi(lp, log_p0, order), _fast_renyi(log_p0, lp, order)) <= radius

    lam = largest_feasible(probably_feasible, upper)
    inside = feasible(lam)
    if not inside:  # the two evaluations disagree at the boundary (rounding): search with the official one
        lam = largest_feasible(feasible, lam)
        inside = feasible(lam)
    if not inside:  # cannot happen (λ = 0 is p_0 itself); checked explicitly: `assert` vanishes under python -O
        raise RuntimeError(f"λ = {lam} violates the Rényi ball D↔_{order:g} ≤ {radius}")
    return lam, last[lam]


def product_distribution(mixed_logprobs) -> np.ndarray:
    """Probabilities over K of the normalised pointwise product of the rows (n×|K| log-probabilities):
    softmax of their sum."""
    lp = np.asarray(mixed_logprobs, dtype=np.float64)
    if lp.ndim == 1:
        lp = lp[None, :]
    if lp.ndim != 2 or lp.shape[0] < 1 or lp.shape[1] < 1:
        raise ValueError(f"mixed_logprobs must be a non-empty (n, |K|) array, got shape {lp.shape}")
    if np.isnan(lp).any() or np.isposinf(lp).any():
        raise ValueError("mixed_logprobs must not contain NaN or +inf")
    total = lp.sum(axis=0)
    if not np.isfinite(total).any():
        raise ValueError("the rows have no common support: the product distribution is undefined")
    return np.exp(_log_softmax(total))


def next_token_distribution(zero_shot_logprobs, one_shot_logprobs, *, top_k: int, beta: float,
                            alpha: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """Alg 1 up to the sampling: (K, probabilities over K, info) for one token; ``info`` as in :func:`step`. The
    number of one-shot rows is the number of shots: one row gets the proven ball, more the paper's (module
    docstring); whether more than one may be used at all is decided when the run is planned (:func:`guarantee`)."""
    z = _vector("zero_shot_logprobs", zero_shot_logprobs)
    ones = np.asarray(one_shot_logprobs, dtype=np.float64)
    if ones.ndim == 1:
        ones = ones[None, :]
    if ones.ndim != 2 or ones.shape[0] < 1 or ones.shape[1] != z.size:
        raise ValueError(f"one_shot_logprobs must be an (n_shots >= 1, {z.size}) array over the same vocabulary "
                         f"as zero_shot_logprobs, got shape {ones.shape}")
    beta = _positive_number("beta", beta)
    alpha = _order(alpha)
    shots = ones.shape[0]
    radius, order = ball_radius(beta, alpha, shots), ball_order(alpha)
    ids = public_top_k(z, top_k)
    zero = truncate(z, ids)
    rows = truncate(ones, ids)
    lambdas, divergences, mixed = [], [], []
    for row in rows:
        lam, divergence = _choose_lambda(row, zero, radius, order, LAMBDA_MAX)
        lambdas.append(lam)
        divergences.append(divergence)
        mixed.append(_mix(row, zero, lam))
    info = {
        "lambdas": [float(v) for v in lambdas],
        "max_divergence": float(max(divergences)),
        "radius": radius,
        "ball_order": order,
    }
    return ids, product_distribution(np.stack(mixed)), info


def step(zero_shot_logprobs, one_shot_logprobs, *, top_k: int, beta: float, alpha: float,
         rng: np.random.Generator) -> tuple[int, dict]:
    """One DPS-MOZO token (Alg 1): its vocabulary id (always in K) and ``info`` — numbers only: the λ of every
    one-shot row (``lambdas``), the largest D↔_{2α} of a mixed row from p_0 (``max_divergence``), the ball's
    ``radius`` (:func:`ball_radius`) and ``ball_order`` (2α). ``zero_shot_logprobs``: (V,); ``one_shot_logprobs``:
    (n_shots, V), one row per demonstration drawn by :func:`sample_demonstrations` for this token. Its cost is one
    token of ``cost(β, α, q, tokens, shots=n_shots)``."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator (e.g. np.random.default_rng(seed))")
    ids, probs, info = next_token_distribution(zero_shot_logprobs, one_shot_logprobs, top_k=top_k, beta=beta,
                                               alpha=alpha)
    cdf = np.cumsum(probs)
    j = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    j = min(j, len(ids) - 1)
    while probs[j] == 0.0:  # never return a zero-probability token (u·cdf[-1] on a flat stretch of the cdf)
        j -= 1
    return int(ids[j]), info


def sample_demonstrations(n_records: int, shots: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``shots`` distinct records out of ``n_records`` (without replacement); call it for every token."""
    n_records = _positive_int("n_records", n_records)
    shots = _positive_int("shots", shots)
    if shots > n_records:
        raise ValueError(f"cannot draw {shots} demonstrations without replacement from {n_records} records; "
                         "lower shots or use a larger private set")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator (e.g. np.random.default_rng(seed))")
    return rng.choice(n_records, size=shots, replace=False)


# ------------------------------------------------------------------------------------------ accounting, planning

def choose_alpha(epsilon: float, delta: float) -> int:
    """The smallest integer α ≥ 2 whose fixed-order budget ε̃(ε, δ, α) is ≥ ε/2 (the α column of 000 Table 5)."""
    epsilon = _positive_number("epsilon", epsilon)
    delta = _delta(delta)
    start = 2
    while start <= _ALPHA_MAX:
        a = np.arange(start, 2 * start, dtype=float)
        budget = epsilon - np.log((a - 1) / a) + (math.log(delta) + np.log(a)) / (a - 1)
        hits = np.nonzero(budget >= epsilon / 2)[0]
        for i in hits:  # confirm with the scalar formula that calibrate_beta uses
            if fixed_order_budget(epsilon, delta, int(a[i])) >= epsilon / 2:
                return int(a[i])
        start *= 2
    raise ValueError(f"no Rényi order up to {_ALPHA_MAX} leaves ε/2 of ε = {epsilon:g} at δ = {delta:g}; "
                     "raise epsilon or delta")


def _fits(beta: float, alpha: int, q: float, steps: int, budget: float, epsilon: float, delta: float) -> bool:
    rdp = steps * dps_mozo_rdp(beta, alpha, q, [alpha])[0]
    return bool(rdp <= budget and bbghs_epsilon([rdp], [alpha], delta) <= epsilon)


def calibrate_beta(sampling_rate: float, steps: int, epsilon: float, delta: float, alpha: int) -> float:
    """The largest β (bisection, feasible end, relative precision ~1e-6) with
    ``steps`` · ε'(α; β) ≤ ε̃ = fixed_order_budget(ε, δ, α), ε' the per-token amplified RDP (:func:`dps_mozo_rdp`);
    ``steps`` = queries × max_new_tokens."""
    q = _positive_number("sampling_rate", sampling_rate)
    if q > 1:
        raise ValueError(f"sampling_rate must be in (0, 1] (shots / dataset size), got {shown(sampling_rate)}")
    steps = _positive_int("steps", steps, " (queries × max_new_tokens)")
    epsilon = _positive_number("epsilon", epsilon)
    delta = _delta(delta)
    alpha = _integer_order(alpha)
    budget = fixed_order_budget(epsilon, delta, alpha)
    if budget <= 0:
        raise ValueError(f"at α = {alpha} the conversion to (ε = {epsilon:g}, δ = {delta:g}) alone exceeds ε "
                         f"(ε̃ = {budget:.4g} <= 0); use a larger alpha (e.g. choose_alpha(ε, δ) = "
                         f"{choose_alpha(epsilon, delta)}) or a larger epsilon/delta")

    def fits(beta: float) -> bool:
        return _fits(beta, alpha, q, steps, budget, epsilon, delta)

    lo = largest(fits, start=1.0, limit=1e6, rel_tol=_BETA_REL_TOL)  # the feasible end; 0.0: none fits
    if lo == 0.0:
        raise ValueError(f"no β > 0 fits ε = {epsilon:g} over {steps} token steps at α = {alpha}; "
                         "raise epsilon or lower queries / max_new_tokens")
    return lo


def cost(beta: float, alpha: int, sampling_rate: float, tokens: int, *, shots: int,
         accept_unproven_guarantee: bool = False) -> DPSMozoEvent:
    """Privacy event of one DPS-MOZO query of ``tokens`` (= max_new_tokens) token steps with ``shots`` one-shot
    rows per token; charge it even when the answer stops early at EOS (the number of steps taken depends on the
    private data). shots > 1 is refused unless ``accept_unproven_guarantee`` (:func:`guarantee`); the event says
    which guarantee it rests on."""
    label = guarantee(shots, accept_unproven_guarantee)
    return DPSMozoEvent(float(beta), _integer_order(alpha), float(sampling_rate),
                        _positive_int("tokens", tokens, " (max_new_tokens)"), mechanism=MECHANISM, guarantee=label)


def plan(dataset_size: int, shots: int, queries: int, max_new_tokens: int, epsilon: float, delta: float,
         alpha: int | None = None, top_k: int = DEFAULT_TOP_K, *, accept_unproven_guarantee: bool = False) -> dict:
    """β and α for answering ``queries`` queries of at most ``max_new_tokens`` tokens within (ε, δ) with ``shots``
    demonstrations per token drawn from ``dataset_size`` private records; no private data involved. shots > 1 is
    refused (ValueError) unless ``accept_unproven_guarantee`` is True (:func:`guarantee`)."""
    dataset_size = _positive_int("dataset_size", dataset_size)
    shots = _positive_int("shots", shots)
    label = guarantee(shots, accept_unproven_guarantee)
    if shots > dataset_size:
        raise ValueError(f"shots = {shots} exceeds dataset_size = {dataset_size}: the demonstrations of a token are "
                         "drawn without replacement; lower shots")
    queries = _positive_int("queries", queries)
    max_new_tokens = _positive_int("max_new_tokens", max_new_tokens)
    top_k = _positive_int("top_k", top_k)
    epsilon = _positive_number("epsilon", epsilon)
    delta = _delta(delta)
    alpha = choose_alpha(epsilon, delta) if alpha is None else _integer_order(alpha)
    q = shots / dataset_size
    steps = queries * max_new_tokens
    beta = calibrate_beta(q, steps, epsilon, delta, alpha)
    orders = list(range(2, alpha + 1))
    certified = bbghs_epsilon(steps * dps_mozo_rdp(beta, alpha, q, orders), orders, delta)
    if not certified <= epsilon:  # cannot happen: calibrate_beta checks the value at α itself
        raise RuntimeError(f"planned β = {beta} certifies ε = {certified} > {epsilon}")
    return {
        "method": METHOD,
        "epsilon": epsilon,
        "delta": delta,
        "dataset_size": dataset_size,
        "shots": shots,
        "sampling_rate": q,
        "queries": queries,
        "tokens_per_query": max_new_tokens,
        "steps": steps,
        "top_k": top_k,
        "alpha": alpha,
        "epsilon_tilde": fixed_order_budget(epsilon, delta, alpha),
        "beta": beta,
        "guarantee": label,
        "accept_unproven_guarantee": label == PAPER_CLAIM,
        "ball_order": BALL_ORDER_FACTOR * alpha,
        "radius": ball_radius(beta, alpha, shots),
        "pairwise_factor": pairwise_factor(alpha),
        "rdp_per_token_unamplified": 4.0 * beta * alpha,
        "rdp_per_token": float(dps_mozo_rdp(beta, alpha, q, [alpha])[0]),
        "lambda_max": LAMBDA_MAX,
        "neighbouring": DPSMozoEvent.neighbouring,
        "epsilon_certified": certified,
    }
