"""AdaPMixED (paper 003 Alg 1, Thm 4.1, Thm C.1, Lemma C.1; MECHANISMS §8, §11.1, §12.1 items 13, 16)."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import log_softmax, softmax

from dpicl.privacy.accounting.events import FixedOrderRDPEvent
from dpicl.privacy.accounting.rdp import bbghs_epsilon
from dpicl.privacy.accounting.wor import conversion_term, fixed_order_budget
from dpicl.privacy.mechanisms import adapmixed as am
from dpicl.privacy.mechanisms.renyi import renyi_divergence, symmetric_renyi
from dpicl.privacy.rng import make_rng

# ---------------------------------------------------------------------------------------------------------------
# §11.1 vectors


def test_conversion_term_at_alpha_18():
    assert conversion_term(18, 1e-5) == pytest.approx(0.45005, abs=5e-6)


def test_screening_cost_vector():
    per_query = am.screen_rdp(18, 1e-4, 100, 1e-2)
    assert per_query == pytest.approx(1.8e-7, rel=1e-9)
    assert 9728 * per_query == pytest.approx(0.00175, abs=5e-6)
    # the Gaussian RDP α·Δ²/(2σ²) with the replace-one sensitivity Δ = λ√2/N
    delta2 = (1e-4 * math.sqrt(2) / 100) ** 2
    assert per_query == pytest.approx(18 * delta2 / (2 * 1e-2**2), rel=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# Thm C.1 and its inverse, Lemma C.1


def lemma_c1_beta(alpha, n, per_prediction):
    """003 Lemma C.1 (N > 1) with the sound pairwise factor c(α) in place of 003's 4:
    β ≤ log(N·e^{(α−1)ε_G/T} + 1 − N)/(c(α)(α−1)α)."""
    c = 1 + (alpha - 0.5) / (alpha - 1)
    return math.log(n * math.exp((alpha - 1) * per_prediction) + 1 - n) / (c * (alpha - 1) * alpha)


@pytest.mark.parametrize("alpha", [2, 6, 18])
@pytest.mark.parametrize("n", [2, 10, 80, 100])
@pytest.mark.parametrize("per_prediction", [1e-4, 0.01, 0.5, 3.0])
def test_member_bound_is_inverted_by_lemma_c1(alpha, n, per_prediction):
    beta = lemma_c1_beta(alpha, n, per_prediction)
    assert am.member_bound_rdp(alpha, beta, n) == pytest.approx(per_prediction, rel=1e-9)
    # the closed form itself (003 Eq. 7)
    c = 1 + (alpha - 0.5) / (alpha - 1)
    closed = math.log((n - 1 + math.exp((alpha - 1) * c * beta * alpha)) / n) / (alpha - 1)
    assert am.member_bound_rdp(alpha, beta, n) == pytest.approx(closed, rel=1e-12)


def test_member_bound_single_member_is_replace_one():
    # replace-one: two points of the ball, c(α)·βα (the paper's βα is for removing the only model)
    for alpha, beta in [(2, 0.1), (18, 0.2), (15, 1e-3)]:
        assert am.member_bound_rdp(alpha, beta, 1) == pytest.approx(am.pairwise_factor(alpha) * beta * alpha,
                                                                    rel=1e-12)


def test_pairwise_factor_bounds_two_points_of_the_ball():
    """The sound replacement for 003's 4βα: with the ball at order 2α, two points of it are within c(α)·βα at
    order α — also for 003's failing example (three distributions near p_0 where 4βα fails at a single order)."""
    rng = np.random.default_rng(7)
    for alpha in (2, 6, 18):
        for _ in range(300):
            v = int(rng.integers(2, 8))
            p0 = softmax(rng.normal(0, 3, v))
            members = softmax(rng.normal(0, 3, (2, v)), axis=1)
            beta = float(rng.uniform(1e-4, 0.5))
            lam = am.choose_lambdas(members, p0, beta, alpha)  # the decoder's search, both members at once
            a, b = (am.mix(m, p0, lam_m) for m, lam_m in zip(members, lam))
            assert renyi_divergence(a, b, alpha) <= am.pairwise_factor(alpha) * beta * alpha * (1 + 1e-9)
    assert am.pairwise_factor(18) == pytest.approx(1 + 17.5 / 17)


