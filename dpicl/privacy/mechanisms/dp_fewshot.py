"""DP few-shot generation — synthetic demonstrations token by token (paper 002 Alg 1, App A; MECHANISMS §6, §A.1,
§A.3, §11.1, §12.1 items 6 and 17).

For every generated token, M splits of private demonstrations each give the LLM's next-token distribution; the
distributions are restricted to the public vocabulary K (the top-k tokens of the *public* prompt, which holds no
private data — 002's "RVP"), averaged over the splits, noised, and the argmax is released. Two aggregations:

* **Gaussian**: each split's distribution is renormalised to sum 1 over K, so replacing one split moves the mean
  by ≤ √2/M in L2 (:func:`l2_sensitivity`); noise N(0, (√2/M·nm)²) on every entry of K. One token is a
  Poisson-subsampled Gaussian (``SubsampledGaussianEvent``) and the noise multiplier nm is PRV-calibrated over all
  generated tokens (:func:`plan`).
* **Exponential** (report-noisy-max with exponential noise, = permute-and-flip; Ding et al. 2021): each split's
  distribution is max-normalised (largest entry 1, all in [0, 1]), so the mean moves by ≤ 1/M in L∞
  (:func:`linf_sensitivity`); noise Exp(scale 2·(1/M)/ε0) on every entry of K → ε0-DP per token, amplified by
  Poisson(q) to ε̄ = log(1 + q(e^ε0 − 1)) and composed as pure DP (``SubsampledPureDPEvent``).

Privacy-correct variant; it differs from 002's code (``microsoft/dp-few-shot-generation``) in:

* sampling (§12.1 item 6): per token a fresh **Poisson** sample of the private pool at rate q = M·N/|D|
  (add/remove neighbours, the relation the PRV accounting assumes), grouped into M splits of ≤ N demonstrations by
  a keyed hash of the record (``dpicl.privacy.sampling``; done by the pipeline), so one record changes one split's
  distribution; the code drew M·N records without replacement and dealt them round-robin by position;
* the argmax is over K only (§12.1 item 17): the code took it over the whole vocabulary, where off-K entries are 0
  and win whenever every noisy value on K is negative;
* M is the configured number of splits whatever the sample: an empty split still contributes its (zero-shot)
  distribution, so M itself is data-independent;
* a split whose distribution cannot be normalised over K (all of K has probability 0, or the model returned
  NaN/+inf) contributes the uniform distribution over K — a function of that split alone, so the sensitivity
  bounds above hold for every model output.

Accounting: T token steps drawing from one pool compose as ``ComposedEvent(step_event, T)`` (:func:`cost`); the
number of steps charged is the maximum T (stopping early at an end token is post-processing of released tokens).
For classification the demonstrations of label y are generated from the records of label y only: the pools are
disjoint, so the label generations compose in parallel and the charge is that of the pool with the largest q
(the smallest pool), with the same noise and token count for every label (:func:`pool_sampling_rate`,
:func:`charge_for_pools`). No private data are involved in planning.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.special import gammaln, log_expit, logsumexp

from ..accounting.auto import total_epsilon
from ..accounting.calibration import plan_gaussian
from ..accounting.events import ComposedEvent, PrivacyEvent, SubsampledGaussianEvent, SubsampledPureDPEvent
from ..errors import shown
from ..search import bisect

METHOD = "dp-fewshot"  # name in plans
MECHANISM = "dp_fewshot"  # label of the ledger events
MECHANISMS = ("gaussian", "exponential")
DEFAULT_TOP_K = 100  # 002's RVP: the public top-100 tokens

_REL_TOL = 1e-4  # relative precision of the planned ε0 (feasible end of the bisection bracket)
_EPS0_MIN = 1e-6  # below this no per-token ε0 is useful
_EPS0_MAX = 700.0  # e^ε0 must stay finite
_SUM_TOL = 1e-6  # a Gaussian-mode row must sum to 1 within this


def l2_sensitivity(splits: int) -> float:
    """√2/M: L2 change of the mean of M distributions (each summing to 1) when one of them is replaced."""
    _check_int("splits", splits)
    return math.sqrt(2) / splits


def linf_sensitivity(splits: int) -> float:
    """1/M: L∞ change of the mean of M vectors in [0, 1]^K when one of them is replaced."""
    _check_int("splits", splits)
    return 1.0 / splits


# ----------------------------------------------------------------------------------------------------------------
# input checks


def _check_int(name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {shown(value)}")


def _check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {shown(value)}")


def _check_mechanism(mechanism: str) -> None:
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {shown(mechanism)}")


def _check_noise_parameter(mechanism: str, noise_multiplier, epsilon0) -> None:
    """Exactly the parameter of ``mechanism`` is given, and it is valid."""
    _check_mechanism(mechanism)
    if mechanism == "gaussian":
        if epsilon0 is not None:
            raise ValueError("the gaussian mechanism takes noise_multiplier, not epsilon0")
        if noise_multiplier is None:
            raise ValueError("the gaussian mechanism needs noise_multiplier")
        _check_positive("noise_multiplier", noise_multiplier)
    else:
        if noise_multiplier is not None:
            raise ValueError("the exponential mechanism takes epsilon0, not noise_multiplier")
        if epsilon0 is None:
            raise ValueError("the exponential mechanism needs epsilon0")
        _check_positive("epsilon0", epsilon0)


def _check_rate(sampling_rate) -> None:
    _check_positive("sampling_rate", sampling_rate)
    if sampling_rate > 1:
        raise ValueError(f"sampling_rate must be in (0, 1], got {shown(sampling_rate)}")


def _check_dists(dists: np.ndarray, mechanism: str) -> np.ndarray:
    """The M×|K| split distributions, checked to lie in the domain the sensitivity is derived for."""
    d = np.asarray(dists, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] < 1 or d.shape[1] < 1:
        raise ValueError(f"dists must be a non-empty M×|K| array, got shape {d.shape}")
    if not np.isfinite(d).all() or (d < 0).any():
        raise ValueError("dists must be finite and non-negative (use split_distributions)")
    if mechanism == "gaussian":
        if np.abs(d.sum(axis=1) - 1.0).max() > _SUM_TOL:
            raise ValueError("gaussian: every split's distribution must sum to 1 over K (use split_distributions)")
    elif (d > 1.0).any():
        raise ValueError("exponential: every split's values must lie in [0, 1] (use split_distributions)")
    return d


# ----------------------------------------------------------------------------------------------------------------
# one token


def public_vocabulary(public_logprobs: np.ndarray, k: int = DEFAULT_TOP_K) -> np.ndarray:
    """Ids of the k most likely tokens of the public prompt (002's RVP), most likely first; ties go to the
    lower id. ``public_logprobs`` (V,) must come from a prompt without private data (K is public)."""
    lp = np.asarray(public_logprobs, dtype=np.float64)
    if lp.ndim != 1 or lp.size < 1:
        raise ValueError(f"public_logprobs must be a non-empty 1-D array, got shape {lp.shape}")
    if np.isnan(lp).any():
        raise ValueError("public_logprobs contains NaN")
    _check_int("k", k)
    if k > lp.size:
        raise ValueError(f"k = {k} exceeds the vocabulary size {lp.size}")
    return np.argsort(-lp, kind="stable")[:k].astype(np.int64)


def split_distributions(private_logprobs: np.ndarray, vocabulary: np.ndarray, mode: str) -> np.ndarray:
    """Each split's next-token distribution restricted to K and normalised, M×|K| float64.

    ``private_logprobs`` (M×V): log-probabilities (or logits: a per-row constant does not matter) of the M private
    prompts. "gaussian": probabilities renormalised to sum 1 over K (002's ``log_normalize``); "exponential":
    scaled so that the largest is 1 (``log_max_normalize``). Computed in log space (log-sum-exp / max shift), so
    very small probabilities neither underflow nor overflow before normalising. A row that cannot be normalised
    (all −inf on K, or NaN/+inf) becomes the uniform distribution over K (all ones for "exponential").
    """
    _check_mechanism(mode)
    lp = np.asarray(private_logprobs, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[0] < 1 or lp.shape[1] < 1:
        raise ValueError(f"private_logprobs must be a non-empty M×V array, got shape {lp.shape}")
    vocab = np.asarray(vocabulary)
    if vocab.ndim != 1 or vocab.size < 1 or not np.issubdtype(vocab.dtype, np.integer):
        raise ValueError("vocabulary must be a non-empty 1-D array of token ids")
    if vocab.min() < 0 or vocab.max() >= lp.shape[1]:
        raise ValueError(f"vocabulary ids must lie in [0, {lp.shape[1]})")
    if np.unique(vocab).size != vocab.size:
        raise ValueError("vocabulary ids must be distinct")
    sub = lp[:, vocab]
    bad = np.isnan(sub).any(axis=1) | np.isposinf(sub).any(axis=1) | np.isneginf(sub).all(axis=1)
    sub = np.where(bad[:, None], 0.0, sub)  # uniform over K
    if mode == "gaussian":
        shift = logsumexp(sub, axis=1, keepdims=True)
    else:
        shift = sub.max(axis=1, keepdims=True)
    out = np.exp(sub - shift)
    if mode == "exponential":
        np.minimum(out, 1.0, out=out)  # exp(0) = 1 exactly; guard the domain anyway
    return out


def noisy_scores(
    dists: np.ndarray,
    mechanism: str,
    *,
    noise_multiplier: float | None = None,
    epsilon0: float | None = None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Mean over the M splits plus the mechanism's noise on every entry of K (|K|,); never released itself.

    "gaussian": N(0, (√2/M·nm)²); "exponential": Exp(scale 2·(1/M)/ε0).
    """
    _check_noise_parameter(mechanism, noise_multiplier, epsilon0)
    d = _check_dists(dists, mechanism)
    m, k = d.shape
    mean = d.mean(axis=0)
    if mechanism == "gaussian":
        return mean + rng.normal(0.0, l2_sensitivity(m) * noise_multiplier, size=k)
    return mean + rng.exponential(scale=2.0 * linf_sensitivity(m) / epsilon0, size=k)


def gaussian_token(dists: np.ndarray, noise_multiplier: float, rng: np.random.Generator) -> int:
    """Index into K of the released token: argmax over K of mean + N(0, (√2/M·nm)²)."""
    return int(np.argmax(noisy_scores(dists, "gaussian", noise_multiplier=noise_multiplier, rng=rng)))


def exponential_token(dists: np.ndarray, epsilon0: float, rng: np.random.Generator) -> int:
    """Index into K of the released token: argmax over K of mean + Exp(scale 2/(M·ε0)) (ε0-DP)."""
    return int(np.argmax(noisy_scores(dists, "exponential", epsilon0=epsilon0, rng=rng)))


def step(
    private_logprobs: np.ndarray,
    public_logprobs: np.ndarray,
    *,
    top_k: int = DEFAULT_TOP_K,
    mechanism: str,
    noise_multiplier: float | None = None,
    epsilon0: float | None = None,
    rng: np.random.Generator,
) -> int:
    """One DP token: the vocabulary id (always in the public top-``top_k``) released for M private prompts
    (``private_logprobs``, M×V) and the public prompt (``public_logprobs``, V). Its cost is one step of
    :func:`cost`."""
    _check_noise_parameter(mechanism, noise_multiplier, epsilon0)
    vocab = public_vocabulary(public_logprobs, top_k)
    lp = np.asarray(private_logprobs)
    if lp.ndim != 2 or lp.shape[1] != np.asarray(public_logprobs).shape[0]:
        raise ValueError(f"private_logprobs must be M×V with V = {np.asarray(public_logprobs).shape[0]}, "
                         f"got shape {lp.shape}")
    dists = split_distributions(lp, vocab, mechanism)
    if mechanism == "gaussian":
        index = gaussian_token(dists, noise_multiplier, rng)
    else:
        index = exponential_token(dists, epsilon0, rng)
    return int(vocab[index])


# ----------------------------------------------------------------------------------------------------------------
# accounting


def step_event(mechanism: str, sampling_rate: float, splits: int, *, noise_multiplier: float | None = None,
               epsilon0: float | None = None) -> PrivacyEvent:
    """Privacy event of one token step drawing from a pool at Poisson rate ``sampling_rate``."""
    _check_noise_parameter(mechanism, noise_multiplier, epsilon0)
    _check_int("splits", splits)
    if mechanism == "gaussian":
        return SubsampledGaussianEvent(float(noise_multiplier), float(sampling_rate), l2_sensitivity(splits),
                                       MECHANISM)
    return SubsampledPureDPEvent(float(epsilon0), float(sampling_rate), linf_sensitivity(splits), MECHANISM)


def cost(plan: dict) -> ComposedEvent:
    """Privacy event of all ``plan["tokens"]`` token steps of a plan (one pool): a ``ComposedEvent``."""
    try:
        mechanism, q, splits, tokens = plan["mechanism"], plan["sampling_rate"], plan["splits"], plan["tokens"]
    except KeyError as missing:
        raise ValueError(f"plan lacks {missing}; use dp_fewshot.plan") from None
    _check_int("tokens", tokens)
    params = {"noise_multiplier": plan.get("noise_multiplier")} if mechanism == "gaussian" \
        else {"epsilon0": plan.get("epsilon0")}
    return ComposedEvent(step_event(mechanism, q, splits, **params), int(tokens))


def pool_sampling_rate(pool_sizes: Iterable[int], splits: int, shots: int) -> float:
    """q = M·N/|D_y| of the smallest pool: the largest rate, which a plan for disjoint per-label pools uses.

    Pool sizes are treated as public (as in 002, whose δ is 1/|D|).
    """
    _check_int("splits", splits)
    _check_int("shots", shots)
    sizes = list(pool_sizes)
    if not sizes:
        raise ValueError("pool_sizes is empty")
    for size in sizes:
        _check_int("pool size", size)
    q = splits * shots / min(sizes)
    if q > 1:
        raise ValueError(f"M·N = {splits * shots} exceeds the smallest pool ({min(sizes)} records)")
    return q


def charge_for_pools(events: Sequence[ComposedEvent]) -> ComposedEvent:
    """The one ledger charge for generations from disjoint pools (parallel composition: a record is in one pool).

    ``events`` are the pools' :func:`cost` events; they must differ only in the sampling rate (same mechanism,
    noise, splits, token count). ε grows with q, so the pool with the largest q is the worst case and its event is
    the charge.
    """
    events = list(events)
    if not events:
        raise ValueError("no pool events")
    for e in events:
        if not isinstance(e, ComposedEvent) or not isinstance(e.event, (SubsampledGaussianEvent,
                                                                         SubsampledPureDPEvent)):
            raise ValueError(f"expected dp_fewshot.cost events, got {e!r}")
    first = events[0]
    for e in events[1:]:
        if e.count != first.count or type(e.event) is not type(first.event) \
                or e.event.sensitivity != first.event.sensitivity \
                or getattr(e.event, "noise_multiplier", None) != getattr(first.event, "noise_multiplier", None) \
                or getattr(e.event, "epsilon", None) != getattr(first.event, "epsilon", None):
            raise ValueError("pool events must share mechanism, noise, splits and token count; only q may differ")
    return max(events, key=lambda e: e.event.sampling_rate)


def randomized_response_epsilon(amplified_epsilon: float, count: int, delta: float) -> float:
    """Exact ε at ``delta`` of ``count`` compositions of ε̄-randomized response — the dominating pair of every
    ε̄-DP mechanism, which the PRV accountant composes numerically (``PureDPMechanism``).

    The privacy loss is a sum of ``count`` iid ±ε̄ (+ with probability e^ε̄/(1+e^ε̄)), so
    δ(ε) = Σ_i C(k,i) p^(k−i) (1−p)^i (1 − e^(ε − (k−2i)ε̄))₊, solved for ε. Guides :func:`plan`'s search only;
    the ledger's number is always ``total_epsilon``.
    """
    _check_positive("amplified_epsilon", amplified_epsilon)
    _check_int("count", count)
    _check_positive("delta", delta)
    if delta >= 1:
        raise ValueError(f"delta must be in (0, 1), got {shown(delta)}")
    i = np.arange(count + 1, dtype=np.float64)
    loss = (count - 2 * i) * amplified_epsilon
    log_w = (gammaln(count + 1) - gammaln(i + 1) - gammaln(count - i + 1)
             + (count - i) * log_expit(amplified_epsilon) + i * log_expit(-amplified_epsilon))

    def delta_at(eps: float) -> float:
        above = loss > eps
        if not above.any():
            return 0.0
        return float(np.exp(logsumexp(log_w[above] + np.log(-np.expm1(eps - loss[above])))))

    if delta_at(0.0) <= delta:
        return 0.0
    from scipy.optimize import brentq  # on use only (as in privacy.accounting.calibration)

    return float(brentq(lambda e: delta_at(e) - delta, 0.0, count * amplified_epsilon, xtol=1e-12))


def _exponential_epsilon0(sampling_rate: float, tokens: int, epsilon: float, delta: float, fits) -> float:
    """Largest ε0 with fits(ε0), to relative precision _REL_TOL (the feasible end of the bracket).

    The search starts at the exact answer for randomized response (the accountant's bound lies slightly above it)
    and then bisects on ``fits``, which must be the ledger's own check. The PRV library cannot discretise some
    ε̄ (it raises "Discrete mean differs from continuous mean significantly", e.g. for ε̄ just above 0.1 with
    T = 100), so an ε0 there counts as not fitting: never more than the ledger certifies, possibly less.
    """
    def safe_fits(eps0: float) -> bool:
        try:
            return fits(eps0)
        except RuntimeError:
            return False

    from scipy.optimize import brentq

    bar = brentq(lambda b: randomized_response_epsilon(b, tokens, delta) - epsilon, 1e-12, epsilon + 1.0,
                 xtol=1e-12)  # ε̄ whose exact composition is the target
    hi = _EPS0_MAX if bar >= _EPS0_MAX else min(_EPS0_MAX, math.log1p(math.expm1(bar) / sampling_rate))
    if safe_fits(hi):  # the accountant's bound meets the exact value here: look a little further up
        lo, step = hi, 1e-3
        while lo < _EPS0_MAX:
            hi = min(_EPS0_MAX, lo * (1 + step))
            if not safe_fits(hi):
                break
            lo, step = hi, 2 * step
        else:
            return lo
    else:  # step down, ever faster, to a fitting ε0
        top, step = hi, 1e-3
        while True:
            lo = top * (1 - step) if step < 0.5 else top * 0.25 / step
            if lo < _EPS0_MIN:
                raise ValueError(f"no per-token ε0 fits ε = {epsilon:g} over {tokens} tokens; raise ε")
            if safe_fits(lo):
                break
            hi, step = lo, 2 * step
    return bisect(safe_fits, lo, hi, rel_tol=_REL_TOL, relative_to="lower")  # lo fits, hi does not


def plan(sampling_rate: float, tokens: int, epsilon: float, delta: float, *, splits: int,
         mechanism: str = "gaussian") -> dict:
    """Per-token noise for ``tokens`` token steps from one pool at Poisson rate ``sampling_rate`` within (ε, δ).

    For per-label pools pass ``pool_sampling_rate(...)`` (the largest q) and the tokens of one pool; the charge is
    then ``cost(plan)``. "gaussian": nm from ``calibrate_noise_multiplier`` (certified PRV), σ = √2/M·nm.
    "exponential": the largest ε0 (relative precision 1e-4, feasible side) whose ``tokens`` amplified pure-DP steps
    have ``total_epsilon`` ≤ ε. ``epsilon_certified`` is ``total_epsilon([cost(plan)], δ)``.
    """
    _check_mechanism(mechanism)
    _check_rate(sampling_rate)
    _check_int("tokens", tokens)
    _check_int("splits", splits)
    _check_positive("epsilon", epsilon)
    _check_positive("delta", delta)
    if delta >= 1:
        raise ValueError(f"delta must be in (0, 1), got {shown(delta)}")
    tokens, splits = int(tokens), int(splits)
    base = {"method": METHOD, "mechanism": mechanism, "splits": splits, "sampling_rate": sampling_rate,
            "tokens": tokens, "epsilon": epsilon, "delta": delta}
    if mechanism == "gaussian":
        g = plan_gaussian(METHOD, l2_sensitivity(splits), sampling_rate, tokens, epsilon, delta)
        result = {**base, "noise_multiplier": g["noise_multiplier"], "sensitivity": g["sensitivity"],
                  "sigma": g["sigma"], "noise_multiplier_uncertified": g["noise_multiplier_uncertified"]}
    else:
        def fits(eps0: float) -> bool:
            event = ComposedEvent(step_event("exponential", sampling_rate, splits, epsilon0=eps0), tokens)
            return total_epsilon([event], delta) <= epsilon

        eps0 = _exponential_epsilon0(sampling_rate, tokens, epsilon, delta, fits)
        event = step_event("exponential", sampling_rate, splits, epsilon0=eps0)
        result = {**base, "epsilon0": eps0, "amplified_epsilon": event.amplified_epsilon,
                  "sensitivity": linf_sensitivity(splits), "noise_scale": 2 * linf_sensitivity(splits) / eps0}
    result["epsilon_certified"] = total_epsilon([cost(result)], delta)
    if not result["epsilon_certified"] <= epsilon:  # the calibrations above guarantee this
        raise RuntimeError(f"planned dp-fewshot spends ε = {result['epsilon_certified']} > {epsilon}")
    return result
