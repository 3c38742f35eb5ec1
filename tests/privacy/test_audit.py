"""Empirical privacy audits (dpicl.privacy.audit): the statistics, every mechanism's audit, and that the audits
catch deliberately broken variants of every mechanism."""

import json
import math

import numpy as np
import pytest
from scipy.stats import binomtest
from typer.testing import CliRunner

from dpicl.privacy.audit import (
    AUDITS,
    SamplePair,
    clopper_pearson,
    epsilon_lower_bound,
    lower_bound_from_pairs,
    pair_epsilon,
    run_audit,
)
from dpicl.privacy.audit.batch import BatchedGenerator, batched_draws
from dpicl.privacy.mechanisms import esa, joint_em, ksa_ptr

# Trials for the audits that loop over single calls (the vectorised ones use their defaults): enough for a
# correct mechanism to pass and a broken one to be caught with these seeds, small enough for ~1 min in all.
CORRECT_TRIALS = {"ksa-jem": 3_000, "ksa-ptr": 3_000, "adapmixed": 2_000}
BROKEN_TRIALS = {"ksa-ptr": 1_000, "adapmixed": 600}
LOOPED = {"ksa-jem", "ksa-ptr", "adapmixed"}  # one Python call per trial: seconds per audit
SEED = 7


def _maybe_slow(name: str, *values):
    return pytest.param(name, *values, marks=pytest.mark.slow) if name in LOOPED else pytest.param(name, *values)


# ------------------------------------------------------------------------------------------------ statistics


def test_clopper_pearson_closed_forms():
    n, alpha = 1000, 0.05
    lower, upper = clopper_pearson(0, n, 0.95)
    assert lower == 0.0
    assert upper == pytest.approx(1 - (alpha / 2) ** (1 / n), rel=1e-9)
    lower, upper = clopper_pearson(n, n, 0.95)
    assert upper == 1.0
    assert lower == pytest.approx((alpha / 2) ** (1 / n), rel=1e-9)


