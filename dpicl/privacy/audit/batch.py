"""Vectorised draws for auditing: run a mechanism's own code once on a whole batch of trials.

Several mechanisms are "statistic + noise from ``rng``" (RNM, ESA, DP few-shot, DPM's leaf sums). Handing them a
:class:`BatchedGenerator` — every draw gets a leading batch axis — makes one call of the *shipped* function
produce many independent trials (numpy broadcasting does the rest), instead of a Python loop over 10⁶ calls.

Because a mechanism that reduces over its noise (``int(np.argmax(...))``, ``float(...)``) would silently mix
the trials, :func:`batched_draws` first checks that the batched call reproduces exactly what the mechanism
returns with an ordinary generator on the same random stream, and refuses to vectorise otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_BATCHABLE = ("normal", "gumbel", "exponential", "laplace", "random")


class BatchedGenerator:
    """A stand-in for ``np.random.Generator`` whose draws in ``batched`` get a leading axis of length ``batch``.

    Draws listed in ``passthrough`` are forwarded unchanged (one draw for the whole batch, e.g. DPM's tree, which
    is then shared by the trials of the batch); any other attribute raises AttributeError, so an unexpected kind
    of draw fails loudly instead of being shared silently.
    """

    def __init__(self, rng: np.random.Generator, batch: int, batched: tuple[str, ...] = _BATCHABLE,
                 passthrough: tuple[str, ...] = ()):
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy Generator")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        unknown = set(batched) - set(_BATCHABLE)
        if unknown:
            raise ValueError(f"cannot batch {sorted(unknown)}")
        self._rng = rng
        self.batch = batch
        self._batched = frozenset(batched)
        self._passthrough = frozenset(passthrough)

    def _size(self, size) -> tuple[int, ...]:
        if size is None:
            return (self.batch,)
        return (self.batch, *np.atleast_1d(np.asarray(size, dtype=np.int64)).tolist())

    def _draw(self, name: str, *args, size=None):
        if name in self._batched:
            return getattr(self._rng, name)(*args, size=self._size(size))
        if name in self._passthrough:
            return getattr(self._rng, name)(*args, size=size)
        raise AttributeError(f"BatchedGenerator: draw {name!r} is neither batched nor passed through")

    def normal(self, loc=0.0, scale=1.0, size=None):
        return self._draw("normal", loc, scale, size=size)

    def gumbel(self, loc=0.0, scale=1.0, size=None):
        return self._draw("gumbel", loc, scale, size=size)

    def exponential(self, scale=1.0, size=None):
        return self._draw("exponential", scale, size=size)

    def laplace(self, loc=0.0, scale=1.0, size=None):
        return self._draw("laplace", loc, scale, size=size)

    def random(self, size=None):
        return self._draw("random", size=size)

    def __getattr__(self, name):
        raise AttributeError(f"BatchedGenerator has no {name!r}: the audited code draws in a way it cannot batch")


def _as_array(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def batched_draws(
    single: Callable[[np.random.Generator], object],
    batched: Callable[[BatchedGenerator], object],
    statistic: Callable[[object], np.ndarray],
    trials: int,
    rng: np.random.Generator,
    *,
    chunk: int = 250_000,
    check_reps: int = 3,
    batched_names: tuple[str, ...] = _BATCHABLE,
    passthrough: tuple[str, ...] = (),
) -> np.ndarray:
    """``trials`` values of ``statistic`` of the mechanism's output, drawn ``chunk`` trials per batched call.

    ``single(rng)`` is the mechanism as shipped (one trial); ``batched(gen)`` the same call taking a
    :class:`BatchedGenerator`. Before drawing, ``check_reps`` trials are drawn both ways from the same seed and
    ``statistic`` of the results must agree exactly (with ``passthrough`` draws, which a sequential run repeats
    per trial, use ``check_reps=1``); otherwise RuntimeError.
    """
    seed = int(rng.integers(2**63))
    ref = np.random.default_rng(seed)
    expected = np.concatenate([np.atleast_1d(_as_array(statistic(single(ref)))) for _ in range(check_reps)])
    got = _as_array(statistic(batched(BatchedGenerator(np.random.default_rng(seed), check_reps, batched_names,
                                                        passthrough)))).ravel()
    if got.shape != expected.shape or not np.array_equal(got, expected):
        raise RuntimeError("the batched call does not reproduce the mechanism's own output on the same random "
                           "stream; this mechanism cannot be audited in batches")
    out = []
    done = 0
    while done < trials:
        n = min(chunk, trials - done)
        values = _as_array(statistic(batched(BatchedGenerator(rng, n, batched_names, passthrough)))).ravel()
        if values.shape != (n,):
            raise RuntimeError(f"the batched statistic has shape {values.shape}, expected ({n},)")
        out.append(values)
        done += n
    return np.concatenate(out)
