"""RDP accountant: the papers' exponential-mechanism vectors, Bun–Steinke and Poisson-amplification properties,
soundness against the PRV accountant, and the choice of accountant in total_epsilon (MECHANISMS §A.2, §11.1)."""

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from dpicl.privacy.accounting import (
    PRVAccountant,
    PrivacyEvent,
    RDPAccountant,
    SubsampledExponentialEvent,
    SubsampledGaussianEvent,
    SubsampledPTREvent,
    UnsupportedEventError,
    choose_accountant,
    event_from_json,
    max_additional,
    total_epsilon,
)
from dpicl.privacy.accounting.rdp import bbghs_epsilon, exponential_rdp, gaussian_rdp, poisson_subsampled_rdp

ALPHAS = np.arange(2, 200)


@dataclass(frozen=True)
class _DummyEvent(PrivacyEvent):
    kind: ClassVar[str] = "test_rdp_dummy"
    epsilon: float = 1.0


# MECHANISMS §11.1 "KSA-jointEM (001)": Poisson q=400/14732, T=100, δ=5e-5, integer grid α<200
@pytest.mark.parametrize("eps, expected", [(0.77, 0.9927), (1.65, 2.99845), (2.67, 7.99574)])
def test_ksa_joint_em_vectors(eps, expected):
    # the papers' numbers come from autodp's evaluation of the amplification bound, our conservative default
    events = [SubsampledExponentialEvent(eps, 400 / 14732, 1.0, "ksa_joint_em")] * 100
    assert RDPAccountant(amplification="autodp").epsilon(events, 5e-5) == pytest.approx(expected, rel=1e-3)
    assert total_epsilon(events, 5e-5) == RDPAccountant().epsilon(events, 5e-5)
    assert total_epsilon(events, 5e-5) == pytest.approx(expected, rel=1e-3)
    # the opt-in form as written in §A.2 is tighter
    tight = RDPAccountant(amplification="steinke").epsilon(events, 5e-5)
    assert 0.5 * expected < tight < expected


# MECHANISMS §11.1 "PubDP-ICL KSA (004 Table 4b)": T=100, δ=2.56e-4
@pytest.mark.parametrize(
    "q, eps, expected",
    [
        (400 / 3900, 0.23, 0.971), (400 / 3900, 0.63, 2.997), (400 / 3900, 1.32, 7.970),
        (400 / 2600, 0.23, 1.542), (400 / 2600, 0.63, 4.796), (400 / 2600, 1.32, 11.533),
    ],
)
def test_pubdp_icl_ksa_vectors(q, eps, expected):
    events = [SubsampledExponentialEvent(eps, q, 1.0)] * 100
    assert RDPAccountant().epsilon(events, 2.56e-4) == pytest.approx(expected, rel=1e-3)
    assert RDPAccountant(amplification="steinke").epsilon(events, 2.56e-4) <= expected


def _autodp_subsampled_em_curve(eps, q):
    """The papers' chain in autodp: a Bun–Steinke EM mechanism, Poisson-amplified (improved_bound_flag=False)."""
    from autodp import transformer_zoo
    from autodp.autodp_core import Mechanism

    class EM(Mechanism):
        def __init__(self):
            Mechanism.__init__(self)
            self.name, self.params = "EM", {"eps": eps}

            def rdp(a):  # written independently of dpicl: the sinh form of MECHANISMS §A.2
                if np.isinf(a):
                    return eps
                a = max(a, 2.0)
                bs = math.log((math.sinh(a * eps) - math.sinh((a - 1) * eps)) / math.sinh(eps)) / (a - 1)
                return min(a * eps * eps / 2, bs)

            self.propagate_updates(rdp, "RDP")

    mech = transformer_zoo.AmplificationBySampling(PoissonSampling=True).amplify(EM(), q, improved_bound_flag=False)
    return np.array([mech.RenyiDP(float(a)) for a in ALPHAS])