def test_member_bound_is_stable_and_monotone():
    assert math.isfinite(am.member_bound_rdp(18, 50.0, 100))  # e^{(α−1)cβα} overflows a float
    assert am.member_bound_rdp(18, 50.0, 100) == pytest.approx(am.pairwise_factor(18) * 50 * 18
                                                               - math.log(100) / 17, rel=1e-12)
    betas = [1e-5, 1e-3, 0.01, 0.2]
    values = [am.member_bound_rdp(18, b, 100) for b in betas]
    assert values == sorted(values)
    assert am.member_bound_rdp(18, 0.01, 100) < am.member_bound_rdp(18, 0.01, 10)
    assert am.member_bound_rdp(18, 0.0, 100) == 0.0


# ---------------------------------------------------------------------------------------------------------------
# λ search and PMixED (property tests)


@st.composite
def ensembles(draw):
    v = draw(st.integers(2, 12))
    n = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([0.5, 3.0, 15.0]))
    rng = np.random.default_rng(seed)
    public = softmax(rng.normal(0, scale, v))
    private = softmax(rng.normal(0, scale, (n, v)), axis=1)
    if draw(st.booleans()):  # exact zeros in some member distributions
        private[:, rng.integers(0, v)] = 0.0
        private /= private.sum(axis=1, keepdims=True)
    alpha = draw(st.sampled_from([1.5, 2, 6, 18, 40]))
    beta = draw(st.floats(1e-5, 1.0))
    return private, public, alpha, beta


