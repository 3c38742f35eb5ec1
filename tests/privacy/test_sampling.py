"""Poisson subsampling and teacher assignment (MECHANISMS §A.1, §12.1 item 6)."""

import numpy as np
import pytest
from scipy import stats

from dpicl.privacy.rng import make_rng
from dpicl.privacy.sampling import (
    assign_teachers,
    default_sampling_rate,
    group_into_teachers,
    keyed_hash,
    poisson_sample,
    teacher_of,
)

KEY = b"data-independent-test-key"


def ids(n, prefix="r"):
    return [f"{prefix}{i}" for i in range(n)]


def test_poisson_inclusion_frequency_matches_rate():
    rng = make_rng(0, test_mode=True)
    n, reps, q = 200, 2000, 0.03
    counts = np.zeros(n)
    for _ in range(reps):
        counts[poisson_sample(n, q, rng)] += 1
    total = counts.sum()
    lo, hi = stats.binom.interval(0.999, n * reps, q)
    assert lo <= total <= hi
    # every record on its own, Bonferroni over n records
    lo1, hi1 = stats.binom.interval(1 - 0.001 / n, reps, q)
    assert ((counts >= lo1) & (counts <= hi1)).all()


def test_poisson_sample_size_is_random_binomial():
    # A fixed-size draw without replacement (the papers' code) would have zero variance here.
    rng = make_rng(1, test_mode=True)
    n, q, reps = 1000, 0.1, 2000
    sizes = np.array([len(poisson_sample(n, q, rng)) for _ in range(reps)])
    var = n * q * (1 - q)
    chi = (reps - 1) * sizes.var(ddof=1) / var
    assert stats.chi2.ppf(0.0005, reps - 1) <= chi <= stats.chi2.ppf(0.9995, reps - 1)


def test_poisson_sample_edge_rates_and_validation():
    rng = make_rng(2, test_mode=True)
    np.testing.assert_array_equal(poisson_sample(10, 1.0, rng), np.arange(10))
    assert len(poisson_sample(0, 0.5, rng)) == 0
    for bad in (0.0, -0.1, 1.01, float("nan")):
        with pytest.raises(ValueError):
            poisson_sample(10, bad, rng)
    with pytest.raises(ValueError):
        assign_teachers(ids(5), KEY, 2, 1, 0.0, rng)


def test_keyed_hash_separates_keys_and_purposes():
    h = keyed_hash(KEY, "r1", "teacher")
    assert h == keyed_hash(KEY, "r1", "teacher") and h >= 0
    assert h != keyed_hash(KEY, "r1", "rank")
    assert h != keyed_hash(b"other", "r1", "teacher")
    assert keyed_hash(KEY, "ab", "c") != keyed_hash(KEY, "b", "ca")


def test_teacher_of_depends_only_on_the_record():
    all_ids = ids(500)
    full = teacher_of(all_ids, KEY, 17)
    rng = np.random.default_rng(3)
    subset = sorted(rng.choice(500, size=120, replace=False))
    np.testing.assert_array_equal(teacher_of([all_ids[i] for i in subset], KEY, 17), full[subset])
    # order of the other records does not matter either
    perm = rng.permutation(500)
    np.testing.assert_array_equal(teacher_of([all_ids[i] for i in perm], KEY, 17), full[perm])
    assert full.min() >= 0 and full.max() < 17


def test_teacher_of_is_roughly_uniform_and_keyed():
    t = teacher_of(ids(20_000), KEY, 10)
    observed = np.bincount(t, minlength=10)
    assert stats.chisquare(observed).pvalue > 1e-4
    # a different key gives a different assignment
    assert (teacher_of(ids(200), b"another key", 10) != t[:200]).mean() > 0.5


def _check_group(groups, sampled, n_teachers, shots):
    assert len(groups) == n_teachers
    flat = [r for g in groups for r in g]
    assert len(flat) == len(set(flat)) and set(flat) <= set(sampled)
    assert all(len(g) <= shots for g in groups)
    t = dict(zip(sampled, teacher_of(sampled, KEY, n_teachers)))
    assert all(t[r] == i for i, g in enumerate(groups) for r in g)


