"""DP few-shot generation (paper 002; MECHANISMS §6, §11.1, §12.1 items 6 and 17): per-token noisy argmax over the
public vocabulary, its sensitivities, noise scales and accounting."""

import itertools
import math

import numpy as np
import pytest
from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant
from prv_accountant.privacy_random_variables import PureDPMechanism
from scipy import stats

from dpicl.privacy.accounting import PRVAccountant as LedgerPRV
from dpicl.privacy.accounting.auto import total_epsilon
from dpicl.privacy.accounting.calibration import calibrate_noise_multiplier
from dpicl.privacy.accounting.events import (
    ComposedEvent,
    SubsampledGaussianEvent,
    SubsampledPureDPEvent,
    event_from_json,
)
from dpicl.privacy.mechanisms import dp_fewshot as dpf
from dpicl.privacy.rng import make_rng

# From the privacy analysis (MECHANISMS §6), not from the code: replacing one split's distribution moves the mean
# of M distributions by ≤ √2/M in L2 (each sums to 1) and by ≤ 1/M in L∞ (each lies in [0, 1]).
L2 = math.sqrt(2)
LINF = 1.0

# MECHANISMS §6 table: |D| (per class), M·N, T, σ for ε = 1, 2, 4, 8, ε_est [recomputed]; δ = 1/|D|.
TABLE = {
    "agnews": (30_000, 20, 100, (0.51, 0.46, 0.39, 0.31), (0.965, 1.789, 3.815, 7.967)),
    "dbpedia": (40_000, 80, 100, (0.63, 0.54, 0.45, 0.36), (0.893, 1.919, 3.895, 7.587)),
    "trec": (835, 80, 15, (1.36, 0.95, 0.69, 0.51), (0.950, 1.935, 3.955, 7.968)),
    "mit-g": (2_953, 80, 80, (1.08, 0.81, 0.64, 0.50), (0.985, 1.994, 3.843, 7.704)),
    "mit-d": (1_561, 80, 80, (1.52, 1.04, 0.77, 0.58), (0.998, 1.976, 3.881, 7.935)),
}
SPLITS = {"agnews": 10, "dbpedia": 40, "trec": 80, "mit-g": 20, "mit-d": 20}
TARGETS = (1, 2, 4, 8)
# RNM-Exp, DBPedia: ε0 → amplified ε̄, ε over T = 100 at q = 80/40000, δ = 1/40000
RNM_EXP = ((2.73, 0.02826, 0.981), (3.34, 0.05301, 1.983), (3.95, 0.09701, 3.951), (4.57, 0.17487, 7.946))


def rng(seed=0):
    return make_rng(seed, test_mode=True)


def random_dists(m, k, mode, seed=0):
    g = np.random.default_rng(seed)
    return dpf.split_distributions(g.normal(0, 3, size=(m, k)), np.arange(k), mode)


def certified(event, delta):
    """total_epsilon, or ∞ where the PRV library cannot discretise the event (it then cannot be charged)."""
    try:
        return total_epsilon([event], delta)
    except RuntimeError:
        return math.inf


# ---------------------------------------------------------------------------------------------------------------
# sensitivities


def test_sensitivity_constants():
    for m in (1, 10, 40, 80):
        assert dpf.l2_sensitivity(m) == pytest.approx(L2 / m)
        assert dpf.linf_sensitivity(m) == pytest.approx(LINF / m)
    with pytest.raises(ValueError):
        dpf.l2_sensitivity(0)


def test_replacing_one_split_moves_the_mean_by_at_most_the_sensitivity():
    # Random logprob rows (also extreme and degenerate ones) through split_distributions. It works row by row, so
    # replacing split j's row a by b moves the mean by (R_b − R_a)/M: ≤ √2/M in L2 (gaussian) and ≤ 1/M in L∞
    # (exponential) over all pairs; one-hot rows on different tokens attain it.
    g = np.random.default_rng(0)
    k = 6
    rows = [g.normal(0, s, size=k) for s in (0.1, 1, 10, 100, 1000) for _ in range(20)]
    rows += [np.full(k, -np.inf), np.full(k, np.nan), *(np.where(np.arange(k) == i, 0.0, -np.inf) for i in range(k))]
    rows = np.stack(rows)
    for mode, sens, norm in (("gaussian", L2, 2), ("exponential", LINF, np.inf)):
        r = dpf.split_distributions(rows, np.arange(k), mode)
        for m in (1, 3, 7):  # row-wise: a split's row does not depend on the other splits
            idx = g.choice(len(rows), size=m)
            np.testing.assert_array_equal(dpf.split_distributions(rows[idx], np.arange(k), mode), r[idx])
            j, new = int(g.integers(m)), int(g.integers(len(rows)))
            changed = idx.copy()
            changed[j] = new
            moved = dpf.split_distributions(rows[changed], np.arange(k), mode).mean(0) - r[idx].mean(0)
            np.testing.assert_allclose(moved, (r[new] - r[idx[j]]) / m, atol=1e-15)
        worst = max(float(np.linalg.norm(a - b, ord=norm)) for a, b in itertools.combinations(r, 2))
        assert worst <= sens + 1e-12
        assert worst == pytest.approx(sens)


