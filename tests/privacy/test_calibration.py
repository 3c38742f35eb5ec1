"""Noise calibration against the MECHANISMS §11.1 vectors, certification, the stored search, and max_additional."""

import json

import pytest

from dpicl.privacy.accounting import (
    AutoAccountant,
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
VECTORS = [(SAMSUM_Q, SAMSUM_DELTA, *v) for v in SAMSUM] + [(DOCVQA_Q, DOCVQA_DELTA, *v) for v in DOCVQA]


def bound(nm, q, T, delta, accountant=None):
    return (accountant or PRVAccountant()).epsilon([SubsampledGaussianEvent(nm, q, 1.0)] * T, delta)


@pytest.fixture
def fresh_search(tmp_path, monkeypatch):
    """An empty on-disk store and in-memory cache: find_noise_multiplier really searches (as in a new process)."""
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path))
    find_noise_multiplier.cache_clear()
    yield tmp_path / "calibration"
    find_noise_multiplier.cache_clear()


@pytest.fixture(scope="module")
def papers_search(tmp_path_factory):
    """The papers' search at every vector's point, each searched once for the module in an empty store:
    {(q, δ, ε): nm}. (In CI, with an empty store, searching again in each test that compares cost 2½ minutes.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPICL_CACHE", str(tmp_path_factory.mktemp("cache")))
        find_noise_multiplier.cache_clear()
        found = {(q, delta, eps): find_noise_multiplier(q, 100, eps, delta) for q, delta, eps, _ in VECTORS}
        find_noise_multiplier.cache_clear()
    return found


@pytest.mark.slow
@pytest.mark.parametrize("q,delta,eps,expected", VECTORS)
def test_find_noise_multiplier_reproduces_the_vectors(q, delta, eps, expected, papers_search):
    assert papers_search[q, delta, eps] == pytest.approx(expected, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("q,delta,eps,expected", VECTORS)
def test_calibrated_noise_is_certified_and_close(q, delta, eps, expected, papers_search):
    nm = calibrate_noise_multiplier(q, 100, eps, delta)
    assert nm == pytest.approx(expected, rel=5e-3)
    assert bound(nm, q, 100, delta) <= eps  # certified by the ledger's accountant
    # never noisier than the papers' own search (to its tolerance), and (nearly) the smallest certified value
    assert nm <= papers_search[q, delta, eps] * (1 + 1e-3)
    assert bound(nm * (1 - 1e-3), q, 100, delta) > eps


@pytest.mark.slow
def test_calibration_raises_noise_when_the_upper_bound_does_not_fit(papers_search):
    # A coarser accountant (eps_up = estimate + 0.01) does not certify the papers' value at ε=1:
    # calibration must raise nm just enough, and stay within 0.5 %.
    coarse = PRVAccountant(eps_error=0.01)
    base = papers_search[SAMSUM_Q, SAMSUM_DELTA, 1]
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
    """A stand-in accountant whose ε depends only on the number of events (to test the search itself); composed
    events count as many as they compose."""

    def __init__(self, f):
        self.f = f

    def epsilon(self, events, delta):
        from dpicl.privacy.accounting.events import flatten

        return self.f(sum(count for _, count in flatten(events)))


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


SMALL = (0.05, 10, 2.0, 1e-5)  # q, T, ε, δ: a search of a second or two


def test_the_search_is_stored_on_disk_and_not_repeated_by_a_new_process(fresh_search, monkeypatch):
    from dpicl.privacy.accounting import calibration

    calls = []
    search = calibration._prv_find_noise_multiplier
    monkeypatch.setattr(calibration, "_prv_find_noise_multiplier", lambda **kw: calls.append(kw) or search(**kw))
    first = find_noise_multiplier(*SMALL)
    find_noise_multiplier.cache_clear()  # as a new process would start
    assert find_noise_multiplier(*SMALL) == first and len(calls) == 1
    q, T, eps, delta = SMALL
    assert find_noise_multiplier(q, T + 1, eps, delta) != first and len(calls) == 2  # other arguments: a search
    assert len(list(fresh_search.glob("*.json"))) == 2
    assert not list(fresh_search.glob("*.tmp"))


@pytest.fixture(scope="module")
def small_search(tmp_path_factory):
    """SMALL's search, once for the module: (its value, its stored file's name and text)."""
    with pytest.MonkeyPatch.context() as mp:
        store = tmp_path_factory.mktemp("cache")
        mp.setenv("DPICL_CACHE", str(store))
        find_noise_multiplier.cache_clear()
        value = find_noise_multiplier(*SMALL)
        find_noise_multiplier.cache_clear()
    [path] = (store / "calibration").glob("*.json")
    return value, path.name, path.read_text()


@pytest.mark.parametrize("damage", ["too little noise", "not json", "negative", "other arguments"])
def test_a_damaged_store_never_gives_an_uncertified_noise_multiplier(fresh_search, small_search, damage):
    q, T, eps, delta = SMALL
    searched, name, text = small_search
    fresh_search.mkdir(parents=True)
    path = fresh_search / name
    stored = json.loads(text)  # as the search stored it
    if damage == "too little noise":
        stored["value"] = searched * 0.97
    elif damage == "negative":
        stored["value"] = -1.0
    elif damage == "other arguments":
        stored["key"]["num_steps"] = repr(T + 1)
        stored["value"] = searched * 0.5
    path.write_text("{not json" if damage == "not json" else json.dumps(stored))
    find_noise_multiplier.cache_clear()
    hint = find_noise_multiplier(*SMALL)
    assert hint == (searched * 0.97 if damage == "too little noise" else searched)  # the others are searched again
    if damage == "too little noise":
        assert bound(hint, q, T, delta, AutoAccountant()) > eps  # premise: the stored value is not private enough
    nm = calibrate_noise_multiplier(*SMALL)
    # the accountant certifies what calibration returns, whatever the store held
    assert bound(nm, q, T, delta, AutoAccountant()) <= eps


def test_the_store_uses_the_applications_cache_root_and_an_injected_one(tmp_path, monkeypatch):
    # the core does not import the application: its default root is computed the same way (existing stores stay
    # valid), and an injected root wins
    from dpicl.inference import models
    from dpicl.privacy.accounting import calibration

    monkeypatch.delenv("DPICL_CACHE", raising=False)
    assert calibration.cache_dir() == models.cache_dir()
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path / "env"))
    assert calibration.cache_dir() == models.cache_dir() == tmp_path / "env"
    monkeypatch.setenv("DPICL_CACHE", "~/somewhere")
    assert calibration.cache_dir() == models.cache_dir()
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path / "env"))
    try:
        calibration.set_cache_dir(tmp_path / "injected")
        find_noise_multiplier.cache_clear()
        find_noise_multiplier(*SMALL)
        assert len(list((tmp_path / "injected" / "calibration").glob("*.json"))) == 1
        assert not (tmp_path / "env").exists()
    finally:
        calibration.set_cache_dir(None)
        find_noise_multiplier.cache_clear()
    assert calibration.cache_dir() == tmp_path / "env"


@pytest.mark.slow
def test_a_backlog_of_1e5_queries_is_calibrated_coarsely_and_the_ledger_pays_for_all_of_it(fresh_search):
    """Past ~10⁴ queries calibration certifies on a coarser mesh (seconds, bounded memory): the ledger's own, finer
    accountant must still pay for every planned query, and the price of the coarse mesh must stay small."""
    from dpicl.privacy.accounting.events import ComposedEvent

    q, T, eps, delta = SAMSUM_Q, 100_000, 3.0, SAMSUM_DELTA
    nm = calibrate_noise_multiplier(q, T, eps, delta)
    event = SubsampledGaussianEvent(nm, q, 1.0)
    ledger = AutoAccountant()
    assert ledger.epsilon([ComposedEvent(event, T)], delta) <= eps
    # within 1 % of the smallest nm the ledger's accountant certifies
    assert ledger.epsilon([ComposedEvent(SubsampledGaussianEvent(nm * 0.99, q, 1.0), T)], delta) > eps