def test_group_into_teachers_caps_and_partitions():
    sampled = ids(300)
    groups = group_into_teachers(sampled, KEY, 10, 4)
    _check_group(groups, sampled, 10, 4)
    # 300 records over 10 teachers: every teacher is full, and keeps its 4 smallest ranks in rank order
    for g in groups:
        assert len(g) == 4
        ranks = [keyed_hash(KEY, r, "rank") for r in g]
        assert ranks == sorted(ranks)


def test_group_into_teachers_is_order_invariant_and_keeps_empty_teachers():
    rng = np.random.default_rng(4)
    sampled = ids(30)
    shuffled = [sampled[i] for i in rng.permutation(30)]
    assert group_into_teachers(sampled, KEY, 8, 2) == group_into_teachers(shuffled, KEY, 8, 2)
    groups = group_into_teachers(ids(2), KEY, 50, 3)
    assert len(groups) == 50 and sum(len(g) == 0 for g in groups) >= 48


@pytest.mark.parametrize("seed", range(20))
def test_neighbouring_samples_change_at_most_one_teacher(seed):
    rng = np.random.default_rng(seed)
    pool = ids(400)
    n_teachers, shots = int(rng.integers(1, 30)), int(rng.integers(1, 6))
    sampled = [pool[i] for i in rng.choice(400, size=int(rng.integers(0, 200)), replace=False)]
    extra = f"x{seed}"
    neighbour = list(sampled)
    neighbour.insert(int(rng.integers(0, len(sampled) + 1)), extra)
    a = group_into_teachers(sampled, KEY, n_teachers, shots)
    b = group_into_teachers(neighbour, KEY, n_teachers, shots)
    _check_group(b, neighbour, n_teachers, shots)
    changed = [i for i in range(n_teachers) if a[i] != b[i]]
    assert changed in ([], [int(teacher_of([extra], KEY, n_teachers)[0])])


@pytest.mark.parametrize("seed", range(20))
def test_relevance_ranked_neighbours_change_at_most_one_teacher(seed):
    # The counter-example a query-dependent choice could create: the added record is the most relevant of all,
    # so any teacher that could see it would pick it. Only its own teacher may.
    rng = np.random.default_rng(seed)
    pool = ids(400)
    relevance = {rid: float(r) for rid, r in zip(pool, rng.random(400))}
    n_teachers, shots = int(rng.integers(1, 30)), int(rng.integers(1, 6))
    sampled = [pool[i] for i in rng.choice(400, size=int(rng.integers(0, 200)), replace=False)]
    extra = f"x{seed}"
    neighbour = sampled + [extra]
    a = group_into_teachers(sampled, KEY, n_teachers, shots, "salt", relevance)
    b = group_into_teachers(neighbour, KEY, n_teachers, shots, "salt", {**relevance, extra: 2.0})
    _check_group(b, neighbour, n_teachers, shots)
    changed = [i for i in range(n_teachers) if a[i] != b[i]]
    assert changed == [int(teacher_of([extra], KEY, n_teachers)[0])]
    assert b[changed[0]][-1] == extra  # the most relevant, shown last (next to the query)


def test_relevance_keeps_each_teachers_most_relevant_records_most_relevant_last():
    pool = ids(200)
    relevance = {rid: float(v) for rid, v in zip(pool, np.random.default_rng(3).random(200))}
    groups = group_into_teachers(pool, KEY, 7, 3, "salt", relevance)
    buckets = teacher_of(pool, KEY, 7)
    for t, kept in enumerate(groups):
        bucket = sorted((rid for rid, b in zip(pool, buckets) if b == t), key=relevance.get)
        assert kept == bucket[-3:]  # ascending relevance: the most relevant last
    # without relevance the keyed rank decides, and it differs from the relevance order
    assert group_into_teachers(pool, KEY, 7, 3, "salt") != groups