@pytest.mark.parametrize("eps, q", [(0.77, 400 / 14732), (1.32, 400 / 2600), (2.67, 0.3)])
def test_amplification_matches_autodp_and_steinke_is_tighter(eps, q):
    ref = _autodp_subsampled_em_curve(eps, q)
    ours = poisson_subsampled_rdp(lambda a: exponential_rdp(eps, a), q, 199, eps_inf=eps, bound="autodp")
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)
    steinke = poisson_subsampled_rdp(lambda a: exponential_rdp(eps, a), q, 199, eps_inf=eps, bound="steinke")
    assert np.all(steinke <= ours + 1e-12)
    assert steinke[0] == pytest.approx(ours[0])  # α = 2: the two bounds coincide


def test_bun_steinke_curve():
    for eps in [0.01, 0.23, 1.0, 2.67, 8.0, 50.0]:
        curve = exponential_rdp(eps, ALPHAS)
        assert np.all(np.isfinite(curve))
        assert np.all(curve <= ALPHAS * eps * eps / 2 + 1e-15)
        assert np.all(curve <= eps + 1e-12)
        assert np.all(np.diff(curve) >= -1e-12)  # RDP is non-decreasing in α
        # the stable form equals the sinh formula where that can be evaluated directly
        for a in ALPHAS[:20]:
            if a * eps < 300:
                direct = math.log((math.sinh(a * eps) - math.sinh((a - 1) * eps)) / math.sinh(eps)) / (a - 1)
                assert curve[a - 2] == pytest.approx(min(a * eps * eps / 2, direct), rel=1e-9)
    # large αε: the bound approaches ε (pure DP) from below, no overflow
    assert exponential_rdp(50.0, [199])[0] == pytest.approx(50.0, rel=0.01)


@pytest.mark.parametrize("bound", ["autodp", "steinke"])
@pytest.mark.parametrize("kind, param", [("em", 0.5), ("em", 3.0), ("gauss", 0.8), ("gauss", 3.0)])
def test_amplification_below_unamplified_and_monotone_in_q(bound, kind, param):
    if kind == "em":
        base, eps_inf = (lambda a: exponential_rdp(param, a)), param
    else:
        base, eps_inf = (lambda a: gaussian_rdp(param, a)), math.inf
    unamplified = base(ALPHAS.astype(float))
    prev = None
    # q = 1 is the unamplified curve; the autodp variant's shifted terms can exceed it just below q = 1
    for q in [1e-4, 1e-3, 0.01, 0.05, 0.2, 0.5, 0.9] + ([1.0] if bound == "steinke" else []):
        curve = poisson_subsampled_rdp(base, q, 199, eps_inf, bound)
        assert np.all(np.isfinite(curve)) and np.all(curve >= 0)
        if bound == "steinke":  # the autodp variant is only ≤ the base curve shifted by one order
            assert np.all(curve <= unamplified * (1 + 1e-9) + 1e-15)
        if math.isfinite(eps_inf):
            assert np.all(curve <= math.log1p(q * math.expm1(eps_inf)) + 1e-12)
        if prev is not None:
            assert np.all(curve >= prev - 1e-12)
        prev = curve
    np.testing.assert_allclose(poisson_subsampled_rdp(base, 1.0, 199, eps_inf, bound), np.minimum(
        unamplified, math.log1p(math.expm1(eps_inf)) if math.isfinite(eps_inf) else math.inf))


def test_bound_at_alpha_2_closed_form():
    # m = 2: log[(1−q)(1+q) + q² e^{ε(2)}] = log(1 + q²(e^{ε(2)} − 1))
    q, nm = 0.03, 0.9
    got = poisson_subsampled_rdp(lambda a: gaussian_rdp(nm, a), q, 5)[0]
    assert got == pytest.approx(math.log1p(q * q * math.expm1(2 / (2 * nm * nm))), rel=1e-12)


