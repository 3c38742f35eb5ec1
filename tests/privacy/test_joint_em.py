"""Joint exponential mechanism (Gillenwater et al. 2022; paper 001 KSA; MECHANISMS §3, §12.1 item 4, §13)."""

import inspect
import itertools
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from dpicl.privacy.mechanisms import joint_em
from dpicl.privacy.rng import make_rng

# From the privacy analysis (MECHANISMS §A.1), not from the code: one teacher output replaced moves one count
# up and another down, so a difference of counts moves by 2.
REQUIRED_SENSITIVITY = 2.0


def brute_force(counts, k):
    """Every ordered k-sequence of distinct items with its utility −max_i (c_(i) − c_{s_i})."""
    counts = np.asarray(counts, dtype=float)
    top = np.sort(counts)[::-1][:k]
    seqs = list(itertools.permutations(range(counts.size), k))
    utils = np.array([-np.max(top - counts[list(s)]) for s in seqs])
    return seqs, utils


def expected_probs(counts, k, epsilon, sensitivity):
    seqs, utils = brute_force(counts, k)
    logits = epsilon * utils / (2 * sensitivity)
    p = np.exp(logits - logits.max())
    return seqs, p / p.sum()


def empirical(counts, k, epsilon, n, seed):
    rng = make_rng(seed, test_mode=True)
    return Counter(tuple(int(x) for x in joint_em.sample_topk(counts, k, epsilon, rng)) for _ in range(n))


def chi2_pvalue(counts, k, epsilon, n, seed, test_sensitivity):
    """Goodness of fit of joint_em.sample_topk (as it stands, module constant included) to Δ = test_sensitivity."""
    seqs, p = expected_probs(counts, k, epsilon, test_sensitivity)
    emp = empirical(counts, k, epsilon, n, seed)
    assert set(emp) <= set(seqs)
    observed = np.array([emp.get(s, 0) for s in seqs])
    return stats.chisquare(observed, p * n).pvalue


def test_sensitivity_is_privacy_correct():
    assert joint_em.SENSITIVITY == REQUIRED_SENSITIVITY


def test_worked_example_counts():
    utils, log_counts = joint_em.sorted_entry_log_counts(np.array([5, 3, 3, 1]), 2)
    np.testing.assert_allclose(np.exp(log_counts), [0, 0, 0, 2, 1, 3, 3, 3], atol=1e-9)
    np.testing.assert_array_equal(utils, [2, 0, 0, 0, -2, -2, -2, -4])


def _compare_with_brute_force(counts, k):
    _, utils = brute_force(counts, k)
    truth = Counter(utils.tolist())
    u_fast, lc_fast = joint_em.count_sequences_by_utility(counts, k)
    fast = dict(zip(u_fast.tolist(), np.exp(lc_fast).tolist()))
    assert set(fast) == set(truth), (counts, k, fast, truth)
    for u, n in truth.items():
        assert fast[u] == pytest.approx(n, rel=1e-9), (counts, k, u)
    # Every ordered sequence is counted exactly once.
    assert sum(fast.values()) == pytest.approx(len(utils), rel=1e-9)


def test_fast_counts_match_brute_force_integer_ties():
    rng = np.random.default_rng(12345)
    cases = 0
    for _ in range(300):
        d = int(rng.integers(1, 7))
        k = int(rng.integers(1, min(3, d) + 1))
        counts = rng.integers(0, 6, size=d)
        _compare_with_brute_force(counts, k)
        cases += 1
    assert cases >= 200


def test_fast_counts_match_brute_force_real_counts():
    # Non-integer counts: near-equal differences must still be grouped by their true value.
    rng = np.random.default_rng(777)
    for _ in range(100):
        d = int(rng.integers(2, 7))
        k = int(rng.integers(1, min(3, d) + 1))
        counts = np.round(rng.uniform(0, 3, size=d), 1)
        _compare_with_brute_force(counts, k)


