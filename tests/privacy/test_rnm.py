"""RNM (paper 001 §3.1; MECHANISMS §1, §A.1, §12.1 item 5, §13): √2 noise on the vote histogram, argmax, plan."""

import inspect
import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from dpicl import methods
from dpicl.cli import app
from dpicl.privacy.accounting.events import SubsampledGaussianEvent, event_from_json
from dpicl.privacy.mechanisms import rnm
from dpicl.privacy.rng import make_rng

from .test_esa import assert_noise_std_on_sum

# From the privacy analysis (MECHANISMS §A.1, paper 001 Thm 3), not from the code: one record changes one
# teacher's vote, moving one count down by 1 and another up by 1.
REQUIRED_SENSITIVITY = math.sqrt(2)


def _histogram_as_noisy_mean(teachers, noise_multiplier, rng):
    """Adapter for ``assert_noise_std_on_sum``: its one-hot teacher rows are votes; returns noisy counts / N."""
    votes = [int(np.argmax(row)) for row in teachers]
    hist = rnm.vote_histogram(votes, teachers.shape[1])
    return rnm.noisy_histogram(hist, noise_multiplier, rng) / teachers.shape[0]


def assert_released_label_rate(argmax_fn, noise_multiplier, sensitivity, gap=2.0, draws=4000, seed=0,
                               confidence=0.999):
    """Raise AssertionError unless the *released* label of histogram [0, gap] flips to class 0 at the rate that
    noise std ``sensitivity``·nm on each count implies: P = Φ̄(gap / (√2·Δ·nm)) (difference of two iid normals).
    """
    rng = make_rng(seed, test_mode=True)
    hist = np.array([0.0, gap])
    flips = sum(argmax_fn(hist, noise_multiplier, rng) == 0 for _ in range(draws))
    expected = stats.norm.sf(gap / (math.sqrt(2) * sensitivity * noise_multiplier))
    ci = stats.binomtest(int(flips), draws).proportion_ci(confidence)
    assert ci.low <= expected <= ci.high, f"flip rate CI [{ci.low:.4f}, {ci.high:.4f}] excludes {expected:.4f}"


def test_sensitivity_is_root_two():
    assert rnm.SENSITIVITY == REQUIRED_SENSITIVITY
    e = rnm.cost(0.6251, 0.005)
    assert e == SubsampledGaussianEvent(0.6251, 0.005, REQUIRED_SENSITIVITY, "rnm")
    assert e.sigma == pytest.approx(REQUIRED_SENSITIVITY * 0.6251)


def test_event_round_trips_through_json_and_planning():
    e = rnm.cost(0.8947, 0.005)
    back = event_from_json(e.to_json())
    assert back == e
    assert back.sensitivity == REQUIRED_SENSITIVITY and back.mechanism == "rnm"
    plan = methods.get("rnm").Plan.model_construct(noise_multiplier=0.8947, sampling_rate=0.005)
    assert plan.event() == e


@pytest.mark.parametrize("n_teachers", [1, 3, 10])
def test_one_changed_teacher_moves_histogram_by_at_most_root_two(n_teachers):
    # Brute force over every vote vector and every single-teacher change (abstain included): the L2 change is
    # at most √2 and √2 is attained, i.e. the constant is exactly the mechanism's sensitivity.
    m = 3
    labels = [rnm.ABSTAIN, *range(m)]
    rng = np.random.default_rng(n_teachers)
    vectors = itertools.product(labels, repeat=n_teachers) if n_teachers <= 3 else \
        (tuple(rng.choice(labels, size=n_teachers)) for _ in range(300))
    worst = 0.0
    for votes in vectors:
        h = rnm.vote_histogram(list(votes), m)
        for i, new in itertools.product(range(n_teachers), labels):
            changed = list(votes)
            changed[i] = new
            worst = max(worst, float(np.linalg.norm(rnm.vote_histogram(changed, m) - h)))
    assert worst == pytest.approx(REQUIRED_SENSITIVITY)


@pytest.mark.parametrize("nm", [0.6251, 1.7615])
def test_noise_std_on_each_count_is_root_two_times_noise_multiplier(nm):
    assert_noise_std_on_sum(_histogram_as_noisy_mean, nm, REQUIRED_SENSITIVITY * nm, dim=4)


def test_noise_check_fails_when_sensitivity_is_one(monkeypatch):
    # Acceptance criterion: the same check fails when Δ is set to 1 (the paper's Remark-1 accounting) — here the
    # module constant, which noisy_histogram reads at call time.
    monkeypatch.setattr(rnm, "SENSITIVITY", 1.0)
    with pytest.raises(AssertionError):
        assert_noise_std_on_sum(_histogram_as_noisy_mean, 1.0, REQUIRED_SENSITIVITY * 1.0, dim=4)


