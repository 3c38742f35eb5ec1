"""How relevant each private record is to a query: the cosine of their embeddings, for teachers that show the records
of their own sample most similar to the query (`private_demonstrations: nearest`, docs/PRIVACY.md).

A record's relevance must be a function of that record and the query alone (then a teacher's demonstrations stay a
function of its own sampled records, `dpicl.privacy.sampling.group_into_teachers`): every private input is embedded
in its own forward pass (the encoder's batch-invariant default), never in a batch with other records.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np


class QueryRelevance(Mapping[str, float]):
    """{record id: cosine similarity of the record's input to one query}, computed when looked up: a teacher looks up
    only the records of its sample, and a table of every record for every query of a batch would not fit in memory
    at 10^5 records."""

    def __init__(self, query: np.ndarray, vectors: np.ndarray, rows: Mapping[str, int]) -> None:
        self._query, self._vectors, self._rows = query, vectors, rows

    def __getitem__(self, record_id: str) -> float:
        return float(self._vectors[self._rows[record_id]] @ self._query)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


def record_vectors(encoder, records: Sequence) -> np.ndarray:
    """The private records' input embeddings (one row per record, in order), each computed alone."""
    if getattr(encoder, "batch_invariant", False) is not True:
        raise ValueError("private_demonstrations: nearest needs a batch-invariant encoder (each private record "
                         "embedded alone, so that its score does not depend on other records); this one batches texts")
    return _embedded_alone(encoder, tuple(r.input for r in records))


@functools.lru_cache(maxsize=1)
def _embedded_alone(encoder, inputs: tuple[str, ...]) -> np.ndarray:
    """Held for the process's next call (a sweep's repetitions rank against the same records; the pipeline stores
    them instead: dpicl/tasks/sample.py)."""
    return encoder.encode(inputs, progress=True)


def records_fingerprint(model: str, records: Sequence) -> str:
    """What `record_vectors` depends on: the encoder model and each record's id and input, in order (sha256 hex)."""
    digest = hashlib.sha256(model.encode())
    for r in records:
        for text in (r.record_id, r.input):
            digest.update(len(text).to_bytes(8, "big") + text.encode())
    return digest.hexdigest()


def relevance(encoder, queries: Sequence[str], records: Sequence, vectors: np.ndarray) -> list[QueryRelevance]:
    """For each query, the relevance of every private record in `records` (embedded as `vectors`) to it."""
    if len(vectors) != len(records):
        raise ValueError(f"{len(vectors)} record embeddings for {len(records)} records")
    rows = {r.record_id: i for i, r in enumerate(records)}
    # the queries may share batches: they are not the private data, and a record's score depends on the query anyway
    return [QueryRelevance(query, vectors, rows) for query in encoder.encode(list(queries), batched=True)]
