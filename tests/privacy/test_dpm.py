"""DPM private clustering (paper 004, Liebenow et al. 2024; MECHANISMS §5, §12.1 items 8–9, §13).

Budget split over levels, recovery of well-separated blobs (exact and with little noise), smooth degradation as
ε shrinks, the split score's sensitivity UTILITY_SCALE/ñ (and that it is nearly attained), the exponential
mechanism's distribution, the Laplace and Gaussian noise scales, input validation, and the public interval size.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpicl.privacy.mechanisms import dpm
from dpicl.privacy.rng import make_rng

# From the analysis (module docstring), not from the code: t/q = 3.6 is the steeper centreness slope, w_e = 5.
REQUIRED_UTILITY_SCALE = 1.0 * 0.3 / (1 / 12) + 5.0


def rng(seed: int) -> np.random.Generator:
    return make_rng(seed, test_mode=True)


def unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def blobs(gen: np.random.Generator, per_blob: int = 60, d: int = 8, spread: float = 0.05):
    """Three blobs of unit-norm points around orthogonal directions; returns (points, true means)."""
    directions = np.eye(d)[:3]
    groups = [unit_rows(m + spread * gen.normal(size=(per_blob, d))) for m in directions]
    return np.concatenate(groups), np.array([g.mean(axis=0) for g in groups])


def top3_error(clusters: list[dpm.Cluster], means: np.ndarray) -> float:
    """Mean distance from each true mean to the nearest of the (up to) 3 largest clusters' centres."""
    centres = np.array([c.centre for c in clusters[:3]])
    return float(np.mean([np.min(np.linalg.norm(centres - m, axis=1)) for m in means]))


def params_for(scale: float, levels: int = 2, interval: float = 0.05) -> dpm.DPMParams:
    """Per-query noise that shrinks as ``scale`` (an ε-like budget) grows: all three parts together."""
    em = dpm.level_shares(scale, levels)
    counts = 1.0 / dpm.level_shares(scale, levels, first=1)
    return dpm.DPMParams(tuple(em), tuple(counts), 2.0 / scale, interval)


# --- constants and budget split -----------------------------------------------------------------------------


def test_utility_scale_is_8_6():
    assert dpm.UTILITY_SCALE == pytest.approx(REQUIRED_UTILITY_SCALE) == pytest.approx(8.6)
    assert (dpm.LOWER, dpm.UPPER) == (-1.0, 1.0)


@pytest.mark.parametrize(("total", "levels", "first"), [(1.0, 1, 0), (0.12, 4, 0), (3.0, 7, 1), (10.0, 5, 3)])
def test_level_shares_sum_to_total_with_ratio_sqrt2(total, levels, first):
    shares = dpm.level_shares(total, levels, first)
    assert shares.shape == (levels,)
    assert shares.sum() == pytest.approx(total, rel=1e-12)
    np.testing.assert_allclose(shares[1:] / shares[:-1], math.sqrt(2), rtol=1e-12)
    weights = np.sqrt(2.0 ** np.arange(first, first + levels))
    np.testing.assert_allclose(shares, total * weights / weights.sum(), rtol=1e-12)


# --- recovery of well-separated blobs -----------------------------------------------------------------------


def test_blobs_recovered_exactly_without_noise():
    gen = rng(0)
    points, means = blobs(gen)
    beta = dpm.interval_size(points, gen)
    clusters = dpm.cluster(points, dpm.DPMParams([math.inf] * 2, [0.0] * 2, 0.0, beta), gen)
    counts = [c.noisy_count for c in clusters]
    assert counts == sorted(counts, reverse=True)
    assert sum(counts) == pytest.approx(len(points))  # every point in exactly one released leaf
    assert sum(counts[:3]) == pytest.approx(len(points))
    centres = np.array([c.centre for c in clusters[:3]])
    dist = np.linalg.norm(centres[:, None, :] - means[None, :, :], axis=2)  # centre × true mean
    nearest = dist.argmin(axis=1)
    assert sorted(nearest) == [0, 1, 2]
    assert dist.min(axis=1).max() < 1e-9