@pytest.mark.parametrize("nm, q, T", [(1.27186, 400 / 14732, 100), (0.78704, 400 / 14732, 100), (2.0, 0.05, 30)])
def test_rdp_on_gaussian_is_looser_than_prv_but_close(nm, q, T):
    events = [SubsampledGaussianEvent(nm, q, 2.0, "esa")] * T
    prv = PRVAccountant().epsilon(events, 5e-5)
    rdp = RDPAccountant(amplification="steinke").epsilon(events, 5e-5)
    assert prv <= rdp <= 1.6 * prv
    assert RDPAccountant(amplification="autodp").epsilon(events, 5e-5) >= rdp
    # all-Gaussian ledgers keep the PRV value
    assert total_epsilon(events, 5e-5) == prv


def test_mixed_ledger_through_total_epsilon():
    g = SubsampledGaussianEvent(1.0, 400 / 14732, 2.0, "esa")
    e = SubsampledExponentialEvent(0.77, 400 / 14732, 2.0, "ksa_joint_em")
    delta = 5e-5
    gaussians, ems = [g] * 40, [e] * 40
    mixed = total_epsilon(gaussians + ems, delta)
    assert mixed == RDPAccountant().epsilon(gaussians + ems, delta)
    assert mixed >= total_epsilon(gaussians, delta)  # PRV value of the Gaussian part
    assert mixed >= RDPAccountant().epsilon(gaussians, delta)
    assert mixed >= total_epsilon(ems, delta)
    assert mixed <= RDPAccountant().epsilon(gaussians, delta) + RDPAccountant().epsilon(ems, delta) + 1.0
    # adding an event never lowers ε, whichever kind it is
    ledger, last = [], 0.0
    for event in [g, e, e, g, SubsampledExponentialEvent(3.0, 0.5, 1.0), g, e]:
        ledger.append(event)
        now = total_epsilon(ledger, delta)
        assert now >= last - 1e-12
        last = now
    # order and labels do not matter
    relabelled = [SubsampledExponentialEvent(0.77, 400 / 14732, 1.0, "other")] * 40
    assert total_epsilon(ems[::-1] + gaussians, delta) == pytest.approx(mixed)
    assert total_epsilon(gaussians + relabelled, delta) == pytest.approx(mixed)


def test_unsupported_and_empty():
    acc = RDPAccountant()
    assert acc.epsilon([], 1e-5) == 0.0
    assert not acc.supports(_DummyEvent())
    assert acc.supports(SubsampledExponentialEvent(1.0, 0.1, 1.0))
    with pytest.raises(UnsupportedEventError):
        acc.epsilon([SubsampledExponentialEvent(1.0, 0.1, 1.0), _DummyEvent()], 1e-5)
    with pytest.raises(UnsupportedEventError):
        total_epsilon([SubsampledExponentialEvent(1.0, 0.1, 1.0), _DummyEvent(0.1)], 1e-5)
    with pytest.raises(ValueError):
        acc.epsilon([SubsampledExponentialEvent(1.0, 0.1, 1.0)], 0.0)
    with pytest.raises(ValueError):
        RDPAccountant(alphas=[1, 2])
    with pytest.raises(ValueError):
        RDPAccountant(amplification="tight")


def test_exponential_event_validation_and_json():
    e = SubsampledExponentialEvent(0.77, 400 / 14732, 2.0, "ksa_joint_em")
    assert e.kind == "subsampled_exponential"
    assert event_from_json(e.to_json()) == e
    for bad in [dict(epsilon=0.0), dict(epsilon=math.inf), dict(sampling_rate=0.0), dict(sampling_rate=1.5),
                dict(sensitivity=-1.0), dict(epsilon=True)]:
        kwargs = dict(epsilon=1.0, sampling_rate=0.1, sensitivity=1.0) | bad
        with pytest.raises(ValueError):
            SubsampledExponentialEvent(**kwargs)


def test_max_additional_default_handles_exponential_events():
    spent = [SubsampledGaussianEvent(1.0, 0.05, 2.0, "esa")] * 5
    new = SubsampledExponentialEvent(0.77, 400 / 14732, 2.0)
    limit, delta = 4.0, 5e-5
    k = max_additional(spent, new, limit, delta)
    assert k > 0
    assert total_epsilon(spent + [new] * k, delta) <= limit
    assert total_epsilon(spent + [new] * (k + 1), delta) > limit


