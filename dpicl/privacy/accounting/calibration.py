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
import os
import tempfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from prv_accountant.dpsgd import find_noise_multiplier as _prv_find_noise_multiplier

from ..search import bisect, bisect_int, doubling
from .auto import AutoAccountant
from .events import ComposedEvent, PrivacyEvent, SubsampledGaussianEvent
from .prv import MAX_BYTES, PRVAccountant, mesh_bytes
from .rdp import RDPAccountant

# Relative precision of the certified noise multiplier (0.01 %), far inside the 0.5 % allowance.
_REL_TOL = 1e-4

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


def _library_search_fits(nm_rdp: float, sampling_rate: float, queries: int, delta: float) -> bool:
    """Whether prv-accountant's own search stays within the memory bound: it starts at nm = √2 and evaluates down to
    about the PRV answer over √2, at eps_error 0.005 and delta_error δ/1000 (rate 0.667 with 10⁴ queries took 24 GB)."""
    from prv_accountant import PoissonSubsampledGaussianMechanism

    lowest = PoissonSubsampledGaussianMechanism(noise_multiplier=min(math.sqrt(2), nm_rdp / 2),
                                                sampling_probability=sampling_rate)
    return mesh_bytes([lowest], [queries], 0.005, delta / 1000) <= MAX_BYTES


def _bounded_search(nm_rdp: float, sampling_rate: float, queries: int, epsilon: float, delta: float,
                    evaluations: int = 8) -> float:
    """Where the library's search would not fit: from the RDP-certified nm, a bracketed secant search in
    (log nm, log ε) with the ledger's memory-bounded PRV accountant (ε is close to a power of nm there, so a few
    evaluations land within 0.1 %); the smallest nm either accountant certifies."""
    prv = PRVAccountant()

    def log_excess(nm: float) -> float:
        return math.log(_epsilon_for(prv, nm, sampling_rate, queries, delta) / epsilon)

    best = nm_rdp
    fit = (math.log(nm_rdp), None)  # (log nm, log ε/target) of the smallest nm known to fit
    miss = None  # the same for the largest nm known not to fit
    x = math.log(nm_rdp)
    for _ in range(evaluations):
        try:
            y = log_excess(math.exp(x))
        except RuntimeError:  # too large even coarsened: what was certified so far stands
            break
        if y <= 0:
            best, fit = min(best, math.exp(x)), (x, y)
        else:
            miss = (x, y)
        if fit[1] is not None and abs(fit[1]) < 1e-3:
            break
        if miss is None:  # no bracket yet: ε ≈ c·nm^-2 at least this far out; step past the root
            x = fit[0] + fit[1] / 2 * 1.2 if fit[1] is not None else x - 0.2
        elif fit[1] is None:
            break
        else:
            (x0, y0), (x1, y1) = fit, miss
            if x0 - x1 < 1e-4:
                break
            secant = x0 - y0 * (x1 - x0) / (y1 - y0)
            x = min(max(secant, x1 + 0.02 * (x0 - x1)), x0 - 0.02 * (x0 - x1))  # strictly inside the bracket
    return best


@functools.lru_cache(maxsize=256)
def searched_noise_multiplier(sampling_rate: float, queries: int, epsilon: float, delta: float) -> float:
    """Where calibration starts (before certification): prv-accountant's search where it fits in memory (the
    papers' call and value), else an RDP bisection tightened by a few bounded PRV steps (kept on disk too)."""
    nm_rdp = _rdp_noise_multiplier(sampling_rate, queries, epsilon, delta)
    if _library_search_fits(nm_rdp, sampling_rate, queries, delta):
        return find_noise_multiplier(sampling_rate, queries, epsilon, delta)
    arguments = dict(sampling_rate=sampling_rate, queries=queries, epsilon=epsilon, delta=delta,
                     search="rdp-then-bounded-prv")
    return _stored_search(arguments, lambda: _bounded_search(nm_rdp, sampling_rate, queries, epsilon, delta))


def calibrate_noise_multiplier(
    sampling_rate: float, queries: int, epsilon: float, delta: float, accountant=None
) -> float:
    """Per-query nm whose accountant upper bound over ``queries`` compositions is ≤ ``epsilon``.

    find_noise_multiplier's value if the accountant certifies it; otherwise the smallest larger value (to
    0.01 %) that it certifies.
    """
    if queries < 1:
        raise ValueError(f"queries must be >= 1, got {queries}")
    default = accountant is None
    accountant = accountant or AutoAccountant()
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


def max_additional(
    events_so_far: Sequence[PrivacyEvent],
    new_event: PrivacyEvent,
    epsilon_limit: float,
    delta: float,
    accountant=None,
    upper: int = 100_000,
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
        # the papers' value, before certifying it against the ledger's upper bound
        "noise_multiplier_uncertified": searched_noise_multiplier(sampling_rate, queries, epsilon, delta),
    }
