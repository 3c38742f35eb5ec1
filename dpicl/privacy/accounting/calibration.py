"""Noise calibration and budget look-ahead (MECHANISMS §A.3, §2 "Accounting", §12.1 item 8).

The papers calibrate the per-query noise multiplier with ``prv_accountant.dpsgd.find_noise_multiplier``; that
search only promises ε ≤ target + eps_error. The ledger checks spending with the accountant's upper bound,
so :func:`calibrate_noise_multiplier` nudges the multiplier up until that bound really is ≤ the target:
a budget planned for T queries then pays for T queries.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import operator
import os
import tempfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from ..search import bisect, bisect_int, doubling
from .auto import AutoAccountant
from .events import ComposedEvent, PrivacyEvent, SubsampledGaussianEvent
from .prv import PRVAccountant
from .rdp import RDPAccountant

# Relative precision of the certified noise multiplier (0.01 %), far inside the 0.5 % allowance.
_REL_TOL = 1e-4
# Memory bounds of calibration's PRV evaluations (prv.MAX_BYTES is the ledger's): about 10⁶ mesh points to
# certify, 2·10⁵ to search; each evaluation's time is about proportional to its points.
CERTIFY_BYTES = 4e8
SEARCH_BYTES = 8e7

_cache_dir: Path | None = None  # set by the application (set_cache_dir); None: the environment decides


def set_cache_dir(path: str | os.PathLike | None) -> None:
    """Where the calibration store lives: the dpicl cache root (the store is its ``calibration/`` folder).

    The core imports nothing of the application; the application may inject its cache root here. ``None``
    (the default) reads `$DPICL_CACHE`, else `~/.cache/dpicl`, when the store is used — the same root as
    ``dpicl.inference.models.cache_dir``, so stored searches stay valid.
    """
    global _cache_dir
    _cache_dir = None if path is None else Path(path).expanduser()


def cache_dir() -> Path:
    """The cache root the calibration store uses (see :func:`set_cache_dir`)."""
    if _cache_dir is not None:
        return _cache_dir
    env = os.environ.get("DPICL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dpicl"


@functools.lru_cache(maxsize=256)  # pure and slow (seconds to a minute): plans and tests ask twice
def find_noise_multiplier(sampling_rate: float, queries: int, epsilon: float, delta: float) -> float:
    """The papers' call: nm (noise std per unit sensitivity) for T Poisson-subsampled Gaussian queries.

    Also kept on disk (:func:`_stored_search`), so each new process — every scheduled flow run, every
    `dpicl plan` — does not search again. Its value is only where calibration starts:
    :func:`calibrate_noise_multiplier` certifies whatever it returns with the accountant.
    """
    arguments = dict(sampling_probability=sampling_rate, num_steps=queries, target_epsilon=epsilon,
                     target_delta=delta, eps_error=0.01, mu_max=100)
    return _stored_search(arguments, lambda: float(_prv_find_noise_multiplier(**arguments)))


def _prv_find_noise_multiplier(**arguments) -> float:
    from prv_accountant.dpsgd import find_noise_multiplier  # imported when used, as in .prv

    return find_noise_multiplier(**arguments)


def _stored_search(arguments: dict, search) -> float:
    """`search()`, stored under `cache_dir()/calibration` (by default `$DPICL_CACHE/calibration`), keyed by its
    arguments and prv-accountant's version.

    The arguments are public (sampling rate, T, ε, δ); a file that does not hold a finite positive number for
    exactly these arguments is ignored and written again (atomically: a temporary file, then a rename).
    """
    key = {**{k: repr(v) for k, v in arguments.items()}, "prv_accountant": version("prv-accountant")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    path = cache_dir() / "calibration" / f"find_noise_multiplier-{digest}.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored["key"] == key and math.isfinite(stored["value"]) and stored["value"] > 0:
            return float(stored["value"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = search()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(f.name, path)
    except OSError:  # a read-only cache only costs the search next time
        pass
    return value


def times(event: PrivacyEvent, count: int) -> list[PrivacyEvent]:
    """``count`` applications of ``event`` as one composed event (accountants compose it by count)."""
    count = operator.index(count)  # a numpy integer too (ComposedEvent takes a Python int); never a float
    if count == 0:
        return []
    if isinstance(event, ComposedEvent):
        return [ComposedEvent(event.event, event.count * count)]
    return [event] if count == 1 else [ComposedEvent(event, count)]


def _epsilon_for(accountant, noise_multiplier: float, sampling_rate: float, queries: int, delta: float) -> float:
    event = SubsampledGaussianEvent(noise_multiplier, sampling_rate, sensitivity=1.0, mechanism="calibration")
    return accountant.epsilon(times(event, queries), delta)


def _rdp_noise_multiplier(sampling_rate: float, queries: int, epsilon: float, delta: float) -> float:
    """The smallest nm (to 0.01 %) whose RDP bound over ``queries`` compositions is ≤ ``epsilon``: sound, looser
    than PRV, and cheap at any number of queries (one curve per candidate nm)."""
    rdp = RDPAccountant()

    def fits(nm: float) -> bool:
        return _epsilon_for(rdp, nm, sampling_rate, queries, delta) <= epsilon

    _, hi = doubling(lambda nm: not fits(nm), 1.0, 1e6)  # the first of 1, 2, 4, … that fits
    if hi is None:
        raise RuntimeError("could not certify a noise multiplier; is the target ε reachable?")
    lo = hi / 2
    while fits(lo) and lo > 1e-3:  # halve down to one that does not fit (or the floor)
        lo, hi = lo / 2, lo
    return bisect(fits, hi, lo, rel_tol=_REL_TOL, relative_to="lower")  # hi fits


def _certifier() -> PRVAccountant:
    """The PRV accountant calibration certifies with: the ledger's mesh up to about 10⁶ points (about a second per
    evaluation on one laptop core; every plan up to ~10⁴ queries), a coarser one beyond — a looser bound, so at
    10⁵ queries a noise multiplier about eps_error/ε larger (0.6 % at ε = 3) for a `dpicl plan` of seconds."""
    return PRVAccountant(max_bytes=CERTIFY_BYTES)


def _estimate_search(sampling_rate: float, queries: int, epsilon: float, delta: float) -> float:
    """The noise multiplier at which the certifier's bound is expected to meet ``epsilon``: from the RDP-certified
    nm, steps down (at most halving nm per step) until the expected bound passes the target, then Brent's method in
    log nm, on a coarse PRV *estimate* (a quarter second each; within far less than its error bound of the fine
    one) plus the certifier's eps_error. The smallest nm expected to fit; only a starting point, which calibration
    certifies. The RDP value if PRV cannot answer."""
    nm_rdp = _rdp_noise_multiplier(sampling_rate, queries, epsilon, delta)
    searcher, certifier = PRVAccountant(max_bytes=SEARCH_BYTES, max_eps_error=math.inf), _certifier()
    fits = [math.log(nm_rdp)]  # log nm of every evaluation expected to fit

    @functools.cache  # Brent's method asks again for the bracket's ends
    def log_excess(x: float) -> float:
        """log(expected certified ε / target) at nm = e^x; positive: does not fit."""
        nm = math.exp(x)
        event = SubsampledGaussianEvent(nm, sampling_rate, sensitivity=1.0, mechanism="calibration")
        try:
            margin = certifier.mesh_eps_error((("gaussian", nm, sampling_rate),), (queries,))
            y = math.log((searcher.estimate(times(event, queries), delta) + margin) / epsilon)
        except RuntimeError:  # beyond what PRV resolves (far too little noise, or too large): not a fit
            return 1.0
        if y <= 0:
            fits.append(x)
        return y

    from scipy.optimize import brentq  # on use only: scipy.optimize slows every CLI start

    x_fit = math.log(nm_rdp)
    y_fit = log_excess(x_fit)
    if y_fit > 0:  # PRV certifies nothing below the RDP value here
        return nm_rdp
    for _ in range(10):
        x = x_fit + max(1.2 * y_fit, -0.7)  # ε ≈ c·nm^-k with k ≥ 1 this far out: a little past the root
        y = log_excess(x)
        if y > 0:
            brentq(log_excess, x, x_fit, xtol=2e-4, maxiter=12, full_output=True, disp=False)
            break
        x_fit, y_fit = x, y
    return math.exp(min(fits))


@functools.lru_cache(maxsize=256)
def searched_noise_multiplier(sampling_rate: float, queries: int, epsilon: float, delta: float) -> float:
    """Where calibration starts, before certification (:func:`_estimate_search`; kept on disk, so a new process does
    not search again). The papers' search (:func:`find_noise_multiplier`) aims at the same point, to its tolerance."""
    arguments = dict(sampling_rate=sampling_rate, queries=queries, epsilon=epsilon, delta=delta,
                     search="prv-estimate-brent", certify_bytes=CERTIFY_BYTES, search_bytes=SEARCH_BYTES)
    return _stored_search(arguments, lambda: _estimate_search(sampling_rate, queries, epsilon, delta))


