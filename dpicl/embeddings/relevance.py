"""How relevant each private record is to a query: the cosine of their embeddings, for teachers that show the records
of their own sample most similar to the query (`private_demonstrations: nearest`, docs/PRIVACY.md).

A record's relevance must be a function of that record and the query alone (then a teacher's demonstrations stay a
function of its own sampled records, `dpicl.privacy.sampling.group_into_teachers`): every private input is embedded
in its own forward pass (the encoder's batch-invariant default), never in a batch with other records.
"""

from __future__ import annotations

import functools
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


def relevance(encoder, queries: Sequence[str], records: Sequence) -> list[QueryRelevance]:
    """For each query, the relevance of every private record in `records` to it."""
    if getattr(encoder, "batch_invariant", False) is not True:
        raise ValueError("private_demonstrations: nearest needs a batch-invariant encoder (each private record embedded "
                         "alone, so that its score does not depend on other records); this one batches its texts")
    vectors = _private_vectors(encoder, tuple(r.input for r in records))
    rows = {r.record_id: i for i, r in enumerate(records)}
    # the queries may share batches: they are not the private data, and a record's score depends on the query anyway
    return [QueryRelevance(query, vectors, rows) for query in encoder.encode(list(queries), batched=True)]


@functools.lru_cache(maxsize=2)
def _private_vectors(encoder, inputs: tuple[str, ...]) -> np.ndarray:
    """The private inputs' embeddings, each computed alone; once per process and private dataset (every batch of a
    run ranks against the same records), held for the worker process's life. In memory only, never stored."""
    return encoder.encode(inputs, progress=True)
