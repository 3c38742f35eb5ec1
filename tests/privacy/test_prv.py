"""PRV accountant: sound upper bounds, cross-checked against closed forms and Google dp_accounting."""

import math
from dataclasses import dataclass
from typing import ClassVar

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy import optimize, stats

from dpicl.privacy.accounting import (
    PRVAccountant,
    PrivacyEvent,
    SubsampledGaussianEvent,
    UnsupportedEventError,
    total_epsilon,
)


@dataclass(frozen=True)
class _DummyEvent(PrivacyEvent):
    kind: ClassVar[str] = "test_prv_dummy"
    epsilon: float = 1.0


def gaussian_exact_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP mechanism (Dong, Roth, Su 2019, Cor. 2.13), solved for δ."""
    def excess(eps):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta
    return optimize.brentq(excess, 0.0, 100.0, xtol=1e-12)


def google_rdp_epsilon(nm, q, count, delta):
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(nm)), count))
    return acc.get_epsilon(delta)


def test_empty_and_unsupported():
    acc = PRVAccountant()
    assert acc.epsilon([], 1e-5) == 0.0
    assert total_epsilon([], 1e-5) == 0.0
    assert not acc.supports(_DummyEvent())
    with pytest.raises(UnsupportedEventError):
        acc.epsilon([SubsampledGaussianEvent(1.0, 0.1, 1.0), _DummyEvent()], 1e-5)
    # never a naive sum, even when the foreign event carries an ε
    with pytest.raises(UnsupportedEventError):
        total_epsilon([_DummyEvent(0.1)], 1e-5)


@pytest.mark.slow
def test_stack_md_reference_value():
    # docs/STACK.md: nm=5, q=0.01, T=10,000, δ=1e-5 → ε ≈ 0.736 (an estimate, 3 decimals)
    acc = PRVAccountant()
    eps = acc.epsilon([SubsampledGaussianEvent(5.0, 0.01, 1.0)] * 10_000, 1e-5)
    assert 0.7355 <= eps <= 0.7365 + acc.eps_error


@pytest.mark.parametrize("nm,count", [(1.0, 5), (2.0, 20), (0.8, 1)])
def test_full_batch_matches_exact_gaussian(nm, count):
    # q = 1: T Gaussian releases with noise multiplier nm are exactly sqrt(T)/nm-GDP.
    acc = PRVAccountant()
    exact = gaussian_exact_epsilon(math.sqrt(count) / nm, 1e-5)
    eps = acc.epsilon([SubsampledGaussianEvent(nm, 1.0, 2.0)] * count, 1e-5)
    assert exact <= eps <= exact + acc.eps_error + 1e-3


@pytest.mark.parametrize(
    "nm,q,count,delta",
    [(1.27186, 400 / 14732, 100, 5e-5), (2.0, 0.05, 300, 1e-6), (0.9, 0.01, 50, 1e-5)],
)
def test_between_pld_optimistic_and_rdp(nm, q, count, delta):
    acc = PRVAccountant()
    eps = acc.epsilon([SubsampledGaussianEvent(nm, q, 1.0)] * count, delta)
    # RDP is a looser sound bound: the PRV upper bound must not exceed it
    assert eps <= google_rdp_epsilon(nm, q, count, delta)
    # Google's PLD, optimistic discretisation, is (nearly) a lower bound on the true ε: a sound upper bound is above it
    lower = pld.from_gaussian_mechanism(
        standard_deviation=nm, sampling_prob=q, pessimistic_estimate=False, use_connect_dots=False,
        value_discretization_interval=1e-3,
    ).self_compose(count).get_epsilon_for_delta(delta)
    upper = pld.from_gaussian_mechanism(
        standard_deviation=nm, sampling_prob=q, value_discretization_interval=1e-3,
    ).self_compose(count).get_epsilon_for_delta(delta)
    assert lower <= eps <= upper + acc.eps_error + 1e-3


@pytest.mark.slow
def test_composition_of_mixed_events_is_monotone_and_order_free():
    rng = np.random.default_rng(0)
    acc = PRVAccountant()
    kinds = [SubsampledGaussianEvent(nm, q, d, m) for nm, q, d, m in
             [(1.0, 0.02, 2.0, "esa"), (3.0, 0.2, 1.0, "x"), (0.7, 0.005, 1.414, "rnm"), (5.0, 1.0, 2.0, "")]]
    events, previous = [], 0.0
    for i in range(8):
        events.append(kinds[int(rng.integers(len(kinds)))] if i >= len(kinds) else kinds[i])
        eps = acc.epsilon(events, 1e-5)
        assert eps >= previous - 1e-9, (i, eps, previous)
        previous = eps
    shuffled = [events[i] for i in rng.permutation(len(events))]
    assert acc.epsilon(shuffled, 1e-5) == pytest.approx(previous, abs=1e-12)
    # mixed composition is below RDP's bound for the same list
    r = rdp.RdpAccountant()
    for e in events:
        r.compose(dp_accounting.PoissonSampledDpEvent(e.sampling_rate, dp_accounting.GaussianDpEvent(e.noise_multiplier)))
    assert previous <= r.get_epsilon(1e-5)


def test_labels_and_sensitivity_do_not_change_the_cost():
    # nm is already per unit sensitivity, so events differing only in label/Δ cost the same
    acc = PRVAccountant()
    a = acc.epsilon([SubsampledGaussianEvent(1.0, 0.05, 2.0, "esa")] * 30, 1e-5)
    b = acc.epsilon([SubsampledGaussianEvent(1.0, 0.05, 1.0, "other")] * 30, 1e-5)
    c = acc.epsilon([SubsampledGaussianEvent(1.0, 0.05, 2.0, "esa"), SubsampledGaussianEvent(1.0, 0.05, 1.0)] * 15, 1e-5)
    assert a == b == c


@pytest.mark.slow
def test_more_noise_less_epsilon_and_total_epsilon_agrees():
    acc = PRVAccountant()
    e1 = acc.epsilon([SubsampledGaussianEvent(1.0, 0.05, 1.0)] * 50, 1e-5)
    e2 = acc.epsilon([SubsampledGaussianEvent(1.5, 0.05, 1.0)] * 50, 1e-5)
    e3 = acc.epsilon([SubsampledGaussianEvent(1.0, 0.10, 1.0)] * 50, 1e-5)
    assert e2 < e1 < e3
    assert total_epsilon([SubsampledGaussianEvent(1.0, 0.05, 1.0)] * 50, 1e-5) == e1


@pytest.mark.parametrize("nm,q,count", [(11.0, 0.027, 100_000), (0.8, 0.027, 100), (2.0, 0.3, 1_000)])
def test_the_fast_domain_covers_the_safe_one_with_an_fft_friendly_length(nm, q, count):
    import warnings

    from prv_accountant import PRVAccountant as LibAccountant
    from prv_accountant.accountant import compute_safe_domain_size
    from scipy.fft import next_fast_len

    from dpicl.privacy.accounting.prv import _prv, fast_half_width, safe_half_width

    key = (("gaussian", nm, q),)
    for eps_error in (0.005, 0.05):
        safe = compute_safe_domain_size([_prv(key[0])], [count], eps_error=eps_error, delta_error=1e-10)
        assert safe_half_width(key, (count,), eps_error, 1e-10) == pytest.approx(safe, rel=1e-12)
        assert fast_half_width(key, (count,), eps_error, 1e-10) >= safe
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lib = LibAccountant(prvs=[_prv(key[0])], max_self_compositions=[count], eps_error=0.05, delta_error=1e-10,
                            eps_max=fast_half_width(key, (count,), 0.05, 1e-10))
    size = len(lib.composer.self_composers[0].prvs[0].pmf)
    assert size % 2 == 0 and next_fast_len(size, real=True) == size


@pytest.mark.parametrize("nm,q,count", [(5.0, 0.02, 3_000), (0.9, 0.05, 200)])
def test_the_fast_domain_gives_the_librarys_bound(nm, q, count):
    """Our evaluation (a larger, FFT-friendly domain) against the library's own on its safe domain: each is an upper
    bound within eps_error of the same estimate, so ours is never below the library's lower bound."""
    from prv_accountant import PoissonSubsampledGaussianMechanism
    from prv_accountant import PRVAccountant as LibAccountant

    delta = 1e-5
    ours = PRVAccountant()
    lib = LibAccountant(prvs=[PoissonSubsampledGaussianMechanism(noise_multiplier=nm, sampling_probability=q)],
                        max_self_compositions=[count], eps_error=ours.eps_error, delta_error=ours.delta_error)
    lower, _, upper = lib.compute_epsilon(delta=delta - ours.delta_error, num_self_compositions=[count])
    ε = ours.epsilon([SubsampledGaussianEvent(nm, q, 1.0)] * count, delta)
    assert lower <= ε <= upper + 1e-4
    assert ours.estimate([SubsampledGaussianEvent(nm, q, 1.0)] * count, delta) == pytest.approx(ε - ours.eps_error)