@settings(deadline=None, max_examples=80)
@given(ensembles())
def test_lambda_stays_inside_the_ball_and_mixture_is_a_distribution(case):
    private, public, alpha, beta = case
    radius, order = beta * alpha, am.ball_order(alpha)  # the ball is enforced at order 2α
    lambdas = []
    for p_i in private:
        lam = am.choose_lambda(p_i, public, beta, alpha)
        assert 0.0 <= lam <= 1.0
        assert symmetric_renyi(am.mix(p_i, public, lam), public, order) <= radius  # exactly, no tolerance
        if lam < 1.0:  # the feasible end of a bracket whose other end is infeasible: not needlessly small
            assert symmetric_renyi(am.mix(p_i, public, min(1.0, lam + 1e-9)), public, order) > radius
        lambdas.append(lam)
    p, lam_out = am.pmixed(private, public, beta, alpha)
    # the vectorised search: inside the ball exactly too, and as large up to its bisection precision
    for p_i, lam in zip(private, lam_out):
        assert symmetric_renyi(am.mix(p_i, public, lam), public, order) <= radius
    np.testing.assert_allclose(lam_out, lambdas, atol=2 ** -23)
    assert np.all(p >= 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    # quasi-convexity: the mean of points of the ball is in the ball (up to the rounding of the mean itself)
    assert symmetric_renyi(p, public, order) <= radius * (1 + 1e-12)


@settings(deadline=None, max_examples=80)
@given(ensembles(), st.integers(0, 2**32 - 1))
# p_i ≪ p_0 at λ = 1: log1p(λ·(p_i/p_0 − 1)) cancelled to a relative error of 4e-9 in D here
@example((np.array([[1.0, 2.28078893e-11]]), np.array([7.91721154e-04, 9.99208279e-01]), 1.5, 1.0), 0)
def test_the_fast_divergences_of_the_search_equal_the_general_form(case, seed):
    private, public, alpha, _ = case
    order = am.ball_order(alpha)
    lam = np.random.default_rng(seed).random(len(private))
    lam[0] = 1.0  # λ = 1 with a member's zero: an infinite divergence
    with np.errstate(divide="ignore"):
        log_0 = np.log(public)
        general = am._log_divergences(np.log(am._mixtures(private, public, lam)), log_0, order)
    fast = am._mixture_divergences(private, public, log_0, order)(lam, np.arange(len(private)))
    np.testing.assert_allclose(fast, general, rtol=1e-9, atol=1e-12)
    assert np.array_equal(np.isinf(fast), np.isinf(general))


def test_lambda_is_one_when_member_equals_public():
    p = softmax(np.arange(5.0))
    assert am.choose_lambda(p, p, 1e-6, 18) == 1.0


def test_lambda_is_zero_when_member_leaves_public_support():
    public = np.array([0.5, 0.5, 0.0])
    member = np.array([0.0, 0.0, 1.0])
    assert am.choose_lambda(member, public, 0.2, 18) == 0.0


# ---------------------------------------------------------------------------------------------------------------
# noisy screening


def _screen_case(v=80, n=10, seed=1):
    rng = np.random.default_rng(seed)
    public = softmax(rng.normal(0, 2, v))
    private = softmax(rng.normal(0, 2, (n, v)), axis=1)
    return private, public


def _noise_on_support(sigma, draws=1500, top_k=40, lam=0.3):
    private, public = _screen_case()
    expected = lam * private.mean(axis=0) + (1 - lam) * public
    rng = make_rng(7, test_mode=True)
    on_k, off_k = [], []
    for _ in range(draws):
        support, noisy = am.noisy_mixture(private, public, top_k=top_k, lam=lam, sigma=sigma, rng=rng)
        mask = np.zeros(public.size, bool)
        mask[support] = True
        on_k.append(noisy[mask] - expected[mask])
        off_k.append(noisy[~mask])
    return np.concatenate(on_k), np.concatenate(off_k), support, public


def test_screen_noise_is_gaussian_with_std_sigma_on_top_k_only():
    sigma = 1e-2
    noise, off, support, public = _noise_on_support(sigma)
    assert support.size == 40
    np.testing.assert_array_equal(np.sort(support), np.sort(np.argsort(-public, kind="stable")[:40]))
    assert stats.kstest(noise, stats.norm(0, sigma).cdf).pvalue > 1e-3
    # the test has the power to see noise that is too small (or too large)
    assert stats.kstest(noise, stats.norm(0, sigma / 2).cdf).pvalue < 1e-9
    assert stats.kstest(noise, stats.norm(0, 2 * sigma).cdf).pvalue < 1e-9
    assert noise.std() == pytest.approx(sigma, rel=0.02)
    assert np.all(off == 0.0)  # exactly zero off K: no noise, no private mass


def test_noise_is_added_before_renormalisation():
    # with σ tiny the noisy vector is the *un-renormalised* truncated mixture (its sum over K is < 1)
    private, public = _screen_case()
    support, noisy = am.noisy_mixture(private, public, top_k=5, lam=0.5, sigma=1e-12,
                                      rng=make_rng(0, test_mode=True))
    expected = 0.5 * private.mean(axis=0) + 0.5 * public
    np.testing.assert_allclose(noisy[support], expected[support], atol=1e-10)
    assert noisy[support].sum() < 0.99


def test_noisy_screen_is_post_processing_of_the_noisy_mixture():
    private, public = _screen_case()
    kwargs = dict(top_k=60, lam=1e-2, sigma=1e-2)
    for seed in range(5):
        support, noisy = am.noisy_mixture(private, public, rng=make_rng(seed, test_mode=True), **kwargs)
        clipped = np.clip(noisy[support], 0, None)
        expected = renyi_divergence(clipped / clipped.sum(), public[support] / public[support].sum(), 18)
        result = am.noisy_screen(private, public, threshold=4.5, alpha=18, rng=make_rng(seed, test_mode=True),
                                 **kwargs)
        assert result.divergence == pytest.approx(expected, rel=1e-12)
        assert result.passed == (expected <= 4.5)


def test_screen_fails_when_no_positive_mass_is_left():
    support = np.array([0, 1])
    assert am.screen_divergence(support, np.array([-0.1, -0.2, 0.0]), np.array([0.5, 0.3, 0.2]), 18) == math.inf
    private = np.array([[1.0]])
    public = np.array([1.0])
    outcomes = {am.noisy_screen(private, public, top_k=1, lam=1.0, sigma=10.0, threshold=4.5, alpha=18,
                                rng=make_rng(s, test_mode=True)).divergence for s in range(40)}
    assert outcomes == {0.0, math.inf}  # one token: either it survives the clipping (D = 0) or nothing is left


def test_top_k_skips_tokens_without_public_mass():
    public = np.array([0.0, 0.6, 0.0, 0.4])
    np.testing.assert_array_equal(am.top_k_support(public, 3), [1, 3])


# ---------------------------------------------------------------------------------------------------------------
# one token: sampling and reporting


def _passing_case():
    public = np.array([0.30, 0.25, 0.20, 0.12, 0.08, 0.05])
    private = np.array([[0.05, 0.05, 0.10, 0.10, 0.20, 0.50],
                        [0.10, 0.40, 0.20, 0.10, 0.10, 0.10],
                        [0.60, 0.10, 0.10, 0.10, 0.05, 0.05]])
    return private, public


def _failing_case():
    public = np.array([0.90, 0.06, 0.02, 0.01, 0.005, 0.005])
    private = np.tile([0.001, 0.001, 0.001, 0.001, 0.001, 0.995], (3, 1))
    return private, public


STEP = dict(beta=0.05, alpha=6, top_k=6, screen_sigma=1e-3)


def _draw(private, public, draws, **kwargs):
    rng = make_rng(11, test_mode=True)
    tokens, infos = [], []
    lp_private = np.log(private).astype(np.float32)
    lp_public = np.log(public).astype(np.float32)
    for _ in range(draws):
        token, info = am.step(lp_private, lp_public, rng=rng, **kwargs)
        tokens.append(token)
        infos.append(info)
    return np.bincount(tokens, minlength=public.size), infos


def _chi2_pvalue(counts, p):
    return stats.chisquare(counts, counts.sum() * p / p.sum()).pvalue


@pytest.fixture
def memoised(monkeypatch):
    """choose_lambdas and data_dependent_rdp, which `step` calls, are pure and see the same inputs at every draw:
    compute them once (scipy's logsumexp overhead makes thousands of λ searches slow); the sampling is untouched."""
    cache = {}

    def wrap(fn):
        def cached(*args, **kwargs):
            key = (fn.__name__, tuple(np.asarray(a).tobytes() if isinstance(a, np.ndarray) else a for a in args),
                   tuple((k, np.asarray(v).tobytes()) for k, v in sorted(kwargs.items())))
            if key not in cache:
                cache[key] = fn(*args, **kwargs)
            return cache[key]
        return cached

    monkeypatch.setattr(am, "choose_lambdas", wrap(am.choose_lambdas))
    monkeypatch.setattr(am, "data_dependent_rdp", wrap(am.data_dependent_rdp))


def test_tokens_follow_the_pmixed_mixture_when_the_screen_passes(memoised):
    private, public = _passing_case()
    counts, infos = _draw(private, public, 6000, screen_lam=1e-4, threshold=4.5, **STEP)
    assert all(info.passed for info in infos)
    p32 = am.probs_from_logprobs(np.log(private).astype(np.float32))
    p0_32 = am.probs_from_logprobs(np.log(public).astype(np.float32))
    p, lambdas = am.pmixed(p32, p0_32, STEP["beta"], STEP["alpha"])
    assert np.all(lambdas < 1) and np.all(lambdas > 0)  # a real mixture, distinguishable from both ends
    assert _chi2_pvalue(counts, p) > 1e-4
    assert _chi2_pvalue(counts, public) < 1e-9
    assert _chi2_pvalue(counts, private.mean(axis=0)) < 1e-9
    assert all(info.data_dependent_rdp > 0 for info in infos)


def test_tokens_follow_the_public_distribution_when_the_screen_fails():
    private, public = _failing_case()
    step = dict(STEP, beta=5.0)  # a radius so large that PMixED would use the members as they are (λ = 1)
    counts, infos = _draw(private, public, 3000, screen_lam=1.0, threshold=0.5, **step)
    assert not any(info.passed for info in infos)
    assert all(info.data_dependent_rdp == 0.0 for info in infos)
    assert _chi2_pvalue(counts, public) > 1e-4
    p, lambdas = am.pmixed(private, public, step["beta"], step["alpha"])
    assert np.all(lambdas == 1.0)
    assert _chi2_pvalue(counts, p) < 1e-9


def test_per_token_charge_does_not_depend_on_the_screen():
    passing, public_pass = _passing_case()
    failing, public_fail = _failing_case()
    # the same parameters for both; only the data decide the outcome of the screen
    _, passed = _draw(passing, public_pass, 3, screen_lam=1.0, threshold=3.0, **STEP)
    _, failed = _draw(failing, public_fail, 3, screen_lam=1.0, threshold=3.0, **STEP)
    assert all(i.passed for i in passed) and not any(i.passed for i in failed)
    expected = am.screen_rdp(6, 1.0, 3, 1e-3) + am.member_bound_rdp(6, STEP["beta"], 3)
    assert {i.rdp_bound for i in passed + failed} == {expected}
    assert {i.members for i in passed + failed} == {3}


def test_invalid_member_rows_are_replaced_by_public_and_public_must_be_valid():
    private, public = _passing_case()
    lp = np.log(private)
    lp[1] = np.nan
    lp[2] = -np.inf
    token, info = am.step(lp, np.log(public), beta=0.02, alpha=6, top_k=6, rng=make_rng(0, test_mode=True))
    assert 0 <= token < public.size and info.members == 3
    with pytest.raises(ValueError, match="public"):
        am.step(np.log(private), np.full(6, np.nan), beta=0.02, rng=make_rng(0, test_mode=True))
    with pytest.raises(ValueError, match="N×6"):
        am.step(np.log(private)[:, :5], np.log(public), beta=0.02, rng=make_rng(0, test_mode=True))


def test_probs_from_float32_logprobs():
    logits = np.random.default_rng(3).normal(0, 10, (4, 1000))
    lp = log_softmax(logits, axis=1).astype(np.float32)
    p = am.probs_from_logprobs(lp)
    assert p.dtype == np.float64
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(p, softmax(logits, axis=1), rtol=1e-5, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# data-dependent value (information only)


@settings(deadline=None, max_examples=40)
@given(ensembles())
def test_data_dependent_rdp_is_nonnegative(case):
    private, public, alpha, beta = case
    value = am.data_dependent_rdp(private, alpha, public=public)
    assert value >= 0


def test_data_dependent_rdp_is_zero_for_equal_members_and_bounded_by_thm_c1():
    private, public = _passing_case()
    assert am.data_dependent_rdp(np.tile(public, (5, 1)), 18) == 0.0
    p, lambdas = am.pmixed(private, public, 0.02, 6)
    mixtures = lambdas[:, None] * private + (1 - lambdas[:, None]) * public
    value = am.data_dependent_rdp(mixtures, 6)
    assert 0 < value <= am.member_bound_rdp(6, 0.02, 3)
    with pytest.raises(ValueError, match="public"):
        am.data_dependent_rdp(mixtures[:1], 6)
    assert am.data_dependent_rdp(mixtures[:1], 6, public=public) == symmetric_renyi(mixtures[0], public, 6)


# ---------------------------------------------------------------------------------------------------------------
# cost and plan


def test_cost_is_the_reserved_query_bound():
    event = am.cost(18, 0.001, 100, 64)
    expected = 64 * (am.screen_rdp(18, 1e-4, 100, 1e-2) + am.member_bound_rdp(18, 0.001, 100))
    assert event == FixedOrderRDPEvent(18, event.rdp, mechanism="adapmixed")
    assert event.rdp == pytest.approx(expected, rel=1e-12)
    assert am.query_bound_rdp(18, 0.001, 100, 64) == event.rdp
    with pytest.raises(ValueError, match="integer"):
        am.cost(2.5, 0.001, 100, 64)


def _plan(*args, members=am.PAPER_MEMBERS, **kwargs):
    """The mechanism's plan at paper 003's ensemble size unless told otherwise (it has no default of its own)."""
    return am.plan(*args, members=members, **kwargs)


@pytest.mark.parametrize("epsilon", [1.0, 3.0, 8.0])
def test_plan_certifies_epsilon_and_uses_the_budget(epsilon):
    plan = _plan(100, 64, epsilon, 1e-5)
    assert plan["method"] == "adapmixed" and plan["alpha"] == 18 and plan["members"] == 100
    assert plan["epsilon_certified"] <= epsilon
    assert plan["epsilon_certified"] == pytest.approx(epsilon, rel=1e-6)  # the largest β: nothing left over
    assert plan["rdp_budget"] == pytest.approx(fixed_order_budget(epsilon, 1e-5, 18))
    assert plan["conversion_term"] == pytest.approx(0.45005, abs=5e-6)
    assert 100 * plan["rdp_per_query"] <= plan["rdp_budget"]
    assert plan["rdp_per_query"] == am.query_bound_rdp(18, plan["beta"], 100, 64)
    assert plan["screen_rdp_per_token"] == pytest.approx(1.8e-7)
    assert plan["epsilon_certified"] == bbghs_epsilon([100 * plan["rdp_per_query"]], [18], 1e-5)
    # the feasible side: a slightly larger β would not fit
    with pytest.raises(ValueError, match="pays for"):
        _plan(100, 64, epsilon, 1e-5, beta=plan["beta"] * (1 + 1e-6))
    assert _plan(100, 64, epsilon, 1e-5, beta=plan["beta"])["beta"] == plan["beta"]


def test_more_queries_or_tokens_give_smaller_beta():
    betas = [_plan(q, 32, 4.0, 1e-5)["beta"] for q in (10, 100, 1000)]
    assert betas[0] > betas[1] > betas[2] > 0
    assert _plan(100, 64, 4.0, 1e-5)["beta"] < _plan(100, 32, 4.0, 1e-5)["beta"]


def test_plan_rejects_a_beta_that_does_not_fit():
    with pytest.raises(ValueError, match=r"pays for 0 of the 100 queries; beta <= "):
        _plan(100, 64, 8.0, 1e-5, beta=0.2)
    small = _plan(10, 64, 8.0, 1e-5)["beta"]
    with pytest.raises(ValueError, match=r"pays for 10 of the 100 queries"):
        _plan(100, 64, 8.0, 1e-5, beta=small)


@pytest.mark.parametrize("kwargs, match", [
    (dict(queries=0), "queries"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(epsilon=-1.0), "epsilon"),
    (dict(delta=1.5), "delta"),
    (dict(members=0), "members"),
    (dict(alpha=2.5), "alpha"),
    (dict(alpha=1), "alpha"),
    (dict(beta=-0.1), "beta"),
    (dict(screen_sigma=0.0), "screen_sigma"),
    (dict(screen_lam=2.0), "screen_lam"),
    (dict(epsilon=0.3), "conversion alone"),
    (dict(queries=10**9, epsilon=1.0), "screening alone"),
])
def test_plan_bad_inputs(kwargs, match):
    args = dict(queries=100, max_new_tokens=64, epsilon=8.0, delta=1e-5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        _plan(**args)
