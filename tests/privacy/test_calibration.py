"""Noise calibration against the MECHANISMS §11.1 vectors, certification, and max_additional."""

import pytest

from dpicl.privacy.accounting import (
    PRVAccountant,
    SubsampledGaussianEvent,
    calibrate_noise_multiplier,
    find_noise_multiplier,
    max_additional,
)

SAMSUM_Q, SAMSUM_DELTA = 400 / 14732, 5e-5
DOCVQA_Q, DOCVQA_DELTA = 100 / 221329, 4e-6
SAMSUM = [(1, 1.27186), (3, 0.78704), (8, 0.54819)]
DOCVQA = [(1, 0.5340), (3, 0.4361), (8, 0.3251)]


def bound(nm, q, T, delta, accountant=None):
    return (accountant or PRVAccountant()).epsilon([SubsampledGaussianEvent(nm, q, 1.0)] * T, delta)


@pytest.mark.slow
@pytest.mark.parametrize("eps,expected", SAMSUM)
def test_find_noise_multiplier_samsum(eps, expected):
    assert find_noise_multiplier(SAMSUM_Q, 100, eps, SAMSUM_DELTA) == pytest.approx(expected, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("eps,expected", DOCVQA)
def test_find_noise_multiplier_docvqa(eps, expected):
    assert find_noise_multiplier(DOCVQA_Q, 100, eps, DOCVQA_DELTA) == pytest.approx(expected, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("q,delta,eps,expected", [(SAMSUM_Q, SAMSUM_DELTA, *v) for v in SAMSUM]
                         + [(DOCVQA_Q, DOCVQA_DELTA, *v) for v in DOCVQA])
def test_calibrated_noise_is_certified_and_close(q, delta, eps, expected):
    nm = calibrate_noise_multiplier(q, 100, eps, delta)
    assert nm == pytest.approx(expected, rel=5e-3)
    assert nm >= find_noise_multiplier(q, 100, eps, delta)
    assert bound(nm, q, 100, delta) <= eps


@pytest.mark.slow
def test_calibration_raises_noise_when_the_upper_bound_does_not_fit():
    # A coarser accountant (eps_up = estimate + 0.01) does not certify the papers' value at ε=1:
    # calibration must raise nm just enough, and stay within 0.5 %.
    coarse = PRVAccountant(eps_error=0.01)
    base = find_noise_multiplier(SAMSUM_Q, 100, 1.0, SAMSUM_DELTA)
    assert bound(base, SAMSUM_Q, 100, SAMSUM_DELTA, coarse) > 1.0  # premise of the test
    nm = calibrate_noise_multiplier(SAMSUM_Q, 100, 1.0, SAMSUM_DELTA, accountant=coarse)
    assert base < nm <= base * 1.005
    assert bound(nm, SAMSUM_Q, 100, SAMSUM_DELTA, coarse) <= 1.0
    # and it is (nearly) the smallest such value
    assert bound(nm * (1 - 3e-4), SAMSUM_Q, 100, SAMSUM_DELTA, coarse) > 1.0


@pytest.mark.slow
def test_max_additional_is_consistent_with_the_accountant():
    acc = PRVAccountant()
    spent = [SubsampledGaussianEvent(1.0, 0.05, 2.0, "esa")] * 7
    new = SubsampledGaussianEvent(2.0, 0.05, 2.0, "esa")
    limit, delta = 1.7, 1e-5
    k = max_additional(spent, new, limit, delta, accountant=acc)
    assert k > 0
    assert acc.epsilon(spent + [new] * k, delta) <= limit
    assert acc.epsilon(spent + [new] * (k + 1), delta) > limit


def test_max_additional_edges():
    acc = PRVAccountant()
    new = SubsampledGaussianEvent(1.0, 0.05, 2.0)
    # already over the limit: nothing more
    assert max_additional([SubsampledGaussianEvent(0.5, 1.0, 1.0)] * 5, new, 1.0, 1e-5, accountant=acc) == 0
    # a nearly free event: capped at `upper`
    tiny = SubsampledGaussianEvent(200.0, 1e-4, 1.0)
    assert max_additional([], tiny, 1.0, 1e-5, accountant=acc, upper=50) == 50


class _CountAccountant:
    """A stand-in accountant whose ε depends only on the number of events (to test the search itself)."""

    def __init__(self, f):
        self.f = f

    def epsilon(self, events, delta):
        return self.f(len(events))


@pytest.mark.parametrize(
    "f",
    [
        lambda n: 0.05 * n**0.5,  # concave
        lambda n: 1e-4 * n**2,  # convex
        lambda n: 0.001 * n + 0.3 * (n >= 500),  # a jump
    ],
)
@pytest.mark.parametrize("limit", [0.0, 0.01, 0.3, 1.0, 2.9, 7.0])
@pytest.mark.parametrize("n_spent", [0, 3])
def test_max_additional_search_matches_brute_force(f, limit, n_spent):
    acc = _CountAccountant(f)
    new = SubsampledGaussianEvent(1.0, 0.1, 1.0)
    upper = 5_000
    got = max_additional([new] * n_spent, new, limit, 1e-5, accountant=acc, upper=upper)
    fitting = [k for k in range(upper + 1) if f(n_spent + k) <= limit]
    assert got == (max(fitting) if fitting else 0)
