"""How relevant each private record is to a query: the cosine of their embeddings, for teachers that show the records
of their own sample most similar to the query (`private_demonstrations: nearest`, docs/PRIVACY.md).

A record's relevance must be a function of that record and the query alone (then a teacher's demonstrations stay a
function of its own sampled records, `dpicl.privacy.sampling.group_into_teachers`): every private input is embedded
in its own forward pass (the encoder's batch-invariant default), never in a batch with other records.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np


def relevance(encoder, queries: Sequence[str], records: Sequence) -> list[dict[str, float]]:
    """For each query, {record id: cosine similarity of its input to the query} over the private `records`."""
    vectors = _private_vectors(encoder, tuple(r.input for r in records))
    # the queries may share batches: they are not the private data, and a record's score depends on the query anyway
    scores = encoder.encode(list(queries), batched=True) @ vectors.T
    ids = [r.record_id for r in records]
    return [dict(zip(ids, row.tolist())) for row in scores]


@functools.lru_cache(maxsize=2)
def _private_vectors(encoder, inputs: tuple[str, ...]) -> np.ndarray:
    """The private inputs' embeddings, each computed alone; once per process and private dataset (every batch of a
    run ranks against the same records). Kept in memory only, never stored."""
    return encoder.encode(inputs)