def test_blobs_recovered_with_little_noise():
    gen = rng(1)
    points, means = blobs(gen)
    params = dpm.DPMParams((50.0, 50.0), (0.05, 0.05), 0.01, dpm.interval_size(points, gen))
    for _ in range(10):
        clusters = dpm.cluster(points, params, gen)
        centres = np.array([c.centre for c in clusters[:3]])
        dist = np.linalg.norm(centres[:, None, :] - means[None, :, :], axis=2)
        assert sorted(dist.argmin(axis=1)) == [0, 1, 2]
        assert dist.min(axis=1).max() < 0.1  # a few stray points at most (blob means are ≈ 1.4 apart)
        assert sum(c.noisy_count for c in clusters[:3]) == pytest.approx(len(points), abs=1.0)


def test_error_grows_smoothly_as_epsilon_shrinks():
    gen = rng(2)
    points, means = blobs(gen)
    errors = []
    for scale in (100.0, 10.0, 1.0, 0.1):
        params = params_for(scale)
        errors.append(np.mean([top3_error(dpm.cluster(points, params, gen), means) for _ in range(20)]))
    assert all(b >= a - 0.01 for a, b in itertools.pairwise(errors)), errors
    assert errors[0] < 0.05, errors
    assert errors[-1] > 10 * errors[0] + 0.5, errors


# --- sensitivity of the split scores ------------------------------------------------------------------------


