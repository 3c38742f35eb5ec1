"""Per-query Poisson subsampling and exemplar-to-teacher assignment (MECHANISMS §A.1, §12.1 item 6).

The accountants assume Poisson subsampling with add/remove neighbours: every record enters a query's sample
independently with probability q, fresh for every query. The sampled records are split into N disjoint
teachers. To keep "one record reaches exactly one teacher" exact, a record's teacher is a keyed hash of its id
alone — never its position in the sample (the papers' code used contiguous slices of a without-replacement
draw, which breaks this).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence

import numpy as np

# Purposes separate the hash streams, so the teacher index and the rank are unrelated.
_TEACHER = "teacher"
_RANK = "rank"


def keyed_hash(key: bytes, record_id: str, purpose: str) -> int:
    """HMAC-SHA256 of ``purpose`` and ``record_id`` under ``key``, as a non-negative big int."""
    # NUL separator: purposes are internal constants without NUL, so (purpose, id) pairs never collide.
    message = purpose.encode("utf-8") + b"\x00" + record_id.encode("utf-8")
    return int.from_bytes(hmac.new(key, message, hashlib.sha256).digest(), "big")


def teacher_of(record_ids: Sequence[str], key: bytes, n_teachers: int) -> np.ndarray:
    """Teacher index of each record: keyed hash of its id mod N.

    Depends only on the record id and the data-independent key — not on which other records exist or were
    sampled — so adding or removing a record never moves any other record to another teacher.
    """
    if n_teachers < 1:
        raise ValueError(f"n_teachers must be >= 1, got {n_teachers}")
    return np.array([keyed_hash(key, rid, _TEACHER) % n_teachers for rid in record_ids], dtype=np.int64)


def poisson_sample(n_records: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of the records included, each independently with probability ``rate`` (true Poisson)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"sampling rate must be in (0, 1], got {rate}")
    if n_records < 0:
        raise ValueError(f"n_records must be >= 0, got {n_records}")
    return np.flatnonzero(rng.random(n_records) < rate)


def group_into_teachers(
    sampled_ids: Sequence[str], key: bytes, n_teachers: int, shots: int, rank_salt: str = "",
    relevance: Mapping[str, float] | None = None,
) -> list[list[str]]:
    """Split sampled record ids into ``n_teachers`` disjoint lists of at most ``shots`` demonstrations.

    A teacher keeps its ``shots`` records with the smallest ``keyed_hash(key, id, "rank" + rank_salt)``, in
    that order. The salt is drawn fresh per query (data-independent), so an over-full teacher does not always
    favour the same records. Both the teacher and the rank are functions of the id (and the salt) alone, so a
    teacher's list is a function of (sampled ids ∩ that teacher's bucket) only: adding or removing one record
    changes at most the list of its own teacher. Always returns exactly ``n_teachers`` lists; an empty list
    means that teacher answers with no demonstrations, which is still a function of its own (empty) records.

    ``relevance`` (record id → how relevant the record is to the query): a teacher keeps instead its ``shots``
    most relevant records, the most relevant last (next to the query), the keyed rank breaking ties. Each
    record's relevance must be a function of that record and the query alone (an embedding of the record
    computed on its own, never in a batch with other records); then the list is still a function of the
    teacher's own bucket, and the argument above holds unchanged.
    """
    if shots < 1:
        raise ValueError(f"shots must be >= 1, got {shots}")
    teachers: list[list[str]] = [[] for _ in range(n_teachers)]
    for rid, t in zip(sampled_ids, teacher_of(sampled_ids, key, n_teachers)):
        teachers[t].append(rid)
    # Sorting by the keyed rank (not sample order) is what keeps the cap local to one teacher.
    rank = _RANK + rank_salt
    if relevance is None:
        return [sorted(ids, key=lambda rid: keyed_hash(key, rid, rank))[:shots] for ids in teachers]
    most_relevant = [sorted(ids, key=lambda rid: (-relevance[rid], keyed_hash(key, rid, rank)))[:shots]
                     for ids in teachers]
    return [ids[::-1] for ids in most_relevant]


def assign_teachers(
    record_ids: Sequence[str],
    key: bytes,
    n_teachers: int,
    shots: int,
    rate: float,
    rng: np.random.Generator,
    relevance: Mapping[str, float] | None = None,
) -> list[list[str]]:
    """Draw a fresh Poisson(``rate``) sample of ``record_ids`` and group it into teachers.

    Call once per query: the accountants charge every query for its own Poisson sample. See
    :func:`group_into_teachers` for why the grouping and the cap keep one record's reach to one teacher, also
    when each teacher keeps its records most relevant to the query (``relevance``).
    """
    rank_salt = rng.bytes(16).hex()
    sampled = [record_ids[i] for i in poisson_sample(len(record_ids), rate, rng)]
    return group_into_teachers(sampled, key, n_teachers, shots, rank_salt=rank_salt, relevance=relevance)


def default_sampling_rate(n_teachers: int, shots: int, n_records: int) -> float:
    """q = min(1, N·s/n): the expected sample fills every teacher (the papers' q = 400/14732)."""
    if n_records < 1:
        raise ValueError(f"n_records must be >= 1, got {n_records}")
    return min(1.0, n_teachers * shots / n_records)
