"""make_rng: cryptographic seeding by default, fixed seeds only in test mode."""

import numpy as np
import pytest

from dpicl.privacy.rng import make_rng


def test_fixed_seed_refused_outside_test_mode(monkeypatch):
    monkeypatch.delenv("DPICL_TEST_MODE", raising=False)
    with pytest.raises(ValueError, match="tests and benchmarks only"):
        make_rng(1)
    monkeypatch.setenv("DPICL_TEST_MODE", "0")
    with pytest.raises(ValueError):
        make_rng(1)


def test_fixed_seed_allowed_in_test_mode(monkeypatch):
    monkeypatch.delenv("DPICL_TEST_MODE", raising=False)
    a = make_rng(7, test_mode=True).random(5)
    monkeypatch.setenv("DPICL_TEST_MODE", "1")
    b = make_rng(7).random(5)
    np.testing.assert_array_equal(a, b)


def test_unseeded_generators_differ(monkeypatch):
    monkeypatch.delenv("DPICL_TEST_MODE", raising=False)
    draws = {tuple(make_rng().integers(0, 2**62, size=4)) for _ in range(5)}
    assert len(draws) == 5


def test_benchmark_generators_reproduce_by_seed_and_label_and_are_crypto_seeded_without_one(monkeypatch):
    from dpicl.privacy.rng import benchmark_rng

    monkeypatch.delenv("DPICL_TEST_MODE", raising=False)
    draw = lambda *args: tuple(benchmark_rng(*args).integers(0, 2**62, size=4))  # noqa: E731
    assert draw(3) == draw(3) == tuple(make_rng(3, test_mode=True).integers(0, 2**62, size=4))
    assert draw(3, 0, "ensemble") == draw(3, 0, "ensemble")
    assert len({draw(3, 0, "ensemble"), draw(3, 1, "ensemble"), draw(3, 0, "esa"), draw(4, 0, "ensemble")}) == 4
    assert len({draw(None) for _ in range(5)}) == 5  # no seed: the OS's randomness, never a fixed stream
