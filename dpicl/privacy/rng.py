"""Random number generators for the DP core (MECHANISMS §A, conventions of every mechanism).

DP noise and Poisson sampling are only private if the adversary cannot predict the random draws, so
production generators are seeded from the OS's cryptographic source. Fixed seeds exist for tests and
benchmarks only and must be asked for explicitly.
"""

from __future__ import annotations

import hashlib
import os
import secrets

import numpy as np

TEST_MODE_ENV = "DPICL_TEST_MODE"


def _test_mode_enabled() -> bool:
    return os.environ.get(TEST_MODE_ENV) == "1"


def make_rng(seed: int | None = None, *, test_mode: bool = False) -> np.random.Generator:
    """Return a numpy Generator; cryptographically seeded unless a seed is given in test mode.

    A fixed ``seed`` is accepted only with ``test_mode=True`` or ``DPICL_TEST_MODE=1`` in the environment:
    a known seed makes the noise reproducible by anyone, which voids the privacy guarantee.
    """
    if seed is None:
        return np.random.default_rng(secrets.randbits(128))
    if not (test_mode or _test_mode_enabled()):
        raise ValueError(
            "a fixed RNG seed is for tests and benchmarks only: it makes the DP noise predictable. "
            f"Pass test_mode=True or set {TEST_MODE_ENV}=1 if this is a test; otherwise use seed=None."
        )
    return np.random.default_rng(seed)


def derived_seed(seed: int, *labels) -> bytes:
    """32 bytes derived from a benchmark seed and labels (a repetition, a stage): independent streams per label."""
    return hashlib.sha256(":".join(map(str, (seed, *labels))).encode()).digest()


def benchmark_rng(seed: int | None, *labels) -> np.random.Generator:
    """The generator of a benchmark, sweep or audit: cryptographically seeded without a seed (the default), else
    reproducible from the seed (and, given labels, from the seed and labels): the one place a tool's `--seed`
    becomes a generator."""
    if seed is None:
        return make_rng()
    if labels:
        seed = int.from_bytes(derived_seed(seed, *labels)[:8], "big")
    return make_rng(seed, test_mode=True)