# ---------------------------------------------------------------------------------------------------------------
# vocabulary and normalisation


def test_public_vocabulary_is_the_top_k_most_likely_first():
    lp = np.log(np.array([0.1, 0.3, 0.05, 0.3, 0.25]))
    assert dpf.public_vocabulary(lp, 3).tolist() == [1, 3, 4]  # tie 1/3 → lower id first
    assert dpf.public_vocabulary(lp, 5).tolist() == [1, 3, 4, 0, 2]
    big = np.random.default_rng(0).normal(size=1000)
    assert set(dpf.public_vocabulary(big).tolist()) == set(np.argsort(big)[-100:].tolist())
    for bad_k in (0, 6, 2.5, True):
        with pytest.raises(ValueError):
            dpf.public_vocabulary(lp, bad_k)
    with pytest.raises(ValueError):
        dpf.public_vocabulary(np.array([0.0, np.nan]), 1)
    with pytest.raises(ValueError):
        dpf.public_vocabulary(np.zeros((2, 2)), 1)


def test_split_distributions_normalise_over_k():
    g = np.random.default_rng(1)
    logits = g.normal(0, 2, size=(4, 30))
    lp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    vocab = np.array([3, 7, 0, 29, 12])
    p = np.exp(lp[:, vocab])
    gauss = dpf.split_distributions(lp, vocab, "gaussian")
    expo = dpf.split_distributions(lp, vocab, "exponential")
    assert gauss.dtype == np.float64 and gauss.shape == (4, 5)
    np.testing.assert_allclose(gauss, p / p.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(expo, p / p.max(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(gauss.sum(1), 1.0, rtol=1e-12)
    assert (expo.max(1) == 1.0).all() and (expo >= 0).all()
    # a per-row constant (logits instead of log-probabilities) does not matter
    np.testing.assert_allclose(dpf.split_distributions(logits, vocab, "gaussian"), gauss, rtol=1e-12)


def test_split_distributions_are_stable_and_total():
    vocab = np.array([0, 1, 2])
    lp = np.array([
        [-2000.0, -2001.0, -2000.0, 0.0],  # K far in the tail of this split: no underflow
        [-np.inf, -np.inf, -np.inf, 0.0],  # all of K impossible → uniform
        [np.nan, 0.0, 0.0, 0.0],  # broken output → uniform
        [np.inf, 0.0, 0.0, 0.0],  # broken output → uniform
        [0.0, -np.inf, -1.0, 0.0],  # a single impossible token stays 0
    ])
    gauss = dpf.split_distributions(lp, vocab, "gaussian")
    expo = dpf.split_distributions(lp, vocab, "exponential")
    e = math.exp(-1)
    np.testing.assert_allclose(gauss[0], np.array([1, e, 1]) / (2 + e))
    np.testing.assert_allclose(expo[0], [1, e, 1])
    for row in (1, 2, 3):
        np.testing.assert_allclose(gauss[row], 1 / 3)
        np.testing.assert_allclose(expo[row], 1.0)
    np.testing.assert_allclose(gauss[4], np.array([1, 0, e]) / (1 + e))
    assert np.isfinite(gauss).all() and np.isfinite(expo).all()


def test_split_distributions_reject_bad_input():
    lp = np.zeros((2, 5))
    for vocab in (np.array([0, 5]), np.array([-1, 2]), np.array([1, 1]), np.array([], dtype=int), np.array([0.0, 1.0])):
        with pytest.raises(ValueError):
            dpf.split_distributions(lp, vocab, "gaussian")
    with pytest.raises(ValueError):
        dpf.split_distributions(lp, np.array([0, 1]), "laplace")
    with pytest.raises(ValueError):
        dpf.split_distributions(np.zeros(5), np.array([0, 1]), "gaussian")


# ---------------------------------------------------------------------------------------------------------------
# noise: statistical tests that fail if the noise is smaller than the analysis requires


@pytest.mark.parametrize("m,nm", [(10, 0.39), (40, 0.45), (80, 1.36)])
def test_gaussian_noise_std_is_root_two_over_m_times_nm(m, nm):
    k = 20_000
    d = random_dists(m, k, "gaussian", seed=m)
    noise = dpf.noisy_scores(d, "gaussian", noise_multiplier=nm, rng=rng(m)) - d.mean(0)
    sigma = L2 / m * nm
    assert stats.kstest(noise, stats.norm(scale=sigma).cdf).pvalue > 1e-3
    assert stats.kstest(noise, stats.norm(scale=sigma / math.sqrt(2)).cdf).pvalue < 1e-6  # half the variance
    assert stats.kstest(noise, stats.norm(scale=sigma / 2).cdf).pvalue < 1e-6  # half the std


@pytest.mark.parametrize("m,eps0", [(40, 2.73), (40, 4.57), (20, 1.0)])
def test_exponential_noise_scale_is_two_over_m_eps0(m, eps0):
    k = 20_000
    d = random_dists(m, k, "exponential", seed=m)
    noise = dpf.noisy_scores(d, "exponential", epsilon0=eps0, rng=rng(m)) - d.mean(0)
    scale = 2 * LINF / m / eps0
    assert (noise >= -1e-15).all()
    assert stats.kstest(noise, stats.expon(scale=scale).cdf).pvalue > 1e-3
    assert stats.kstest(noise, stats.expon(scale=scale / 2).cdf).pvalue < 1e-6  # the monotone-query scale Δ/ε0


def test_token_functions_use_noisy_scores():
    d = random_dists(8, 50, "gaussian")
    for seed in range(20):
        assert dpf.gaussian_token(d, 0.3, rng(seed)) == int(np.argmax(
            dpf.noisy_scores(d, "gaussian", noise_multiplier=0.3, rng=rng(seed))))
    d = random_dists(8, 50, "exponential")
    for seed in range(20):
        assert dpf.exponential_token(d, 2.0, rng(seed)) == int(np.argmax(
            dpf.noisy_scores(d, "exponential", epsilon0=2.0, rng=rng(seed))))


def _two_token_dists(m, gap, mode):
    """M splits over K = {0, 1} whose mean is [0.5 + gap/2, 0.5 − gap/2] (gaussian) or [1, 1 − gap] (exponential)."""
    if mode == "gaussian":
        row = [0.5 + gap / 2, 0.5 - gap / 2]
    else:
        row = [1.0, 1.0 - gap]
    return np.tile(row, (m, 1))


def _assert_rate(hits, draws, expected):
    ci = stats.binomtest(int(hits), draws).proportion_ci(0.999)
    assert ci.low <= expected <= ci.high, f"rate CI [{ci.low:.4f}, {ci.high:.4f}] excludes {expected:.4f}"


def test_released_token_rate_gaussian():
    # P(token 1) = Φ̄(gap / (√2·σ)) with σ = √2/M·nm: computable, so half the noise would be caught.
    m, nm, gap, draws = 10, 0.5, 0.1, 6000
    d = _two_token_dists(m, gap, "gaussian")
    g = rng(3)
    hits = sum(dpf.gaussian_token(d, nm, g) == 1 for _ in range(draws))
    sigma = L2 / m * nm
    _assert_rate(hits, draws, stats.norm.sf(gap / (math.sqrt(2) * sigma)))
    ci = stats.binomtest(int(hits), draws).proportion_ci(0.999)
    assert not ci.low <= stats.norm.sf(gap / (math.sqrt(2) * sigma / 2)) <= ci.high


def test_released_token_rate_exponential():
    # X0, X1 iid Exp(b): P(1 − gap + X1 > 1 + X0) = P(X1 − X0 > gap) = ½·e^(−gap/b) (Laplace difference).
    m, eps0, gap, draws = 20, 1.0, 0.05, 6000
    d = _two_token_dists(m, gap, "exponential")
    g = rng(4)
    hits = sum(dpf.exponential_token(d, eps0, g) == 1 for _ in range(draws))
    b = 2 * LINF / m / eps0
    _assert_rate(hits, draws, 0.5 * math.exp(-gap / b))
    ci = stats.binomtest(int(hits), draws).proportion_ci(0.999)
    assert not ci.low <= 0.5 * math.exp(-gap / (b / 2)) <= ci.high


# ---------------------------------------------------------------------------------------------------------------
# the released token


def test_token_is_always_in_k_even_when_all_noisy_values_are_negative():
    # §12.1 item 17: 002's code took the argmax over the whole vocabulary, where off-K entries are 0.
    v, k, m = 50, 3, 4
    g = np.random.default_rng(5)
    public = g.normal(size=v)
    vocab = dpf.public_vocabulary(public, k)
    private = g.normal(size=(m, v))
    d = dpf.split_distributions(private, vocab, "gaussian")
    step_rng, shadow_rng = rng(6), rng(6)  # the step and its shadow draw the same noise
    all_negative, seen = 0, set()
    for _ in range(400):
        token = dpf.step(private, public, top_k=k, mechanism="gaussian", noise_multiplier=50.0, rng=step_rng)
        scores = dpf.noisy_scores(d, "gaussian", noise_multiplier=50.0, rng=shadow_rng)
        assert token in vocab
        assert token == vocab[int(np.argmax(scores))]
        all_negative += bool((scores < 0).all())
        seen.add(token)
    assert all_negative > 20  # the edge case really occurred (about 1/8 of the draws)
    assert seen == set(vocab.tolist())
    for _ in range(50):
        token = dpf.step(private, public, top_k=k, mechanism="exponential", epsilon0=1e-3, rng=step_rng)
        assert token in vocab


def test_without_noise_the_token_is_the_argmax_of_the_mean_over_k():
    g = np.random.default_rng(7)
    for trial in range(20):
        m, v = int(g.integers(1, 12)), 200
        private = g.normal(0, 3, size=(m, v))
        public = g.normal(size=v)
        vocab = dpf.public_vocabulary(public, 10)
        private[:, np.setdiff1d(np.arange(v), vocab)[0]] = 50.0  # the most likely token overall is not in K
        for mode, params in (("gaussian", {"noise_multiplier": 1e-12}), ("exponential", {"epsilon0": 1e12})):
            d = dpf.split_distributions(private, vocab, mode)
            best = int(np.argmax(d.mean(0)))
            assert dpf.step(private, public, top_k=10, mechanism=mode, rng=rng(trial), **params) == vocab[best]
        assert dpf.gaussian_token(dpf.split_distributions(private, vocab, "gaussian"), 1e-12, rng(trial)) == \
            int(np.argmax(dpf.split_distributions(private, vocab, "gaussian").mean(0)))
        assert dpf.exponential_token(dpf.split_distributions(private, vocab, "exponential"), 1e12, rng(trial)) == \
            int(np.argmax(dpf.split_distributions(private, vocab, "exponential").mean(0)))


def test_token_functions_reject_bad_input():
    private, public = np.zeros((3, 10)), np.zeros(10)
    with pytest.raises(ValueError):
        dpf.step(private, public, top_k=3, mechanism="gaussian", rng=rng())  # no noise_multiplier
    with pytest.raises(ValueError):
        dpf.step(private, public, top_k=3, mechanism="gaussian", noise_multiplier=1.0, epsilon0=1.0, rng=rng())
    with pytest.raises(ValueError):
        dpf.step(private, public, top_k=3, mechanism="exponential", noise_multiplier=1.0, rng=rng())
    with pytest.raises(ValueError):
        dpf.step(private, public, top_k=3, mechanism="laplace", noise_multiplier=1.0, rng=rng())
    with pytest.raises(ValueError):
        dpf.step(np.zeros((3, 9)), public, top_k=3, mechanism="gaussian", noise_multiplier=1.0, rng=rng())
    for nm in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            dpf.gaussian_token(np.full((2, 2), 0.5), nm, rng())
    with pytest.raises(ValueError):  # not a distribution over K: the sensitivity would not hold
        dpf.gaussian_token(np.full((2, 2), 0.7), 1.0, rng())
    with pytest.raises(ValueError):
        dpf.exponential_token(np.full((2, 2), 1.5), 1.0, rng())
    with pytest.raises(ValueError):
        dpf.exponential_token(np.full((2, 2), -0.1), 1.0, rng())


# ---------------------------------------------------------------------------------------------------------------
# accounting


def test_cost_events():
    p = {"mechanism": "gaussian", "splits": 40, "sampling_rate": 0.002, "tokens": 100, "noise_multiplier": 0.45}
    e = dpf.cost(p)
    assert e == ComposedEvent(SubsampledGaussianEvent(0.45, 0.002, L2 / 40, "dp_fewshot"), 100)
    assert e.event.sigma == pytest.approx(L2 / 40 * 0.45)
    assert event_from_json(e.to_json()) == e
    p = {"mechanism": "exponential", "splits": 40, "sampling_rate": 0.002, "tokens": 100, "epsilon0": 2.73}
    e = dpf.cost(p)
    assert e == ComposedEvent(SubsampledPureDPEvent(2.73, 0.002, LINF / 40, "dp_fewshot"), 100)
    assert event_from_json(e.to_json()) == e
    with pytest.raises(ValueError):
        dpf.cost({"mechanism": "gaussian", "splits": 40, "sampling_rate": 0.002, "tokens": 100})
    with pytest.raises(ValueError):
        dpf.cost({"mechanism": "gaussian", "splits": 40, "tokens": 100, "noise_multiplier": 1.0})


def test_per_label_pools_charge_the_largest_rate():
    sizes = {"World": 30_000, "Sport": 29_000, "Business": 31_000}
    q = dpf.pool_sampling_rate(sizes.values(), splits=10, shots=2)
    assert q == pytest.approx(20 / 29_000)
    events = [dpf.cost({"mechanism": "gaussian", "splits": 10, "sampling_rate": 20 / n, "tokens": 100,
                        "noise_multiplier": 0.39}) for n in sizes.values()]
    assert dpf.charge_for_pools(events).event.sampling_rate == pytest.approx(q)
    assert total_epsilon([dpf.charge_for_pools(events)], 1 / 29_000) >= total_epsilon([events[0]], 1 / 29_000)
    other = dpf.cost({"mechanism": "gaussian", "splits": 10, "sampling_rate": 0.001, "tokens": 100,
                      "noise_multiplier": 0.5})
    with pytest.raises(ValueError):
        dpf.charge_for_pools([*events, other])
    with pytest.raises(ValueError):
        dpf.charge_for_pools([])
    with pytest.raises(ValueError):
        dpf.pool_sampling_rate([10, 15], splits=10, shots=2)  # M·N > smallest pool
    with pytest.raises(ValueError):
        dpf.pool_sampling_rate([], splits=10, shots=2)


@pytest.mark.slow
def test_table_noise_multipliers_reproduce_epsilon():
    # MECHANISMS §6 / §11.1: the papers' σ give ε_est (PRV library, as called by 002's code) to ±0.01, ≤ target; our
    # ledger's bound on the cost event (eps_up at δ − delta_error, eps_error 0.005) is at most 0.02 above target.
    for name, (n, mn, t, sigmas, eps_est) in TABLE.items():
        q, delta = mn / n, 1 / n
        for sigma, expected, target in zip(sigmas, eps_est, TARGETS):
            prv = PoissonSubsampledGaussianMechanism(noise_multiplier=sigma, sampling_probability=q)
            acc = PRVAccountant(prvs=[prv], max_self_compositions=[t], eps_error=0.01, delta_error=1e-10)
            est = acc.compute_epsilon(delta=delta, num_self_compositions=[t])[1]
            assert est == pytest.approx(expected, abs=0.01), (name, sigma)
            assert est <= target
            event = dpf.cost({"mechanism": "gaussian", "splits": SPLITS[name], "sampling_rate": q, "tokens": t,
                              "noise_multiplier": sigma})
            assert event.event.sigma == pytest.approx(L2 / SPLITS[name] * sigma)
            assert total_epsilon([event], delta) <= target + 0.02, (name, sigma)


def test_rnm_exp_row():
    q, t, delta = 80 / 40_000, 100, 1 / 40_000
    for eps0, bar, expected in RNM_EXP:
        event = dpf.cost({"mechanism": "exponential", "splits": 40, "sampling_rate": q, "tokens": t,
                          "epsilon0": eps0})
        assert event.event.amplified_epsilon == pytest.approx(bar, abs=5e-5)
        acc = PRVAccountant(prvs=[PureDPMechanism(event.event.amplified_epsilon)], max_self_compositions=[t + 1],
                            eps_error=0.01, delta_error=1e-10)
        est = acc.compute_epsilon(delta=delta, num_self_compositions=[t])[1]
        assert est == pytest.approx(expected, abs=0.01)
        # the exact composition of randomized response agrees with PRV's estimate, our PRV bound is just above it;
        # the ledger takes the RDP bound of the subsampled ε0-DP steps when it is smaller (it is, about half)
        exact = dpf.randomized_response_epsilon(event.event.amplified_epsilon, t, delta)
        assert exact == pytest.approx(expected, abs=0.01)
        assert exact <= LedgerPRV().epsilon([event], delta) <= exact + 0.02
        assert total_epsilon([event], delta) <= LedgerPRV().epsilon([event], delta)


def test_randomized_response_epsilon_small_cases():
    # one step of ε̄-RR: δ(ε) = p·(1 − e^(ε − ε̄)) with p = e^ε̄/(1+e^ε̄), so ε = ε̄ + log(1 − δ/p)
    bar, delta = 0.5, 1e-3
    p = math.exp(bar) / (1 + math.exp(bar))
    assert dpf.randomized_response_epsilon(bar, 1, delta) == pytest.approx(bar + math.log(1 - delta / p), abs=1e-9)
    # never more than the basic composition k·ε̄
    assert dpf.randomized_response_epsilon(0.1, 50, 1e-6) <= 5.0
    assert dpf.randomized_response_epsilon(0.1, 3, 0.9) == 0.0


@pytest.mark.slow
def test_plan_gaussian_uses_the_certified_noise_multiplier():
    q, t, eps, delta = 80 / 835, 15, 4.0, 1 / 835
    p = dpf.plan(q, t, eps, delta, splits=80)
    assert p["method"] == "dp-fewshot" and p["mechanism"] == "gaussian"
    assert p["noise_multiplier"] == calibrate_noise_multiplier(q, t, eps, delta)
    assert p["noise_multiplier"] == pytest.approx(0.69, abs=0.01)  # the paper's σ (TREC, ε = 4)
    assert p["sigma"] == pytest.approx(L2 / 80 * p["noise_multiplier"])
    assert p["splits"] == 80 and p["tokens"] == t and p["sampling_rate"] == q
    assert p["epsilon_certified"] == total_epsilon([dpf.cost(p)], delta) <= eps


@pytest.mark.parametrize("q,t,eps,delta,splits", [
    (80 / 40_000, 100, 1.0, 1 / 40_000, 40),
    (80 / 40_000, 100, 4.0, 1 / 40_000, 40),
    (80 / 40_000, 100, 8.0, 1 / 40_000, 40),
    (80 / 1_561, 80, 2.0, 1 / 1_561, 20),
    (1.0, 10, 1.0, 1e-5, 4),
])
def test_plan_exponential_is_the_largest_certified_epsilon0(q, t, eps, delta, splits):
    p = dpf.plan(q, t, eps, delta, splits=splits, mechanism="exponential")
    assert p["method"] == "dp-fewshot" and p["mechanism"] == "exponential"
    assert p["epsilon_certified"] == total_epsilon([dpf.cost(p)], delta) <= eps
    assert p["epsilon_certified"] > eps - 0.05  # the budget is used
    assert p["amplified_epsilon"] == pytest.approx(math.log1p(q * math.expm1(p["epsilon0"])))
    assert p["noise_scale"] == pytest.approx(2 / splits / p["epsilon0"])
    larger = dpf.cost({**p, "epsilon0": p["epsilon0"] * 1.01})
    assert certified(larger, delta) > eps


def test_plan_exponential_is_at_least_the_papers_epsilon0():
    # DBPedia RNM-Exp: 002's ε0 = 2.73 / 3.34 / 3.95 / 4.57 for ε = 1 / 2 / 4 / 8 (PRV as randomized response);
    # the ledger's smaller RDP bound pays for more per token, and certifies it
    for (eps0, _, _), eps in zip(RNM_EXP, TARGETS):
        p = dpf.plan(80 / 40_000, 100, eps, 1 / 40_000, splits=40, mechanism="exponential")
        assert eps0 <= p["epsilon0"] and p["epsilon_certified"] <= eps


def test_plan_rejects_bad_input():
    good = {"sampling_rate": 0.01, "tokens": 10, "epsilon": 1.0, "delta": 1e-5}
    for key, bad in (("sampling_rate", 0.0), ("sampling_rate", 1.5), ("tokens", 0), ("tokens", 2.5),
                     ("epsilon", 0.0), ("epsilon", math.inf), ("delta", 0.0), ("delta", 1.0)):
        args = {**good, key: bad}
        with pytest.raises(ValueError):
            dpf.plan(args["sampling_rate"], args["tokens"], args["epsilon"], args["delta"], splits=4,
                     mechanism="exponential")
    with pytest.raises(ValueError):
        dpf.plan(0.01, 10, 1.0, 1e-5, splits=0, mechanism="exponential")
    with pytest.raises(ValueError):
        dpf.plan(0.01, 10, 1.0, 1e-5, splits=4, mechanism="laplace")