@pytest.mark.parametrize("k,n,confidence", [(1, 10, 0.95), (37, 200, 0.95), (500, 1000, 0.99), (3, 100_000, 0.9)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n, confidence):
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    lower, upper = clopper_pearson(k, n, confidence)
    assert lower == pytest.approx(ci.low, rel=1e-9)
    assert upper == pytest.approx(ci.high, rel=1e-9)


def test_clopper_pearson_vectorised_and_symmetric():
    k = np.arange(0, 21)
    lower, upper = clopper_pearson(k, 20)
    assert np.all(np.diff(lower) > 0) and np.all(np.diff(upper) > 0)
    np.testing.assert_allclose(lower, 1 - upper[::-1], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("k,n", [(-1, 10), (11, 10), (1.5, 10), (0, 0)])
def test_clopper_pearson_rejects_bad_counts(k, n):
    with pytest.raises(ValueError):
        clopper_pearson(k, n)


def _randomized_response(epsilon: float, n: int, rng: np.random.Generator):
    p = math.exp(epsilon) / (1 + math.exp(epsilon))
    return (rng.random(n) < p).astype(np.int64), (rng.random(n) < 1 - p).astype(np.int64)


def test_randomized_response_bound_is_close_to_but_not_above_epsilon():
    epsilon = 1.0
    x, y = _randomized_response(epsilon, 400_000, np.random.default_rng(SEED))
    bound = epsilon_lower_bound(x, y, delta=0.0, discrete=True)
    assert epsilon - 0.05 < bound.epsilon_lower_bound <= epsilon
    assert bound.point_estimate == pytest.approx(epsilon, abs=0.03)
    assert bound.n_num == 200_000  # half of the trials chose the event, the other half bounded it


def test_bound_exceeds_the_true_epsilon_rarely():
    """Coverage: over many independent audits of an exactly-ε mechanism the bound is above ε in ≲ 5 % of them."""
    rng = np.random.default_rng(SEED)
    above = sum(epsilon_lower_bound(*_randomized_response(1.0, 20_000, rng), delta=0.0, discrete=True)
                .epsilon_lower_bound > 1.0 for _ in range(60))
    assert above <= 4


def test_no_multiple_comparisons_bias_on_identical_distributions():
    """D = D′: the true ε is 0. Searching ~1,600 threshold events on the same trials would report ε > 0; with
    the event chosen on held-out-free selection trials the bound stays at 0."""
    rng = np.random.default_rng(SEED)
    bounds = [epsilon_lower_bound(rng.normal(size=50_000), rng.normal(size=50_000), delta=1e-5)
              .epsilon_lower_bound for _ in range(10)]
    assert sum(b > 0 for b in bounds) <= 1
    assert max(bounds) < 0.3


def test_gaussian_threshold_bound_separates_noise_levels():
    """σ = 2 for a shift of 1 (claimed ε ≈ 2.0 at δ = 1e-5): the bound stays below 2; with half the noise it is
    above it (the 'half noise is caught' property the audits rely on)."""
    rng = np.random.default_rng(SEED)
    n = 1_000_000
    correct = epsilon_lower_bound(rng.normal(0, 2, n), rng.normal(1, 2, n), delta=1e-5).epsilon_lower_bound
    half = epsilon_lower_bound(rng.normal(0, 1, n), rng.normal(1, 1, n), delta=1e-5).epsilon_lower_bound
    assert 1.0 < correct < 1.99
    assert half > 2.5


def test_several_pairs_choose_the_informative_one():
    rng = np.random.default_rng(SEED)
    noise = SamplePair(rng.normal(size=20_000), rng.normal(size=20_000), label="noise")
    signal = SamplePair(rng.normal(0, 1, 20_000), rng.normal(2, 1, 20_000), label="signal")
    bound = lower_bound_from_pairs([noise, signal], delta=1e-5)
    assert bound.pair == "signal" and bound.epsilon_lower_bound > 1.0


def test_pair_epsilon_of_randomized_response_and_identical_distributions():
    e = math.exp(1.5)
    assert pair_epsilon([e / (1 + e), 1 / (1 + e)], [1 / (1 + e), e / (1 + e)], 0.0) == pytest.approx(1.5, abs=1e-9)
    assert pair_epsilon([0.2, 0.8], [0.2, 0.8], 1e-5) == 0.0
    assert pair_epsilon([1.0, 0.0], [0.0, 1.0], 0.5) == math.inf


# ------------------------------------------------------------------------------------------- batched draws


def test_batched_generator_reproduces_sequential_draws():
    single = [np.random.default_rng(3).normal(0, 2, size=4) for _ in range(1)]
    ref = np.random.default_rng(3)
    sequential = np.stack([ref.normal(0, 2, size=4) for _ in range(3)])
    batched = BatchedGenerator(np.random.default_rng(3), 3).normal(0, 2, size=4)
    np.testing.assert_array_equal(batched, sequential)
    np.testing.assert_array_equal(batched[0], single[0])
    with pytest.raises(AttributeError):
        BatchedGenerator(np.random.default_rng(3), 3).integers(5)


def test_batched_draws_refuse_a_mechanism_that_reduces_over_its_noise():
    def released(rng):  # like rnm.noisy_argmax: int(argmax) would silently mix a batch
        return int(np.argmax(np.array([0.0, 0.5]) + rng.normal(0, 1, size=2)))

    with pytest.raises(RuntimeError, match="cannot be audited in batches"):
        batched_draws(released, released, lambda out: np.asarray(out, dtype=float), 1000,
                      np.random.default_rng(0))


# ------------------------------------------------------------------------------------------------ the audits


def test_registry_names_and_variants():
    assert set(AUDITS) == {"rnm", "esa", "ksa-jem", "ksa-ptr", "sga", "dp-fewshot-gaussian",
                           "dp-fewshot-exponential", "dps-mozo", "adapmixed"}
    for audit in AUDITS.values():
        assert audit.broken_variants and audit.default_trials >= 1000 and audit.description


def test_result_has_numeric_json_fields():
    result = AUDITS["dps-mozo"](trials=2_000, seed=SEED)
    d = json.loads(json.dumps(result.to_dict()))
    for key in ("claimed_epsilon", "epsilon_lower_bound", "delta", "confidence"):
        assert isinstance(d[key], float) and math.isfinite(d[key])
    assert isinstance(d["passed"], bool) and d["passed"] is True
    assert d["trials"] == 2_000 and d["broken"] is None and d["event"] and d["neighbours"]
    # one shot per token, the configuration whose bound is proven (the claimed ε is not the paper's claim)
    assert d["parameters"]["shots"] == 1 and "proven" in d["note"]
    assert d["counts"]["numerator"][1] == 1_000


def test_seeded_audits_are_reproducible():
    a, b = (run_audit("dp-fewshot-exponential", trials=5_000, seed=11) for _ in range(2))
    assert a.epsilon_lower_bound == b.epsilon_lower_bound and a.counts == b.counts


def test_unknown_names_are_errors():
    with pytest.raises(ValueError, match="one of: rnm"):
        run_audit("nope")
    with pytest.raises(ValueError, match="one of: half-noise"):
        run_audit("rnm", broken="nope")
    with pytest.raises(ValueError, match="trials"):
        run_audit("rnm", trials=10)


@pytest.mark.parametrize("name", [_maybe_slow(n) for n in AUDITS])
def test_every_audit_passes(name):
    result = run_audit(name, trials=CORRECT_TRIALS.get(name), seed=SEED)
    assert result.passed, result.to_dict()
    assert 0.5 < result.claimed_epsilon < 3.0  # moderate: the regime where broken variants are detectable
    assert 0.0 <= result.epsilon_lower_bound <= result.claimed_epsilon


@pytest.mark.parametrize("name,variant", [_maybe_slow(n, v) for n, a in AUDITS.items() for v in a.broken_variants])
def test_every_broken_variant_is_caught(name, variant):
    result = run_audit(name, trials=BROKEN_TRIALS.get(name), seed=SEED, broken=variant)
    assert result.broken == variant
    assert not result.passed and result.epsilon_lower_bound > result.claimed_epsilon, result.to_dict()


def test_broken_variants_restore_the_mechanisms():
    clip, passes = esa._clip_rows_to_unit_norm, ksa_ptr.ptr_passes
    run_audit("esa", trials=1_000, seed=SEED, broken="no-clip")
    run_audit("ksa-ptr", trials=100, seed=SEED, broken="no-test")
    assert esa._clip_rows_to_unit_norm is clip and ksa_ptr.ptr_passes is passes
    # the sensitivity-1 variants patch the module constant the mechanisms read at call time; it must come back
    run_audit("esa", trials=1_000, seed=SEED, broken="sensitivity-1")
    run_audit("ksa-jem", trials=100, seed=SEED, broken="sensitivity-1")
    assert esa.SENSITIVITY == 2.0 and joint_em.SENSITIVITY == 2.0


# ------------------------------------------------------------------------------------------------------ CLI


def _app():
    from dpicl.cli import app

    return app


def test_cli_json_and_exit_codes():
    runner = CliRunner()
    ok = runner.invoke(_app(), ["audit", "dp-fewshot-exponential", "--seed", "1", "--trials", "5000", "--json"])
    assert ok.exit_code == 0, ok.output
    payload = json.loads(ok.stdout)
    assert set(payload) == {"dp-fewshot-exponential"}
    assert payload["dp-fewshot-exponential"]["passed"] is True
    caught = runner.invoke(_app(), ["audit", "dp-fewshot-exponential", "--seed", "1", "--trials", "5000", "--json",
                                    "--broken", "half-scale"])
    assert caught.exit_code == 1
    assert json.loads(caught.stdout)["dp-fewshot-exponential"]["passed"] is False


def test_cli_table_and_unknown_mechanism():
    runner = CliRunner()
    table = runner.invoke(_app(), ["audit", "dps-mozo", "--seed", "1", "--trials", "2000"])
    assert table.exit_code == 0 and "dps-mozo" in table.stdout and "claimed" in table.stdout
    bad = runner.invoke(_app(), ["audit", "nope"])
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: unknown mechanism 'nope'") and bad.stdout == ""
    assert "rnm" in bad.output and "adapmixed" in bad.output
