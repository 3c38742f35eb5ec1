"""Nearest-candidate selection with FAISS: which public candidate is closest (cosine) to a private vector.

Used after aggregation, e.g. to map a DP embedding (from ESA / RNM over teacher-output embeddings) onto the
nearest public candidate answer. Candidates are unit-normalized here, so `IndexFlatIP` is cosine search; the
query need not be unit-norm, since scaling it does not change the argmax.
"""

from __future__ import annotations

from collections.abc import Sequence

import faiss
import numpy as np


def set_faiss_threads(n: int) -> None:
    """Set FAISS's OpenMP threads for the process (on 2 shared cores 1 is often fastest)."""
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    faiss.omp_set_num_threads(n)


def nearest_candidate(query_vector: np.ndarray, candidate_embeddings: np.ndarray) -> int:
    """Index of the candidate (row of C × d) with the highest cosine similarity to `query_vector` (d,)."""
    query = np.asarray(query_vector, dtype=np.float32)
    if query.ndim != 1:
        raise ValueError(f"query_vector must be 1-d, got shape {query.shape}")
    return nearest_candidates(query[None, :], [candidate_embeddings])[0]


def nearest_candidates(
    query_vectors: np.ndarray, candidate_sets: Sequence[np.ndarray]
) -> list[int]:
    """For each query i (row of Q × d), its nearest (cosine) candidate in `candidate_sets[i]`."""
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    if queries.ndim != 2:
        raise ValueError(f"query_vectors must be 2-d (Q × d), got shape {queries.shape}")
    if len(candidate_sets) != queries.shape[0]:
        raise ValueError(f"{queries.shape[0]} queries but {len(candidate_sets)} candidate sets")
    d = queries.shape[1]
    if not np.isfinite(queries).all():
        raise ValueError("query vectors must be finite")
    result = []
    for i, candidates in enumerate(candidate_sets):
        cands = _unit_rows(candidates, d, i)
        index = faiss.IndexFlatIP(d)
        index.add(cands)
        _, ids = index.search(queries[i : i + 1], 1)
        result.append(int(ids[0, 0]))
    return result


def consensus(candidate_embeddings: np.ndarray) -> int:
    """Index of the candidate nearest the set's own consensus: the highest summed cosine similarity to every
    candidate (itself included), i.e. nearest the sum of their unit vectors (a medoid; self-consistency for free
    text). For public candidates a free answer."""
    cands = np.asarray(candidate_embeddings, dtype=np.float32)
    if cands.ndim != 2 or len(cands) == 0:
        raise ValueError(f"candidate_embeddings must be a non-empty 2-d array, got shape {cands.shape}")
    unit = _unit_rows(cands, cands.shape[1], 0)
    return nearest_candidate(unit.sum(axis=0), unit)


def most_similar(query_vectors: np.ndarray, record_vectors: np.ndarray, count: int) -> np.ndarray:
    """For each query (row of Q × d), the indices of its `count` most similar records (cosine; rows of N × d), most
    similar first: a Q × min(count, N) array."""
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    if queries.ndim != 2:
        raise ValueError(f"query_vectors must be 2-d (Q × d), got shape {queries.shape}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    records = _unit_rows(record_vectors, queries.shape[1], 0)
    index = faiss.IndexFlatIP(records.shape[1])
    index.add(records)
    _, ids = index.search(queries, min(count, len(records)))
    return ids.astype(np.int64)


def most_similar_texts(encoder, queries: Sequence[str], texts: Sequence[str], count: int) -> np.ndarray:
    """For each query, the indices of its `count` most similar `texts` by the encoder's embeddings, most similar
    first (:func:`most_similar`)."""
    return most_similar(encoder.encode(queries), encoder.encode(texts), count)


def _unit_rows(candidates: np.ndarray, d: int, i: int) -> np.ndarray:
    cands = np.array(candidates, dtype=np.float32, copy=True)
    if cands.ndim != 2 or cands.shape[1] != d:
        raise ValueError(f"candidate set {i} must have shape (C, {d}), got {cands.shape}")
    if cands.shape[0] == 0:
        raise ValueError(f"candidate set {i} is empty")
    if not np.isfinite(cands).all():
        raise ValueError(f"candidate set {i} has non-finite values")
    norms = np.linalg.norm(cands, axis=1, keepdims=True)
    # A zero vector stays zero (similarity 0) rather than becoming NaN.
    np.divide(cands, norms, out=cands, where=norms > 0)
    return np.ascontiguousarray(cands)


def public_candidates(centres: Sequence[np.ndarray], public_embeddings: np.ndarray, public_texts: Sequence[str],
                      k: int) -> list[int]:
    """SGA's candidates (paper 004 §4): for each cluster centre in the given order (largest noisy count first),
    the nearest public output (cosine, FAISS), skipping texts already chosen, until k. Returns indices into the
    public outputs, so every candidate is a public text by construction."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(public_texts) != len(public_embeddings):
        raise ValueError(f"{len(public_texts)} public texts but {len(public_embeddings)} embeddings")
    queries = np.asarray(centres, dtype=np.float32)
    if len(queries) == 0:
        return []
    cands = _unit_rows(public_embeddings, queries.shape[1], 0)
    index = faiss.IndexFlatIP(cands.shape[1])
    index.add(cands)
    _, nearest = index.search(np.ascontiguousarray(queries), 1)
    chosen: dict[str, int] = {}
    for i in nearest[:, 0]:
        chosen.setdefault(public_texts[int(i)], int(i))
        if len(chosen) == k:
            break
    return list(chosen.values())