def calibrate_noise_multiplier(
    sampling_rate: float, queries: int, epsilon: float, delta: float, accountant=None
) -> float:
    """Per-query nm whose accountant upper bound over ``queries`` compositions is ≤ ``epsilon``.

    The searched value (:func:`searched_noise_multiplier`) if the accountant (default: the ledger's, with the
    certifier's mesh) certifies it; otherwise the smallest larger value (to 0.01 %) that it certifies.
    """
    if queries < 1:
        raise ValueError(f"queries must be >= 1, got {queries}")
    default = accountant is None
    accountant = accountant or AutoAccountant(prv=_certifier())
    nm = searched_noise_multiplier(sampling_rate, queries, epsilon, delta)

    def fits(x: float) -> bool:
        # the ledger's bound is the smaller of PRV and RDP: an RDP fit certifies it without the (slow) PRV call
        if default and _epsilon_for(RDPAccountant(), x, sampling_rate, queries, delta) <= epsilon:
            return True
        return _epsilon_for(accountant, x, sampling_rate, queries, delta) <= epsilon

    if fits(nm):
        return nm
    # Grow the step (nm·(1 + step), step = 0.001, 0.002, …) until the bound fits, then bisect between the last
    # failure and the first success; the feasible end of the bracket is returned.
    failed, step = doubling(lambda s: not fits(nm * (1 + s)), 1e-3, 10)
    if step is None:
        raise RuntimeError("could not certify a noise multiplier; is the target ε reachable?")
    lo = nm if failed is None else nm * (1 + failed)
    return bisect(fits, nm * (1 + step), lo, rel_tol=_REL_TOL, relative_to="lower")


