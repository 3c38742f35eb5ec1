"""FAISS nearest-candidate selection against a plain numpy cosine argmax."""

import numpy as np
import pytest

from dpicl.embeddings.candidates import nearest_candidate, nearest_candidates, set_faiss_threads


def _cosine_argmax(query, candidates):
    sims = candidates @ query / (np.linalg.norm(candidates, axis=1) * np.linalg.norm(query))
    return int(np.argmax(sims))


@pytest.mark.parametrize("seed", range(20))
def test_matches_numpy_cosine_argmax(seed):
    rng = np.random.default_rng(seed)
    d, c = 16, int(rng.integers(1, 50))
    # Non-unit candidates with very different norms: inner product alone would pick the longest one.
    candidates = rng.normal(size=(c, d)) * rng.uniform(0.01, 100, size=(c, 1))
    query = rng.normal(size=d) * 7.0
    assert nearest_candidate(query, candidates) == _cosine_argmax(query, candidates)


def test_batched_form_with_different_set_sizes():
    rng = np.random.default_rng(0)
    d = 8
    sets = [rng.normal(size=(c, d)) for c in (1, 5, 30, 2)]
    queries = rng.normal(size=(4, d))
    expected = [_cosine_argmax(q, s) for q, s in zip(queries, sets)]
    assert nearest_candidates(queries, sets) == expected
    assert nearest_candidates(np.zeros((0, d)), []) == []


def test_exact_match_is_found():
    rng = np.random.default_rng(1)
    candidates = rng.normal(size=(100, 32)).astype(np.float32)
    for i in (0, 41, 99):
        assert nearest_candidate(candidates[i] * 3.0, candidates) == i


def test_invalid_inputs():
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError):
        nearest_candidate(rng.normal(size=4), rng.normal(size=(3, 5)))  # dimension mismatch
    with pytest.raises(ValueError):
        nearest_candidate(rng.normal(size=4), np.zeros((0, 4)))  # no candidates
    with pytest.raises(ValueError):
        nearest_candidate(rng.normal(size=(2, 4)), rng.normal(size=(3, 4)))  # query not 1-d
    with pytest.raises(ValueError):
        nearest_candidates(rng.normal(size=(2, 4)), [rng.normal(size=(3, 4))])  # count mismatch
    with pytest.raises(ValueError):
        nearest_candidate(np.full(4, np.nan), rng.normal(size=(3, 4)))
    with pytest.raises(ValueError):
        set_faiss_threads(0)


def test_set_faiss_threads():
    import faiss

    set_faiss_threads(1)
    assert faiss.omp_get_max_threads() == 1


def test_public_candidates_follow_the_cluster_order_skip_repeated_texts_and_stop_at_k():
    from dpicl.embeddings.candidates import public_candidates

    rng = np.random.default_rng(0)
    public = rng.normal(size=(6, 5))
    public /= np.linalg.norm(public, axis=1, keepdims=True)
    texts = ["a", "b", "a", "c", "d", "e"]  # rows 0 and 2 are the same text
    centres = [public[2] * 0.3, public[0] * 2, public[4], public[1], public[5]]
    chosen = public_candidates(centres, public, texts, k=3)
    assert chosen == [2, 4, 1], "nearest public output per centre, in order, repeated text 'a' skipped"
    assert public_candidates(centres, public, texts, k=10) == [2, 4, 1, 5]
    assert public_candidates([], public, texts, k=3) == []
    with pytest.raises(ValueError, match="public texts"):
        public_candidates(centres, public, texts[:-1], k=3)


@pytest.mark.parametrize("seed", range(10))
def test_most_similar_ranks_records_as_a_numpy_cosine_sort(seed):
    from dpicl.embeddings.candidates import most_similar

    rng = np.random.default_rng(seed)
    d, n, count = 12, int(rng.integers(1, 40)), int(rng.integers(1, 50))
    records = rng.normal(size=(n, d)) * rng.uniform(0.01, 100, size=(n, 1))  # cosine, not inner product
    queries = rng.normal(size=(3, d))
    ranked = most_similar(queries, records, count)
    assert ranked.shape == (3, min(count, n))
    for query, row in zip(queries, ranked):
        sims = records @ query / np.linalg.norm(records, axis=1)
        assert row.tolist() == np.argsort(-sims, kind="stable")[:min(count, n)].tolist()


@pytest.mark.parametrize("seed", range(10))
def test_consensus_is_the_candidate_with_the_highest_summed_cosine_to_all(seed):
    from dpicl.embeddings.candidates import consensus

    rng = np.random.default_rng(seed)
    candidates = rng.normal(size=(int(rng.integers(1, 30)), 12)) * rng.uniform(0.01, 100, size=(1, 1))
    unit = candidates / np.linalg.norm(candidates, axis=1, keepdims=True)
    assert consensus(candidates) == int(np.argmax((unit @ unit.T).sum(axis=1)))
    # lengths do not count: a long outlier does not pull the consensus towards itself
    stretched = candidates * rng.uniform(0.01, 100, size=(len(candidates), 1))
    assert consensus(stretched) == consensus(candidates)


def test_consensus_picks_the_middle_of_a_cluster_over_an_outlier():
    from dpicl.embeddings.candidates import consensus

    cluster = np.array([[1.0, 0.1, 0.0], [1.0, 0.0, 0.0], [1.0, -0.1, 0.0]])
    assert consensus(np.vstack([[0.0, 0.0, 50.0], cluster])) == 2
    with pytest.raises(ValueError, match="non-empty"):
        consensus(np.zeros((0, 3)))