def test_assign_teachers_neighbouring_datasets_same_draws():
    # Appending a record keeps the first n uniform draws identical, so the other records' inclusion is the same.
    base, n_teachers = ids(300), 10
    new_teacher = int(teacher_of(["new"], KEY, n_teachers)[0])
    changed_runs = 0
    for seed in range(60):
        a = assign_teachers(base, KEY, n_teachers, 4, 0.2, make_rng(seed, test_mode=True))
        b = assign_teachers(base + ["new"], KEY, n_teachers, 4, 0.2, make_rng(seed, test_mode=True))
        _check_group(a, base, n_teachers, 4)
        diff = [i for i in range(n_teachers) if a[i] != b[i]]
        assert diff in ([], [new_teacher])
        changed_runs += bool(diff)
    assert changed_runs > 0  # the new record did make it into some teacher, so the check was not vacuous


def test_assign_teachers_draws_fresh_samples():
    rng = make_rng(5, test_mode=True)
    first = assign_teachers(ids(1000), KEY, 10, 4, 0.04, rng)
    second = assign_teachers(ids(1000), KEY, 10, 4, 0.04, rng)
    assert first != second


def test_default_sampling_rate():
    assert default_sampling_rate(100, 4, 14732) == pytest.approx(400 / 14732)
    assert default_sampling_rate(100, 4, 100) == 1.0
    with pytest.raises(ValueError):
        default_sampling_rate(100, 4, 0)


def test_rank_salt_varies_which_records_an_overfull_teacher_keeps():
    # one teacher, 20 candidates, 4 shots: the kept set should depend on the per-query salt
    sampled = ids(20)
    kept = {tuple(group_into_teachers(sampled, KEY, 1, 4, rank_salt=f"{s:032x}")[0]) for s in range(30)}
    assert len(kept) > 10
    # and never on anything but the teacher's own records: same salt, same answer
    assert group_into_teachers(sampled, KEY, 1, 4, "ab") == group_into_teachers(sampled[::-1], KEY, 1, 4, "ab")


@pytest.mark.parametrize("name", ["esa", "rnm", "ksa-jem", "ksa-ptr", "sga", "ksa-public"])
def test_nearest_demonstrations_at_the_default_rate_are_warned_about(name):
    """At the default rate each teacher samples about `shots` records: "nearest" would have nothing to choose from."""
    from dpicl.methods import get
    from dpicl.methods.base import Budget, Facts

    method, facts, budget = get(name), Facts(dataset_size=3000), Budget(3.0, 1e-5)
    base = {"teachers": 40, "shots": 1, "planned_queries": 20}  # enough teachers for KSA-PTR's own warning to stay away

    def nearest_warnings(**settings):
        chosen = method.Settings(**base, **settings)
        return [w for w in method.warnings(chosen, method.plan(chosen, facts, budget)) if "nearest" in w]

    (warning,) = nearest_warnings(private_demonstrations="nearest")
    assert f"{40 / 3000:.4g}" in warning and "sampling_rate" in warning
    assert nearest_warnings(private_demonstrations="nearest", sampling_rate=0.04) == []
    assert nearest_warnings() == []


@pytest.mark.parametrize("name", ["esa", "rnm", "ksa-jem", "ksa-ptr", "sga", "ksa-public"])
def test_teachers_times_shots_beyond_the_dataset_are_warned_about(name):
    """`dpicl plan --teachers 100 --shots 4` on 60 records capped q at 1 without a word: no amplification, and the
    teachers show fewer records than `shots`."""
    from dpicl.methods import get
    from dpicl.methods.base import Budget, Facts

    method, facts, budget = get(name), Facts(dataset_size=60), Budget(3.0, 1e-3)

    def capped_warnings(**settings):
        chosen = method.Settings(planned_queries=20, **settings)
        return [w for w in method.warnings(chosen, method.plan(chosen, facts, budget)) if "capped at 1" in w]

    (warning,) = capped_warnings(teachers=100, shots=4)
    assert "(400)" in warning
    assert capped_warnings(teachers=15, shots=4)  # 60 of 60: q = 1 too
    assert capped_warnings(teachers=14, shots=4) == []
    assert capped_warnings(teachers=100, shots=4, sampling_rate=0.5) == []  # a rate chosen, not capped