def test_no_caller_can_pick_another_sensitivity():
    # cost(...) always records SENSITIVITY, so the functions that draw the noise take no Δ of their own
    for fn in (rnm.noisy_histogram, rnm.noisy_argmax, rnm.run):
        assert "sensitivity" not in inspect.signature(fn).parameters, fn.__name__


def test_released_label_flips_at_the_rate_root_two_noise_implies(monkeypatch):
    # The released quantity itself (not just the noisy counts): Φ̄(2/(√2·√2·1)) = Φ̄(1) ≈ 0.159.
    assert_released_label_rate(rnm.noisy_argmax, 1.0, REQUIRED_SENSITIVITY)
    # … and with Δ = 1 the rate would be Φ̄(√2) ≈ 0.079: the same check must fail.
    monkeypatch.setattr(rnm, "SENSITIVITY", 1.0)
    with pytest.raises(AssertionError):
        assert_released_label_rate(rnm.noisy_argmax, 1.0, REQUIRED_SENSITIVITY)


@pytest.mark.parametrize("seed", range(20))
def test_with_tiny_noise_the_release_is_the_plurality_label(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 7))
    votes = [int(v) for v in rng.integers(-1, m, size=int(rng.integers(1, 40)))]
    counts = Counter(v for v in votes if v != -1)
    top = max(counts.values(), default=0)
    plurality = {c for c in range(m) if counts.get(c, 0) == top}
    released = rnm.run(votes, m, 1e-9, make_rng(seed, test_mode=True))
    assert released in plurality
    if len(plurality) == 1:
        assert rnm.noisy_argmax(rnm.vote_histogram(votes, m), 1e-9, make_rng(seed, test_mode=True)) == \
            plurality.pop()


def test_vote_histogram_counts_votes_and_ignores_abstentions():
    np.testing.assert_array_equal(rnm.vote_histogram([2, 0, 2, -1, 3, 2, -1], 5), [1, 0, 3, 1, 0])
    np.testing.assert_array_equal(rnm.vote_histogram(np.array([1, 1], dtype=np.int8), 2), [0, 2])
    np.testing.assert_array_equal(rnm.vote_histogram([], 3), [0, 0, 0])
    np.testing.assert_array_equal(rnm.vote_histogram([-1, -1], 2), [0, 0])


@pytest.mark.parametrize("votes,m", [
    ([0, 3], 3),        # == m
    ([0, 7], 3),
    ([-2, 0], 3),       # negative other than the abstain marker
    ([0.0, 1.0], 3),    # not integers
    ([0.5], 3),
    ([[0, 1]], 3),      # not 1-D
    (["0"], 3),
    ([0], 0),           # no classes
    ([0], 2.0),
    ([0], True),
])
def test_vote_histogram_rejects_invalid_input(votes, m):
    with pytest.raises(ValueError):
        rnm.vote_histogram(votes, m)


def test_noisy_argmax_validates_input():
    rng = make_rng(0, test_mode=True)
    for bad in (np.zeros(0), np.zeros((2, 2)), np.array([1.0, np.nan]), np.array([np.inf, 0.0])):
        with pytest.raises(ValueError):
            rnm.noisy_argmax(bad, 1.0, rng)
    for nm in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            rnm.noisy_argmax(np.array([1.0, 2.0]), nm, rng)


@pytest.mark.slow
def test_plan_cli_reproduces_agnews_noise_multiplier_with_sensitivity_root_two():
    # MECHANISMS §1 table, AGNews row (q = 40/8000, T = 10,000, δ = 1e-4), ε = 8: nm = 0.6251.
    result = CliRunner().invoke(app, [
        "plan", "--method", "rnm", "--sampling-rate", "0.005", "--queries", "10000",
        "--epsilon", "8", "--delta", "1e-4", "--json",
    ])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["method"] == "rnm"
    assert out["noise_multiplier"] == pytest.approx(0.6251, rel=5e-3)
    assert out["noise_multiplier"] >= out["noise_multiplier_uncertified"]
    assert out["sensitivity"] == pytest.approx(REQUIRED_SENSITIVITY, rel=1e-12)
    assert out["sigma"] == pytest.approx(REQUIRED_SENSITIVITY * out["noise_multiplier"])
    assert (out["sampling_rate"], out["queries"], out["epsilon"], out["delta"]) == (0.005, 10000, 8, 1e-4)
