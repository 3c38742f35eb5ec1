"""What the attack modules share: the record type, the log-probability floor, index checks, stage timings and
the one-shot prompt set of the n × n design (probability and label attacks). Nothing here sees more than the
functions that call it; nothing is logged."""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from dpicl.config import TaskConfig
from dpicl.prompts import render_prompt, zero_shot_prompt

Record = tuple[str, str]  # (input, output) of one private record

LOG_FLOOR = -30.0


def _number(value) -> bool:
    return isinstance(value, (numbers.Real, np.generic)) and not isinstance(value, str)


def _indices(name: str, values: Sequence[int]) -> list[int]:
    out = [int(v) for v in values]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} holds repeated indices")
    return out


@contextmanager
def _timed(timings: dict | None, stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        if timings is not None:
            timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


def _clear_token_cache(backend) -> None:
    """Drop the backend's KV cache of a finished teacher-forced / token-by-token decoding (when it keeps one)."""
    clear = getattr(backend, "clear_token_cache", None)
    if callable(clear):
        clear()


def _one_shot_prompts(task: TaskConfig, records: Sequence[Record], test: Sequence[int], query: str,
                      fillers: Sequence[int]) -> list[str]:
    """The prompt set of one query of the n × n design: the one-shot prompt of ``query`` with each record of
    ``test`` as its demonstration, then the zero-shot prompt, then the one-shot prompts of the ``fillers``."""
    return ([render_prompt(task, [records[m]], query) for m in test] + [zero_shot_prompt(task, query)]
            + [render_prompt(task, [records[f]], query) for f in fillers])