@pytest.mark.parametrize(
    "counts,k,epsilon,seed",
    [([5, 3, 3, 1], 2, 1.0, 0), ([4, 4, 2, 1, 0], 3, 2.0, 1), ([1, 3, 0, 3, 2, 2], 2, 0.5, 2)],
)
def test_sampling_distribution_matches_exponential_mechanism(counts, k, epsilon, seed):
    p = chi2_pvalue(np.array(counts), k, epsilon, 20_000, seed, REQUIRED_SENSITIVITY)
    assert p > 1e-3


def test_too_little_noise_is_detected(monkeypatch):
    # Sampling with the papers' Δ=1 spends 2ε; the Δ=2 goodness-of-fit test must notice. The broken variant is
    # the shipped sampler with the module constant it reads at call time set to 1.
    monkeypatch.setattr(joint_em, "SENSITIVITY", 1.0)
    p = chi2_pvalue(np.array([5, 3, 3, 1]), 2, 1.0, 20_000, 3, REQUIRED_SENSITIVITY)
    assert p < 1e-3


def test_output_is_k_distinct_valid_indices():
    rng = make_rng(4, test_mode=True)
    gen = np.random.default_rng(5)
    for _ in range(200):
        d = int(gen.integers(1, 40))
        k = int(gen.integers(1, d + 1))
        counts = gen.integers(0, 10, size=d)
        out = joint_em.sample_topk(counts, k, float(gen.uniform(0.01, 10)), rng)
        assert out.shape == (k,)
        assert np.issubdtype(out.dtype, np.integer)
        assert len(set(out.tolist())) == k
        assert out.min() >= 0 and out.max() < d


def test_huge_epsilon_returns_true_topk_in_order():
    rng = make_rng(6, test_mode=True)
    gen = np.random.default_rng(7)
    for _ in range(50):
        d = int(gen.integers(10, 500))
        k = int(gen.integers(1, 11))
        counts = gen.integers(0, 30, size=d)  # many ties
        out = joint_em.sample_topk(counts, k, 1e6, rng)
        np.testing.assert_array_equal(counts[out], np.sort(counts)[::-1][:k])


def test_tiny_epsilon_is_close_to_uniform():
    counts = np.array([9, 0, 5, 5, 1])
    k = 2
    emp = empirical(counts, k, 1e-9, 20_000, 8)
    seqs = list(itertools.permutations(range(counts.size), k))
    observed = np.array([emp.get(s, 0) for s in seqs])
    assert observed.sum() == 20_000
    assert stats.chisquare(observed).pvalue > 1e-3


def test_seeded_rng_is_reproducible():
    counts = np.array([7, 2, 9, 4, 4, 1])
    a = [joint_em.sample_topk(counts, 3, 1.0, make_rng(9, test_mode=True)).tolist() for _ in range(3)]
    assert a[0] == a[1] == a[2]


@pytest.mark.parametrize(
    "counts,k,epsilon,exc",
    [
        ([1, 2, 3], 0, 1.0, ValueError),
        ([1, 2, 3], 4, 1.0, ValueError),
        ([1, 2, 3], 2, 0.0, ValueError),
        ([1, 2, 3], 2, -1.0, ValueError),
        ([1, 2, 3], 2, float("inf"), ValueError),
        ([1, np.nan, 3], 2, 1.0, ValueError),
        ([1, np.inf, 3], 2, 1.0, ValueError),
        ([], 1, 1.0, ValueError),
        ([[1, 2], [3, 4]], 1, 1.0, ValueError),
        ([1, 2, 3], 1.5, 1.0, TypeError),
    ],
)
def test_validation(counts, k, epsilon, exc):
    with pytest.raises(exc):
        joint_em.sample_topk(np.array(counts, dtype=float), k, epsilon, make_rng(0, test_mode=True))


def test_no_caller_can_pick_another_sensitivity():
    # cost(...) always records SENSITIVITY: the sampler takes no Δ of its own (one passed is a TypeError)
    assert "sensitivity" not in inspect.signature(joint_em.sample_topk).parameters
    with pytest.raises(TypeError):
        joint_em.sample_topk(np.array([1.0, 2.0]), 1, 1.0, make_rng(0, test_mode=True), sensitivity=1.0)


# ------------------------------------------------------------------------ KSA joint EM: domain, cost, plan

Q = 400 / 14732