def random_points(gen: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Rows of norm ≤ 1: unit directions with radii that are 1 half of the time."""
    radii = np.where(gen.random(n) < 0.5, 1.0, gen.random(n))
    return unit_rows(gen.normal(size=(n, d))) * radii[:, None]


def neighbours(gen: np.random.Generator, s: np.ndarray):
    """S minus one point, S plus one point, S with one point replaced."""
    i = int(gen.integers(s.shape[0]))
    new = random_points(gen, 1, s.shape[1])
    yield "remove", np.delete(s, i, axis=0)
    yield "add", np.concatenate([s, new])
    replaced = s.copy()
    replaced[i] = new[0]
    yield "replace", replaced


def max_score_change_ratio(gen: np.random.Generator) -> float:
    """One random case: max over neighbours of max |Δscore| / (UTILITY_SCALE/ñ); asserts it is ≤ 1."""
    n, d = int(gen.integers(2, 31)), int(gen.integers(1, 5))
    s = random_points(gen, n, d)
    noisy = max(0.5, n + gen.uniform(-3, 3))
    beta = float(gen.uniform(0.02, 2.5))
    base = dpm.split_scores(s, noisy, beta)
    bound = REQUIRED_UTILITY_SCALE / noisy
    worst = 0.0
    for kind, other in neighbours(gen, s):
        change = float(np.max(np.abs(dpm.split_scores(other, noisy, beta) - base)))
        assert change <= bound + 1e-9, f"{kind}: change {change} > bound {bound} (n={n}, d={d}, β={beta})"
        worst = max(worst, change / bound)
    return worst


def test_split_score_sensitivity_bound_holds_and_is_nearly_attained():
    gen = rng(3)
    ratios = [max_score_change_ratio(gen) for _ in range(400)]
    # tight: a UTILITY_SCALE smaller than the true Lipschitz constant by 5 % would make the assertion above fail
    assert max(ratios) > 0.95


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_split_score_sensitivity_bound_hypothesis(seed):
    max_score_change_ratio(rng(seed))


def test_split_scores_shape_and_empty_node():
    s = random_points(rng(4), 5, 3)
    assert dpm.split_scores(s, 5.0, 0.3).shape == (3, 6)  # B = int(2/0.3) = 6
    assert dpm.split_scores(s, 5.0, 5.0).shape == (3, 1)  # β wider than the box: one interval
    empty = dpm.split_scores(np.zeros((0, 3)), 2.0, 0.5)
    assert empty.shape == (3, 4) and np.all(np.isfinite(empty))


def test_split_scores_prefer_the_empty_median_gap():
    # two groups at ±0.5 on dimension 0: the best split is in the empty middle of dimension 0 (c = 1, e = 1)
    s = np.array([[0.5, 0.0]] * 10 + [[-0.5, 0.0]] * 10)
    scores = dpm.split_scores(s, 20.0, 0.1)
    dim, b = np.unravel_index(np.argmax(scores), scores.shape)
    centre = dpm.LOWER + (b + 0.5) * 0.1
    assert dim == 0 and -0.5 < centre < 0.5
    assert scores.max() == pytest.approx(dpm.W_CENTRE + dpm.W_EMPTY)


# --- exponential mechanism ----------------------------------------------------------------------------------


def choice_counts(scores, epsilon, noisy_count, draws, seed):
    gen = rng(seed)
    counts = np.zeros(scores.size, dtype=np.int64)
    for _ in range(draws):
        dim, b = dpm.choose_split(scores, epsilon, noisy_count, gen)
        counts[dim * scores.shape[1] + b] += 1
    return counts


def softmax_probabilities(scores, epsilon, noisy_count, utility_scale):
    logits = epsilon * scores.ravel() / (2 * utility_scale / noisy_count)
    p = np.exp(logits - logits.max())
    return p / p.sum()


def test_choose_split_is_the_exponential_mechanism():
    scores = np.array([[0.5, 3.0, 1.0], [2.0, 0.0, 4.0]])
    epsilon, noisy_count, draws = 2.0, 6.0, 40_000
    counts = choice_counts(scores, epsilon, noisy_count, draws, seed=5)
    expected = draws * softmax_probabilities(scores, epsilon, noisy_count, REQUIRED_UTILITY_SCALE)
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # the same counts reject an EM with half the sensitivity (too little noise)
    too_sharp = draws * softmax_probabilities(scores, epsilon, noisy_count, REQUIRED_UTILITY_SCALE / 2)
    assert stats.chisquare(counts, too_sharp).pvalue < 1e-6


def test_choose_split_exact_argmax_at_infinite_epsilon():
    scores = np.array([[0.0, 2.0, 1.0], [2.0, 0.5, 2.0]])
    gen = rng(6)
    state = gen.bit_generator.state
    assert dpm.choose_split(scores, math.inf, 3.0, gen) == (0, 1)  # first maximum
    assert gen.bit_generator.state == state  # no randomness consumed


# --- noise scales -------------------------------------------------------------------------------------------


def two_group_leaves(count_scale: float, noise_std: float, runs: int, seed: int):
    """(count noise, sum noise) samples from the two leaves of 50 points at ±0.5·e₁ each (d = 3).

    L = 2, split limit 100/4 = 25: the exact EM splits the root between the groups, each child (≈ 50 ≫ 25) cannot
    be split without an empty side, so the leaves are the two children with their Laplace counts; the released
    centre times max(ñ, 1) minus the true sum (±25·e₁) is the Gaussian noise on the leaf sum.
    """
    d = 3
    e1 = np.eye(d)[0]
    points = np.concatenate([np.tile(0.5 * e1, (50, 1)), np.tile(-0.5 * e1, (50, 1))])
    params = dpm.DPMParams((math.inf, math.inf), (count_scale, count_scale), noise_std, 0.1)
    gen = rng(seed)
    count_noise, sum_noise = [], []
    for _ in range(runs):
        clusters = dpm.cluster(points, params, gen)
        assert len(clusters) == 2
        for c in clusters:
            true_sum = 25 * e1 * np.sign(c.centre[0])
            count_noise.append(c.noisy_count - 50)
            sum_noise.append(c.centre * max(c.noisy_count, 1.0) - true_sum)
    return np.array(count_noise), np.array(sum_noise)


def test_laplace_count_and_gaussian_sum_noise_have_the_stated_scale():
    count_scale, noise_std = 1.5, 0.8
    count_noise, sum_noise = two_group_leaves(count_scale, noise_std, runs=2000, seed=7)
    assert stats.kstest(count_noise, stats.laplace(scale=count_scale).cdf).pvalue > 1e-3
    assert stats.kstest(count_noise, stats.laplace(scale=count_scale / 2).cdf).pvalue < 1e-6
    flat = sum_noise.ravel()
    assert stats.kstest(flat, stats.norm(scale=noise_std).cdf).pvalue > 1e-3
    assert stats.kstest(flat, stats.norm(scale=noise_std / 2).cdf).pvalue < 1e-6
    # every coordinate is noised, with the same std
    np.testing.assert_allclose(sum_noise.std(axis=0), noise_std, rtol=0.1)


def test_zero_noise_is_exact():
    count_noise, sum_noise = two_group_leaves(0.0, 0.0, runs=3, seed=8)
    assert np.all(count_noise == 0)
    np.testing.assert_allclose(sum_noise, 0.0, atol=1e-12)


def test_single_leaf_centre_noise_is_noise_std_over_count():
    # L = 1 with exact child counts: they sum to n, never both > n/2, so the root is the only leaf (count n, exact)
    gen = rng(9)
    points = unit_rows(gen.normal(size=(20, 4)))
    params = dpm.DPMParams((1.0,), (0.0,), 3.0, 0.2)
    noise = []
    for _ in range(2000):
        (leaf,) = dpm.cluster(points, params, gen)
        assert leaf.noisy_count == 20
        noise.append(leaf.centre - points.mean(axis=0))
    noise = np.ravel(noise)
    assert stats.kstest(noise, stats.norm(scale=3.0 / 20).cdf).pvalue > 1e-3
    assert stats.kstest(noise, stats.norm(scale=1.5 / 20).cdf).pvalue < 1e-6


def test_cluster_does_not_modify_its_input_and_releases_every_leaf():
    gen = rng(10)
    points, _ = blobs(gen, per_blob=20)
    copy = points.copy()
    params = dpm.DPMParams((1.0, 1.0, 1.0), (2.0, 2.0, 2.0), 1.0, 0.1)
    for _ in range(20):
        clusters = dpm.cluster(points, params, gen)
        assert 1 <= len(clusters) <= 2**3
        counts = [c.noisy_count for c in clusters]
        assert counts == sorted(counts, reverse=True)
        assert all(c.centre.shape == (8,) for c in clusters)
    np.testing.assert_array_equal(points, copy)


# --- validation ---------------------------------------------------------------------------------------------


GOOD = {"em_epsilons": (1.0, 1.0), "count_scales": (1.0, 1.0), "noise_std": 1.0, "interval": 0.1}


def test_params_coerce_lists_and_count_levels():
    p = dpm.DPMParams([1.0, math.inf, 2], [0, 1.0, 0.5], 0, 0.3)
    assert p.em_epsilons == (1.0, math.inf, 2.0) and p.count_scales == (0.0, 1.0, 0.5)
    assert isinstance(p.em_epsilons, tuple) and p.levels == 3


@pytest.mark.parametrize(("change", "match"), [
    ({"count_scales": (1.0,)}, "count_scales has 1 entries but em_epsilons has 2"),
    ({"em_epsilons": (), "count_scales": ()}, "at least one level"),
    ({"em_epsilons": (1.0, 0.0)}, r"em_epsilons\[1\]"),
    ({"em_epsilons": (1.0, math.nan)}, r"em_epsilons\[1\]"),
    ({"count_scales": (1.0, -1.0)}, r"count_scales\[1\]"),
    ({"count_scales": (1.0, math.inf)}, r"count_scales\[1\]"),
    ({"noise_std": -0.1}, "noise_std"),
    ({"interval": 0.0}, "interval"),
    ({"interval": math.inf}, "interval"),
    ({"em_epsilons": 1.0}, "em_epsilons must be a sequence"),
])
def test_bad_params_raise(change, match):
    with pytest.raises(ValueError, match=match):
        dpm.DPMParams(**{**GOOD, **change})


@pytest.mark.parametrize(("points", "match"), [
    (np.zeros(4), "n×d"),
    (np.zeros((0, 4)), "n×d"),
    (np.zeros((4, 0)), "n×d"),
    (np.zeros((2, 2, 2)), "n×d"),
])
def test_bad_shapes_raise(points, match):
    # the shape is public; the values of the (private) points never make cluster fail (next test)
    with pytest.raises(ValueError, match=match):
        dpm.cluster(points, dpm.DPMParams(**GOOD), rng(11))


def test_non_finite_and_over_norm_private_rows_are_replaced_not_refused():
    # cluster runs after the query is charged: refusing a NaN or over-norm private embedding there would reveal
    # it. Such a row must act as a public stand-in: the zero vector for a non-finite row, the unit-ball point in
    # its direction for an over-norm row (as ESA clips) — the output equals that on the replaced data.
    d = 8
    points, _ = blobs(rng(16), per_blob=30, d=d)
    bad, replaced = points.copy(), points.copy()
    bad[0, 2] = np.nan
    bad[1, 5] = -np.inf
    bad[2] = -5.0 * np.eye(d)[6]  # norm 5
    bad[3] = np.full(d, 1e308)  # finite, but its norm overflows
    bad[4] = 0.9  # norm 0.9·√8 ≈ 2.5
    replaced[0] = replaced[1] = 0.0
    replaced[2] = -np.eye(d)[6]
    replaced[3] = replaced[4] = np.full(d, 1 / math.sqrt(d))
    params = dpm.DPMParams((1.0, 1.0), (1.0, 1.0), 0.5, 0.1)
    for seed in range(5):
        got, want = dpm.cluster(bad, params, rng(seed)), dpm.cluster(replaced, params, rng(seed))
        assert [c.noisy_count for c in got] == [c.noisy_count for c in want]
        for g, w in zip(got, want):
            assert np.all(np.isfinite(g.centre))
            np.testing.assert_allclose(g.centre, w.centre, rtol=0, atol=1e-12)
    # exact, single leaf (L = 1, exact child counts): the released sum is that of the stand-ins, over all n rows
    (leaf,) = dpm.cluster(bad, dpm.DPMParams((math.inf,), (0.0,), 0.0, 0.5), rng(17))
    assert leaf.noisy_count == len(points)
    np.testing.assert_allclose(leaf.centre * len(points), replaced.sum(axis=0), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(np.isnan(bad).sum(), 1)  # the caller's array is left as it was


@pytest.mark.parametrize(("points", "match"), [
    (np.full((3, 2), 0.9), "normalise the embeddings"),
    (np.array([[0.1, np.nan], [0.2, 0.1]]), "finite"),
    (np.array([[0.1, np.inf], [0.2, 0.1]]), "finite"),
])
def test_bad_public_points_raise_without_echoing_values(points, match):
    # the public points alone (interval_size) are still checked: their values depend on no private record
    with pytest.raises(ValueError, match=match) as info:
        dpm.interval_size(points, rng(11))
    assert "0.9" not in str(info.value)


def test_rows_within_tolerance_are_accepted():
    x = np.array([[1.0 + 5e-7, 0.0], [0.0, -1.0]])
    (leaf,) = dpm.cluster(x, dpm.DPMParams((math.inf,), (0.0,), 0.0, 0.5), rng(12))
    np.testing.assert_allclose(leaf.centre, [0.5, -0.5])  # scaled to exactly norm 1


def test_other_bad_arguments_raise():
    gen = rng(13)
    s = random_points(gen, 4, 2)
    with pytest.raises(ValueError, match="noisy_count"):
        dpm.split_scores(s, 0.0, 0.1)
    with pytest.raises(ValueError, match="interval"):
        dpm.split_scores(s, 4.0, -1.0)
    with pytest.raises(ValueError, match="epsilon"):
        dpm.choose_split(np.ones((2, 2)), 0.0, 4.0, gen)
    with pytest.raises(ValueError, match="noisy_count"):
        dpm.choose_split(np.ones((2, 2)), 1.0, -1.0, gen)
    with pytest.raises(ValueError, match="scores"):
        dpm.choose_split(np.ones(3), 1.0, 4.0, gen)
    with pytest.raises(ValueError, match="levels"):
        dpm.level_shares(1.0, 0)
    with pytest.raises(ValueError, match="total"):
        dpm.level_shares(-1.0, 2)
    with pytest.raises(ValueError, match="percentile"):
        dpm.interval_size(s, gen, percentile=101)
    with pytest.raises(ValueError, match="repeats"):
        dpm.interval_size(s, gen, repeats=0)
    with pytest.raises(ValueError, match="normalise"):
        dpm.interval_size(np.full((3, 2), 0.9), gen)
    with pytest.raises(TypeError, match="params"):
        dpm.cluster(s, dict(GOOD), gen)


# --- interval size ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sigma", "d"), [(0.05, 16), (0.1, 8), (0.2, 4)])
def test_interval_size_tracks_the_spread(sigma, d):
    gen = rng(14)
    x = gen.normal(0.0, sigma, size=(100, d))
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0)  # inside the unit ball (rarely active)
    beta = dpm.interval_size(x, gen)
    assert isinstance(beta, float) and beta > 0
    assert 0.5 * sigma / 2 <= beta <= 0.5 * sigma * 2


def test_interval_size_with_fewer_than_two_points():
    gen = rng(15)
    assert dpm.interval_size(np.zeros((1, 3)), gen) == (dpm.UPPER - dpm.LOWER) / 2
    assert dpm.interval_size(np.zeros((0, 3)), gen) == (dpm.UPPER - dpm.LOWER) / 2