# how far `max_additional` searches by default: a count at this limit means "at least this many"
PAYABLE_SEARCH_LIMIT = 100_000


def max_additional(
    events_so_far: Sequence[PrivacyEvent],
    new_event: PrivacyEvent,
    epsilon_limit: float,
    delta: float,
    accountant=None,
    upper: int = PAYABLE_SEARCH_LIMIT,
) -> int:
    """Largest k ≤ ``upper`` with ε(events_so_far + k × new_event) ≤ ``epsilon_limit`` by the accountant.

    Exponential search for a bracket, then a safeguarded interpolation search (each accountant call costs
    about a second, so fewer calls than plain bisection matter). By construction k fits and k+1 does not,
    unless k == ``upper``.
    """
    default = accountant is None
    accountant = accountant or AutoAccountant()
    base = list(events_so_far)

    def eps(k: int) -> float:
        return accountant.epsilon(base + times(new_event, k), delta)

    lo = 0  # invariant: lo fits
    rdp = RDPAccountant()
    if default and all(rdp.supports(e) for e in [*base, new_event]):
        # the ledger's bound is at most the RDP bound: what RDP pays for, it pays for (cheap to find, any k)
        lo = _largest_fitting(lambda k: rdp.epsilon(base + times(new_event, k), delta), epsilon_limit, upper)
    eps_lo = eps(lo)
    if eps_lo > epsilon_limit:
        return 0
    if lo == upper:
        return upper
    hi = lo + 1
    while True:  # find the first hi that does not fit
        eps_hi = eps(hi)
        if eps_hi > epsilon_limit:
            break
        if hi == upper:
            return upper
        # Extrapolate the secant (ε is roughly concave in k, so this tends to undershoot: aim 20 % past it),
        # growing at most 16-fold per step so a bad guess never costs a huge composition.
        slope = (eps_hi - eps_lo) / (hi - lo)
        guess = hi + (epsilon_limit - eps_hi) / slope * 1.2 if slope > 0 else math.inf
        lo, eps_lo = hi, eps_hi
        hi = int(min(upper, 16 * lo, max(lo + 1, math.ceil(guess) if math.isfinite(guess) else upper)))
    bisect_next = False
    while hi - lo > 1:
        if bisect_next:
            mid = (lo + hi) // 2
        else:  # ε grows smoothly in k: linear interpolation lands near the boundary
            frac = (epsilon_limit - eps_lo) / (eps_hi - eps_lo)
            mid = min(hi - 1, max(lo + 1, lo + int(frac * (hi - lo))))
        width = hi - lo
        eps_mid = eps(mid)
        if eps_mid <= epsilon_limit:
            lo, eps_lo = mid, eps_mid
        else:
            hi, eps_hi = mid, eps_mid
        bisect_next = (hi - lo) > width // 2  # safeguard: bisect after a step that did not halve the bracket
    return lo


def _largest_fitting(eps, limit: float, upper: int) -> int:
    """Largest k ≤ upper with eps(k) ≤ limit, for eps non-decreasing in k (0 when none fits): plain bisection, for
    a cheap eps."""
    if eps(0) > limit:
        return 0
    hi = 1
    while hi < upper and eps(hi) <= limit:
        hi = min(upper, hi * 2)
    if eps(hi) <= limit:
        return hi
    return bisect_int(lambda k: eps(k) <= limit, hi // 2, hi)  # hi // 2 fits (or is 0)


def plan_gaussian(method: str, sensitivity: float, sampling_rate: float, queries: int, epsilon: float,
                  delta: float) -> dict:
    """Per-query parameters of a Poisson-subsampled Gaussian mechanism for ``queries`` queries within (ε, δ).

    ``noise_multiplier`` is per unit sensitivity; ``sigma`` = sensitivity × noise multiplier is the noise std.
    """
    nm = calibrate_noise_multiplier(sampling_rate, queries, epsilon, delta)
    return {
        "method": method,
        "noise_multiplier": nm,
        "sensitivity": sensitivity,
        "sigma": sensitivity * nm,
        "sampling_rate": sampling_rate,
        "queries": queries,
        "epsilon": epsilon,
        "delta": delta,
        # the searched value, before certifying it against the accountant's upper bound
        "noise_multiplier_uncertified": searched_noise_multiplier(sampling_rate, queries, epsilon, delta),
    }