def test_histogram_on_domain_counts_once_per_output_and_ignores_other_tokens():
    domain = ["Amanda", "cookies", "baked", "Jerry"]
    outputs = [["Amanda", "baked", "cookies", "Amanda"], ["cookies", "tomorrow"], [], ("Jerry", "Jerry", "x")]
    np.testing.assert_array_equal(joint_em.histogram_on_domain(outputs, domain), [1, 2, 1, 1])
    np.testing.assert_array_equal(joint_em.histogram_on_domain([], domain), [0, 0, 0, 0])
    assert joint_em.histogram_on_domain(outputs, []).shape == (0,)
    # one output replaced by any other moves every count by at most 1
    gen = np.random.default_rng(11)
    words = domain + ["a", "b", "c"]
    for _ in range(200):
        outs = [gen.choice(words, size=int(gen.integers(0, 8))).tolist() for _ in range(int(gen.integers(1, 12)))]
        other = list(outs)
        other[int(gen.integers(len(outs)))] = gen.choice(words, size=int(gen.integers(0, 8))).tolist()
        diff = joint_em.histogram_on_domain(outs, domain) - joint_em.histogram_on_domain(other, domain)
        assert np.max(np.abs(diff)) <= 1
    with pytest.raises(ValueError):
        joint_em.histogram_on_domain(outputs, ["a", "a"])
    with pytest.raises(TypeError):
        joint_em.histogram_on_domain(["a string"], domain)


def test_select_keywords():
    domain = ["w0", "w1", "w2", "w3", "w4"]
    counts = np.array([3.0, 40.0, 7.0, 25.0, 0.0])
    rng = make_rng(12, test_mode=True)
    assert joint_em.select_keywords(domain, counts, 3, 1e6, rng) == ["w1", "w3", "w2"]
    assert sorted(joint_em.select_keywords(domain, counts, 10, 1.0, rng)) == sorted(domain)  # k = min(k, d)
    out = joint_em.select_keywords(domain, counts, 2, 0.5, rng)
    assert len(out) == 2 and len(set(out)) == 2 and set(out) <= set(domain)
    # empty (public) domain: nothing released, no noise drawn
    state = rng.bit_generator.state
    assert joint_em.select_keywords([], np.array([]), 10, 1.0, rng) == []
    assert rng.bit_generator.state == state
    for args in [(domain, counts[:-1], 2, 1.0), (domain, counts, 0, 1.0), (domain, counts, 2, 0.0)]:
        with pytest.raises(ValueError):
            joint_em.select_keywords(*args, rng)


def test_cost_event():
    e = joint_em.cost(0.77, Q)
    assert e.kind == "subsampled_exponential"
    assert (e.epsilon, e.sampling_rate, e.sensitivity, e.mechanism) == (0.77, Q, 2.0, "ksa_jem")


# The §11.1 vectors (ε_EM 0.77 / 1.65 / 2.67 → 0.9927 / 2.99845 / 7.99574) are checked in test_rdp.py; here the
# plan must invert them.
@pytest.mark.parametrize("target, eps_em", [(0.9927, 0.77), (2.99845, 1.65), (7.99574, 2.67)])
def test_plan_inverts_the_papers_vectors(target, eps_em):
    from dpicl.privacy.accounting import RDPAccountant

    p = joint_em.plan(Q, 100, target, 5e-5)
    assert p["method"] == "ksa-jem" and p["sensitivity"] == 2.0 and p["queries"] == 100
    assert p["epsilon_em"] == pytest.approx(eps_em, rel=2e-4)
    acc = RDPAccountant()
    assert p["epsilon_certified"] == acc.epsilon([joint_em.cost(p["epsilon_em"], Q)] * 100, 5e-5) <= target
    assert acc.epsilon([joint_em.cost(p["epsilon_em"] * (1 + 1e-4), Q)] * 100, 5e-5) > target


def test_plan_validation():
    for args in [(0.0, 100, 1.0, 1e-5), (1.5, 100, 1.0, 1e-5), (Q, 0, 1.0, 1e-5), (Q, 100, 0.0, 1e-5),
                 (Q, 100, 1.0, 0.0)]:
        with pytest.raises(ValueError):
            joint_em.plan(*args)