# ------------------------------------------------------------------ approximate RDP: KSA-PTR (001 Def 6, Thm 12)

Q_PTR = 400 / 14732


def test_ptr_curve_is_the_amplified_sum_at_the_modified_rate():
    e = SubsampledPTREvent(0.9, 1.869, 1.823e-5, Q_PTR)
    acc = RDPAccountant()
    rate = Q_PTR / (1 - Q_PTR * 1.823e-5)  # sound: above 001 Thm 12's q(1−δ0)/(1−q·δ0), whose proof has a gap
    expected = poisson_subsampled_rdp(lambda a: gaussian_rdp(1.869, a) + exponential_rdp(0.9, a), rate, 199,
                                      math.inf, "autodp")
    np.testing.assert_allclose(acc.rdp([e] * 3), 3 * expected, rtol=1e-12)
    # the failure terms add over the queries; BBGHS is taken at δ − Σ q·δ0
    assert acc.failure_delta([e] * 100) == pytest.approx(100 * Q_PTR * 1.823e-5)
    assert acc.epsilon([e] * 100, 5e-5) == pytest.approx(
        bbghs_epsilon(100 * expected, acc.alphas, 5e-5 - 100 * Q_PTR * 1.823e-5))
    # more than the budget's δ in failures: no finite ε
    assert acc.epsilon([e] * 101, 1.823e-5 * Q_PTR * 100) == math.inf
    # a PTR query costs at least its Gaussian test and at least its FindBestK (same rate, δ0 → 0)
    tiny = SubsampledPTREvent(0.9, 1.869, 1e-12, Q_PTR)
    assert acc.epsilon([tiny] * 100, 5e-5) >= acc.epsilon([SubsampledGaussianEvent(1.869, Q_PTR, 2.0)] * 100, 5e-5)
    assert acc.epsilon([tiny] * 100, 5e-5) >= acc.epsilon([SubsampledExponentialEvent(0.9, Q_PTR, 2.0)] * 100, 5e-5)


def test_ledger_with_ptr_events_goes_to_rdp_and_stays_sound():
    g = SubsampledGaussianEvent(1.0, Q_PTR, 2.0, "esa")
    e = SubsampledExponentialEvent(0.77, Q_PTR, 2.0, "ksa_jem")
    p = SubsampledPTREvent(0.9, 1.869, 1e-5, Q_PTR)
    delta = 5e-5
    assert not PRVAccountant().supports(p)
    assert choose_accountant([g, p]).name == "rdp" and choose_accountant([p]).name == "rdp"
    gaussians, ems, ptrs = [g] * 30, [e] * 30, [p] * 30
    mixed = total_epsilon(gaussians + ems + ptrs, delta)
    assert mixed == RDPAccountant().epsilon(gaussians + ems + ptrs, delta)
    for part in (gaussians, ems, ptrs, gaussians + ptrs, ems + ptrs, gaussians + ems):
        assert mixed >= total_epsilon(part, delta)
        assert mixed >= RDPAccountant().epsilon(part, delta)
    # adding any event never lowers ε (including the PRV → RDP switch on the first PTR event)
    ledger, last = [], 0.0
    for event in [g, g, p, e, p, g, SubsampledPTREvent(3.0, 0.5, 1e-3, 0.5), e, p]:
        ledger.append(event)
        now = total_epsilon(ledger, delta)
        assert now >= last - 1e-12
        last = now
    assert total_epsilon(ptrs[::-1] + ems + gaussians, delta) == pytest.approx(mixed)


def test_max_additional_stops_before_the_failures_use_up_delta():
    p = SubsampledPTREvent(0.2, 5.0, 1e-5, Q_PTR)
    delta = 5e-5
    k = max_additional([], p, 100.0, delta)  # ε is no constraint here: δ is
    assert k == math.ceil(delta / p.failure_delta) - 1
    assert total_epsilon([p] * k, delta) < math.inf == total_epsilon([p] * (k + 1), delta)
